/* sample/kern.h: internal numeric kernels of the sample module (not a public API):
 * a vectorisable exp for non-positive arguments, max/sum reductions with a fixed summation
 * order (so results never depend on the compiler), and a stable key sort. Pure functions
 * of their arguments; thread-safe. */
#ifndef DSPARK_SAMPLE_KERN_H
#define DSPARK_SAMPLE_KERN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^x for x <= 0, relative error below 1e-7. Returns 0 for x < -87 and for NaN, so NaN
 * and -inf logits act as impossible tokens. Branch-free so loops over it vectorise. The
 * explicit fmaf() makes the result the same in scalar and vector code and under any
 * -ffp-contract setting (it needs FMA hardware to be fast, which -march=native gives). */
static inline float kern_exp(float x) {
    float xc = x >= -87.0f ? x : -87.0f;
    float n = fmaf(xc, 1.44269504f, 12582912.0f); /* adding 1.5 * 2^23 rounds to an integer */
    n = n - 12582912.0f;
    float r = fmaf(n, -0.693359375f, xc); /* ln 2 split in two: n * hi is exact */
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x >= -87.0f ? y : 0.0f;
}

/* Largest value of x[0..n) ignoring NaN; -INFINITY when n == 0 or all are NaN. */
float kern_max(const float *x, int n);
/* Index of the largest value, the lowest such index on ties; NaN ignored; 0 when no value
 * is above -INFINITY. */
int32_t kern_argmax(const float *x, int n);
/* Sum of x[0..n) in double, eight interleaved partial sums added in a fixed order. */
double kern_sum(const float *x, int n);
/* y[i] = kern_exp((x[i] - max) * inv_t) for i < n; returns kern_sum(y, n). */
double kern_exp_shift(float *y, const float *x, int n, float max, float inv_t);

/* Order-preserving map from float to uint32: a < b implies key(a) < key(b); reversed so an
 * ascending sort gives logits in descending order. */
static inline uint32_t kern_key_desc(float f) {
    f = f + 0.0f; /* -0 becomes +0: they compare equal, so they must tie */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* Sorts (key[i], id[i]) pairs by key ascending; stable, so pairs given in id order leave
 * equal keys in id order. tmp_key and tmp_id are scratch of n entries each. */
void kern_sort(uint32_t *key, int32_t *id, uint32_t *tmp_key, int32_t *tmp_id, int n);

#endif
