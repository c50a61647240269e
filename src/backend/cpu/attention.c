/* backend/cpu/attention.c: causal GQA attention over the KV cache, one (row, head) pair per
 * task. Softmax is max-subtracted in float. Each row's result depends only on that row: the
 * order of operations is fixed by the row's own key range, never by the number of rows.
 *
 * AVX-512 path, per (row, head): scores for 16 keys at a time (each key a head_dim-long dot
 * product of fixed order, the 16 sums reduced together by one fixed tree into one vector),
 * then exp over the scores, then the weighted sum of V rows with the output held in
 * registers (even and odd keys in two accumulator sets, added at the end). */
#include "backend/cpu/cpu.h"

#include "backend/cpu/simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Scores of a task's queries, per thread (no per-call malloc once warm). */
static _Thread_local struct thread_buf scores_buf;

/* One kv head's rows: position j's at pg[j >> shift] + off + (j & mask) * D. A contiguous
 * cache is one page (pg points to `one`, so a struct rows is filled in place, never copied). */
struct rows {
    const void *const *pg;
    const void *one;
    size_t off;
    int shift, mask;
};

static inline void head_rows(struct rows *r, const struct cpu_attn *a, int v, int g) {
    const size_t D = (size_t)a->head_dim;
    if (a->pages) {
        r->pg = a->pages, r->shift = a->page_shift, r->mask = (1 << a->page_shift) - 1;
        r->off = (v ? a->v_off : a->k_off) + ((size_t)g << a->page_shift) * D;
    } else {
        r->one = (v ? a->v : a->k) + (size_t)g * a->cap * D;
        r->pg = &r->one, r->shift = 30, r->mask = (1 << 30) - 1, r->off = 0;
    }
}

static inline const float *row_at(const struct rows *r, int j, int D) {
    return (const float *)r->pg[j >> r->shift] + r->off + (size_t)(j & r->mask) * D;
}

#ifdef __AVX512F__

/* Lane i of the result is the sum of the 16 lanes of a[i], by the tree 16 -> 8 -> 4 -> 2 -> 1
 * (lanes l + l+8, then l + l+4, l + l+2, l + l+1), the same for every i. */
static inline __m512 reduce16(const __m512 a[16]) {
    __m512 t[8], u[4], w[2];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* quarters: a[4i], a[4i+1], a[4i+2], a[4i+3] */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) /* per quarter q: pairs of a[4(2i)+q], a[4(2i+1)+q] */
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xee));
    __m512 s =
        _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xdd));
    /* lane 4q + r holds the sum of a[4r + q] */
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, s);
}

/* Scores of the keys [lo, p] for one query row q of one head, scaled (and rounded as the
 * bf16 path does), into sc[lo..p]; returns their maximum. */
static float scores(const struct cpu_attn *a, const float *q, const struct rows *k, int lo, int p,
                    float *sc) {
    const int D = a->head_dim, nv = (D + 15) / 16;
    const __mmask16 dm = (D & 15) ? (__mmask16)((1u << (D & 15)) - 1) : 0xffff;
    const __m512 vs = _mm512_set1_ps(a->scale);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j0 = lo; j0 <= p; j0 += 16) {
        const int nk = p - j0 + 1 < 16 ? p - j0 + 1 : 16;
        /* a partial block repeats key p in its unused lanes (masked off below), so every
         * loop here has a constant trip count and the accumulators stay in registers */
        const float *kr[16];
        if ((j0 >> k->shift) == ((j0 + nk - 1) >> k->shift)) { /* one page: rows D apart */
            const float *r0 = row_at(k, j0, D);
            for (int i = 0; i < 16; i++) kr[i] = r0 + (size_t)(i < nk ? i : nk - 1) * D;
        } else {
            for (int i = 0; i < 16; i++) kr[i] = row_at(k, i < nk ? j0 + i : p, D);
        }
        __m512 acc[16];
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        for (int d = 0; d < nv; d++) {
            const __mmask16 m = d == nv - 1 ? dm : 0xffff;
            __m512 qv = _mm512_maskz_loadu_ps(m, q + 16 * d);
            for (int i = 0; i < 16; i++)
                acc[i] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kr[i] + 16 * d), acc[i]);
        }
        __m512 s = reduce16(acc);
        s = a->bf16 ? bf16r16(_mm512_mul_ps(bf16r16(s), vs)) : _mm512_mul_ps(s, vs);
        const __mmask16 km = (__mmask16)((1u << nk) - 1);
        _mm512_mask_storeu_ps(sc + j0, km, s);
        vmax = _mm512_mask_max_ps(vmax, km, vmax, s);
    }
    return _mm512_reduce_max_ps(vmax);
}

/* sc[lo..p] = exp(sc - mx) / their sum (the sum over 16 lanes, then the fixed tree), each
 * rounded to bf16 on that path: the attention weights. */
