/* backend/cpu/matmul_amx.c: y = x · W^T for BF16 weights on Intel AMX tiles.
 *
 * The tile unit multiplies bfloat16 pairs and accumulates in float32. To keep float32 accuracy,
 * each float32 x is split exactly into three bfloat16 parts, x = hi + mid + lo (hi and mid by
 * truncation, so the remainders are exact; three 8-bit significands cover float32's 24 bits).
 * A weight is exactly a bfloat16, so every product is exact, and each output element is
 * accumulated as: for each 32-wide k-block, the hi, then the mid, then the lo products. That
 * order depends on k alone: a row's result is the same whatever the number of rows in the call
 * (each tile row is computed independently of the others) and whatever the thread count.
 *
 * Weights are packed once, at load, into the layout the tile loads read: for every block of 16
 * output rows and 32 k-columns, 16 lines of 64 bytes, line r holding the pairs
 * (w[c][2r], w[c][2r+1]) of the 16 output rows c (zero padding past m and k); the blocks of 4
 * neighbouring 16-row groups interleave by k-block, so each thread streams its weights in order.
 *
 * A verify pass of up to 16 rows reads each weight once and costs nearly what one row costs:
 * one tile instruction covers 16 rows x 16 outputs x 32 k. */
#include "backend/cpu/cpu.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 11)
#define AMX_BUILD 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define TN 16 /* output rows per tile block */
#define TK 32 /* k per tile block */
#define TR 16 /* token rows per tile */

size_t cpu_amx_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + TN - 1) / TN) * (size_t)((cols + TK - 1) / TK) * TN * TK * 2;
}

/* Offset, in bf16 elements, of block (cb, kb): column blocks go in groups of GB, and within a
 * group the blocks of one k-block are adjacent, so a group is read as one sequential stream. */
#define GB 4
static size_t block_at(int64_t ncb, int64_t nkb, int64_t cb, int64_t kb) {
    int64_t g = cb / GB, nbg = ncb - g * GB < GB ? ncb - g * GB : GB;
    return ((size_t)(g * GB) * (size_t)nkb + (size_t)(kb * nbg + cb % GB)) * TN * TK;
}

void cpu_amx_pack(void *dst, const void *w, int64_t rows, int64_t cols) {
    const uint16_t *src = w;
    int64_t nkb = (cols + TK - 1) / TK, ncb = (rows + TN - 1) / TN;
    for (int64_t cb = 0; cb < ncb; cb++)
        for (int64_t kb = 0; kb < nkb; kb++) {
            uint16_t *d = (uint16_t *)dst + block_at(ncb, nkb, cb, kb);
            for (int r = 0; r < TK / 2; r++)
                for (int c = 0; c < TN; c++)
                    for (int e = 0; e < 2; e++) {
                        int64_t row = cb * TN + c, col = kb * TK + 2 * r + e;
                        uint16_t v = 0;
                        if (row < rows && col < cols) memcpy(&v, src + row * cols + col, 2);
                        d[r * 2 * TN + 2 * c + e] = v;
                    }
        }
}

#if AMX_BUILD

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    const char *off = getenv("DSPARK_NO_AMX");
    if (off && *off && strcmp(off, "0")) return;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1, avx512 = (b >> 16) & 1 && (b >> 30) & 1;
    if (!tile || !bf16 || !avx512) return;
    /* the kernel must grant this process the tile state */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) return;
    amx_ok = 1;
}

int cpu_amx_available(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

struct tilecfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Tiles: 0, 1, 2 the hi, mid, lo parts of x (rows x 32 bf16); 3 weights (16 lines of 32 bf16);
 * 4..7 accumulators for four blocks of 16 outputs (rows x 16 floats). Configured per thread for
 * `rows` token rows. */
static _Thread_local int cfg_rows;

__attribute__((target("amx-tile"))) static void configure(int rows) {
    if (cfg_rows == rows) return;
    struct tilecfg t;
    memset(&t, 0, sizeof t);
    t.palette = 1;
    for (int i = 0; i < 8; i++) {
        t.colsb[i] = 64;
        t.rows[i] = (uint8_t)(i == 3 ? TK / 2 : rows);
    }
    _tile_loadconfig(&t);
    cfg_rows = rows;
}

/* Splits x[n, k] into three bfloat16 arrays [n, kp] (kp = k rounded up to TK, zero-padded). */
__attribute__((target("avx512f,avx512bw"))) static void
split_rows(uint16_t *parts, const float *x, int r0, int r1, int k, int kp, size_t part_stride) {
    for (int r = r0; r < r1; r++) {
        const float *xr = x + (size_t)r * k;
        uint16_t *h = parts + (size_t)r * kp, *md = h + part_stride, *l = md + part_stride;
        int i = 0;
        const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
        for (; i < kp; i += 16) {
            __mmask16 m = i + 16 <= k ? 0xffff : i < k ? (__mmask16)((1u << (k - i)) - 1) : 0;
            __m512 v = _mm512_maskz_loadu_ps(m, xr + i);
            __m512 vh = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), top));
            __m512 r1v = _mm512_sub_ps(v, vh);
            __m512 vm = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r1v), top));
            __m512 r2v = _mm512_sub_ps(r1v, vm);
            /* lo: round to nearest even (its own remainder is below float32's precision) */
            __m512i lb = _mm512_castps_si512(r2v);
            __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(lb, 16), _mm512_set1_epi32(1));
            lb = _mm512_add_epi32(lb, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
            _mm256_storeu_si256((__m256i *)(void *)(h + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(
                                                                _mm512_castps_si512(vh), 16)));
            _mm256_storeu_si256(
                (__m256i *)(void *)(md + i),
                _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(vm), 16)));
            _mm256_storeu_si256((__m256i *)(void *)(l + i),
                                _mm512_cvtepi32_epi16(_mm512_srli_epi32(lb, 16)));
        }
    }
}

