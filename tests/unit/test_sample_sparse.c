/* tests/unit/test_sample_sparse.c: building a distribution from a row summary
 * (sample_row_summarize, sample_dist_build_sparse, sample_prob_untruncated) gives the bits
 * sample_dist_build gives on the whole row, over many rows and settings; the summary holds
 * exactly the candidates it documents; rows it cannot stand for say so (n = -1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sample/dist.h"
#include "sample/kern.h"
#include "sample/rng.h"
#include "test.h"
#include "unit/dists.h"

enum {
    CAP = 1024, /* candidates a device summary holds (the CUDA backend's) */
    N_KIND = 5, /* row shapes, see fill_row() */
};

static void summary_init(struct sample_row_summary *s, int cap) {
    s->ids = malloc((size_t)cap * sizeof *s->ids);
    s->logits = malloc((size_t)cap * sizeof *s->logits);
}

static void summary_free(struct sample_row_summary *s) {
    free(s->ids);
    free(s->logits);
}

/* The same distribution, bit for bit. */
static int same_dist(const struct sample_dist *a, const struct sample_dist *b) {
    return a->n == b->n && a->sorted == b->sorted && a->mass == b->mass &&
           memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) == 0 &&
           memcmp(a->probs, b->probs, (size_t)a->n * sizeof *a->probs) == 0;
}

/* Row shapes: 0 uniform noise with one token in 97 raised and a few far above; 1 the same
 * rounded to halves (many exact ties); 2 the same with every 7th logit -inf; 3 peaked, as
 * a language model's (a few tokens near the top, the rest 10+ nats down); 4 flat (all tied
 * but one token in 50). */
static void fill_row(float *l, int n, int kind, struct rng *r) {
    for (int i = 0; i < n; i++) {
        float x = 8.0f * (rng_float(r) - 0.5f) + (i % 97 ? 0.0f : 6.0f);
        if (kind == 1) x = roundf(x * 2) / 2;
        if (kind == 2 && i % 7 == 3) x = -INFINITY;
        if (kind == 3) x = -12.0f + 4.0f * (rng_float(r) + rng_float(r) - 1.0f);
        if (kind == 4) x = i % 50 ? 1.0f : 2.0f;
        l[i] = x;
    }
    if (kind == 4) return;
    for (int j = 0; j < 5; j++) l[rng_below(r, (uint32_t)n)] = 10.0f + (float)j * 0.5f;
    if (kind == 3) l[rng_below(r, (uint32_t)n)] = 10.0f; /* a tie at the top */
}

/* The top_k-th largest logit (no NaN in l), by sorting a copy. */
static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

static float kth_value(const float *l, int n, int k) {
    float *c = malloc((size_t)n * sizeof *c);
    memcpy(c, l, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_desc);
    float v = c[k - 1];
    free(c);
    return v;
}

/* s holds exactly the tokens with logit >= thr, in id order, or n = -1 when they exceed cap. */
static int holds_exactly(const struct sample_row_summary *s, const float *l, int n, float thr,
                         int cap) {
    int m = 0;
    for (int i = 0; i < n; i++) m += l[i] >= thr;
    if (m > cap) return s->n == -1;
    if (s->n != m) return 0;
    m = 0;
    for (int i = 0; i < n; i++)
        if (l[i] >= thr) {
            if (s->ids[m] != i || memcmp(&s->logits[m], &l[i], sizeof l[i])) return 0;
            m++;
        }
    return 1;
}

/* ---- the summary ---- */

TEST(summary_candidates) {
    enum { N = 8192 };
    float *l = malloc(N * sizeof *l), *y = malloc(N * sizeof *y);
    struct sample_row_summary s;
    summary_init(&s, CAP);
    struct rng r;
    rng_seed(&r, 1);
    static const int ks[] = {1, 5, 40, 100, 1000, 1024, 1025};
    static const float ts[] = {0.05f, 0.7f, 1.0f, 3.0f};
    int exact_k = 1, exact_p = 1, totals = 1, none = 1;
    for (int kind = 0; kind < N_KIND; kind++) {
        fill_row(l, N, kind, &r);
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            sample_row_summarize(l, N, 1.0f, ks[ki], 0.9f, CAP, &s);
            exact_k &= holds_exactly(&s, l, N, kth_value(l, N, ks[ki]), CAP);
        }
        for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++) {
            float t = ts[ti];
            sample_row_summarize(l, N, t, 0, 0.9f, CAP, &s);
            float w = SAMPLE_NUCLEUS_NATS * t, thr = kern_max(l, N) - w;
            exact_p &= holds_exactly(&s, l, N, thr, CAP);
            double total = kern_exp_shift(y, l, N, kern_max(l, N), 1.0f / t);
            totals &= s.max == kern_max(l, N) && memcmp(&s.total, &total, sizeof total) == 0;
            sample_row_summarize(l, N, t, N, 1.0f, CAP, &s); /* top_k >= n_vocab is off */
            none &= s.n == 0 && memcmp(&s.total, &total, sizeof total) == 0;
        }
    }
    CHECK(exact_k);
    CHECK(exact_p);
    CHECK(totals);
    CHECK(none);
    free(l);
    free(y);
    summary_free(&s);
}

