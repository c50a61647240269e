/* backend/cpu/matmul.c: y[n, m] = x[n, k] · W[m, k]^T (+ bias) for F32, F16 and BF16 weights.
 *
 * Batch invariance is the design constraint. Every output element is one dot product whose
 * order of operations is fixed by k alone: k is cut into blocks of 32 (the last one zero-padded),
 * each block is two vectors of multiply-adds into a single accumulator (the low half, then the
 * high half), and the accumulator is reduced by one fixed tree. Register tiles of any shape run
 * that same sequence per element, so a row's result does not depend on n, on which tile it
 * lands in, or on the thread count. The bias is added after the reduction.
 *
 * BF16 widening costs one integer op per 16 weights: a 32-weight block loaded as 16 dwords
 * gives the even-index weights by `<< 16` and the odd-index ones by masking the low half. x is
 * repacked once per call to match (per block: 16 even elements, then 16 odd ones), zero-padded
 * to a whole block, so the weight tail is the only masked load. F16 and F32 keep x in order.
 *
 * Threads take contiguous runs of output rows. For n > 1 a tile of MR token rows reuses every
 * loaded weight vector MR times; weights are walked in blocks that stay in L2 while all token
 * rows pass over them. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define MM_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MM_AVX2 1
#include <immintrin.h>
#endif

#define MM_INLINE static inline __attribute__((always_inline))
#define TMAX      8 /* largest tile side */

/* Elements per k-block, and lanes per vector. */
#if MM_AVX512
#define KB 32
#define VL 16
#elif MM_AVX2
#define KB 16
#define VL 8
#else
#define KB 16
#define VL 8
#endif

struct mm_job {
    float *y;          /* [n, m] */
    const float *xp;   /* [n, kp] repacked x */
    const char *w;     /* [m, k] weights */
    const float *bias; /* [m] or NULL */
    enum dtype wt;
    int n, k, m, kp;    /* kp: k rounded up to KB */
    size_t w_row_bytes; /* k * dtype_size */
};

/* ---- x repacking ---- */

/* Copies one row of x into the padded layout the kernels read: BF16 splits every KB-block into
 * its even then odd elements (to match how the weights are widened); others copy in order. */
static void pack_row(float *dst, const float *src, int k, int kp, int bf16_order) {
    if (!bf16_order) {
        memcpy(dst, src, (size_t)k * sizeof *dst);
        for (int i = k; i < kp; i++) dst[i] = 0.0f;
        return;
    }
    int b = 0;
#if MM_AVX512
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (; b + KB <= k; b += KB) {
        __m512 a = _mm512_loadu_ps(src + b), c = _mm512_loadu_ps(src + b + 16);
        _mm512_storeu_ps(dst + b, _mm512_permutex2var_ps(a, ev, c));
        _mm512_storeu_ps(dst + b + 16, _mm512_permutex2var_ps(a, od, c));
    }
#endif
    for (; b < kp; b += KB) {
        for (int i = 0; i < KB / 2; i++) {
            int e = b + 2 * i, o = e + 1;
            dst[b + i] = e < k ? src[e] : 0.0f;
            dst[b + KB / 2 + i] = o < k ? src[o] : 0.0f;
        }
    }
}

struct pack_job {
    float *dst;
    const float *src;
    int n, k, kp, bf16_order;
};

static void pack_worker(void *arg, int ith, int nth) {
    struct pack_job *p = arg;
    int r0 = (int)((int64_t)p->n * ith / nth), r1 = (int)((int64_t)p->n * (ith + 1) / nth);
    for (int r = r0; r < r1; r++)
        pack_row(p->dst + (size_t)r * p->kp, p->src + (size_t)r * p->k, p->k, p->kp, p->bf16_order);
}

/* Scratch for packed x, owned by the calling thread and grown on demand (no per-call malloc
 * once warm). */
static _Thread_local struct thread_buf scratch;

static float *scratch_get(size_t n_floats) {
    return thread_buf_get(&scratch, n_floats * sizeof(float));
}

#if MM_AVX512
/* ---- AVX-512 kernels ---- */

/* Widens half h (0: lanes the packed x holds first, 1: second) of the 32 weights of block b of
 * a row. tail: number of valid weights when the block is partial, else 0. */