struct amx_job {
    const struct cpu_amx_out *outs; /* the weights sharing x, each with its output */
    int n_outs;
    const uint16_t *parts; /* [3][n][kp] */
    int n, k, kp;
    size_t part_stride; /* n * kp */
};

/* Writes rows [r0, r0 + nr) x outputs [c0, c0 + 16) from a tile stored in buf (+ bias). */
__attribute__((target("avx512f"))) static void put(const struct cpu_amx_out *o, const float *buf,
                                                   int r0, int nr, int c0) {
    const int nc = o->m - c0 < TN ? o->m - c0 : TN;
    const __mmask16 mk = (__mmask16)((1u << nc) - 1);
    const __m512 b = o->bias ? _mm512_maskz_loadu_ps(mk, o->bias + c0) : _mm512_setzero_ps();
    for (int r = 0; r < nr; r++) {
        __m512 v = _mm512_load_ps(buf + r * TN);
        if (o->bias) v = _mm512_add_ps(v, b);
        _mm512_mask_storeu_ps(o->y + (size_t)(r0 + r) * o->m + c0, mk, v);
    }
}

/* Weight blocks are read PF blocks ahead of their use: a tile load does not hide a miss.
 * Prefetches never fault, so reading past a thread's range (or the buffer) is harmless. */
#define PF 4
static inline void prefetch_block(const uint16_t *p) {
    for (int l = 0; l < TN * TK * 2; l += 64) __builtin_prefetch((const char *)p + l, 0, 3);
}

/* NB (1, 2 or 4) blocks of 16 outputs: blocks b0 .. b0 + NB - 1 of the group at w, which holds
 * nbg blocks per k-block, for the token rows whose x parts start at hi (stride xs bytes). Per
 * k-block, the three x parts are loaded once and each output block's weights times hi, then
 * mid, then lo accumulate into its tile. */
#define AMX_STEP(T, b)                                                                             \
    do {                                                                                           \
        const uint16_t *w_ = w + ((size_t)kb * nbg + b0 + (b)) * blk;                              \
        prefetch_block(w_ + (size_t)PF * nbg * blk);                                               \
        _tile_loadd(3, w_, 64);                                                                    \
        _tile_dpbf16ps(T, 0, 3);                                                                   \
        _tile_dpbf16ps(T, 1, 3);                                                                   \
        _tile_dpbf16ps(T, 2, 3);                                                                   \
    } while (0)
#define AMX_BLOCKS(NB)                                                                             \
    __attribute__((target("amx-tile,amx-bf16"))) static void blocks##NB(                           \
        const struct amx_job *j, const uint16_t *w, int nbg, int b0, const uint16_t *hi,           \
        size_t xs, float *buf) {                                                                   \
        const int nkb = j->kp / TK;                                                                \
        const size_t blk = (size_t)TN * TK, ps = j->part_stride;                                   \
        _tile_zero(4);                                                                             \
        if (NB > 1) _tile_zero(5);                                                                 \
        if (NB > 2) {                                                                              \
            _tile_zero(6);                                                                         \
            _tile_zero(7);                                                                         \
        }                                                                                          \
        for (int kb = 0; kb < nkb; kb++) {                                                         \
            _tile_loadd(0, hi + kb * TK, xs);                                                      \
            _tile_loadd(1, hi + ps + kb * TK, xs);                                                 \
            _tile_loadd(2, hi + 2 * ps + kb * TK, xs);                                             \
            AMX_STEP(4, 0);                                                                        \
            if (NB > 1) AMX_STEP(5, 1);                                                            \
            if (NB > 2) {                                                                          \
                AMX_STEP(6, 2);                                                                    \
                AMX_STEP(7, 3);                                                                    \
            }                                                                                      \
        }                                                                                          \
        _tile_stored(4, buf, TN * 4);                                                              \
        if (NB > 1) _tile_stored(5, buf + TR * TN, TN * 4);                                        \
        if (NB > 2) {                                                                              \
            _tile_stored(6, buf + 2 * TR * TN, TN * 4);                                            \
            _tile_stored(7, buf + 3 * TR * TN, TN * 4);                                            \
        }                                                                                          \
    }
