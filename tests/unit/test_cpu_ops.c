/* tests/unit/test_cpu_ops.c: the float32 helpers of backend/cpu/ops.c and the attention kernel
 * against double references, on lengths around the vector width. */
#include "backend/cpu/cpu.h"
#include "test.h"

#include "base/thread.h"
#include "tensor/dtype.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static const int lens[] = {0, 1, 5, 15, 16, 17, 31, 32, 33, 63, 128, 1000};
#define N_LENS (int)(sizeof lens / sizeof *lens)

TEST(dot_axpy_scale_add) {
    float a[1000], b[1000], y[1000], y0[1000];
    for (int li = 0; li < N_LENS; li++) {
        int n = lens[li];
        for (int i = 0; i < n; i++) a[i] = frand(), b[i] = frand(), y[i] = y0[i] = frand();
        double s = 0, abs_s = 0;
        for (int i = 0; i < n; i++) s += (double)a[i] * b[i], abs_s += fabs((double)a[i] * b[i]);
        CHECK_NEAR(cpu_dot(a, b, n), s, 1e-6 * abs_s + 1e-30);
        cpu_axpy(y, 0.5f, a, n);
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= fabs(y[i] - (y0[i] + 0.5 * a[i])) <= 1e-6;
        CHECK(ok);
        cpu_scale(y, 2.0f, n);
        for (int i = 0; i < n; i++) ok &= fabs(y[i] - 2 * (y0[i] + 0.5 * a[i])) <= 3e-6;
        CHECK(ok);
        for (int i = 0; i < n; i++) y[i] = y0[i];
        cpu_add(y, a, (size_t)n);
        for (int i = 0; i < n; i++) ok &= y[i] == y0[i] + a[i];
        CHECK(ok);
    }
    /* axpy leaves elements past n alone */
    for (int i = 0; i < 40; i++) y[i] = 1.0f;
    cpu_axpy(y, 1.0f, a, 17);
    CHECK(y[17] == 1.0f && y[39] == 1.0f);
}

TEST(exp_accuracy) {
    float x[1000], y[1000];
    int n = 1000;
    double worst = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < n; i++) x[i] = frand() * 87.0f;
        cpu_exp(y, x, n);
        for (int i = 0; i < n; i++) {
            double want = exp((double)x[i]);
            double rel = fabs(y[i] - want) / want;
            if (rel > worst) worst = rel;
        }
    }
    CHECK(worst < 4e-7); /* about 3 ulp */
    float sp[7] = {-INFINITY, INFINITY, 0.0f, -200.0f, 100.0f, -87.0f, NAN}, r[7];
    cpu_exp(r, sp, 7);
    CHECK(r[0] == 0.0f);
    CHECK(isinf(r[1]) && r[1] > 0);
    CHECK(r[2] == 1.0f);
    CHECK(r[3] == 0.0f);
    CHECK(isinf(r[4]));
    CHECK_NEAR(r[5], exp(-87.0), 1e-6 * exp(-87.0));
    CHECK(isnan(r[6]));
    /* in place */
    for (int i = 0; i < 33; i++) x[i] = frand();
    for (int i = 0; i < 33; i++) y[i] = x[i];
    cpu_exp(x, x, 33);
    int ok = 1;
    for (int i = 0; i < 33; i++) ok &= fabs(x[i] - exp((double)y[i])) <= 1e-6 * exp((double)y[i]);
    CHECK(ok);
}

TEST(softmax) {
    float x[1000], x0[1000];
    for (int li = 1; li < N_LENS; li++) {
        int n = lens[li];
        for (int i = 0; i < n; i++) x[i] = x0[i] = frand() * 10;
        x[n / 2] = x0[n / 2] = -INFINITY; /* a masked position */
        if (n == 1) x[0] = x0[0] = 3.0f;
        cpu_softmax(x, n);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = x0[i] > mx ? x0[i] : mx;
        for (int i = 0; i < n; i++) sum += exp((double)x0[i] - mx);
        int ok = 1;
        double total = 0;
        for (int i = 0; i < n; i++) {
            double want = exp((double)x0[i] - mx) / sum;
            ok &= fabs(x[i] - want) <= 1e-6 * want + 1e-9;
            total += x[i];
        }
        CHECK(ok);
        CHECK_NEAR(total, 1.0, 1e-5);
    }
    float m[3] = {-INFINITY, -INFINITY, -INFINITY};
    cpu_softmax(m, 3);
    CHECK(m[0] == 0.0f && m[2] == 0.0f);
}

/* Attention of n query rows at positions pos0.. over a cache of cap positions, against a double
 * reference, for head sizes that are and are not multiples of the vector width, GQA groups,
 * sliding windows and the drafters' non-causal mode. Each row's output must also be bit-identical
 * when the rows run one at a time, whatever the thread count (batch invariance). */
static void attn_ref(const struct cpu_attn *a, double *out) {
    int D = a->head_dim, group = a->n_heads / a->n_kv_heads;
    double *sc = malloc(sizeof(double) * (size_t)a->cap);
    for (int t = 0; t < a->n; t++)
        for (int h = 0; h < a->n_heads; h++) {
            int p = a->noncausal ? a->pos0 + a->n - 1 : a->pos0 + t;
            int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
            const float *q = a->q + ((size_t)t * a->n_heads + h) * D;
            const float *k = a->k + (size_t)(h / group) * a->cap * D;
            const float *v = a->v + (size_t)(h / group) * a->cap * D;
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < D; i++) d += (double)q[i] * k[(size_t)j * D + i];
                sc[j] = d * a->scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = lo; j <= p; j++) sum += sc[j] = exp(sc[j] - mx);
            double *o = out + ((size_t)t * a->n_heads + h) * D;
            for (int i = 0; i < D; i++) o[i] = 0;
            for (int j = lo; j <= p; j++)
                for (int i = 0; i < D; i++) o[i] += sc[j] / sum * v[(size_t)j * D + i];
        }
    free(sc);
}