static void softmax_weights(float *sc, int lo, int p, float mx, int bf16) {
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int j0 = lo; j0 <= p; j0 += 16) {
        const int nk = p - j0 + 1 < 16 ? p - j0 + 1 : 16;
        const __mmask16 km = (__mmask16)((1u << nk) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(km, sc + j0), vm));
        e = _mm512_maskz_mov_ps(km, e);
        _mm512_mask_storeu_ps(sc + j0, km, e);
        sum = _mm512_add_ps(sum, e);
    }
    __m512 z[16];
    z[0] = sum;
    for (int i = 1; i < 16; i++) z[i] = _mm512_setzero_ps();
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_cvtss_f32(reduce16(z)));
    for (int j0 = lo; j0 <= p; j0 += 16) {
        const int nk = p - j0 + 1 < 16 ? p - j0 + 1 : 16;
        const __mmask16 km = (__mmask16)((1u << nk) - 1);
        __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(km, sc + j0), inv);
        _mm512_mask_storeu_ps(sc + j0, km, bf16 ? bf16r16(w) : w);
    }
}

/* One query of a task: its head's query vector, its key range [lo, p], its scores. */
struct query {
    const float *q;
    float *sc, *out;
    int lo, p;
};

#define QMAX 6 /* queries whose outputs share one pass over V (4 vectors each in registers) */

/* out[0..D) of each query = sum over its keys j, in increasing order, of w_j * v[j], where sc
 * already holds the weights w_j. NQ (constant after inlining) queries share each load of a V
 * row; a query's sum has the same order whichever queries it shares the pass with. */
static inline __attribute__((always_inline)) void weighted_sums_n(const int NQ,
                                                                  const struct cpu_attn *a,
                                                                  const struct rows *v,
                                                                  const struct query *qs) {
    const int D = a->head_dim;
    int lo_min = qs[0].lo, lo_max = qs[0].lo, p_min = qs[0].p, p_max = qs[0].p;
    for (int i = 1; i < NQ; i++) {
        lo_min = qs[i].lo < lo_min ? qs[i].lo : lo_min;
        lo_max = qs[i].lo > lo_max ? qs[i].lo : lo_max;
        p_min = qs[i].p < p_min ? qs[i].p : p_min;
        p_max = qs[i].p > p_max ? qs[i].p : p_max;
    }
    /* [all0, all1]: the keys every query has, so that stretch runs without checks */
    const int all0 = lo_max, all1 = lo_max <= p_min ? p_min : lo_max - 1;
    for (int d0 = 0; d0 < D; d0 += 64) {
        __mmask16 m[4];
        for (int c = 0; c < 4; c++) {
            int left = D - d0 - 16 * c;
            m[c] = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        }
        __m512 o[QMAX][4];
        for (int i = 0; i < NQ; i++)
            for (int c = 0; c < 4; c++) o[i][c] = _mm512_setzero_ps();
        /* row j's V pointer, stepped by D inside a page, looked up at each page's start */
        const float *vp = NULL;
#define ROW_LOAD(j)                                                                                \
    vp = vp && ((j)&v->mask) ? vp + D : row_at(v, j, D);                                           \
    __m512 vr[4];                                                                                  \
    for (int c = 0; c < 4; c++) vr[c] = _mm512_maskz_loadu_ps(m[c], vp + d0 + 16 * c)
#define ROW_ADD(i, j)                                                                              \
    do {                                                                                           \
        __m512 vw = _mm512_set1_ps(qs[i].sc[j]);                                                   \
        for (int c = 0; c < 4; c++) o[i][c] = _mm512_fmadd_ps(vw, vr[c], o[i][c]);                 \
    } while (0)
        for (int j = lo_min; j < all0; j++) {
            ROW_LOAD(j);
            for (int i = 0; i < NQ; i++)
                if (j >= qs[i].lo && j <= qs[i].p) ROW_ADD(i, j);
        }
        for (int j = all0; j <= all1; j++) {
            ROW_LOAD(j);
            for (int i = 0; i < NQ; i++) ROW_ADD(i, j);
        }
        for (int j = all1 + 1 > all0 ? all1 + 1 : all0; j <= p_max; j++) {
            ROW_LOAD(j);
            for (int i = 0; i < NQ; i++)
                if (j >= qs[i].lo && j <= qs[i].p) ROW_ADD(i, j);
        }
#undef ROW_LOAD
#undef ROW_ADD
        for (int i = 0; i < NQ; i++)
            for (int c = 0; c < 4; c++) {
                __m512 s = a->bf16 ? bf16r16(o[i][c]) : o[i][c];
                _mm512_mask_storeu_ps(qs[i].out + d0 + 16 * c, m[c], s);
            }
    }
}

static void weighted_sums(const struct cpu_attn *a, const struct rows *v, const struct query *qs,
                          int nq) {
    switch (nq) {
    case 1:
        weighted_sums_n(1, a, v, qs);
        break;
    case 2:
        weighted_sums_n(2, a, v, qs);
        break;
    case 3:
        weighted_sums_n(3, a, v, qs);
        break;
    case 4:
        weighted_sums_n(4, a, v, qs);
        break;
    case 5:
        weighted_sums_n(5, a, v, qs);
        break;
    default:
        weighted_sums_n(6, a, v, qs);
        break;
    }
}

#define QUERIES_PER_TASK 6   /* query rows per task times the GQA group, at most (and >= 1 row) */
#define KEY_CHUNK        128 /* keys scored per pass of all queries: stays in L1 */

