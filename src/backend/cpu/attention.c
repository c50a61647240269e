/* backend/cpu/attention.c: causal GQA attention over the KV cache, one (row, head) pair per
 * task. Softmax is max-subtracted in float; each row's result depends only on that row. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

static float dot(const float *a, const float *b, int n) {
#ifdef __AVX512F__
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
#else
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
#endif
}

static void axpy(float *y, float a, const float *x, int n) {
#ifdef __AVX512F__
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
#else
    for (int i = 0; i < n; i++) y[i] += a * x[i];
#endif
}

static void attn_task(void *ctx, int ith, int nth) {
    const struct cpu_attn *a = ctx;
    int D = a->head_dim, group = a->n_heads / a->n_kv_heads;
    int n_tasks = a->n * a->n_heads;
    float *sc = a->scratch + (size_t)ith * a->cap;
    for (int task = ith; task < n_tasks; task += nth) {
        int t = task / a->n_heads, h = task % a->n_heads;
        int p = a->noncausal ? a->pos0 + a->n - 1 : a->pos0 + t;
        int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        const float *q = a->q + (size_t)task * D;
        const float *k = a->k + (size_t)(h / group) * a->cap * D;
        const float *v = a->v + (size_t)(h / group) * a->cap * D;
        float mx = -INFINITY;
        for (int j = lo; j <= p; j++) {
            float d = dot(q, k + (size_t)j * D, D);
            sc[j] = a->bf16 ? bf16_round(bf16_round(d) * a->scale) : d * a->scale;
            if (sc[j] > mx) mx = sc[j];
        }
        float sum = 0;
        for (int j = lo; j <= p; j++) {
            sc[j] = expf(sc[j] - mx);
            sum += sc[j];
        }
        float inv = 1.0f / sum;
        float *o = a->out + (size_t)task * D;
        memset(o, 0, sizeof(float) * (size_t)D);
        for (int j = lo; j <= p; j++) {
            float w = sc[j] * inv;
            axpy(o, a->bf16 ? bf16_round(w) : w, v + (size_t)j * D, D);
        }
        if (a->bf16)
            for (int i = 0; i < D; i++) o[i] = bf16_round(o[i]);
    }
}

void cpu_attention(struct pool *pool, const struct cpu_attn *a) {
    pool_run(pool, attn_task, (void *)a);
}
