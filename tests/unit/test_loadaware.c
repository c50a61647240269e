/* tests/unit/test_loadaware.c: load-aware verification (tune/loadaware.c, paper Alg. 1):
 * against a direct reading of the algorithm on random instances, and the cases whose answer is
 * known: a flat cost admits every draft, a cost linear in tokens admits none, sequences
 * without confidences keep their drafts, and the early stop. */
#include "test.h"
#include "tune/controller.h"
#include "tune/loadaware.h"

#include <stdint.h>
#include <string.h>

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static struct tune_costs curve(const double *per_width, int widths) {
    struct tune_costs c;
    memset(&c, 0, sizeof c);
    c.max_cap = widths - 1;
    for (int w = 1; w <= widths; w++) c.verify[w] = per_width[w - 1];
    return c;
}

/* The algorithm as the paper states it: repeatedly take the highest remaining a (ties: lower
 * r, then lower j), admit it, stop at the first admission that does not raise the rate. */
static void reference(const struct tune_costs *c, int R, const int *n, const float *const *a,
                      int *out) {
    int len[64], taken[64][TUNE_MAX_CAP + 1], b = R;
    memset(taken, 0, sizeof taken);
    for (int r = 0; r < R; r++) {
        len[r] = a[r] ? 0 : n[r];
        if (!a[r]) b += n[r];
        out[r] = len[r];
    }
    double tau = R, best = tau / tune_batch_seconds(c, b);
    for (;;) {
        int br = -1, bj = -1;
        for (int r = 0; r < R; r++)
            for (int j = 0; a[r] && j < n[r]; j++)
                if (!taken[r][j] && a[r][j] > 0 && (br < 0 || a[r][j] > a[br][bj])) br = r, bj = j;
        if (br < 0) break;
        taken[br][bj] = 1;
        if (bj != len[br]) break;
        len[br] = bj + 1, b++, tau += a[br][bj];
        double rate = tau / tune_batch_seconds(c, b);
        if (rate <= best) break;
        best = rate;
        memcpy(out, len, sizeof(int) * (size_t)R);
    }
}

TEST(matches_the_algorithm) {
    /* pycoder's measured pass costs (docs/perf.md), widths 1..17, in ms */
    const double py[17] = {0.553, 0.609, 0.727, 0.710, 0.782, 0.815, 0.883, 0.888, 0.987,
                           1.035, 1.119, 1.149, 1.211, 1.240, 1.319, 1.311, 1.622};
    int agree = 0, cases = 0, admitted = 0;
    for (int t = 0; t < 400; t++) {
        struct tune_costs c;
        if (t % 2) {
            c = curve(py, 17);
        } else { /* random non-decreasing curve */
            double w[17], v = 0.5 + urand();
            for (int i = 0; i < 17; i++) w[i] = v, v += urand() * (t % 4 ? 0.2 : 0.02);
            c = curve(w, 17);
        }
        int R = 1 + (int)(urand() * 12), n[16], len[16], ref[16], best[16];
        float av[16][TUNE_MAX_CAP];
        const float *a[16];
        struct tune_la_cand cand[16 * TUNE_MAX_CAP];
        for (int r = 0; r < R; r++) {
            n[r] = (int)(urand() * 8);
            double s = 1, q = urand();
            for (int j = 0; j < n[r]; j++) av[r][j] = (float)(s *= q + (1 - q) * urand());
            a[r] = r % 5 == 4 ? NULL : av[r];
        }
        tune_load_aware(&c, R, n, a, len, cand, best);
        reference(&c, R, n, a, ref);
        int same = !memcmp(len, ref, sizeof(int) * (size_t)R);
        for (int r = 0; r < R; r++) {
            same &= len[r] >= 0 && len[r] <= n[r] && (a[r] || len[r] == n[r]);
            admitted += a[r] ? len[r] : 0;
        }
        agree += same, cases++;
    }
    printf("  %d of %d random instances as the algorithm states; %d drafts admitted\n", agree,
           cases, admitted);
    CHECK(agree == cases && admitted > 0);
}

TEST(known_answers) {
    const float hi[4] = {0.9f, 0.8f, 0.7f, 0.6f}, lo[3] = {0.3f, 0.1f, 0.01f};
    const float *a[3] = {hi, lo, NULL};
    int n[3] = {4, 3, 2}, len[3], best[3];
    struct tune_la_cand cand[16];
    /* a pass costs the same whatever its width: every draft raises the rate */
    const double flat[17] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    struct tune_costs c = curve(flat, 17);
    tune_load_aware(&c, 3, n, a, len, cand, best);
    CHECK(len[0] == 4 && len[1] == 3 && len[2] == 2);
    /* every token costs one unit: from 1 token per token's cost, a draft (a < 1) can only
     * lower the rate; beside 2 fixed drafts (rate 3/5) the confident ones raise it */
    double lin[17];
    for (int i = 0; i < 17; i++) lin[i] = i + 1;
    c = curve(lin, 17);
    const float *two[2] = {hi, lo};
    tune_load_aware(&c, 2, n, two, len, cand, best);
    CHECK(len[0] == 0 && len[1] == 0);
    tune_load_aware(&c, 3, n, a, len, cand, best); /* 3.9/6, 4.7/7, 5.4/8 rise; +0.6 or +0.3 not */
    CHECK(len[0] == 3 && len[1] == 0 && len[2] == 2);
    /* a step up after 5 tokens: the confident drafts first, then the early stop */
    const double step[17] = {1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
    c = curve(step, 17);
    tune_load_aware(&c, 3, n, a, len, cand, best);
    /* 3 pending + 2 fixed = 5 tokens cost 1; any admission makes 6 tokens cost 3 */
    CHECK(len[0] == 0 && len[1] == 0 && len[2] == 2);
    const float *b2[2] = {hi, lo};
    int n2[2] = {4, 3}, len2[2];
    tune_load_aware(&c, 2, n2, b2, len2, cand, best); /* 2 pending: 3 drafts fit under the step */
    CHECK(len2[0] == 3 && len2[1] == 0);
}

int main(void) {
    RUN(matches_the_algorithm);
    RUN(known_answers);
    return test_report();
}