AMX_BLOCKS(1)
AMX_BLOCKS(2)
AMX_BLOCKS(4)

static int groups_of(const struct cpu_amx_out *o) {
    return ((o->m + TN - 1) / TN + GB - 1) / GB;
}

/* The groups of GB column blocks of all outputs, in order, are one list; threads take
 * contiguous runs of it. */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_worker(void *arg, int ith, int nth) {
    const struct amx_job *j = arg;
    const int nkb = j->kp / TK;
    int ng = 0;
    for (int i = 0; i < j->n_outs; i++) ng += groups_of(&j->outs[i]);
    const int g0 = (int)((int64_t)ng * ith / nth), g1 = (int)((int64_t)ng * (ith + 1) / nth);
    const size_t xs = (size_t)j->kp * 2; /* bytes per x row */
    float buf[GB * TR * TN] __attribute__((aligned(64)));
    for (int r0 = 0; r0 < j->n; r0 += TR) {
        const int nr = j->n - r0 < TR ? j->n - r0 : TR;
        configure(nr);
        const uint16_t *hi = j->parts + (size_t)r0 * j->kp;
        int oi = 0, base = 0; /* output of group g0, and the index of its first group */
        while (base + groups_of(&j->outs[oi]) <= g0) base += groups_of(&j->outs[oi++]);
        for (int gg = g0; gg < g1; gg++) {
            if (gg - base >= groups_of(&j->outs[oi])) base += groups_of(&j->outs[oi++]);
            const struct cpu_amx_out *o = &j->outs[oi];
            const int g = gg - base, ncb = (o->m + TN - 1) / TN;
            const int nbg = ncb - g * GB < GB ? ncb - g * GB : GB;
            const uint16_t *w = (const uint16_t *)o->tiles + block_at(ncb, nkb, (int64_t)g * GB, 0);
            for (int b = 0; b < nbg;) {
                int nb = nbg - b >= 4 ? 4 : nbg - b >= 2 ? 2 : 1;
                if (nb == 4)
                    blocks4(j, w, nbg, b, hi, xs, buf);
                else if (nb == 2)
                    blocks2(j, w, nbg, b, hi, xs, buf);
                else
                    blocks1(j, w, nbg, b, hi, xs, buf);
                for (int i = 0; i < nb; i++)
                    put(o, buf + i * TR * TN, r0, nr, (g * GB + b + i) * TN);
                b += nb;
            }
        }
    }
}

struct split_job {
    uint16_t *parts;
    const float *x;
    int n, k, kp;
    size_t part_stride;
};

static void split_worker(void *arg, int ith, int nth) {
    struct split_job *s = arg;
    int r0 = (int)((int64_t)s->n * ith / nth), r1 = (int)((int64_t)s->n * (ith + 1) / nth);
    split_rows(s->parts, s->x, r0, r1, s->k, s->kp, s->part_stride);
}

static _Thread_local struct thread_buf scratch; /* the split x */

void cpu_matmul_amx_multi(struct pool *pool, const float *x, int n, int k,
                          const struct cpu_amx_out *outs, int n_outs) {
    if (n <= 0 || n_outs <= 0) return;
    const int kp = (k + TK - 1) / TK * TK;
    uint16_t *parts = thread_buf_get(&scratch, sizeof(uint16_t) * 3 * (size_t)n * kp);
    if (!parts) { /* no memory for the split x: the kernel has no error path */
        for (int i = 0; i < n_outs; i++)
            for (size_t e = 0; e < (size_t)n * outs[i].m; e++) outs[i].y[e] = __builtin_nanf("");
        return;
    }
    struct split_job s = {parts, x, n, k, kp, (size_t)n * kp};
    if (n >= 16 && pool)
        pool_run(pool, split_worker, &s);
    else
        split_worker(&s, 0, 1);
    struct amx_job j = {outs, n_outs, parts, n, k, kp, (size_t)n * kp};
    if (pool)
        pool_run(pool, amx_worker, &j);
    else
        amx_worker(&j, 0, 1);
}

void cpu_matmul_amx(struct pool *pool, float *y, const float *x, const void *tiles,
                    const float *bias, int n, int k, int m) {
    if (m <= 0) return;
    struct cpu_amx_out o = {y, tiles, bias, m};
    cpu_matmul_amx_multi(pool, x, n, k, &o, 1);
}

#else /* no AMX in this build */

int cpu_amx_available(void) {
    return 0;
}

void cpu_matmul_amx_multi(struct pool *pool, const float *x, int n, int k,
                          const struct cpu_amx_out *outs, int n_outs) {
    (void)pool, (void)x, (void)k;
    for (int i = 0; i < n_outs; i++)
        for (size_t e = 0; e < (size_t)n * outs[i].m; e++) outs[i].y[e] = __builtin_nanf("");
}

void cpu_matmul_amx(struct pool *pool, float *y, const float *x, const void *tiles,
                    const float *bias, int n, int k, int m) {
    struct cpu_amx_out o = {y, tiles, bias, m};
    cpu_matmul_amx_multi(pool, x, n, k, &o, 1);
}

#endif