TEST(summary_refuses) {
    enum { N = 1000 };
    float l[N];
    struct rng r;
    rng_seed(&r, 2);
    fill_row(l, N, 0, &r);
    struct sample_row_summary s;
    summary_init(&s, CAP);
    struct sample_dist *d = dist_new(N);
    /* cap: top_k above it, ties past it, a nucleus window past it */
    sample_row_summarize(l, N, 1.0f, 5, 1.0f, 4, &s);
    CHECK(s.n == -1);
    sample_row_summarize(l, N, 1.0f, 5, 1.0f, 5, &s);
    CHECK(s.n == 5);
    sample_row_summarize(l, N, 1.0f, 0, 0.9f, 3, &s);
    CHECK(s.n == -1);
    CHECK(sample_dist_build_sparse(d, &s, 1.0f, 0, 0.9f) == ERR_UNSUPPORTED && d->n == 0);
    float flat[N];
    for (int i = 0; i < N; i++) flat[i] = i == 3 ? 1.0f : 0.0f;
    sample_row_summarize(flat, N, 1.0f, 2, 1.0f, 500, &s); /* 999 tie for 2nd */
    CHECK(s.n == -1);
    sample_row_summarize(flat, N, 1.0f, 2, 1.0f, N, &s);
    CHECK(s.n == N);
    /* NaN anywhere: the row is needed, though max is finite */
    for (int path = 0; path < 3; path++) {
        int k = path == 1 ? 40 : 0;
        float top_p = path == 2 ? 0.9f : 1.0f;
        l[777] = NAN;
        sample_row_summarize(l, N, 1.0f, k, top_p, CAP, &s);
        CHECK(s.n == -1 && isfinite(s.max));
        CHECK(sample_dist_build_sparse(d, &s, 1.0f, k, top_p) == ERR_UNSUPPORTED);
        CHECK(sample_dist_build(d, l, 1.0f, k, top_p) == OK);
        l[777] = 0.0f;
    }
    /* no finite max, temperature <= 0: ERR_ARG as the full build gives */
    float bad[N], inf[N];
    for (int i = 0; i < N; i++) bad[i] = i % 2 ? -INFINITY : NAN, inf[i] = i == 9 ? INFINITY : 0;
    for (int path = 0; path < 3; path++) {
        int k = path == 1 ? 40 : 0;
        float top_p = path == 2 ? 0.9f : 1.0f;
        for (int row = 0; row < 2; row++) {
            const float *x = row ? inf : bad;
            sample_row_summarize(x, N, 1.0f, k, top_p, CAP, &s);
            CHECK(s.n == -1 && s.total == 0);
            CHECK(sample_dist_build_sparse(d, &s, 1.0f, k, top_p) == ERR_ARG && d->n == 0);
            CHECK(sample_dist_build(d, x, 1.0f, k, top_p) == ERR_ARG);
        }
        sample_row_summarize(l, N, 1.0f, k, top_p, CAP, &s);
        CHECK(sample_dist_build_sparse(d, &s, 0.0f, k, top_p) == ERR_ARG);
        sample_row_summarize(l, N, 0.0f, k, top_p, CAP, &s);
        CHECK(s.n == -1);
    }
    summary_free(&s);
    dist_free(d);
}

/* ---- sparse against full ---- */

struct tally {
    int top_k, top_k_ok, top_k_refused_past_cap, nucleus, nucleus_ok, none, none_refused;
    int wrong; /* OK with other bits than the full build's, or refused leaving d not empty */
};

/* Every setting on one row: whenever the sparse build says OK, the full build gave the same
 * bits; a superset of the candidates gives them too. */
