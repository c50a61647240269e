/* backend/cpu/norm.c: RMSNorm and the SwiGLU activation. The sum of squares is accumulated
 * in double (8 lanes, then a fixed tree, on AVX-512), and SiLU uses the vector exp of simd.h;
 * each row's result depends only on that row. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/simd.h"

#include <math.h>

void cpu_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

void cpu_rmsnorm(float *y, const float *x, const float *w, int n, int d, float eps, int bf16) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        double ss = 0;
#ifdef __AVX512F__
        __m512d acc = _mm512_setzero_pd();
        for (int j = 0; j < d; j += 8) {
            __mmask8 m = d - j >= 8 ? 0xff : (__mmask8)((1u << (d - j)) - 1);
            __m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, xr + j));
            acc = _mm512_fmadd_pd(v, v, acc);
        }
        __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
        __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
        ss = _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
#else
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
#endif
        float inv = (float)(1.0 / sqrt(ss / d + (double)eps));
        if (bf16) {
            for (int i = 0; i < d; i++) yr[i] = bf16_round(w[i] * bf16_round(xr[i] * inv));
        } else {
            for (int i = 0; i < d; i++) yr[i] = w[i] * (xr[i] * inv);
        }
    }
}

void cpu_silu_mul(float *g, const float *u, size_t n, int bf16) {
    if (bf16) {
        for (size_t i = 0; i < n; i++)
            g[i] = bf16_round(bf16_round(g[i] / (1.0f + expf(-g[i]))) * u[i]);
        return;
    }
    size_t i = 0;
#ifdef __AVX512F__
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_storeu_ps(
            g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_mask_storeu_ps(g + i, m,
                              _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)),
                                            _mm512_maskz_loadu_ps(m, u + i)));
        i = n;
    }
#endif
    for (; i < n; i++) {
        float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}
