/* backend/cuda/attention.cuh: what the attention kernels (attention.cu) and the merge of their
 * span partials (merge.cu) share: a launch's arguments, a row's lowest key, the kernels'
 * shared-memory limit, and the merge's entry points. */
#ifndef DSPARK_BACKEND_CUDA_ATTENTION_CUH
#define DSPARK_BACKEND_CUDA_ATTENTION_CUH

#include "backend/cuda/cuda.cuh"

#include <type_traits>

struct attn_args {
    const float *q; /* [T, nh, D] */
    const step_params *sp;
    uint16_t *xb_out; /* B operand of the output projection (K = QD) */
    float *acc, *ml;  /* span partials: [att_rows][nh][spans][D] and [..][2] */
    int T, r0, nr;    /* the chunk's rows (xb layout); this launch's rows [r0, r0 + nr) */
    int nh, nkv, G, KT_out, layer, window, spans;
    int early; /* the merge lets the output projection start (and load weights) at once */
    int early_kv; /* one buffer: the next item's keys and queries load during this one's
                   * softmax and values (DSPARK_GPU_ATT_EARLY_KV) */
    int pre_kv;   /* the first item's keys and values of earlier positions are requested
                   * before the wait on the previous kernel (DSPARK_GPU_ATT_PRE_KV) */
    float scale;
    int terms;    /* of xb_out (gpu_model.terms) */
    int merge_ch; /* k_attn_merge_dims: spans a chunk, 1..MERGE_CH */
};

