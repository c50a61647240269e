/* backend/cuda/merge.cu: the merge of attention's span partials (attention.cu): each row's
 * spans, in span order, weighted by exp(m_s - M) and divided by the merged sum, into the
 * output projection's B operand. A block per (row, head) for single steps, a warp per
 * (row, head) for passes of several rows, or a block per (row, head, 32 dims) where those are
 * few and the spans many; the same sums in the same order every way. */
#include "backend/cuda/attention.cuh"

/* By warp 0 of a merge block (lane < 32): the weights w[s - sa] = exp(m_s - M) of a row's
 * spans [sa, sb], M the largest span max, and into *Ls their sum weighted by the span sums,
 * get(s) giving span s's (max, sum). A lane takes spans sa + lane + 32 i in order, holding its
 * first MERGE_ML pairs for both the max and the sum; then butterflies. */
#define MERGE_ML 4 /* (max, sum) pairs a lane holds: spans sa + lane + 32 i */
template <class Get>
__device__ __forceinline__ void merge_weights(Get get, int sa, int sb, float *w, float *Ls,
                                              int lane) {
    float2 r[MERGE_ML];
#pragma unroll
    for (int i = 0; i < MERGE_ML; i++)
        r[i] = sa + lane + 32 * i <= sb ? get(sa + lane + 32 * i) : make_float2(-INFINITY, 0.f);
    float M = -INFINITY;
#pragma unroll
    for (int i = 0; i < MERGE_ML; i++)
        if (sa + lane + 32 * i <= sb) M = fmaxf(M, r[i].x);
    for (int s = sa + lane + 32 * MERGE_ML; s <= sb; s += 32) M = fmaxf(M, get(s).x);
    for (int off = 16; off; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float L = 0.f;
#pragma unroll
    for (int i = 0; i < MERGE_ML; i++) {
        const int s = sa + lane + 32 * i;
        if (s > sb) break;
        float e = expf(r[i].x - M);
        w[s - sa] = e;
        L = fmaf(r[i].y, e, L);
    }
    for (int s = sa + lane + 32 * MERGE_ML; s <= sb; s += 32) {
        const float2 q = get(s);
        float e = expf(q.x - M);
        w[s - sa] = e;
        L = fmaf(q.y, e, L);
    }
    for (int off = 16; off; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
    if (lane == 0) *Ls = L;
}

/* Block (row, head): the row's span partials merged in span order (merge_weights), divided by
 * the merged sum, into the B operand. Its loads are few round trips: the first MV spans of dim
 * tid and each lane's first MERGE_ML maxima and sums are requested together, and later spans
 * MV at a time; the adds are in the order of one span after another whatever the batches.
 * MV = 16 takes 64 registers, 8 takes 40: launches of many rows (prompts) keep more blocks
 * resident with 8. */
#define MERGE_FEW_ROWS 16 /* launches of at most this many rows take MV = 16 */
template <int MV> __global__ void __launch_bounds__(128) k_attn_merge(attn_args a, int D) {
    extern __shared__ float w[]; /* [spans] the row's span weights */
    __shared__ float Ls;
    /* the pass's parameters are there before the previous kernel ends */
    const int t = a.r0 + blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int p = row_lim(a.sp, t), sa = att_lo(p, a.window) / ATT_SPAN, sb = p / ATT_SPAN;
    const size_t base = ((size_t)(t - a.r0) * a.nh + h) * a.spans;
    if (a.early) pdl_launch();
    pdl_wait();
    if (!a.early) pdl_launch();
    float v0[MV]; /* the first spans of dim tid, requested with the maxima and sums */
#pragma unroll
    for (int j = 0; j < MV; j++)
        v0[j] = tid < D && sa + j <= sb ? __ldcg(a.acc + (base + sa + j) * D + tid) : 0.f;
    if (tid < 32) {
        const float2 *ml = (const float2 *)(a.ml + base * 2);
        merge_weights([&](int s) { return __ldcg(ml + s); }, sa, sb, w, &Ls, tid);
    }
    __syncthreads();
    for (int d = tid; d < D; d += 128) {
        const float *ac = a.acc + base * D + d;
        float o = 0.f;
        for (int s = sa; s <= sb; s += MV) { /* MV spans' loads at once, in order */
            if (d != tid || s != sa)
#pragma unroll
                for (int j = 0; j < MV; j++)
                    if (s + j <= sb) v0[j] = __ldcg(ac + (size_t)(s + j) * D);
#pragma unroll
            for (int j = 0; j < MV; j++)
                if (s + j <= sb) o = fmaf(v0[j], w[s + j - sa], o);
        }
        xb_put(a.xb_out, a.T, a.KT_out, t, h * D + d, o / Ls, a.terms);
    }
}

/* Passes of several rows (g->merge_warp): a warp per (row, head), 8 a block, lane l taking
 * dims 4 l .. 4 l + 3 (D <= 128, D % 4 == 0). A block per (row, head) merged a 512-row
 * prompt's 38 MB a layer at 1 TB/s (docs/perf.md); here a warp requests its first MV spans'
 * values and its maxima and sums in one round, computes the weights itself (merge_weights,
 * into its own slice of shared memory, no block barrier) and adds each dim's spans in span
 * order: k_attn_merge's sums in its order. */
#define MERGE_WARPS 8
template <int MV> __global__ void __launch_bounds__(32 * MERGE_WARPS) k_attn_merge_warp(attn_args a,
                                                                                   int D) {
    extern __shared__ float wsm[]; /* [MERGE_WARPS][a.spans] the warps' span weights */
    __shared__ float Lsw[MERGE_WARPS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pair = blockIdx.x * MERGE_WARPS + warp, on = pair < a.nr * a.nh;
    const int t = a.r0 + (on ? pair / a.nh : 0), h = on ? pair % a.nh : 0;
    const int p = row_lim(a.sp, t), sa = att_lo(p, a.window) / ATT_SPAN, sb = p / ATT_SPAN;
    const size_t base = ((size_t)(t - a.r0) * a.nh + h) * a.spans;
    if (a.early) pdl_launch();
    pdl_wait();
    if (!a.early) pdl_launch();
    if (!on) return;
    const int d = 4 * lane;
    const bool dim = d < D;
    const float *ac = a.acc + base * D + d;
    float4 v[MV]; /* the first spans of dims d..d + 3, requested with the maxima and sums */
#pragma unroll
    for (int j = 0; j < MV; j++)
        v[j] = dim && sa + j <= sb ? __ldcg((const float4 *)(ac + (size_t)(sa + j) * D))
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
    float *w = wsm + warp * a.spans;
    const float2 *ml = (const float2 *)(a.ml + base * 2);
    merge_weights([&](int s) { return __ldcg(ml + s); }, sa, sb, w, &Lsw[warp], lane);
    __syncwarp();
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = sa; s <= sb; s += MV) { /* MV spans' loads at once, in order */
        if (s != sa)
#pragma unroll
            for (int j = 0; j < MV; j++)
                if (dim && s + j <= sb) v[j] = __ldcg((const float4 *)(ac + (size_t)(s + j) * D));
#pragma unroll
        for (int j = 0; j < MV; j++)
            if (s + j <= sb) {
                const float ws = w[s + j - sa];
                o[0] = fmaf(v[j].x, ws, o[0]), o[1] = fmaf(v[j].y, ws, o[1]);
                o[2] = fmaf(v[j].z, ws, o[2]), o[3] = fmaf(v[j].w, ws, o[3]);
            }
    }
    const float L = Lsw[warp];
    if (dim)
        xb_put4(a.xb_out, a.T, a.KT_out, t, h * D + d,
                make_float4(o[0] / L, o[1] / L, o[2] / L, o[3] / L), a.terms);
}

/* Launches of few (row, head) blocks (fewer than SMs: decode steps of a few sequences) with
 * more work items than the two-buffer kernel takes (long contexts) merge on more blocks with
 * fewer round trips: block (row, head, MERGE_DIMS dims) brings the row's span maxima and sums
 * and those dims of MERGE_CH spans at a time into shared memory with one round of
 * asynchronous copies, warp 0 computes the span weights from there (merge_weights), and
 * thread d adds its dim in span order: k_attn_merge's sums in its order. */
#define MERGE_DIMS 32
#define MERGE_CH 256
__global__ void __launch_bounds__(128) k_attn_merge_dims(attn_args a, int D) {
    extern __shared__ __align__(16) float sm[]; /* w, (max, sum) pairs, [MERGE_CH][MERGE_DIMS] */
    __shared__ float Ls;
    const int t = a.r0 + blockIdx.x, h = blockIdx.y, d0 = blockIdx.z * MERGE_DIMS;
    const int tid = threadIdx.x, nd = min(MERGE_DIMS, D - d0); /* 16 or 32: D % 16 == 0 */
    const int p = row_lim(a.sp, t), sa = att_lo(p, a.window) / ATT_SPAN, sb = p / ATT_SPAN;
    const size_t base = ((size_t)(t - a.r0) * a.nh + h) * a.spans;
    const int nw = (a.spans + 3) & ~3;
    float *w = sm, *V = sm + 3 * nw;
    float2 *mls = (float2 *)(sm + nw);
    auto stage = [&](int s0, int s1) { /* spans [s0, s1) of dims [d0, d0 + nd) into V */
        const int per = nd / 4;
        for (int x = tid; x < (s1 - s0) * per; x += 128) {
            const int s = s0 + x / per, c = (x % per) * 4;
            cp_async16(V + (s - s0) * MERGE_DIMS + c, a.acc + (base + s) * D + d0 + c);
        }
        cp_async_commit();
    };
    if (a.early) pdl_launch();
    pdl_wait();
    if (!a.early) pdl_launch();
    const int ch = a.merge_ch;
    int s0 = sa, s1 = min(sb + 1, sa + ch);
    for (int s = sa + tid; s <= sb; s += 128) cp_async8(mls + (s - sa), a.ml + (base + s) * 2);
    stage(s0, s1);
    cp_async_wait0();
    __syncthreads();
    if (tid < 32) merge_weights([&](int s) { return mls[s - sa]; }, sa, sb, w, &Ls, tid);
    __syncthreads();
    float o = 0.f;
    for (;;) {
        if (tid < nd)
            for (int s = s0; s < s1; s++) o = fmaf(V[(s - s0) * MERGE_DIMS + tid], w[s - sa], o);
        if (s1 > sb) break;
        __syncthreads(); /* V is the next chunk's */
        s0 = s1, s1 = min(sb + 1, s0 + ch);
        stage(s0, s1);
        cp_async_wait0();
        __syncthreads();
    }
    if (tid < nd) xb_put(a.xb_out, a.T, a.KT_out, t, h * D + d0 + tid, o / Ls, a.terms);
}

static size_t merge_dims_smem(int spans) {
    return sizeof(float) * (3 * (((size_t)spans + 3) / 4 * 4) + MERGE_CH * MERGE_DIMS);
}

size_t merge_smem(int spans) {
    return sizeof(float) * (size_t)spans;
}

int merge_init(gpu_model *g, int spans, size_t most) {
    if (raise_smem((const void *)k_attn_merge<8>, merge_smem(spans)) ||
        raise_smem((const void *)k_attn_merge<16>, merge_smem(spans)))
        return ERR_UNSUPPORTED;
    if (g->D % 4 || g->D > 128 || MERGE_WARPS * merge_smem(spans) > most) /* by heads */
        g->merge_warp = 0;
    else if (raise_smem((const void *)k_attn_merge_warp<8>, MERGE_WARPS * merge_smem(spans)))
        return ERR_UNSUPPORTED;
    if (merge_dims_smem(spans) > most) /* positions past what its staging fits: by heads */
        g->merge_dims = 0;
    else if (raise_smem((const void *)k_attn_merge_dims, merge_dims_smem(spans)))
        return ERR_UNSUPPORTED;
    return OK;
}

cudaError_t merge_launch(gpu_model *g, attn_args a, int n) {
    const int nh = g->d.n_heads;
    a.merge_ch = g->merge_ch > 0 && g->merge_ch < MERGE_CH ? g->merge_ch : MERGE_CH;
    if (g->merge_dims && g->att_kind != ATT_FEW && n * nh < g->sms)
        return launch(k_attn_merge_dims, dim3(n, nh, (g->D + MERGE_DIMS - 1) / MERGE_DIMS),
                      dim3(128), merge_dims_smem(g->att_spans), g->stream, a, g->D);
    if (g->merge_warp > 0 && n >= g->merge_warp)
        return launch(k_attn_merge_warp<8>, dim3(cdiv((size_t)n * nh, MERGE_WARPS)),
                      dim3(32 * MERGE_WARPS), MERGE_WARPS * merge_smem(g->att_spans), g->stream,
                      a, g->D);
    return launch(n <= MERGE_FEW_ROWS ? k_attn_merge<16> : k_attn_merge<8>, dim3(n, nh),
                  dim3(128), merge_smem(g->att_spans), g->stream, a, g->D);
}