MM_INLINE __m512 wload(const int wt, const char *row, int b, int h, int tail) {
    if (wt == DTYPE_BF16) {
        const char *p = row + (size_t)b * 2;
        __m512i r = tail ? _mm512_maskz_loadu_epi16((__mmask32)((1ull << tail) - 1), p)
                         : _mm512_loadu_si512(p);
        return _mm512_castsi512_ps(h ? _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u))
                                     : _mm512_slli_epi32(r, 16));
    }
    unsigned th = 0; /* valid elements in this half when tail */
    if (tail) th = h ? (tail > 16 ? (unsigned)tail - 16 : 0) : (tail < 16 ? (unsigned)tail : 16);
    if (wt == DTYPE_F16) {
        const char *p = row + (size_t)b * 2 + 32 * h;
        __m256i r = tail ? _mm256_maskz_loadu_epi16((__mmask16)((1u << th) - 1), p)
                         : _mm256_loadu_si256((const __m256i *)(const void *)p);
        return _mm512_cvtph_ps(r);
    }
    const float *p = (const float *)(const void *)(row + (size_t)b * 4) + 16 * h;
    return tail ? _mm512_maskz_loadu_ps((__mmask16)((1u << th) - 1), p) : _mm512_loadu_ps(p);
}

/* The one reduction tree: 16 -> 8 -> 4 -> 2 -> 1. */
MM_INLINE float hsum(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* hsum of four accumulators at once, stored to y[0..4) (+ bias[0..4)). Every level adds the
 * same pairs of lanes as hsum, so the four sums are bit-identical to four hsum calls. */
MM_INLINE void hsum4_store(__m512 a, __m512 b, __m512 c, __m512 d, float *y, const float *bias) {
    /* 16 -> 8: lanes i + (i + 8); ab = [a 0..7 | b 0..7] */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    /* 8 -> 4: lanes i + (i + 4); one 128-bit quarter per accumulator */
    __m512 u =
        _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    /* 4 -> 2 -> 1 within each quarter: lanes i + (i + 2), then 0 + 1 */
    u = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4e));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, 0xb1));
    __m128 s = _mm512_castps512_ps128(_mm512_permutexvar_ps(
        _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), u));
    if (bias) s = _mm_add_ps(s, _mm_loadu_ps(bias));
    _mm_storeu_ps(y, s);
}

/* One k-block of a tile: each weight half times the same half of every token row. Per output
 * element this is always fma(low half), then fma(high half), into its one accumulator. */
