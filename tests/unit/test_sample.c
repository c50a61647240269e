/* tests/unit/test_sample.c: exactness tests of the sample module: rng streams, kernels,
 * truncation (top-k ties, nucleus boundary, order of top-k then nucleus) against a
 * brute-force double-precision reference, greedy ties, draws, and a full-size vocabulary.
 * Penalties, logprobs and the sampler are in test_sample_parts.c; statistics in
 * test_sample_stats.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sample/dist.h"
#include "sample/kern.h"
#include "sample/rng.h"
#include "test.h"
#include "unit/dists.h"

enum { BIG_VOCAB = 151936 };

/* ---- a brute-force reference: full sort, double precision ---- */

static const float *ref_logits;

static int ref_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = ref_logits[i], y = ref_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Kept ids in rank order into ids, probabilities into p; returns the count. */
static int ref_trunc(const float *logits, int n, double t, int k, double top_p, int32_t *ids,
                     double *p) {
    for (int i = 0; i < n; i++) ids[i] = i;
    ref_logits = logits;
    qsort(ids, (size_t)n, sizeof *ids, ref_cmp);
    int m = n;
    if (k > 0 && k < n) {
        m = k;
        while (m < n && logits[ids[m]] == logits[ids[k - 1]]) m++;
    }
    double s = 0;
    for (int j = 0; j < m; j++) s += p[j] = exp(((double)logits[ids[j]] - logits[ids[0]]) / t);
    if (top_p < 1) {
        double cum = 0;
        int keep = 0;
        while (keep < m && (keep == 0 || cum < top_p * s)) cum += p[keep++];
        m = keep;
    }
    while (m > 1 && p[m - 1] == 0) m--;
    s = 0;
    for (int j = 0; j < m; j++) s += p[j];
    for (int j = 0; j < m; j++) p[j] /= s;
    return m;
}

/* Checks d against the reference for the same parameters; returns 1 when equal. */
static int matches_ref(const struct sample_dist *d, const float *logits, float t, int k,
                       float top_p) {
    int n = d->n_vocab;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    double *p = malloc((size_t)n * sizeof *p);
    int m = ref_trunc(logits, n, t, k, top_p, ids, p), ok = 1;
    if (d->sorted) {
        ok = d->n == m;
        for (int j = 0; ok && j < m; j++)
            ok = d->ids[j] == ids[j] && fabs(d->probs[j] - p[j]) < 2e-6;
    } else {
        ok = d->n == n;
        float *dense = calloc((size_t)n, sizeof *dense);
        for (int j = 0; j < m; j++) dense[ids[j]] = (float)p[j];
        for (int i = 0; ok && i < n; i++)
            ok = d->ids[i] == i && fabs(d->probs[i] - dense[i]) < 2e-6;
        free(dense);
    }
    free(ids);
    free(p);
    return ok;
}

/* ---- rng ---- */

TEST(rng_same_seed_same_stream) {
    struct rng a, b, c;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    rng_seed(&c, 43);
    int n_diff = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_next(&a), y = rng_next(&b), z = rng_next(&c);
        CHECK(x == y);
        n_diff += x != z;
    }
    CHECK(n_diff > 990);
    struct rng z;
    rng_seed(&z, 0); /* seed 0 must give a live generator */
    CHECK(rng_next(&z) != 0 || rng_next(&z) != 0);
}

TEST(rng_ranges) {
    struct rng r;
    rng_seed(&r, 7);
    double sf = 0, sd = 0;
    int bins[10] = {0};
    for (int i = 0; i < 100000; i++) {
        float f = rng_float(&r);
        double d = rng_double(&r);
        uint32_t b = rng_below(&r, 10);
        CHECK(f >= 0.0f && f < 1.0f);
        CHECK(d >= 0.0 && d < 1.0);
        CHECK(b < 10);
        bins[b < 10 ? b : 0]++;
        sf += f;
        sd += d;
    }
    CHECK_NEAR(sf / 100000, 0.5, 0.01);
    CHECK_NEAR(sd / 100000, 0.5, 0.01);
    for (int i = 0; i < 10; i++) CHECK(abs(bins[i] - 10000) < 500);
}

/* ---- kernels ---- */

