/* tests/unit/test_sample_parts.c: penalty counts and arithmetic (including the extra-ids
 * form used by verify rows), raw logprobs against a double-precision reference, the
 * sampler handle (greedy with penalties, seeded reproducibility, reset), and the
 * deterministic corners of the residual draws. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sample/logprobs.h"
#include "sample/penalty.h"
#include "sample/residual.h"
#include "sample/sampler.h"
#include "test.h"

/* ---- penalties ---- */

TEST(penalty_arithmetic) {
    struct penalty_counts c;
    penalty_init(&c);
    CHECK(penalty_count(&c, 5) == 0);
    CHECK(penalty_add(&c, 5) == OK && penalty_add(&c, 7) == OK && penalty_add(&c, 5) == OK);
    CHECK(penalty_count(&c, 5) == 2 && penalty_count(&c, 7) == 1 && penalty_count(&c, 6) == 0);
    float l[10], orig[10];
    for (int i = 0; i < 10; i++) l[i] = orig[i] = 0.1f * (float)i;
    penalty_apply(&c, 0.5f, 0.25f, l, 10, NULL, 0);
    for (int i = 0; i < 10; i++) {
        float want = orig[i] - (i == 5 ? 0.5f + 0.25f * 2 : i == 7 ? 0.5f + 0.25f : 0.0f);
        CHECK(l[i] == want);
    }
    /* negative penalties encourage repeats */
    memcpy(l, orig, sizeof l);
    penalty_apply(&c, -1.0f, 0.0f, l, 10, NULL, 0);
    CHECK(l[5] == orig[5] + 1.0f && l[7] == orig[7] + 1.0f && l[6] == orig[6]);
    /* zero penalties leave the logits bit-identical */
    memcpy(l, orig, sizeof l);
    penalty_apply(&c, 0.0f, 0.0f, l, 10, NULL, 0);
    CHECK(memcmp(l, orig, sizeof l) == 0);
    penalty_clear(&c);
    CHECK(penalty_count(&c, 5) == 0 && c.n_seen == 0);
    penalty_apply(&c, 1.0f, 1.0f, l, 10, NULL, 0);
    CHECK(memcmp(l, orig, sizeof l) == 0);
    penalty_deinit(&c);
}

TEST(penalty_counts_grow) {
    struct penalty_counts c;
    penalty_init(&c);
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < 5000; i++) CHECK(penalty_add(&c, i * 37 + (i & 1) * 100000) == OK);
    CHECK(c.n_seen == 5000);
    int ok = 1;
    for (int i = 0; i < 5000; i++) ok &= penalty_count(&c, i * 37 + (i & 1) * 100000) == 3;
    CHECK(ok);
    CHECK(penalty_count(&c, 1) == 0);
    penalty_deinit(&c);
    penalty_deinit(&c); /* twice is harmless */
}

TEST(penalty_extra_ids_match_sequential) {
    enum { V = 300 };
    struct penalty_counts base, seq;
    penalty_init(&base);
    penalty_init(&seq);
    int32_t hist[] = {3, 9, 3, 200, 64, 128, 3};
    for (size_t i = 0; i < sizeof hist / sizeof *hist; i++) {
        penalty_add(&base, hist[i]);
        penalty_add(&seq, hist[i]);
    }
    /* drafts: repeats of seen ids, a new id twice, ids sharing (id mod 64) with seen ones */
    int32_t drafts[] = {9, 17, 3, 17, 192, 0, 64};
    int n_d = (int)(sizeof drafts / sizeof *drafts);
    float logits[V], a[V], b[V];
    for (int v = 0; v < V; v++) logits[v] = sinf((float)v) * 3.0f;
    for (int row = 0; row <= n_d; row++) {
        memcpy(a, logits, sizeof a);
        memcpy(b, logits, sizeof b);
        penalty_apply(&base, 0.7f, 0.3f, a, V, drafts, row); /* base + d_1..d_row */
        penalty_apply(&seq, 0.7f, 0.3f, b, V, NULL, 0);      /* as if emitted */
        CHECK(memcmp(a, b, sizeof a) == 0);
        if (row < n_d) penalty_add(&seq, drafts[row]);
    }
    CHECK(base.n_seen == 5 && penalty_count(&base, 17) == 0); /* base untouched */
    penalty_deinit(&base);
    penalty_deinit(&seq);
}