#define TILE_BLOCK(b, t)                                                                           \
    do {                                                                                           \
        for (int h = 0; h < 2; h++) {                                                              \
            __m512 wv[TMAX];                                                                       \
            for (int c = 0; c < NR; c++) wv[c] = wload(wt, w + c * ws, b, h, t);                   \
            for (int r = 0; r < MR; r++) {                                                         \
                __m512 xv = _mm512_loadu_ps(x + r * xs + (b) + h * VL);                            \
                for (int c = 0; c < NR; c++) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);    \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* MR token rows x NR weight rows. x: first token row (stride kp); w: first weight row;
 * pfw: NR weight rows to prefetch into L2 along the way (NULL: none); y: element (first token
 * row, first weight row), stride m. */
MM_INLINE void tile(const int wt, const int MR, const int NR, const struct mm_job *j,
                    const float *x, const char *w, const char *pfw, float *y, const float *bias) {
    __m512 acc[TMAX][TMAX]; /* fixed sizes (not MR x NR) so the compiler keeps them in registers */
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) acc[r][c] = _mm512_setzero_ps();
    const int kfull = j->k / KB * KB, tail = j->k - kfull;
    const size_t ws = j->w_row_bytes, xs = (size_t)j->kp;
    const size_t esz = wt == DTYPE_F32 ? 4 : 2;
    for (int b = 0; b < kfull; b += KB) {
        if (pfw) /* one line per row and block: the stream runs one tile ahead of the FMAs */
            for (int c = 0; c < NR; c++)
                for (size_t l = 0; l < esz * KB; l += 64)
                    __builtin_prefetch(pfw + c * ws + b * esz + l, 0, 2);
        TILE_BLOCK(b, 0);
    }
    if (tail) TILE_BLOCK(kfull, tail);
    for (int r = 0; r < MR; r++) {
        int c = 0;
        for (; c + 4 <= NR; c += 4)
            hsum4_store(acc[r][c], acc[r][c + 1], acc[r][c + 2], acc[r][c + 3],
                        y + (size_t)r * j->m + c, bias ? bias + c : NULL);
        for (; c < NR; c++) {
            float s = hsum(acc[r][c]);
            y[(size_t)r * j->m + c] = bias ? s + bias[c] : s;
        }
    }
}

#elif MM_AVX2
/* ---- AVX2 kernels: the same scheme with 8 lanes and 16-element blocks ---- */

MM_INLINE void wload(const int wt, const char *row, int b, int tail, __m256 *lo, __m256 *hi) {
    if (tail) { /* partial block: go through a zero-padded copy */
        char buf[KB * 4] __attribute__((aligned(32))) = {0};
        memcpy(buf, row + (size_t)b * dtype_size(wt), (size_t)tail * dtype_size(wt));
        wload(wt, buf, 0, 0, lo, hi);
        return;
    }
    if (wt == DTYPE_BF16) {
        __m256i r = _mm256_loadu_si256((const __m256i *)(row + (size_t)b * 2));
        *lo = _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
        *hi = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
    } else if (wt == DTYPE_F16) {
        const char *p = row + (size_t)b * 2;
        *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
    } else {
        const float *p = (const float *)(const void *)(row + (size_t)b * 4);
        *lo = _mm256_loadu_ps(p);
        *hi = _mm256_loadu_ps(p + 8);
    }
}

MM_INLINE float hsum(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

MM_INLINE void tile(const int wt, const int MR, const int NR, const struct mm_job *j,
                    const float *x, const char *w, const char *pfw, float *y, const float *bias) {
    (void)pfw;
    __m256 acc[TMAX][TMAX]; /* fixed sizes so the compiler keeps them in registers */
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) acc[r][c] = _mm256_setzero_ps();
    const int kfull = j->k / KB * KB, tail = j->k - kfull;
    const size_t ws = j->w_row_bytes, xs = (size_t)j->kp;
    for (int b = 0; b < j->k; b += KB) {
        const int t = b < kfull ? 0 : tail;
        __m256 lo[TMAX], hi[TMAX];
        for (int c = 0; c < NR; c++) wload(wt, w + c * ws, b, t, &lo[c], &hi[c]);
        for (int r = 0; r < MR; r++) {
            __m256 xl = _mm256_loadu_ps(x + r * xs + b);
            __m256 xh = _mm256_loadu_ps(x + r * xs + b + VL);
            for (int c = 0; c < NR; c++) {
                acc[r][c] = _mm256_fmadd_ps(lo[c], xl, acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(hi[c], xh, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) {
            float s = hsum(acc[r][c]);
            y[(size_t)r * j->m + c] = bias ? s + bias[c] : s;
        }
}

#else
/* ---- portable fallback: 8 interleaved partial sums per element, fixed pairwise reduction ---- */

MM_INLINE float wget(const int wt, const char *row, int i) {
    uint16_t h;
    if (wt == DTYPE_F32) {
        float f;
        memcpy(&f, row + (size_t)i * 4, 4);
        return f;
    }
    memcpy(&h, row + (size_t)i * 2, 2);
    return wt == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

MM_INLINE void tile(const int wt, const int MR, const int NR, const struct mm_job *j,
                    const float *x, const char *w, const char *pfw, float *y, const float *bias) {
    (void)pfw;
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) {
            const float *xr = x + (size_t)r * j->kp;
            const char *wr = w + c * j->w_row_bytes;
            float acc[VL] = {0};
            for (int b = 0; b < j->k; b += KB)
                for (int h = 0; h < 2; h++)
                    for (int l = 0; l < VL; l++) {
                        /* lane l of half h: the element the packed x holds there */
                        int e = wt == DTYPE_BF16 ? b + 2 * l + h : b + h * VL + l;
                        float wv = e < j->k ? wget(wt, wr, e) : 0.0f;
                        acc[l] = fmaf(wv, xr[b + h * VL + l], acc[l]);
                    }
            for (int s = VL / 2; s >= 1; s /= 2)
                for (int l = 0; l < s; l++) acc[l] += acc[l + s];
            y[(size_t)r * j->m + c] = bias ? acc[0] + bias[c] : acc[0];
        }
}
#endif

/* ---- tiling and threading ---- */

/* Tile shapes (token rows x weight rows): up to TMAX token rows run in one tile, so a verify pass
 * of up to 8 rows reads each weight once. Each shape keeps MR x NR accumulators, NR widened
 * weight vectors and one x vector within the 32 vector registers (16 for AVX2), and spends one
 * widening op per MR multiply-adds. More rows than TMAX go in groups of MR_BIG, then one tile
 * for the rest. */
#if MM_AVX512 /* 32 vector registers */
#define MR_BIG 8
#else /* 16 */
#define MR_BIG 4
#endif
#define ROW_GROUP 8 /* threads split the weight rows in whole groups of this many */
/* Weight rows per L2 block: about 96 KB of weights, a multiple of every tile width. */
#define WB_UNIT 120
static int wblock_rows(const struct mm_job *j) {
    size_t rows = (96u << 10) / (j->w_row_bytes ? j->w_row_bytes : 1);
    rows = rows / WB_UNIT * WB_UNIT;
    return rows < WB_UNIT ? WB_UNIT : (int)rows;
}

/* Runs token rows [r0, r0+MR) against weight rows [c0, c1), NR at a time, then one by one.
 * The first pass over a block of weight rows (pass 0) streams them from memory with each tile
 * prefetching the next; the second pass, which reads the block from L2, prefetches the block
 * after it (the rows from c1 on, up to `end`), so memory traffic overlaps the FMAs. */
MM_INLINE void strip(const int wt, const int MR, const int NR, const struct mm_job *j, int r0,
                     int c0, int c1, int pass, int end) {
    const float *x = j->xp + (size_t)r0 * j->kp;
    float *y = j->y + (size_t)r0 * j->m;
    const size_t ws = j->w_row_bytes;
    const int ahead = pass == 0 ? NR : pass == 1 ? c1 - c0 : 0;
    int c = c0;
    for (; c + NR <= c1; c += NR) {
        const char *pfw = ahead && c + ahead + NR <= end ? j->w + (size_t)(c + ahead) * ws : NULL;
        tile(wt, MR, NR, j, x, j->w + (size_t)c * ws, pfw, y + c, j->bias ? j->bias + c : NULL);
    }
    if (c < c1) { /* the last c1 - c < NR weight rows: one narrower tile */
        const char *pfw = ahead && c + ahead + NR <= end ? j->w + (size_t)(c + ahead) * ws : NULL;
        const char *w = j->w + (size_t)c * ws;
        const float *b = j->bias ? j->bias + c : NULL;
        switch (c1 - c) {
#define TAIL(k)                                                                                    \
    case k:                                                                                        \
        if (k < NR) tile(wt, MR, k < NR ? k : 1, j, x, w, pfw, y + c, b);                          \
        break;
            TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5) TAIL(6) TAIL(7)
#undef TAIL
        }
    }
}

/* One out-of-line function per (dtype, tile shape), so each keeps its accumulators in
 * registers and can be read in a disassembly. */
typedef void strip_fn(const struct mm_job *j, int r0, int c0, int c1, int pass, int end);
#define DEFINE_STRIP(name, WT, MR, NR)                                                             \
    static __attribute__((noinline)) void name(const struct mm_job *j, int r0, int c0, int c1,     \
                                               int pass, int end) {                                \
        strip(WT, MR, NR, j, r0, c0, c1, pass, end);                                               \
    }
#if MM_AVX512
#define NR_OF(MR)                                                                                  \
    ((MR) == 1 ? 8 : (MR) == 2 ? 8 : (MR) == 3 ? 6 : (MR) == 4 ? 5 : (MR) <= 6 ? 4 : 3)
#else
#define NR_OF(MR) ((MR) == 1 ? 4 : (MR) == 2 ? 4 : (MR) == 3 ? 3 : (MR) <= 6 ? 2 : 1)
#endif
#define DEFINE_STRIPS(sfx, WT)                                                                     \
    DEFINE_STRIP(strip_##sfx##_1, WT, 1, NR_OF(1))                                                 \
    DEFINE_STRIP(strip_##sfx##_2, WT, 2, NR_OF(2))                                                 \
    DEFINE_STRIP(strip_##sfx##_3, WT, 3, NR_OF(3))                                                 \
    DEFINE_STRIP(strip_##sfx##_4, WT, 4, NR_OF(4))                                                 \
    DEFINE_STRIP(strip_##sfx##_5, WT, 5, NR_OF(5))                                                 \
    DEFINE_STRIP(strip_##sfx##_6, WT, 6, NR_OF(6))                                                 \
    DEFINE_STRIP(strip_##sfx##_7, WT, 7, NR_OF(7))                                                 \
    DEFINE_STRIP(strip_##sfx##_8, WT, 8, NR_OF(8))                                                 \
    static strip_fn *const strips_##sfx[] = {NULL,                                                 \
                                             strip_##sfx##_1,                                      \
                                             strip_##sfx##_2,                                      \
                                             strip_##sfx##_3,                                      \
                                             strip_##sfx##_4,                                      \
                                             strip_##sfx##_5,                                      \
                                             strip_##sfx##_6,                                      \
                                             strip_##sfx##_7,                                      \
                                             strip_##sfx##_8};
DEFINE_STRIPS(bf16, DTYPE_BF16)
DEFINE_STRIPS(f16, DTYPE_F16)
DEFINE_STRIPS(f32, DTYPE_F32)

/* Token rows in groups of MR_BIG, then one tile for the rest (so n <= TMAX is a single pass), over
 * L2-sized blocks of weight rows. */
static void run_rows(strip_fn *const *sf, const struct mm_job *j, int c0, int c1) {
    const int wb = wblock_rows(j);
    for (int b0 = c0; b0 < c1; b0 += wb) {
        const int b1 = b0 + wb < c1 ? b0 + wb : c1;
        int r = 0, pass = 0;
        if (j->n > TMAX)
            for (; r + MR_BIG <= j->n; r += MR_BIG) sf[MR_BIG](j, r, b0, b1, pass++, c1);
        if (r < j->n) sf[j->n - r](j, r, b0, b1, pass, c1);
    }
}

static void mm_worker(void *arg, int ith, int nth) {
    const struct mm_job *j = arg;
    /* contiguous runs of whole ROW_GROUP-row groups */
    const int groups = (j->m + ROW_GROUP - 1) / ROW_GROUP;
    int c0 = (int)((int64_t)groups * ith / nth) * ROW_GROUP;
    int c1 = (int)((int64_t)groups * (ith + 1) / nth) * ROW_GROUP;
    if (c1 > j->m) c1 = j->m;
    if (c0 >= c1) return;
    run_rows(j->wt == DTYPE_BF16  ? strips_bf16
             : j->wt == DTYPE_F16 ? strips_f16
                                  : strips_f32,
             j, c0, c1);
}

void cpu_matmul(struct pool *pool, float *y, const float *x, const void *w, enum dtype wt,
                const float *bias, int n, int k, int m) {
    if (n <= 0 || m <= 0) return;
    if (k <= 0) {
        for (int r = 0; r < n; r++)
            for (int c = 0; c < m; c++) y[(size_t)r * m + c] = bias ? 0.0f + bias[c] : 0.0f;
        return;
    }
    const int kp = (k + KB - 1) / KB * KB;
    float *xp = scratch_get((size_t)n * kp);
    if (!xp && n > 1) { /* no memory for a scratch of n rows: one row at a time */
        for (int r = 0; r < n; r++)
            cpu_matmul(pool, y + (size_t)r * m, x + (size_t)r * k, w, wt, bias, 1, k, m);
        return;
    }
    if (!xp) { /* not even one row: the kernel has no error path, so the result is NaN */
        for (int c = 0; c < m; c++) y[c] = __builtin_nanf("");
        return;
    }
    struct pack_job pj = {xp, x, n, k, kp, wt == DTYPE_BF16};
    if (n >= 16 && pool)
        pool_run(pool, pack_worker, &pj);
    else
        pack_worker(&pj, 0, 1);
    struct mm_job j = {y, xp, w, bias, wt, n, k, m, kp, (size_t)k * dtype_size(wt)};
    if (pool)
        pool_run(pool, mm_worker, &j);
    else
        mm_worker(&j, 0, 1);
}
