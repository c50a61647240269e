/* backend/cpu/simd.h: AVX-512 helpers shared by the CPU kernels (header-only, inline). */
#ifndef DSPARK_BACKEND_CPU_SIMD_H
#define DSPARK_BACKEND_CPU_SIMD_H

#ifdef __AVX512F__
#include <immintrin.h>
#include <math.h>

/* exp(x) for 16 lanes: x = n·ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, then
 * scaling by 2^n. Relative error about 2 ulp; exp(-inf) = 0, exp(+inf) = +inf. */
static inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(88.8f);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512 y = _mm512_scalef_ps(p, n);
    /* inputs beyond the clamp: +inf stays +inf, NaN stays NaN */
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
/* Rounds every lane to the nearest bfloat16 (ties to even), as bf16_round() does. */
static inline __m512 bf16r16(__m512 x) {
    __m512i b = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
    /* NaN keeps its payload's top half, quieted */
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512i q = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32((int)0xffff0000u)),
                                _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, q));
}

#endif

#endif