TEST(attention) {
    static const struct {
        int D, heads, kv_heads, pos0, n, window, noncausal;
    } cases[] = {
        {64, 6, 2, 0, 1, 0, 0},   {64, 6, 2, 255, 7, 0, 0}, {64, 4, 4, 30, 16, 0, 0},
        {24, 4, 2, 17, 5, 0, 0},  {80, 2, 1, 40, 3, 0, 0},  {128, 4, 1, 100, 9, 0, 0},
        {16, 2, 2, 50, 4, 20, 0}, {64, 6, 2, 33, 7, 0, 1},  {40, 3, 3, 0, 12, 5, 0},
        {32, 8, 1, 20, 3, 0, 0},  {64, 16, 2, 9, 17, 8, 0},
    };
    struct pool *pools[2] = {pool_new(1), pool_new(2)};
    REQUIRE(pools[0] && pools[1]);
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int D = cases[ci].D, H = cases[ci].heads, KVH = cases[ci].kv_heads, n = cases[ci].n;
        int cap = cases[ci].pos0 + n + 3;
        size_t qn = (size_t)n * H * D, kn = (size_t)KVH * cap * D;
        float *q = malloc(sizeof(float) * qn), *k = malloc(sizeof(float) * kn);
        float *v = malloc(sizeof(float) * kn), *out = malloc(sizeof(float) * qn);
        float *one = malloc(sizeof(float) * qn);
        double *ref = malloc(sizeof(double) * qn);
        for (size_t i = 0; i < qn; i++) q[i] = 2 * frand();
        for (size_t i = 0; i < kn; i++) k[i] = 2 * frand(), v[i] = frand();
        for (int bf = 0; bf < 2; bf++) {
            struct cpu_attn a = {.out = out,
                                 .q = q,
                                 .k = k,
                                 .v = v,
                                 .n = n,
                                 .pos0 = cases[ci].pos0,
                                 .cap = cap,
                                 .n_heads = H,
                                 .n_kv_heads = KVH,
                                 .head_dim = D,
                                 .window = cases[ci].window,
                                 .scale = 1.0f / sqrtf((float)D),
                                 .bf16 = bf,
                                 .noncausal = cases[ci].noncausal};
            cpu_attention(pools[1], &a);
            attn_ref(&a, ref);
            double err = 0;
            for (size_t i = 0; i < qn; i++) err = fmax(err, fabs(out[i] - ref[i]));
            /* bf16 rounds scores, probabilities and outputs: about 3 significant digits */
            CHECK(err <= (bf ? 2e-2 : 2e-6));
            if (err > (bf ? 2e-2 : 2e-6))
                printf("  case %zu bf16 %d: max error %.3g\n", ci, bf, err);
            /* rows alone, on 1 or 2 threads: bit-identical (non-causal rows see the whole
             * block, so that block is rerun on one thread instead) */
            int same = 1;
            if (cases[ci].noncausal) {
                struct cpu_attn b = a;
                b.out = one;
                cpu_attention(pools[0], &b);
                same = !memcmp(out, one, sizeof(float) * qn);
            } else {
                for (int t = 0; t < n; t++) {
                    struct cpu_attn b = a;
                    b.out = one + (size_t)t * H * D;
                    b.q = q + (size_t)t * H * D;
                    b.n = 1;
                    b.pos0 = a.pos0 + t;
                    cpu_attention(pools[t & 1], &b);
                }
                same = !memcmp(out, one, sizeof(float) * qn);
            }
            CHECK(same);
            /* a paged cache (pages of 1, 4 and 16 positions, each its own allocation, the
             * rows after a header, K then V): the same bits as the contiguous rows */
            for (int shift = 0; shift <= 4; shift += 2) {
                int P = 1 << shift, np = (cap + P - 1) / P;
                size_t hdr = 16, per = (size_t)KVH * P * D;
                float **pg = malloc(sizeof *pg * (size_t)np);
                REQUIRE(pg);
                for (int i = 0; i < np; i++) REQUIRE(pg[i] = calloc(hdr + 2 * per, sizeof(float)));
                for (int g = 0; g < KVH; g++)
                    for (int j = 0; j < cap; j++) {
                        size_t at = hdr + ((size_t)g * P + (size_t)(j % P)) * D;
                        memcpy(pg[j / P] + at, k + ((size_t)g * cap + j) * D, sizeof(float) * D);
                        memcpy(pg[j / P] + per + at, v + ((size_t)g * cap + j) * D,
                               sizeof(float) * D);
                    }
                struct cpu_attn pa = a;
                pa.out = one, pa.k = pa.v = NULL, pa.cap = 0;
                pa.pages = (const void *const *)pg, pa.page_shift = shift;
                pa.k_off = hdr, pa.v_off = hdr + per;
                cpu_attention(pools[1], &pa);
                CHECK(!memcmp(out, one, sizeof(float) * qn));
                for (int i = 0; i < np; i++) free(pg[i]);
                free(pg);
            }
        }
        free(q), free(k), free(v), free(out), free(one), free(ref);
    }
    pool_free(pools[0]);
    pool_free(pools[1]);
}

int main(void) {
    RUN(dot_axpy_scale_add);
    RUN(exp_accuracy);
    RUN(softmax);
    RUN(attention);
    return test_report();
}