TEST(kern_exp_accuracy) {
    double worst = 0;
    for (int i = 0; i <= 870000; i++) {
        float x = -(float)i * 1e-4f;
        double rel = fabs(kern_exp(x) - exp((double)x)) / exp((double)x);
        worst = rel > worst ? rel : worst;
    }
    CHECK(worst < 3e-7);
    CHECK(kern_exp(0.0f) == 1.0f);
    CHECK(kern_exp(-INFINITY) == 0.0f);
    CHECK(kern_exp(NAN) == 0.0f);
    CHECK(kern_exp(-100.0f) == 0.0f);
}

/* The library's loop over a row (built to vectorise) gives each value's bits exactly as
 * kern_exp() does one at a time here (built without that flag): sampling never depends on
 * which code path, or which build, computed a probability. Inputs cover the clamp at -87, its
 * neighbours, -inf, NaN, denormal results and the temperatures' scaling. */
TEST(kern_exp_shift_equals_scalar) {
    enum { N = 4099 }; /* not a multiple of any vector width */
    static float x[N], y[N];
    struct rng r;
    rng_seed(&r, 11);
    for (int i = 0; i < N; i++) x[i] = -120.0f * rng_float(&r) + 3.0f;
    x[0] = -INFINITY, x[1] = NAN, x[2] = 3.0f, x[3] = -84.0f, x[4] = nextafterf(-84.0f, 0);
    x[5] = nextafterf(-84.0f, -100), x[6] = -83.9f;
    static const float inv_t[] = {1.0f, 1.0f / 0.7f, 2.5f, 0.125f};
    int same = 1;
    for (size_t t = 0; t < sizeof inv_t / sizeof *inv_t; t++) {
        double s = kern_exp_shift(y, x, N, 3.0f, inv_t[t]);
        for (int i = 0; i < N; i++) {
            volatile float v = (x[i] - 3.0f) * inv_t[t]; /* kept out of any vector loop */
            float e = kern_exp(v);
            same &= memcmp(&e, &y[i], sizeof e) == 0;
        }
        CHECK(s == kern_sum(y, N));
    }
    CHECK(same);
}

/* kern_sum's documented order, written the obvious way: block sums into an array, then
 * pairwise levels with an odd last element carried up. */
