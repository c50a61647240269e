/* tests/unit/test_matmul.c: cpu_matmul against a double-precision reference for F32, F16 and
 * BF16 weights on odd shapes, and its batch invariance (bit-exact rows whatever n, tile or
 * thread count), with weights at unaligned addresses. The same for the AMX kernel where the
 * CPU has it. */
#include "backend/cpu/cpu.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* A weight matrix [m, k] of type t placed `off` bytes past a 64-byte boundary, followed by
 * NaN guards so a read past the last row would poison the result. */
struct wmat {
    void *mem;
    char *data;
    float *ref; /* [m, k] the stored values as float */
};

static void wmat_init(struct wmat *w, enum dtype t, int m, int k, size_t off) {
    size_t esz = dtype_size(t), n = (size_t)m * k, guard = 256;
    w->mem = aligned_alloc(64, ((off + (n + guard) * esz + 63) / 64) * 64);
    w->data = (char *)w->mem + off;
    w->ref = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n + guard; i++) {
        float v = i < n ? frand() : __builtin_nanf("");
        char *p = w->data + i * esz;
        if (t == DTYPE_F32) {
            memcpy(p, &v, 4);
        } else {
            uint16_t h = t == DTYPE_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
            memcpy(p, &h, 2);
        }
    }
    dtype_to_f32(t, w->data, w->ref, n);
}

static void wmat_free(struct wmat *w) {
    free(w->mem);
    free(w->ref);
}

/* Checks y against the reference; the bound is the usual fp32 dot-product error bound
 * (a few ulp times the number of sequential adds, relative to sum |w x|). */
static int check_ref(const float *y, const float *x, const struct wmat *w, const float *bias, int n,
                     int k, int m) {
    int ok = 1;
    for (int r = 0; r < n; r++)
        for (int c = 0; c < m; c++) {
            double s = 0, a = 0;
            for (int i = 0; i < k; i++) {
                double p = (double)x[(size_t)r * k + i] * w->ref[(size_t)c * k + i];
                s += p;
                a += fabs(p);
            }
            if (bias) s += bias[c];
            double tol = (k / 16.0 + 8) * 1.2e-7 * (a + (bias ? fabs(bias[c]) : 0)) + 1e-30;
            double got = y[(size_t)r * m + c];
            if (!(fabs(got - s) <= tol)) {
                if (ok)
                    printf("  n=%d k=%d m=%d row %d col %d: got %.9g want %.9g (tol %.3g)\n", n, k,
                           m, r, c, got, s, tol);
                ok = 0;
            }
        }
    return ok;
}

static const enum dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

TEST(matches_reference) {
    struct pool *pool = pool_new(2);
    const int ks[] = {1, 7, 16, 32, 33, 64, 1000};
    const int ms[] = {1, 3, 8, 65};
    for (int ti = 0; ti < 3; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
                int k = ks[ki], m = ms[mi], nmax = 17;
                struct wmat w;
                wmat_init(&w, types[ti], m, k, 2);
                float *x = malloc(sizeof(float) * nmax * k);
                float *y = malloc(sizeof(float) * nmax * m);
                float *bias = malloc(sizeof(float) * m);
                for (int i = 0; i < nmax * k; i++) x[i] = frand();
                for (int i = 0; i < m; i++) bias[i] = frand();
                for (int n = 1; n <= nmax; n++)
                    for (int b = 0; b < 2; b++) {
                        const float *bp = b ? bias : NULL;
                        cpu_matmul(pool, y, x, w.data, types[ti], bp, n, k, m);
                        CHECK(check_ref(y, x, &w, bp, n, k, m));
                    }
                free(x);
                free(y);
                free(bias);
                wmat_free(&w);
            }
    pool_free(pool);
}

/* Every row of an n-row call equals the same row computed alone, bit for bit, for every n,
 * with 1 or 2 threads, and for weights at several misalignments. */