static void compare_row(const float *l, int n, struct sample_dist *full, struct sample_dist *sp,
                        struct sample_row_summary *s, struct sample_row_summary *wide,
                        struct tally *t) {
    static const float temps[] = {1e-4f, 0.05f, 0.3f, 0.7f, 1.0f, 1.5f, 3.0f, 100.0f};
    static const float top_ps[] = {1.0f, 0.99f, 0.95f, 0.9f, 0.5f, 0.0f};
    const int ks[] = {0, -1, 1, 5, 40, 100, 1000, n - 1, n};
    for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (size_t pi = 0; pi < sizeof top_ps / sizeof *top_ps; pi++) {
                float temp = temps[ti], top_p = top_ps[pi];
                int k = ks[ki], has_k = k > 0 && k < n;
                if (!has_k && top_p >= 1 && ti % 3) continue; /* a few no-truncation cases */
                sample_row_summarize(l, n, temp, k, top_p, CAP, s);
                int err = sample_dist_build_sparse(sp, s, temp, k, top_p);
                int full_err = sample_dist_build(full, l, temp, k, top_p);
                if (has_k) {
                    t->top_k++;
                    t->top_k_ok += err == OK;
                    t->top_k_refused_past_cap += err == ERR_UNSUPPORTED && s->n == -1;
                } else if (top_p < 1) {
                    t->nucleus++;
                    t->nucleus_ok += err == OK;
                } else {
                    t->none++;
                    t->none_refused += err == ERR_UNSUPPORTED;
                }
                if (err != OK) {
                    t->wrong += !(err == ERR_UNSUPPORTED && sp->n == 0);
                    continue;
                }
                t->wrong += !(full_err == OK && same_dist(full, sp));
                /* a superset: every token down to a lower threshold */
                float low = s->logits[0];
                for (int j = 1; j < s->n; j++) low = s->logits[j] < low ? s->logits[j] : low;
                low -= 1.0f;
                wide->max = s->max;
                wide->total = s->total;
                wide->n = 0;
                for (int i = 0; i < n; i++)
                    if (l[i] >= low) {
                        wide->ids[wide->n] = i;
                        wide->logits[wide->n++] = l[i];
                    }
                int wide_err = sample_dist_build_sparse(sp, wide, temp, k, top_p);
                t->wrong += !(wide_err == OK && same_dist(full, sp));
            }
}

TEST(sparse_equals_full) {
    static const int vocabs[] = {1000, 8192, 151936};
    static const int rows[] = {8, 4, 1};
    struct rng r;
    rng_seed(&r, 3);
    struct tally t = {0};
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        int n = vocabs[v];
        float *l = malloc((size_t)n * sizeof *l);
        struct sample_dist *full = dist_new(n), *sp = dist_new(n);
        struct sample_row_summary s, wide;
        summary_init(&s, CAP);
        summary_init(&wide, n);
        for (int row = 0; row < rows[v]; row++)
            for (int kind = 0; kind < N_KIND; kind++) {
                fill_row(l, n, kind, &r);
                compare_row(l, n, full, sp, &s, &wide, &t);
            }
        free(l);
        dist_free(full);
        dist_free(sp);
        summary_free(&s);
        summary_free(&wide);
    }
    printf("  top-k %d/%d OK, nucleus %d/%d OK, no truncation %d/%d refused\n", t.top_k_ok, t.top_k,
           t.nucleus_ok, t.nucleus, t.none_refused, t.none);
    CHECK(t.wrong == 0);
    CHECK(t.top_k_ok + t.top_k_refused_past_cap == t.top_k); /* refused only past cap */
    CHECK(t.top_k_ok * 10 >= t.top_k * 7); /* mostly OK: the test cannot pass vacuously */
    CHECK(t.nucleus_ok * 10 >= t.nucleus * 5);
    CHECK(t.none_refused == t.none && t.none > 0);
}

/* The summary's untruncated probability is the full build's probs[id], for every id. */
TEST(prob_untruncated_equals_full) {
    static const int vocabs[] = {1000, 151936};
    static const float temps[] = {0.05f, 0.7f, 1.0f, 2.5f};
    struct rng r;
    rng_seed(&r, 4);
    int same = 1, checked = 0;
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        int n = vocabs[v];
        float *l = malloc((size_t)n * sizeof *l);
        struct sample_dist *d = dist_new(n);
        struct sample_row_summary s;
        summary_init(&s, CAP);
        for (int kind = 0; kind < N_KIND; kind++) {
            fill_row(l, n, kind, &r);
            for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++) {
                float temp = temps[ti];
                sample_row_summarize(l, n, temp, 0, 1.0f, CAP, &s);
                same &= s.n == 0 && sample_dist_build(d, l, temp, 0, 1.0f) == OK && !d->sorted;
                for (int i = 0; i < n; i++) {
                    float p = sample_prob_untruncated(l[i], s.max, s.total, temp);
                    same &= memcmp(&p, &d->probs[i], sizeof p) == 0;
                }
                checked += n;
            }
        }
        free(l);
        dist_free(d);
        summary_free(&s);
    }
    CHECK(same);
    CHECK(checked > 1000000);
}

int main(void) {
    RUN(summary_candidates);
    RUN(summary_refuses);
    RUN(sparse_equals_full);
    RUN(prob_untruncated_equals_full);
    return test_report();
}