static double ref_kern_sum(const float *x, int n) {
    int nb = (n + KERN_SUM_BLOCK - 1) / KERN_SUM_BLOCK;
    if (nb == 0) return 0;
    double *v = malloc((size_t)nb * sizeof *v);
    for (int b = 0; b < nb; b++) {
        double l[8] = {0};
        for (int i = b * KERN_SUM_BLOCK; i < n && i < (b + 1) * KERN_SUM_BLOCK; i++)
            l[(i - b * KERN_SUM_BLOCK) % 8] += (double)x[i];
        v[b] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
    while (nb > 1) {
        int h = 0;
        for (int i = 0; i + 1 < nb; i += 2) v[h++] = v[i] + v[i + 1];
        if (nb % 2) v[h++] = v[nb - 1];
        nb = h;
    }
    double s = v[0];
    free(v);
    return s;
}

/* kern_sum follows its documented order bit for bit (a GPU reproduces it), and is accurate;
 * kern_exp_sum gives kern_exp_shift's sum without storing. Besides the listed sizes, every
 * size up to 600 (a wrong order inside a block shows best alone) and every count of blocks
 * up to 200 (a wrong tree shows best with few blocks). */
TEST(kern_sum_order) {
    static const int listed[] = {0,   1,   7,    8,    255,  256,    257,           511,
                                 512, 513, 1000, 4096, 1795, 151936, 126 * 256 + 77};
    enum { N_LISTED = sizeof listed / sizeof *listed, MAX_N = 1 << 20 };
    static int sizes[N_LISTED + 600 + 200 + 1];
    int n_sizes = 0;
    for (int c = 0; c < N_LISTED; c++) sizes[n_sizes++] = listed[c];
    for (int n = 1; n <= 600; n++) sizes[n_sizes++] = n;
    for (int b = 1; b <= 200; b++) sizes[n_sizes++] = b * KERN_SUM_BLOCK - 3 * (b % 2);
    sizes[n_sizes++] = MAX_N;
    float *x = malloc(MAX_N * sizeof *x), *y = malloc(MAX_N * sizeof *y);
    struct rng r;
    rng_seed(&r, 21);
    int same = 1, close = 1, exp_same = 1;
    for (int c = 0; c < n_sizes; c++) {
        int n = sizes[c];
        /* values over 40 binades, so that nearly every addition rounds and any other order
         * shows in the bits; of both signs for every other size */
        long double ref = 0, abs_sum = 0;
        for (int i = 0; i < n; i++) {
            float u = rng_float(&r);
            x[i] = ldexpf(c % 2 ? u : u - 0.3f, (int)rng_below(&r, 40) - 20);
            ref += x[i];
            abs_sum += fabsl((long double)x[i]);
        }
        double s = kern_sum(x, n), want = ref_kern_sum(x, n);
        same &= memcmp(&s, &want, sizeof s) == 0;
        close &= fabsl((long double)s - ref) <= 1e-12L * abs_sum;
        /* exp arguments from 0 (x = 2^19) down past the cutoff at -87 */
        double e = kern_exp_shift(y, x, n, 0x1p19f, 2e-4f), e2 = kern_exp_sum(x, n, 0x1p19f, 2e-4f);
        exp_same &= memcmp(&e, &e2, sizeof e) == 0;
    }
    CHECK(same);
    CHECK(close);
    CHECK(exp_same);
    CHECK(kern_sum(x, 0) == 0);
    free(x);
    free(y);
}

TEST(kern_sort_stable) {
    static const int sizes[] = {0, 1, 5, 64, 65, 1000, 100000};
    struct rng r;
    rng_seed(&r, 3);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s];
        uint32_t *key = malloc((size_t)(n + 1) * 8), *tk = key + n + 1;
        int32_t *id = malloc((size_t)(n + 1) * 8), *ti = id + n + 1;
        for (int i = 0; i < n; i++) {
            key[i] = (uint32_t)rng_next(&r) & (i % 2 ? 0xff0000ffu : 0x3u); /* many ties */
            id[i] = i;
        }
        kern_sort(key, id, tk, ti, n);
        int ok = 1;
        for (int i = 1; i < n; i++)
            ok &= key[i - 1] < key[i] || (key[i - 1] == key[i] && id[i - 1] < id[i]);
        CHECK(ok);
        free(key);
        free(id);
    }
    CHECK(kern_key_desc(2.0f) < kern_key_desc(1.0f));
    CHECK(kern_key_desc(-1.0f) < kern_key_desc(-2.0f));
    CHECK(kern_key_desc(0.0f) < kern_key_desc(-1e-30f));
    CHECK(kern_key_desc(0.0f) == kern_key_desc(-0.0f));
    CHECK(kern_key_desc(INFINITY) < kern_key_desc(3e38f));
}

/* ---- greedy ---- */

TEST(greedy_ties_lowest_id) {
    float l[] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 2.0f};
    CHECK(sample_greedy(l, 6) == 1);
    float m[] = {NAN, -INFINITY, -3.0f};
    CHECK(sample_greedy(m, 3) == 2);
    float big[1003];
    for (int i = 0; i < 1003; i++) big[i] = (float)(i % 17);
    CHECK(sample_greedy(big, 1003) == 16);
}

/* ---- truncation exactness ---- */

TEST(no_truncation_is_softmax) {
    float l[] = {1.0f, 0.0f, logf(3.0f), -INFINITY, NAN};
    struct sample_dist *d = dist_new(5);
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 1.0f) == OK);
    CHECK(d->n == 5 && !d->sorted);
    double s = M_E + 1 + 3;
    CHECK_NEAR(d->probs[0], M_E / s, 1e-6);
    CHECK_NEAR(d->probs[1], 1 / s, 1e-6);
    CHECK_NEAR(d->probs[2], 3 / s, 1e-6);
    CHECK(d->probs[3] == 0 && d->probs[4] == 0);
    CHECK(d->ids[2] == 2);
    CHECK_NEAR(d->mass, 1.0, 1e-6);
    /* temperature: T = 0.5 squares the ratios */
    float t[] = {0.0f, logf(2.0f)};
    struct sample_dist *d2 = dist_new(2);
    REQUIRE(sample_dist_build(d2, t, 0.5f, 0, 1.0f) == OK);
    CHECK_NEAR(d2->probs[0], 0.2, 1e-6);
    CHECK_NEAR(d2->probs[1], 0.8, 1e-6);
    CHECK(sample_dist_build(d2, t, 0.0f, 0, 1.0f) == ERR_ARG);
    float bad[] = {-INFINITY, NAN}, inf[] = {INFINITY, 0.0f}, nan[] = {NAN, NAN};
    for (int path = 0; path < 3; path++) { /* no truncation, top-k, nucleus */
        int k = path == 1 ? 1 : 0;
        float top_p = path == 2 ? 0.5f : 1.0f;
        CHECK(sample_dist_build(d2, bad, 1.0f, k, top_p) == ERR_ARG && d2->n == 0);
        CHECK(sample_dist_build(d2, inf, 1.0f, k, top_p) == ERR_ARG);
        CHECK(sample_dist_build(d2, nan, 1.0f, k, top_p) == ERR_ARG);
    }
    dist_free(d);
    dist_free(d2);
}