/* ---- logprobs ---- */

static double ref_lse(const float *l, int n) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < n; i++) s += exp((double)l[i] - m);
    return m + log(s);
}

TEST(logprobs_against_double) {
    enum { N = 151936 };
    float *l = malloc(N * sizeof *l);
    for (int scale = 1; scale <= 100; scale *= 10) {
        unsigned x = 12345;
        for (int i = 0; i < N; i++) {
            x = x * 1103515245u + 12345u;
            l[i] = (float)scale * ((float)(x >> 8) / 16777216.0f - 0.5f) + 40.0f;
        }
        l[777] = 40.0f + (float)scale; /* the unique maximum */
        double lse = ref_lse(l, N);
        CHECK_NEAR(logprobs_lse(l, N), lse, 1e-6 * fmax(1, fabs(lse)));
        struct logprobs out;
        REQUIRE(logprobs_compute(l, N, 5, 20, &out) == OK);
        CHECK_NEAR(out.chosen, (double)l[5] - lse, 1e-5);
        CHECK(out.n_top == 20 && out.top_ids[0] == 777);
        int ok = 1;
        for (int j = 0; j < out.n_top; j++) {
            ok &= fabs(out.top[j] - ((double)l[out.top_ids[j]] - lse)) < 1e-5;
            if (j > 0) ok &= out.top[j] <= out.top[j - 1];
        }
        int n_above = 0; /* nothing outside the list beats its last entry */
        for (int i = 0; i < N; i++) n_above += l[i] > l[out.top_ids[19]];
        CHECK(ok && n_above <= 19);
    }
    free(l);
}

TEST(logprobs_ties_and_limits) {
    float l[] = {1.0f, 3.0f, 3.0f, NAN, -INFINITY, 3.0f, 2.0f};
    struct logprobs out;
    REQUIRE(logprobs_compute(l, 7, 4, 3, &out) == OK);
    CHECK(out.n_top == 3 && out.top_ids[0] == 1 && out.top_ids[1] == 2 && out.top_ids[2] == 5);
    CHECK(out.chosen == -INFINITY);
    double lse = log(exp(1) + 3 * exp(3) + exp(2));
    CHECK_NEAR(out.top[0], 3 - lse, 1e-6);
    REQUIRE(logprobs_compute(l, 7, 6, 100, &out) == OK);
    CHECK(out.n_top == 5); /* 7 entries; NaN and -inf are never listed */
    CHECK_NEAR(out.chosen, 2 - lse, 1e-6);
    REQUIRE(logprobs_compute(l, 7, 0, 0, &out) == OK);
    CHECK(out.n_top == 0);
    CHECK(logprobs_compute(l, 7, 7, 1, &out) == ERR_ARG);
    CHECK(logprobs_compute(l, 7, -1, 1, &out) == ERR_ARG);
    float bad[] = {NAN, -INFINITY};
    CHECK(logprobs_compute(bad, 2, 0, 1, &out) == ERR_ARG);
}

/* ---- sampler ---- */

TEST(sampler_greedy_with_penalties) {
    struct sample_params p = {.temperature = 0, .presence_penalty = 0.2f};
    struct sampler *s = sampler_new(&p, 3);
    REQUIRE(s);
    float l[] = {1.0f, 0.9f, 0.0f};
    CHECK(sampler_sample(s, l) == 0);
    CHECK(sampler_accept(s, 0) == OK);
    CHECK(sampler_accept(s, 3) == ERR_ARG);
    float l2[] = {1.0f, 0.9f, 0.0f};
    CHECK(sampler_sample(s, l2) == 1);
    CHECK(l2[0] == 1.0f - 0.2f); /* penalised in place, as documented */
    float tie[] = {0.5f, 0.5f, 0.5f};
    CHECK(sampler_sample(s, tie) == 1);
    sampler_reset(s);
    float l3[] = {1.0f, 0.9f, 0.0f};
    CHECK(sampler_sample(s, l3) == 0 && l3[0] == 1.0f);
    float bad[] = {-INFINITY, NAN, -INFINITY};
    CHECK(sampler_sample(s, bad) == ERR_ARG);
    const struct sample_dist *d;
    CHECK(sampler_build_dist(s, l3, NULL, 0, &d) == ERR_ARG && d == NULL);
    sampler_free(s);
    sampler_free(NULL);
    CHECK(sampler_new(&p, 0) == NULL);
}

