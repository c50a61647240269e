/* tests/unit/test_sample_stats.c: statistical tests, 20 000 draws per case with fixed
 * seeds: draws from truncated distributions match the expected probabilities, and the
 * speculative accept/residual rule commits tokens distributed as the target p, with a
 * deliberately reversed draft q and with one-hot drafts. Tolerance: max |emp - exp| < 0.02. */
#include <math.h>
#include <stdlib.h>

#include "base/err.h"
#include "sample/dist.h"
#include "sample/residual.h"
#include "sample/rng.h"
#include "test.h"
#include "unit/dists.h"

enum { V = 8, DRAWS = 20000 };

/* Distinct logits in descending order, so the ranking is the id order. */
static const float logits_desc[V] = {2.0f, 1.5f, 1.2f, 0.7f, 0.3f, 0.0f, -0.5f, -1.0f};

static const struct {
    float t, top_p;
    int top_k;
} cases[] = {{1.0f, 1.0f, 0}, {1.0f, 0.8f, 0}, {0.7f, 1.0f, 3}};

/* Expected truncated probabilities for logits given in descending order, in double. */
static void expected_desc(const float *l, float t, int top_k, float top_p, double *out) {
    double s = 0, e[V];
    int m = top_k > 0 && top_k < V ? top_k : V;
    for (int i = 0; i < m; i++) s += e[i] = exp(((double)l[i] - l[0]) / t);
    int keep = m;
    if (top_p < 1) {
        double cum = 0;
        keep = 0;
        while (keep < m && (keep == 0 || cum < top_p * s)) cum += e[keep++];
    }
    s = 0;
    for (int i = 0; i < keep; i++) s += e[i];
    for (int i = 0; i < V; i++) out[i] = i < keep ? e[i] / s : 0.0;
}

static double max_diff(const int *count, const double *want) {
    double worst = 0;
    for (int i = 0; i < V; i++) worst = fmax(worst, fabs((double)count[i] / DRAWS - want[i]));
    return worst;
}

TEST(draws_match_truncated_probs) {
    struct sample_dist *d = dist_new(V);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double want[V];
        expected_desc(logits_desc, cases[c].t, cases[c].top_k, cases[c].top_p, want);
        REQUIRE(sample_dist_build(d, logits_desc, cases[c].t, cases[c].top_k, cases[c].top_p) ==
                OK);
        for (int i = 0; i < V; i++) CHECK_NEAR(sample_dist_prob(d, i), want[i], 1e-6);
        struct rng r;
        rng_seed(&r, 100 + c);
        int count[V] = {0};
        for (int i = 0; i < DRAWS; i++) count[sample_dist_draw(d, &r)]++;
        double diff = max_diff(count, want);
        printf("  T=%.1f top_p=%.1f top_k=%d: max |emp-exp| = %.4f\n", cases[c].t, cases[c].top_p,
               cases[c].top_k, diff);
        CHECK(diff < 0.02);
        for (int i = 0; i < V; i++)
            if (want[i] == 0) CHECK(count[i] == 0);
    }
    dist_free(d);
}

/* One speculative step: draft from q, accept with min(1, p/q), else the residual. */
static int32_t spec_step(const struct sample_dist *p, const struct sample_dist *q, float *dense,
                         struct rng *r, int *n_accept) {
    int32_t draft = sample_dist_draw(q, r);
    if (sample_accept(r, sample_dist_prob(p, draft), sample_dist_prob(q, draft))) {
        ++*n_accept;
        return draft;
    }
    return sample_residual(p, q, dense, r);
}

TEST(speculative_reversed_draft) {
    float reversed[V];
    for (int i = 0; i < V; i++) reversed[i] = logits_desc[V - 1 - i];
    struct sample_dist *p = dist_new(V), *q = dist_new(V);
    float dense[V] = {0};
    for (size_t c = 0; c < 2 * sizeof cases / sizeof *cases; c++) {
        size_t k = c % 3;
        int same = c < 3; /* q truncated like p (disjoint supports here), or q untruncated */
        double want[V];
        expected_desc(logits_desc, cases[k].t, cases[k].top_k, cases[k].top_p, want);
        REQUIRE(sample_dist_build(p, logits_desc, cases[k].t, cases[k].top_k, cases[k].top_p) ==
                OK);
        REQUIRE(sample_dist_build(q, reversed, cases[k].t, same ? cases[k].top_k : 0,
                                  same ? cases[k].top_p : 1.0f) == OK);
        struct rng r;
        rng_seed(&r, 200 + c);
        int count[V] = {0}, n_accept = 0;
        for (int i = 0; i < DRAWS; i++) count[spec_step(p, q, dense, &r, &n_accept)]++;
        double diff = max_diff(count, want);
        printf("  T=%.1f top_p=%.1f top_k=%d q %s: max |emp-exp| = %.4f, accepted %.3f\n",
               cases[k].t, cases[k].top_p, cases[k].top_k, same ? "truncated" : "full", diff,
               (double)n_accept / DRAWS);
        CHECK(diff < 0.02);
        int clean = 1;
        for (int i = 0; i < V; i++) clean &= dense[i] == 0.0f;
        CHECK(clean);
    }
    dist_free(p);
    dist_free(q);
}

TEST(speculative_onehot_draft) {
    /* n-gram drafts: q is one-hot, so accept with p(d) and otherwise draw p without d. The
     * draft is the likeliest token, an unlikely one, and one outside the truncated support. */
    struct sample_dist *p = dist_new(V);
    const int32_t drafts[] = {0, 5, 7};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double want[V];
        expected_desc(logits_desc, cases[c].t, cases[c].top_k, cases[c].top_p, want);
        REQUIRE(sample_dist_build(p, logits_desc, cases[c].t, cases[c].top_k, cases[c].top_p) ==
                OK);
        for (size_t k = 0; k < sizeof drafts / sizeof *drafts; k++) {
            struct rng r;
            rng_seed(&r, 300 + 10 * c + k);
            int count[V] = {0};
            for (int i = 0; i < DRAWS; i++) {
                int32_t d = drafts[k];
                int32_t id = sample_accept(&r, sample_dist_prob(p, d), 1.0f)
                                 ? d
                                 : sample_residual_onehot(p, d, &r);
                count[id]++;
            }
            CHECK(max_diff(count, want) < 0.02);
        }
    }
    dist_free(p);
}

TEST(full_vocab_draws) {
    /* 1000 tokens without truncation (the unsorted path with chunked draws): a coarse
     * check on 8 groups of 125 ids, and the cumulative distribution. */
    enum { N = 1000 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = 2.0f * sinf((float)i * 0.37f);
    struct sample_dist d;
    sample_dist_init(&d, malloc(sample_dist_bytes(N)), N);
    REQUIRE(sample_dist_build(&d, l, 1.0f, 0, 1.0f) == OK);
    double want[V] = {0};
    for (int i = 0; i < N; i++) want[i / 125] += d.probs[i];
    struct rng r;
    rng_seed(&r, 400);
    int count[V] = {0};
    for (int i = 0; i < DRAWS; i++) count[sample_dist_draw(&d, &r) / 125]++;
    CHECK(max_diff(count, want) < 0.02);
    free(d.ids);
}

int main(void) {
    RUN(draws_match_truncated_probs);
    RUN(speculative_reversed_draft);
    RUN(speculative_onehot_draft);
    RUN(full_vocab_draws);
    return test_report();
}