TEST(top_k_keeps_ties) {
    float l[] = {1.0f, 3.0f, 2.0f, 2.0f, 2.0f, 0.0f};
    struct sample_dist *d = dist_new(6);
    REQUIRE(sample_dist_build(d, l, 1.0f, 2, 1.0f) == OK);
    CHECK(d->sorted && d->n == 4);
    CHECK(d->ids[0] == 1 && d->ids[1] == 2 && d->ids[2] == 3 && d->ids[3] == 4);
    double s = exp(3) + 3 * exp(2);
    CHECK_NEAR(d->probs[0], exp(3) / s, 1e-6);
    CHECK_NEAR(d->probs[3], exp(2) / s, 1e-6);
    float tie_top[] = {5.0f, 1.0f, 5.0f, 0.0f, 0.0f, 0.0f};
    REQUIRE(sample_dist_build(d, tie_top, 1.0f, 1, 1.0f) == OK);
    CHECK(d->n == 2 && d->ids[0] == 0 && d->ids[1] == 2);
    CHECK_NEAR(d->probs[0], 0.5, 1e-7);
    /* k >= n_vocab is off */
    float six[] = {0, 1, 2, 3, 4, 5};
    REQUIRE(sample_dist_build(d, six, 1.0f, 6, 1.0f) == OK);
    CHECK(!d->sorted && d->n == 6);
    dist_free(d);
}

TEST(top_p_boundary) {
    float l[] = {logf(0.125f), logf(0.5f), logf(0.125f), logf(0.25f)};
    struct sample_dist *d = dist_new(4);
    static const struct {
        float top_p;
        int n;
    } cases[] = {{0.0f, 1},    {-1.0f, 1},   {0.4999f, 1}, {0.5001f, 2},
                 {0.7499f, 2}, {0.7501f, 3}, {0.8749f, 3}, {0.8751f, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        REQUIRE(sample_dist_build(d, l, 1.0f, 0, cases[c].top_p) == OK);
        CHECK(d->sorted && d->n == cases[c].n);
    }
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 0.7501f) == OK);
    CHECK(d->ids[0] == 1 && d->ids[1] == 3 && d->ids[2] == 0); /* tie 0/2: lower id first */
    CHECK_NEAR(d->probs[0], 0.5 / 0.875, 1e-6);
    CHECK_NEAR(d->probs[2], 0.125 / 0.875, 1e-6);
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 1.0f) == OK);
    CHECK(!d->sorted && d->n == 4);
    dist_free(d);
}

TEST(top_k_before_top_p) {
    /* p = .4 .3 .2 .1; top-2 renormalises to 4/7, 3/7, and a nucleus of 0.5 over that keeps
     * one token (over the untruncated p it would keep two). */
    float l[] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    struct sample_dist *d = dist_new(4);
    REQUIRE(sample_dist_build(d, l, 1.0f, 2, 0.5f) == OK);
    CHECK(d->n == 1 && d->ids[0] == 0 && d->probs[0] == 1.0f);
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 0.5f) == OK);
    CHECK(d->n == 2);
    REQUIRE(sample_dist_build(d, l, 1.0f, 3, 0.6f) == OK);
    CHECK(d->n == 2 && d->ids[1] == 1);
    CHECK(matches_ref(d, l, 1.0f, 3, 0.6f));
    dist_free(d);
}