TEST(batch_invariant) {
    struct pool *p1 = pool_new(1), *p2 = pool_new(2);
    const int ks[] = {7, 33, 1000, 1024};
    const int ms[] = {3, 65, 200};
    const size_t offs[] = {0, 2, 6};
    for (int ti = 0; ti < 3; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
                int k = ks[ki], m = ms[mi], nmax = 17;
                size_t off = offs[(ki + mi) % 3];
                struct wmat w;
                wmat_init(&w, types[ti], m, k, off);
                float *x = malloc(sizeof(float) * nmax * k);
                float *bias = malloc(sizeof(float) * m);
                float *one = malloc(sizeof(float) * nmax * m); /* rows computed alone */
                float *y = malloc(sizeof(float) * nmax * m);
                for (int i = 0; i < nmax * k; i++) x[i] = frand();
                for (int i = 0; i < m; i++) bias[i] = frand();
                for (int r = 0; r < nmax; r++)
                    cpu_matmul(p1, one + (size_t)r * m, x + (size_t)r * k, w.data, types[ti], bias,
                               1, k, m);
                int same = 1;
                for (int n = 1; n <= nmax; n++) {
                    cpu_matmul(p2, y, x, w.data, types[ti], bias, n, k, m);
                    same &= memcmp(y, one, sizeof(float) * n * m) == 0;
                    cpu_matmul(p1, y, x, w.data, types[ti], bias, n, k, m);
                    same &= memcmp(y, one, sizeof(float) * n * m) == 0;
                    /* the rows starting at a different offset within the tiles */
                    if (n <= nmax - 3) {
                        cpu_matmul(p2, y, x + 3 * (size_t)k, w.data, types[ti], bias, n, k, m);
                        same &= memcmp(y, one + 3 * (size_t)m, sizeof(float) * n * m) == 0;
                    }
                }
                if (!same) printf("  %s k=%d m=%d differs\n", dtype_name(types[ti]), k, m);
                CHECK(same);
                /* a 13-row call against rows computed alone, on the other pool */
                cpu_matmul(p1, y, x, w.data, types[ti], bias, 13, k, m);
                float row[200];
                for (int r = 0; r < 13; r++) {
                    cpu_matmul(p2, row, x + (size_t)r * k, w.data, types[ti], bias, 1, k, m);
                    CHECK(memcmp(row, y + (size_t)r * m, sizeof(float) * m) == 0);
                }
                free(x);
                free(bias);
                free(one);
                free(y);
                wmat_free(&w);
            }
    pool_free(p1);
    pool_free(p2);
}

/* A large-n call (prefill) is also row-for-row equal to single rows, and a NULL pool works. */
TEST(large_n) {
    struct pool *p2 = pool_new(2);
    int n = 70, k = 300, m = 97;
    struct wmat w;
    wmat_init(&w, DTYPE_BF16, m, k, 2);
    float *x = malloc(sizeof(float) * n * k), *y = malloc(sizeof(float) * n * m);
    float *y0 = malloc(sizeof(float) * n * m);
    for (int i = 0; i < n * k; i++) x[i] = frand();
    cpu_matmul(p2, y, x, w.data, DTYPE_BF16, NULL, n, k, m);
    CHECK(check_ref(y, x, &w, NULL, n, k, m));
    cpu_matmul(NULL, y0, x, w.data, DTYPE_BF16, NULL, n, k, m);
    CHECK(memcmp(y, y0, sizeof(float) * n * m) == 0);
    float row[97];
    int same = 1;
    for (int r = 0; r < n; r++) {
        cpu_matmul(p2, row, x + (size_t)r * k, w.data, DTYPE_BF16, NULL, 1, k, m);
        same &= memcmp(row, y + (size_t)r * m, sizeof row) == 0;
    }
    CHECK(same);
    free(x);
    free(y);
    free(y0);
    wmat_free(&w);
    pool_free(p2);
}

