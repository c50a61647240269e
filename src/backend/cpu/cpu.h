/* backend/cpu/cpu.h: the CPU kernels. Activations are float32; weights are F32, F16 or BF16
 * ([m, k] row-major, m = out features). Every kernel is batch-invariant: the value computed
 * for one row depends only on that row's inputs, never on how many rows share the call or on
 * the thread count, so a verify pass over k tokens gives bit-identical rows to k single steps.
 * Kernels split work over the pool's threads; the pool must not be used concurrently. */
#ifndef DSPARK_BACKEND_CPU_H
#define DSPARK_BACKEND_CPU_H

#include "base/thread.h"
#include "tensor/dtype.h"

#include <stddef.h>
#include <stdint.h>

/* y[n, m] = x[n, k] · W[m, k]^T (+ bias[m] when bias != NULL). y must not alias x. */
void cpu_matmul(struct pool *pool, float *y, const float *x, const void *w, enum dtype wt,
                const float *bias, int n, int k, int m);

/* ---- matmul_amx.c: BF16 weights on Intel AMX tiles, float32 accuracy (x split exactly into
 * three bfloat16 parts). Batch-invariant like cpu_matmul, but not bit-identical to it: a weight
 * must always go through the same one of the two. ---- */

/* 1 when the CPU has AMX-BF16 and the kernel grants its use (DSPARK_NO_AMX=1 turns it off). */
int cpu_amx_available(void);
size_t cpu_amx_packed_size(int64_t rows, int64_t cols); /* bytes of the packed layout */
/* Packs BF16 W[rows, cols] into the tile layout (dst: cpu_amx_packed_size bytes). */
void cpu_amx_pack(void *dst, const void *w, int64_t rows, int64_t cols);
/* y[n, m] = x[n, k] · W^T (+ bias) from W packed by cpu_amx_pack. */
void cpu_matmul_amx(struct pool *pool, float *y, const float *x, const void *tiles,
                    const float *bias, int n, int k, int m);
/* Several weights over the same x[n, k] in one pass of the threads (e.g. q, k and v): each
 * output's rows are exactly what cpu_matmul_amx gives for it alone. */
struct cpu_amx_out {
    float *y;          /* [n, m] */
    const void *tiles; /* [m, k] packed */
    const float *bias; /* [m] or NULL */
    int m;
};
void cpu_matmul_amx_multi(struct pool *pool, const float *x, int n, int k,
                          const struct cpu_amx_out *outs, int n_outs);

/* ---- norm.c, rope.c, attention.c ----
 * The `bf16` flag of these kernels rounds intermediate values to bfloat16 exactly where
 * transformers' bfloat16 path rounds them, so that a bf16 checkpoint's logits can be
 * reproduced; 0 keeps everything in float32 (more accurate, the default). */

/* Rounds x[0..n) to the nearest bfloat16 value, in place. */
void cpu_round_bf16(float *x, size_t n);
/* y[n, d] = x / sqrt(mean(x^2) + eps) * w, per row. y may alias x. */
void cpu_rmsnorm(float *y, const float *x, const float *w, int n, int d, float eps, int bf16);
/* g[i] = silu(g[i]) * u[i] for i < n. */
void cpu_silu_mul(float *g, const float *u, size_t n, int bf16);
/* Rotates x[n, n_heads, head_dim] in place, row t at position pos0 + t ("rotate half" layout:
 * element i pairs with i + head_dim/2). inv_freq has head_dim/2 entries. */
void cpu_rope(float *x, int n, int n_heads, int head_dim, int pos0, const float *inv_freq,
              int bf16);

/* Causal attention of n query rows at positions pos0.. over a cache holding positions
 * [0, pos0 + n). q, out: [n, n_heads, D]. The keys and values of kv head g at position j are,
 * for a paged cache (pages != NULL), at (const float *)pages[j >> page_shift] + k_off (v_off)
 * + ((g << page_shift) + (j & (2^page_shift - 1))) * D; else at k, v + (g * cap + j) * D.
 * window > 0 restricts row p to keys in (p - window, p]. */
struct cpu_attn {
    float *out;
    const float *q, *k, *v;
    const void *const *pages;
    size_t k_off, v_off; /* floats from a page's start to this layer's K, V rows */
    int page_shift;
    int n, pos0, cap, n_heads, n_kv_heads, head_dim, window;
    float scale;
    int bf16;      /* round scores, probabilities and output as transformers' bf16 path does */
    int noncausal; /* every row sees all positions [0, pos0 + n) (block drafters) */
};
void cpu_attention(struct pool *pool, const struct cpu_attn *a);

/* ---- ops.c: float32 vector helpers; each result depends only on its inputs and n ---- */

float cpu_dot(const float *a, const float *b, int n);    /* sum a[i]*b[i] */
void cpu_axpy(float *y, float a, const float *x, int n); /* y += a*x */
void cpu_scale(float *y, float a, int n);                /* y *= a */
void cpu_add(float *y, const float *x, size_t n);        /* y += x (residual) */
/* y = exp(x), within about 2 ulp; y may be x. */
void cpu_exp(float *y, const float *x, int n);
/* x = softmax(x) in place (max-subtracted); returns the sum of exponentials. A row of all
 * -inf becomes all zeros. */
float cpu_softmax(float *x, int n);

#endif