/* A task is one KV head and a few rows: all the query heads of its GQA group for those rows
 * read each chunk of K, then each row of V, once. */
static void attn_task(void *ctx, int ith, int nth) {
    const struct cpu_attn *a = ctx;
    const int D = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const int rpt = group < QUERIES_PER_TASK ? QUERIES_PER_TASK / group : 1; /* rows per task */
    const int row_blocks = (a->n + rpt - 1) / rpt;
    const int n_tasks = a->n_kv_heads * row_blocks;
    const int nq_max = rpt * group;
    struct query qbuf[QUERIES_PER_TASK], *qs = nq_max <= QUERIES_PER_TASK ? qbuf : NULL;
    float mbuf[QUERIES_PER_TASK], *mx = qs ? mbuf : NULL;
    if (!qs) { /* very wide GQA groups */
        qs = malloc(sizeof *qs * (size_t)nq_max);
        mx = malloc(sizeof *mx * (size_t)nq_max);
    }
    float *sc =
        thread_buf_get(&scores_buf, sizeof(float) * (size_t)nq_max * (size_t)(a->pos0 + a->n));
    for (int task = ith; task < n_tasks; task += nth) {
        const int g = task / row_blocks, t0 = task % row_blocks * rpt;
        const int t1 = t0 + rpt < a->n ? t0 + rpt : a->n;
        struct rows k, v;
        head_rows(&k, a, 0, g);
        head_rows(&v, a, 1, g);
        if (!sc || !qs || !mx) { /* no memory: the kernel has no error path, so NaN */
            for (int t = t0; t < t1; t++)
                for (int i = 0; i < group * D; i++)
                    a->out[((size_t)t * a->n_heads + (size_t)g * group) * D + i] =
                        __builtin_nanf("");
            continue;
        }
        int nq = 0, lo_min = 1 << 30, p_max = -1;
        for (int t = t0; t < t1; t++)
            for (int h = g * group; h < (g + 1) * group; h++, nq++) {
                struct query *q = &qs[nq];
                q->p = a->noncausal ? a->pos0 + a->n - 1 : a->pos0 + t;
                q->lo = a->window > 0 && q->p - a->window + 1 > 0 ? q->p - a->window + 1 : 0;
                q->q = a->q + ((size_t)t * a->n_heads + h) * D;
                q->out = a->out + ((size_t)t * a->n_heads + h) * D;
                q->sc = sc + (size_t)nq * (size_t)(a->pos0 + a->n);
                lo_min = q->lo < lo_min ? q->lo : lo_min;
                p_max = q->p > p_max ? q->p : p_max;
            }
        for (int i = 0; i < nq; i++) mx[i] = -INFINITY;
        for (int c0 = lo_min; c0 <= p_max; c0 += KEY_CHUNK)
            for (int i = 0; i < nq; i++) {
                int j0 = c0 > qs[i].lo ? c0 : qs[i].lo;
                int j1 = c0 + KEY_CHUNK - 1 < qs[i].p ? c0 + KEY_CHUNK - 1 : qs[i].p;
                if (j0 > j1) continue;
                float m = scores(a, qs[i].q, &k, j0, j1, qs[i].sc);
                mx[i] = m > mx[i] ? m : mx[i];
            }
        for (int i = 0; i < nq; i++) softmax_weights(qs[i].sc, qs[i].lo, qs[i].p, mx[i], a->bf16);
        for (int i = 0; i < nq; i += QMAX)
            weighted_sums(a, &v, qs + i, nq - i < QMAX ? nq - i : QMAX);
    }
    if (qs != qbuf) free(qs), free(mx);
}

#else /* portable */

static float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void attn_task(void *ctx, int ith, int nth) {
    const struct cpu_attn *a = ctx;
    int D = a->head_dim, group = a->n_heads / a->n_kv_heads;
    int n_tasks = a->n * a->n_heads;
    float *sc = thread_buf_get(&scores_buf, sizeof(float) * (size_t)(a->pos0 + a->n));
    for (int task = ith; task < n_tasks; task += nth) {
        if (!sc) { /* no memory: the kernel has no error path, so NaN */
            for (int i = 0; i < D; i++) a->out[(size_t)task * D + i] = __builtin_nanf("");
            continue;
        }
        int t = task / a->n_heads, h = task % a->n_heads;
        int p = a->noncausal ? a->pos0 + a->n - 1 : a->pos0 + t;
        int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        const float *q = a->q + (size_t)task * D;
        struct rows k, v;
        head_rows(&k, a, 0, h / group);
        head_rows(&v, a, 1, h / group);
        float mx = -INFINITY;
        for (int j = lo; j <= p; j++) {
            float d = dot(q, row_at(&k, j, D), D);
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
            axpy(o, a->bf16 ? bf16_round(w) : w, row_at(&v, j, D), D);
        }
        if (a->bf16)
            for (int i = 0; i < D; i++) o[i] = bf16_round(o[i]);
    }
}

#endif

void cpu_attention(struct pool *pool, const struct cpu_attn *a) {
    pool_run(pool, attn_task, (void *)a);
}