static void run_seq(struct sampler *s, int32_t *out, int n) {
    float l[50];
    for (int t = 0; t < n; t++) {
        for (int v = 0; v < 50; v++) l[v] = cosf((float)(v * 7 + t));
        out[t] = sampler_sample(s, l);
        sampler_accept(s, out[t]);
    }
}

TEST(sampler_seeded_reproducible) {
    struct sample_params p = {.temperature = 1.0f,
                              .top_p = 0.95f,
                              .top_k = 20,
                              .presence_penalty = 0.3f,
                              .frequency_penalty = 0.1f,
                              .seed = 1234};
    struct sampler *a = sampler_new(&p, 50), *b = sampler_new(&p, 50);
    p.seed = 1235;
    struct sampler *c = sampler_new(&p, 50);
    REQUIRE(a && b && c);
    int32_t sa[200], sb[200], sc[200], sr[200];
    run_seq(a, sa, 200);
    run_seq(b, sb, 200);
    run_seq(c, sc, 200);
    sampler_reset(a);
    run_seq(a, sr, 200);
    CHECK(memcmp(sa, sb, sizeof sa) == 0);
    CHECK(memcmp(sa, sr, sizeof sa) == 0);
    CHECK(memcmp(sa, sc, sizeof sa) != 0);
    int ok = 1;
    for (int i = 0; i < 200; i++) ok &= sa[i] >= 0 && sa[i] < 50;
    CHECK(ok);
    CHECK(sampler_n_vocab(a) == 50 && sampler_params(a)->top_k == 20);
    CHECK(penalty_count(sampler_counts(a), sa[0]) >= 1);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* ---- residual corners ---- */

TEST(residual_deterministic) {
    struct sample_dist p, q;
    sample_dist_init(&p, malloc(sample_dist_bytes(4)), 4);
    sample_dist_init(&q, malloc(sample_dist_bytes(4)), 4);
    float lp[] = {0.0f, 0.0f, -INFINITY, -INFINITY}; /* p = .5 .5 0 0 */
    float lq[] = {0.0f, -INFINITY, -INFINITY, 0.0f}; /* q = .5 0 0 .5 */
    REQUIRE(sample_dist_build(&p, lp, 1.0f, 0, 1.0f) == OK);
    REQUIRE(sample_dist_build(&q, lq, 1.0f, 0, 1.0f) == OK);
    float dense[4] = {0};
    struct rng r;
    rng_seed(&r, 1);
    int ok = 1;
    for (int i = 0; i < 200; i++) ok &= sample_residual(&p, &q, dense, &r) == 1;
    for (int i = 0; i < 200; i++) ok &= sample_residual_onehot(&p, 1, &r) == 0;
    CHECK(ok);
    CHECK(dense[0] == 0 && dense[3] == 0);
    /* p == q: no residual mass, falls back to p */
    int n1 = 0;
    for (int i = 0; i < 400; i++) n1 += sample_residual(&p, &p, dense, &r) == 1;
    CHECK(n1 > 100 && n1 < 300);
    /* acceptance ratio: q(d) = 0 is guarded, p(d) = 0 never accepts */
    ok = 1;
    for (int i = 0; i < 100; i++)
        ok &= sample_accept(&r, 0.3f, 0.0f) && !sample_accept(&r, 0, 0.5f);
    for (int i = 0; i < 100; i++) ok &= sample_accept(&r, 0.9f, 0.9f);
    CHECK(ok);
    free(p.ids);
    free(q.ids);
}

int main(void) {
    RUN(penalty_arithmetic);
    RUN(penalty_counts_grow);
    RUN(penalty_extra_ids_match_sequential);
    RUN(logprobs_against_double);
    RUN(logprobs_ties_and_limits);
    RUN(sampler_greedy_with_penalties);
    RUN(sampler_seeded_reproducible);
    RUN(residual_deterministic);
    return test_report();
}