TEST(random_against_reference) {
    static const struct {
        float t;
        int k;
        float p;
    } cases[] = {{1.0f, 0, 1.0f},   {1.0f, 0, 0.9f},   {0.7f, 40, 1.0f},  {0.3f, 0, 0.95f},
                 {2.0f, 100, 0.8f}, {1.0f, 1, 1.0f},   {1.5f, 0, 0.999f}, {1.0f, 3000, 0.5f},
                 {0.05f, 0, 0.99f}, {1.0f, 4999, 1.0f}};
    enum { N = 5000 };
    float *l = malloc(N * sizeof *l);
    struct sample_dist *d = dist_new(N);
    struct rng r;
    rng_seed(&r, 11);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            float x = 6.0f * (rng_float(&r) + rng_float(&r) + rng_float(&r) - 1.5f);
            l[i] = round == 1 ? roundf(x * 2) / 2 : x; /* round 1: many exact ties */
            if (round == 2 && i % 7 == 0) l[i] = -INFINITY;
        }
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            REQUIRE(sample_dist_build(d, l, cases[c].t, cases[c].k, cases[c].p) == OK);
            CHECK(matches_ref(d, l, cases[c].t, cases[c].k, cases[c].p));
        }
    }
    free(l);
    dist_free(d);
}

TEST(nucleus_reaches_far_tail) {
    /* One token at 0 and a flat tail: the nucleus must reach past the first window of
     * candidates (8 nats) and, for top_p near 1 with a tail 25 nats down, past the second. */
    enum { N = 20000 };
    float *l = malloc(N * sizeof *l);
    struct sample_dist *d = dist_new(N);
    for (int i = 0; i < N; i++) l[i] = i == 7 ? 0.0f : -10.0f - 1e-4f * (float)(i % 100);
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 0.7f) == OK); /* tail mass 0.91 of 1.91 */
    CHECK(d->n > 5000 && d->ids[0] == 7);
    CHECK(matches_ref(d, l, 1.0f, 0, 0.7f));
    for (int i = 0; i < N; i++) l[i] = i == 7 ? 0.0f : -25.0f;
    /* tail mass 19999 e^-25 = 2.8e-7 of 1; top_p 1 - 6e-8 keeps ~79% of the tail */
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 0.99999994f) == OK);
    double tail = (N - 1) * exp(-25.0), want = ((double)0.99999994f * (1 + tail) - 1) / exp(-25.0);
    CHECK(d->ids[0] == 7 && fabs(d->n - 1 - want) < 3);
    CHECK(d->ids[1] == 0 && d->ids[2] == 1); /* tail ties in id order */
    free(l);
    dist_free(d);
}

/* ---- draws ---- */

TEST(draw_skips_zero_probability) {
    float l[40];
    for (int i = 0; i < 40; i++) l[i] = i % 3 == 0 ? 0.0f : -INFINITY;
    struct sample_dist *d = dist_new(40);
    struct rng r;
    rng_seed(&r, 5);
    for (int pass = 0; pass < 2; pass++) {
        REQUIRE(sample_dist_build(d, l, 1.0f, pass ? 30 : 0, 1.0f) == OK);
        int ok = 1;
        for (int i = 0; i < 5000; i++) ok &= sample_dist_draw(d, &r) % 3 == 0;
        CHECK(ok);
    }
    CHECK(d->n == 14); /* the -inf ties at the k-th value carry no mass and are dropped */
    float one[] = {-INFINITY, 2.0f, -INFINITY};
    struct sample_dist *d1 = dist_new(3);
    REQUIRE(sample_dist_build(d1, one, 1.0f, 0, 1.0f) == OK);
    for (int i = 0; i < 100; i++) CHECK(sample_dist_draw(d1, &r) == 1);
    CHECK(sample_dist_prob(d1, 1) == 1.0f && sample_dist_prob(d1, 0) == 0.0f);
    CHECK(sample_dist_prob(d1, 7) == 0.0f);
    REQUIRE(sample_dist_build(d, l, 1.0f, 0, 0.5f) == OK);
    CHECK(sample_dist_prob(d, 3) > 0 && sample_dist_prob(d, 1) == 0.0f);
    dist_free(d);
    dist_free(d1);
}

/* sample_dist_draw_u() walks spans, chunks and entries (dist.h; the GPU repeats the walk):
 * over distributions of sizes around the chunk (64) and span (2,048) boundaries, u at 0, just
 * below 1 and on a grid, the entry picked has positive probability, moves forward as u grows,
 * and is the entry whose cumulative interval holds u * mass (a long double reference), up to
 * rounding of the running total. */
