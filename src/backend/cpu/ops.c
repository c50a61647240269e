/* backend/cpu/ops.c: small vector helpers over float32 for attention and softmax.
 * Each result depends only on the inputs and n (one fixed order of operations), so callers
 * that apply them per row stay batch-invariant. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/simd.h"

#include <math.h>

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#define OPS_AVX512 1
#include <immintrin.h>
#endif

#if OPS_AVX512
static inline __mmask16 tail_mask(int left) {
    return (__mmask16)((1u << left) - 1);
}

static inline float hsum16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

#endif

float cpu_dot(const float *a, const float *b, int n) {
#if OPS_AVX512
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    if (i + 16 <= n) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        i += 16;
    }
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        acc1 =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    return hsum16(_mm512_add_ps(acc0, acc1));
#else
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] = fmaf(a[i + l], b[i + l], s[l]);
    for (; i < n; i++) s[0] = fmaf(a[i], b[i], s[0]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
#endif
}

void cpu_axpy(float *y, float a, const float *x, int n) {
    int i = 0;
#if OPS_AVX512
    __m512 va = _mm512_set1_ps(a);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512 r =
            _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
#else
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
#endif
}

void cpu_scale(float *y, float a, int n) {
    int i = 0;
#if OPS_AVX512
    __m512 va = _mm512_set1_ps(a);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, y + i)));
    }
#else
    for (; i < n; i++) y[i] *= a;
#endif
}

void cpu_add(float *y, const float *x, size_t n) {
    size_t i = 0;
#if OPS_AVX512
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
#endif
    for (; i < n; i++) y[i] += x[i];
}

void cpu_exp(float *y, const float *x, int n) {
    int i = 0;
#if OPS_AVX512
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
#else
    for (; i < n; i++) y[i] = expf(x[i]);
#endif
}

float cpu_softmax(float *x, int n) {
    if (n <= 0) return 0.0f;
    float mx = -INFINITY;
    int i = 0;
#if OPS_AVX512
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    mx = _mm512_reduce_max_ps(vm);
#endif
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) { /* every entry masked: uniform weights would be a guess; give 0 */
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return 0.0f;
    }
    i = 0;
    float sum = 0.0f;
#if OPS_AVX512
    __m512 vs = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmx));
        _mm512_storeu_ps(x + i, e);
        vs = _mm512_add_ps(vs, e);
    }
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmx));
        e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(x + i, m, e);
        vs = _mm512_add_ps(vs, e);
    }
    sum = hsum16(vs);
#else
    double dsum = 0.0; /* one float accumulator would lose up to n ulps over long rows */
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        dsum += x[i];
    }
    sum = (float)dsum;
#endif
    cpu_scale(x, 1.0f / sum, n);
    return sum;
}