/* the lowest position a row at position p sees (0 without a sliding window) */
__host__ __device__ __forceinline__ int att_lo(int p, int window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

typedef void (*attn_kernel)(attn_args);

/* ---- what the attention kernels share (attention.cu, attn_prompt.cu) ---- */

/* a sequence's share of a launch: rows [a, b), spans [span0, span0 + nsp), items from it0 */
struct att_seq {
    int a, b, span0, nsp, units, it0;
};

/* A work item's rows: position, lowest key and the item's valid keys [j0, j1) of the tile
 * (j1 = 0: the span is not one of the row's) */
static_assert(ATT_SPAN == 64, "the softmax takes two keys a lane");

struct att_row {
    int t, j0, j1;
};

/* Where sequence P keeps the key (or value) rows of kv head line hh: row j (a position) at
 * (j < nb ? base : own) + j D elements (floats, or bf16 with KV16), read from P once per tile,
 * not per row */
template <bool KV16> struct att_lines {
    typedef typename std::conditional<KV16, uint16_t, float>::type elem; /* bf16 bits, float */
    const elem *base, *own;
    int nb;
    __device__ __forceinline__ const elem *row(int j, int D) const {
        return (j < nb ? base : own) + (size_t)j * D;
    }
};
template <bool KV16>
__device__ __forceinline__ att_lines<KV16> att_lines_of(const seq_params &P, size_t hh, int D,
                                                        bool key) {
    typedef typename att_lines<KV16>::elem E;
    const int nb = P.nb;
    return att_lines<KV16>{(const E *)(key ? P.bk : P.bv) + hh * P.bcap * D,
                           (const E *)(key ? P.kc : P.vc) + (ptrdiff_t)(hh * P.cap * D) -
                               (ptrdiff_t)nb * D,
                           nb};
}
/* A bf16 tile's rows land in the upper half of its float tile (row r at byte 2 D r of it,
 * att_staged), att_expand makes them floats in place. */
template <int D> __device__ __forceinline__ char *att_staged(float *tile) {
    return (char *)(tile + ATT_SPAN / 2 * (D + 4));
}
/* rows [ja, jb) of L into a tile (row j at tile + (j - j0) DP), 16 bytes a copy, by T threads:
 * with T a multiple of the copies a row, each thread keeps one column. bf16 rows go to
 * att_staged (att_expand, once they have landed, makes the tile). */
template <int D, int T, bool KV16>
__device__ __forceinline__ void att_copy_rows(float *tile, int j0, const att_lines<KV16> &L, int ja,
                                              int jb, int tid) {
    constexpr int DP = D + 4, D4 = D / 4, C8 = D / 8;
    static_assert(D % 8 == 0, "a bf16 row in 16-byte copies");
    if constexpr (KV16) {
        char *st = att_staged<D>(tile);
        for (int x = tid; x < (jb - ja) * C8; x += T) {
            const int j = ja + x / C8, c = (x % C8) * 8;
            cp_async16(st + (size_t)(j - j0) * 2 * D + 2 * c, L.row(j, D) + c);
        }
    } else if constexpr (T % D4 == 0) {
        const int c = (tid % D4) * 4;
        for (int j = ja + tid / D4; j < jb; j += T / D4)
            cp_async16(tile + (j - j0) * DP + c, L.row(j, D) + c);
    } else {
        for (int x = tid; x < (jb - ja) * D4; x += T) {
            const int j = ja + x / D4, c = (x % D4) * 4;
            cp_async16(tile + (j - j0) * DP + c, L.row(j, D) + c);
        }
    }
}
/* the low and the high bf16 of a word as floats (exact) */
__device__ __forceinline__ float att_lo16(uint32_t u) {
    return __uint_as_float(u << 16);
}
__device__ __forceinline__ float att_hi16(uint32_t u) {
    return __uint_as_float(u & 0xffff0000u);
}
/* 8 bf16 (a 16-byte copy) as floats at o */
__device__ __forceinline__ void att_bf16x8(float *o, uint4 w) {
    *(float4 *)o = make_float4(att_lo16(w.x), att_hi16(w.x), att_lo16(w.y), att_hi16(w.y));
    *(float4 *)(o + 4) = make_float4(att_lo16(w.z), att_hi16(w.z), att_lo16(w.w), att_hi16(w.w));
}
/* The staged bf16 rows of a tile (landed and seen by every thread) as its float rows, by all
 * T threads of the block, which may read the tile on return. The float rows below ATT_SPAN / 2
 * lie below the staged bytes and are written at once; the staged rows of the upper half are
 * held in registers across a barrier before their floats go over the staged bytes. Rows no
 * copy filled become any floats, which no kernel reads (as with a float tile's rows). */
template <int D, int T> __device__ __forceinline__ void att_expand(float *tile, int tid) {
    constexpr int DP = D + 4, C8 = D / 8, H = ATT_SPAN / 2, N = H * C8, NH = (N + T - 1) / T;
    const char *st = att_staged<D>(tile);
    uint4 hi[NH];
#pragma unroll
    for (int k = 0; k < NH; k++) {
        const int x = tid + k * T;
        if (x < N) hi[k] = *(const uint4 *)(st + (size_t)(H + x / C8) * 2 * D + (x % C8) * 16);
    }
    for (int x = tid; x < N; x += T)
        att_bf16x8(tile + (x / C8) * DP + (x % C8) * 8,
                   *(const uint4 *)(st + (size_t)(x / C8) * 2 * D + (x % C8) * 16));
    __syncthreads();
#pragma unroll
    for (int k = 0; k < NH; k++) {
        const int x = tid + k * T;
        if (x < N) att_bf16x8(tile + (H + x / C8) * DP + (x % C8) * 8, hi[k]);
    }
    __syncthreads();
}

/* The span's softmax of one (row, head) pair, by a warp, two keys a lane: the scores sr[j G4]
 * of the row's keys [r.j0, r.j1) become their weights (keys outside: 0), and the span's max
 * and sum go to ml[0], ml[1]. */
__device__ __forceinline__ void att_softmax(float *sr, int G4, att_row r, float *ml, int lane) {
    float v0 = lane >= r.j0 && lane < r.j1 ? sr[lane * G4] : -INFINITY;
    float v1 = lane + 32 >= r.j0 && lane + 32 < r.j1 ? sr[(lane + 32) * G4] : -INFINITY;
    float m = fmaxf(v0, v1);
    for (int off = 16; off; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float e0 = v0 == -INFINITY ? 0.f : expf(v0 - m), e1 = v1 == -INFINITY ? 0.f : expf(v1 - m);
    float l = e0 + e1;
    for (int off = 16; off; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    sr[lane * G4] = e0, sr[(lane + 32) * G4] = e1;
    if (lane == 0) ml[0] = m, ml[1] = l;
}

/* A tile's queries: (row, head) pair p at p * QP floats, padded so that the four pairs a
 * tiled score load reads fall in different banks */
__host__ __device__ constexpr int att_qp(int D) {
    return D + 4;
}

/* By warp 0: each sequence's share of the launch's rows and its items, numbered one sequence
 * after another (units of ru rows, then spans, then kv heads fastest), into seqs;
 * info: the items, the first sequence, the sequences */
__device__ __forceinline__ void att_seq_table(const attn_args &a, att_seq *seqs, int *info,
                                              int lane, int ru) {
    const step_params *sp = a.sp;
    int s0 = sp->row_seq[a.r0], s1 = sp->row_seq[a.r0 + a.nr - 1], s = s0 + lane, items = 0;
    att_seq q = {};
    if (s <= s1) {
        const seq_params &P = sp->seq[s];
        q.a = max(P.row0, a.r0), q.b = min(P.row0 + P.n, a.r0 + a.nr);
        int pa = P.pos0 + q.a - P.row0, pb = P.pos0 + q.b - 1 - P.row0;
        if (P.noncausal) pa = pb = P.pos0 + P.n - 1; /* every row sees the whole block */
        q.span0 = att_lo(pa, a.window) / ATT_SPAN;
        q.nsp = pb / ATT_SPAN - q.span0 + 1;
        q.units = (q.b - q.a + ru - 1) / ru;
        items = q.units * q.nsp * a.nkv;
    }
    int inc = items;
    for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += v;
    }
    q.it0 = inc - items;
    if (s <= s1) seqs[lane] = q;
    if (lane == 31) info[0] = inc;
    if (lane == 0) info[1] = s0, info[2] = s1 - s0 + 1;
}

/* Where work item `item` of att_seq_table's numbering lies: the sequence (seqs[i]), its kv head,
 * span and unit of rows */
struct att_at {
    int i, kvh, span, unit;
};
__device__ __forceinline__ att_at att_locate(const att_seq *seqs, int ns, int item, int nkv) {
    int i = 0;
    while (i + 1 < ns && seqs[i + 1].it0 <= item) i++;
    const int local = item - seqs[i].it0, rest = local / nkv;
    return att_at{i, local % nkv, seqs[i].span0 + rest % seqs[i].nsp, rest / seqs[i].nsp};
}

/* Work item `item` of att_seq_table's numbering (units of ru rows) placed in its sequence:
 * rows [ua, ua + nr) of sequence si (P), kv head kvh, and of span `span` (the tile at k0) the
 * keys [klo, k1) some row sees; ok 0 when no row of the unit sees the span. last: every row's
 * limit in a non-causal block, or -1. */
struct att_span_item {
    int ok, si, kvh, span, ua, nr, k0, klo, k1, last;
    const seq_params *P;
};
__device__ __forceinline__ att_span_item att_item_at(const attn_args &a, const att_seq *seqs,
                                                     int ns, int s_first, int item, int ru) {
    const att_at w = att_locate(seqs, ns, item, a.nkv);
    const att_seq q = seqs[w.i];
    const seq_params &P = a.sp->seq[s_first + w.i];
    const int ua = q.a + w.unit * ru, nr = min(q.b - ua, ru);
    const int last = P.noncausal ? P.pos0 + P.n - 1 : -1;
    const int k0 = w.span * ATT_SPAN,
              k1 = min(k0 + ATT_SPAN, last >= 0 ? last + 1 : P.pos0 + ua + nr - P.row0);
    const int klo = max(k0, att_lo(last >= 0 ? last : P.pos0 + ua - P.row0, a.window));
    return att_span_item{k1 > klo, s_first + w.i, w.kvh, w.span, ua, nr, k0, klo, k1, last, &P};
}
/* row t of such an item: its keys of the tile (none: j1 = 0) */
__device__ __forceinline__ att_row att_item_row(const attn_args &a, const att_span_item &w,
                                                int t) {
    const int p = w.last >= 0 ? w.last : w.P->pos0 + t - w.P->row0, lo = att_lo(p, a.window);
    att_row r = {t, 0, 0};
    if (w.k0 <= p && w.k0 + ATT_SPAN > lo)
        r.j0 = max(lo, w.k0) - w.k0, r.j1 = min(p + 1, w.k1) - w.k0;
    return r;
}

/* raises kernel k's dynamic shared memory limit to bytes for the whole process (never lowers
 * it); ERR_UNSUPPORTED when the CUDA call fails */
int raise_smem(const void *k, size_t bytes);

/* merge.cu: the shared memory the merge needs for rows of `spans` spans; its limits raised for
 * that many (with most a block can have: the merge by dims is turned off where it does not
 * fit); the merge of launch a's n rows after its attention kernel */
size_t merge_smem(int spans);
int merge_init(gpu_model *g, int spans, size_t most);
cudaError_t merge_launch(gpu_model *g, attn_args a, int n);

/* attn_prompt.cu: k_attnp's limits and grid (g->attp_grid, 0 where it does not serve the
 * model's heads); its launch for a's rows */
int attnp_init(gpu_model *g);
cudaError_t attnp_launch(gpu_model *g, const attn_args *a);

#endif