/* Non-finite inputs propagate like a plain dot product. */
TEST(non_finite) {
    int k = 40, m = 2;
    struct wmat w;
    wmat_init(&w, DTYPE_F32, m, k, 0);
    float x[40];
    for (int i = 0; i < k; i++) x[i] = frand();
    x[37] = __builtin_inff();
    float y[2];
    cpu_matmul(NULL, y, x, w.data, DTYPE_F32, NULL, 1, k, m);
    for (int c = 0; c < m; c++) CHECK(isinf(y[c]) || isnan(y[c]));
    wmat_free(&w);
}

/* The AMX kernel (BF16 weights packed into tiles): float32 accuracy against the double
 * reference on shapes that do not fill whole tiles, rows bit-identical whatever n (up to and
 * past the 16 rows of a tile) and thread count, bias, and a NULL pool. */
TEST(amx) {
    if (!cpu_amx_available()) SKIP("this CPU (or kernel) has no AMX-BF16");
    struct pool *p1 = pool_new(1), *p2 = pool_new(2);
    const int ks[] = {1, 31, 64, 384, 1000};
    const int ms[] = {1, 17, 64, 200};
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            int k = ks[ki], m = ms[mi], nmax = 35;
            struct wmat w;
            wmat_init(&w, DTYPE_BF16, m, k, 2);
            void *tiles = aligned_alloc(64, (cpu_amx_packed_size(m, k) + 63) / 64 * 64);
            REQUIRE(tiles);
            cpu_amx_pack(tiles, w.data, m, k);
            float *x = malloc(sizeof(float) * nmax * k), *y = malloc(sizeof(float) * nmax * m);
            float *bias = malloc(sizeof(float) * m), *row = malloc(sizeof(float) * m);
            for (int i = 0; i < nmax * k; i++) x[i] = frand() * (i % 5 ? 1.0f : 1e-3f);
            for (int i = 0; i < m; i++) bias[i] = frand();
            const int ns[] = {1, 2, 7, 16, 17, 35};
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                int n = ns[ni];
                const float *bp = ni & 1 ? bias : NULL;
                cpu_matmul_amx(ni & 2 ? p1 : p2, y, x, tiles, bp, n, k, m);
                CHECK(check_ref(y, x, &w, bp, n, k, m));
                int same = 1;
                for (int r = 0; r < n; r++) {
                    cpu_matmul_amx(r & 1 ? p2 : NULL, row, x + (size_t)r * k, tiles, bp, 1, k, m);
                    same &= memcmp(row, y + (size_t)r * m, sizeof(float) * m) == 0;
                }
                CHECK(same);
            }
            /* three weights over one x in one call: each output as computed alone */
            if (mi == 1) {
                struct cpu_amx_out outs[3] = {{y, tiles, bias, m},
                                              {y + (size_t)nmax * m, tiles, NULL, m},
                                              {y + (size_t)2 * nmax * m, tiles, bias, m}};
                float *y3 = realloc(y, sizeof(float) * 3 * nmax * m);
                REQUIRE(y3);
                y = y3;
                for (int i = 0; i < 3; i++) outs[i].y = y + (size_t)i * nmax * m;
                cpu_matmul_amx_multi(p2, x, 7, k, outs, 3);
                int same = 1;
                for (int i = 0; i < 3; i++)
                    for (int r = 0; r < 7; r++) {
                        cpu_matmul_amx(NULL, row, x + (size_t)r * k, tiles, outs[i].bias, 1, k, m);
                        same &= memcmp(row, outs[i].y + (size_t)r * m, sizeof(float) * m) == 0;
                    }
                CHECK(same);
            }
            free(x), free(y), free(bias), free(row), free(tiles);
            wmat_free(&w);
        }
    pool_free(p1);
    pool_free(p2);
}

int main(void) {
    RUN(matches_reference);
    RUN(batch_invariant);
    RUN(large_n);
    RUN(amx);
    RUN(non_finite);
    return test_report();
}
