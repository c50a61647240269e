/* sample/kern.h: internal numeric kernels of the sample module (not a public API):
 * a vectorisable exp for non-positive arguments, max/sum reductions with a fixed summation
 * order (so results never depend on the compiler, and a GPU can match them), and a stable
 * key sort. Pure functions of their arguments; thread-safe. */
#ifndef DSPARK_SAMPLE_KERN_H
#define DSPARK_SAMPLE_KERN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The CUDA backend's sampling summaries (backend/cuda/sample.cu) compile kern_exp for the
 * device too, so that the two never drift apart. */
#ifdef __CUDACC__
#define KERN_HOST_DEVICE __host__ __device__
#else
#define KERN_HOST_DEVICE
#endif

/* e^x for x <= 0, relative error below 1e-7. Returns 0 for x < -87 and for NaN, so NaN
 * and -inf logits act as impossible tokens. Branch-free so loops over it vectorise. The
 * explicit fmaf() makes the result the same in scalar and vector code and under any
 * -ffp-contract setting (it needs FMA hardware to be fast, which -march=native gives); no
 * other multiply is followed by an add, so nvcc's contraction cannot change it either. */
static inline KERN_HOST_DEVICE float kern_exp(float x) {
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
/* Sum of x[0..n) in double, in a fixed order that a GPU can reproduce in parallel:
 *  - x is cut into blocks of KERN_SUM_BLOCK values (the last may be shorter);
 *  - a block's sum: eight double accumulators starting at 0, lane j adding (double)x[b + j],
 *    x[b + j + 8], x[b + j + 16], ... (those the block has) in increasing index order, then
 *    combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7));
 *  - the block sums are combined pairwise, level by level: new[i] = old[2i] + old[2i + 1]
 *    for every pair, an odd last element carried to the next level unchanged, until one
 *    value remains. n == 0 gives 0.
 * No allocation and no limit on n. */
enum { KERN_SUM_BLOCK = 256 };
double kern_sum(const float *x, int n);
/* y[i] = kern_exp((x[i] - max) * inv_t) for i < n; returns kern_sum(y, n). */
double kern_exp_shift(float *y, const float *x, int n, float max, float inv_t);
/* kern_exp_shift()'s return value (the same bits) without storing y. */
double kern_exp_sum(const float *x, int n, float max, float inv_t);

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