TEST(draw_u_walks_the_mass) {
    static const int sizes[] = {1, 63, 64, 65, 2047, 2048, 2049, 4100, BIG_VOCAB};
    struct rng r;
    rng_seed(&r, 21);
    int checked = 0, ok_all = 1;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int n = sizes[si];
        float *l = malloc(sizeof(float) * n);
        int32_t *pos_of = malloc(sizeof(int32_t) * n);
        long double *cum = malloc(sizeof(long double) * (n + 1));
        struct sample_dist *d = dist_new(n);
        REQUIRE(l && pos_of && cum && d);
        for (int i = 0; i < n; i++)
            l[i] = i % 7 == 3 && n > 1 ? -INFINITY : 4.0f * (rng_float(&r) - 0.5f);
        for (int pass = 0; pass < 2; pass++) { /* untruncated, then a nucleus */
            REQUIRE(sample_dist_build(d, l, 1.0f, 0, pass ? 0.9f : 1.0f) == OK);
            cum[0] = 0;
            for (int j = 0; j < d->n; j++) cum[j + 1] = cum[j] + d->probs[j], pos_of[d->ids[j]] = j;
            int first = 0;
            while (!(d->probs[first] > 0)) first++;
            int prev = -1, ok = sample_dist_draw_u(d, 0) == d->ids[first];
            for (int k = 0; k <= 4096 && ok; k++) {
                double u = k < 4096 ? k / 4096.0 : 1 - 0x1p-53;
                int j = pos_of[sample_dist_draw_u(d, u)];
                long double t = (long double)u * cum[d->n];
                ok = d->probs[j] > 0 && j >= prev && cum[j] <= t + 1e-12L * cum[d->n] &&
                     t <= cum[j + 1] + 1e-12L * cum[d->n];
                prev = j, checked++;
            }
            if (!ok) printf("  size %d pass %d: the walk missed\n", n, pass);
            ok_all &= ok;
        }
        free(l), free(pos_of), free(cum);
        dist_free(d);
    }
    CHECK(ok_all && checked == 18 * 4097);
}

TEST(big_vocab_valid) {
    float *l = malloc(BIG_VOCAB * sizeof *l);
    struct sample_dist *d = dist_new(BIG_VOCAB);
    char *seen = calloc(BIG_VOCAB, 1);
    struct rng r;
    rng_seed(&r, 99);
    for (int i = 0; i < BIG_VOCAB; i++) l[i] = 3.0f * (rng_float(&r) + rng_float(&r) - 1.0f);
    l[1234] = 12.0f;
    static const struct {
        float t;
        int k;
        float p;
    } cases[] = {{1.0f, 0, 1.0f},   {0.7f, 40, 1.0f},    {1.0f, 0, 0.9f},
                 {0.8f, 50, 0.95f}, {1.0f, 20000, 1.0f}, {3.0f, 0, 0.99f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        REQUIRE(sample_dist_build(d, l, cases[c].t, cases[c].k, cases[c].p) == OK);
        double s = 0;
        int ok = d->n >= 1 && d->n <= BIG_VOCAB;
        memset(seen, 0, BIG_VOCAB);
        for (int j = 0; ok && j < d->n; j++) {
            ok = d->ids[j] >= 0 && d->ids[j] < BIG_VOCAB && !seen[d->ids[j]] && d->probs[j] >= 0;
            if (ok) seen[d->ids[j]] = 1;
            if (d->sorted && j > 0) ok = ok && d->probs[j] <= d->probs[j - 1];
            s += d->probs[j];
        }
        CHECK(ok);
        CHECK_NEAR(s, 1.0, 1e-5);
        CHECK(d->n == BIG_VOCAB || d->sorted);
        if (cases[c].k == 40) CHECK(d->n == 40 && d->ids[0] == 1234);
        int32_t id = sample_dist_draw(d, &r);
        CHECK(id >= 0 && id < BIG_VOCAB);
        CHECK(matches_ref(d, l, cases[c].t, cases[c].k, cases[c].p));
    }
    free(seen);
    free(l);
    dist_free(d);
}

int main(void) {
    RUN(rng_same_seed_same_stream);
    RUN(rng_ranges);
    RUN(kern_exp_accuracy);
    RUN(kern_exp_shift_equals_scalar);
    RUN(kern_sum_order);
    RUN(kern_sort_stable);
    RUN(greedy_ties_lowest_id);
    RUN(no_truncation_is_softmax);
    RUN(top_k_keeps_ties);
    RUN(top_p_boundary);
    RUN(top_k_before_top_p);
    RUN(random_against_reference);
    RUN(nucleus_reaches_far_tail);
    RUN(draw_skips_zero_probability);
    RUN(draw_u_walks_the_mass);
    RUN(big_vocab_valid);
    return test_report();
}
