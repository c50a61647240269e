/* backend/cuda/gemv.cu: the matmuls of decode and verify passes (1 to GPU_GROUP rows per
 * launch). BF16 weights run on the tensor cores (mma.m16n8k16) against the three-term bf16
 * split of the float32 input (cuda.cuh), so every product is exact (a model with one term
 * rounds the input first) and each result is the float32-accumulated dot product,
 * summed in an order fixed per matrix: k-tiles in order within a block's piece, then the
 * pieces in order. Nothing depends on the number of rows.
 *
 * Work: 8 strips of 16 output rows make a strip group, and a matrix is the flattened space
 * of (strip group, k-tile). Each block owns a contiguous range of it (mm_partition: each group
 * split into the same K ranges, or, where that would leave SMs idle, even ranges that cross
 * groups), cut at group boundaries into pieces. In a piece, each of the 8 warps streams its
 * strip's weight fragments (16-byte loads, two batches of U k-tiles in flight in turn, the
 * block's first two loaded before the wait on the previous kernel; DSPARK_GPU_PRE_KT=n also
 * brings the next n k-tiles into shared memory before the wait, off by default: slower on
 * the H200, docs/perf.md) while the block stages the shared input in shared memory
 * (cp.async, two chunk buffers). A piece that is not a whole group writes its sums to a
 * partial buffer and the last piece of the group to arrive adds them in order and runs the
 * epilogue (store, residual add and optionally the next RMSNorm, SwiGLU into the next input,
 * or q/k norm + RoPE + cache append). That last piece's work is on the path to the next
 * kernel, so what it reads besides the sums (residual rows, norm weights, the input rows'
 * group sums of squares) every piece copies into shared memory before it arrives, and the
 * last piece's loads of the others' sums are requested together, one round trip in all.
 * A DSPARK_LAB_STAMPS build records when each block of each launch passed its phases
 * (bench_gpu --lab with DSPARK_LAB_STAMPS=PREFIX; bench/stamps.py reads them).
 * Other weight types take a plain warp-per-row kernel with the store and residual epilogues. */
#include "backend/cuda/mm.cuh"
#include "backend/cuda/ring.cuh"
#ifdef DSPARK_LAB_STAMPS
#include <stdio.h>
#include <stdlib.h>
#endif

/* rows of a group whose terms fit in NT n-tiles */
__host__ __device__ constexpr int mm_rows(int NT, int terms) {
    return 8 * NT / terms < GPU_GROUP ? 8 * NT / terms : GPU_GROUP;
}
/* the widest n-tiles with 8 k-tiles per register batch (wider: 4); 1 row with 8 spills and
 * is no faster (docs/perf.md) */
#ifndef MM_U8_MAX
#define MM_U8_MAX 0
#endif
#ifndef MM_U4_MAX
#define MM_U4_MAX GPU_NT_MAX /* the widest n-tiles with 4 k-tiles per register batch (wider: 2) */
#endif
__host__ __device__ constexpr int mm_unroll(int NT) { /* k-tiles per register batch */
    return NT <= MM_U8_MAX ? 8 : NT <= MM_U4_MAX ? 4 : 2;
}
__host__ __device__ constexpr int mm_chunk(int NT) { /* k-tiles of input staged at a time */
    return NT <= 2 ? 64 : NT <= 4 ? 32 : 16; /* 32 up to 6 n-tiles: slower (docs/perf.md) */
}
/* floats per row of a warp's 16 x 8NT tile of sums in mm_finish: from 3 n-tiles on, 2 more
 * than 8NT (an odd number of pairs), so the 16 rows a warp reads at once fall in 16 different
 * banks (1-2 n-tiles read too few values to matter, and keep their registers) */
__host__ __device__ constexpr int mm_fin_row(int NT) {
    return NT <= 2 ? 8 * NT : 8 * NT + 2;
}
/* what mm_finish keeps in shared memory: per-warp tiles, final values, and for the residual
 * epilogue the residual rows and the next norm's weights */
#define MM_QKV_PRE 4096 /* q|k|v: the step parameters, norm weights and frequencies */
__host__ __device__ constexpr int mm_fin_smem(int NT, int terms) {
    return 8 * 16 * mm_fin_row(NT) * 4 + 2 * 512 * mm_rows(NT, terms) + 512 + MM_QKV_PRE;
}
/* max(two input chunks, mm_fin_smem), rounded up to 1 KB */
__host__ __device__ constexpr int mm_smem(int NT, int terms) {
    return ((2 * mm_chunk(NT) * NT * 256 > mm_fin_smem(NT, terms) ? 2 * mm_chunk(NT) * NT * 256
                                                                 : mm_fin_smem(NT, terms)) +
            1023) /
           1024 * 1024;
}
/* q|k|v launches of up to 16 rows (6 n-tiles of three terms): the rows' RoPE cos and sin
 * (qkv_epilogue's cs), computed before the wait, after the k-tiles brought in before it */
#define MM_CS_BYTES (16 * 64 * 8)
__host__ __device__ constexpr bool mm_cs(int NT, int terms) {
    return mm_rows(NT, terms) <= 16;
}
template <int NT, int TERMS> /* where that table is in a block's dynamic shared memory */
__device__ __forceinline__ float2 *mm_cs_table(unsigned char *smem, const mm_args &a) {
    return (float2 *)(smem + mm_smem(NT, TERMS) + a.npre * 4096);
}
/* k-tiles of weights past the two register batches that a block's first piece can bring into
 * shared memory before its wait, where two blocks still fit on an SM (108 KB each, and the
 * kernel's static shared memory) */
__host__ __device__ constexpr int mm_pre_max(int NT, int terms) {
    return (108 * 1024 - mm_smem(NT, terms)) / 4096 / mm_unroll(NT) * mm_unroll(NT);
}
__device__ __forceinline__ uint4 lds128(const uint4 *p) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(smem_u32(p)));
    return v;
}

/* A warp's fragments of one k-tile are MM_WS uint4 after those of the previous one (the 8
 * strips of a group side by side) */
#define MM_WS 256

/* r = the U fragments of k-tiles [b0, b0 + U), zeros past nk (so that r is new on every path
 * and not kept alive from one batch to the next) */
template <int U>
__device__ __forceinline__ void mm_fetch(uint4 (&r)[U], const uint4 *wp, int b0, int nk) {
    const uint4 *p = wp + (size_t)b0 * MM_WS;
#pragma unroll
    for (int u = 0; u < U; u++)
        r[u] = b0 + u < nk ? ld_stream(p + u * MM_WS) : make_uint4(0, 0, 0, 0);
}

/* an n-tile's B fragment from the shared address where this lane gives its row of the two core
 * matrices (mm_ldm_lane; lanes 0-7 the k 0-7 half, 8-15 the k 8-15 half) */
__device__ __forceinline__ void ldm_x2(unsigned a, uint2 &b) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(b.x), "=r"(b.y)
                 : "r"(a));
}
/* the same for two n-tiles at once, lanes 16-31 giving the second n-tile's rows: how whole
 * groups read them (MM_LDM_X4=0 takes ldm_x2 per n-tile, 7% slower at 32 rows with exact
 * inputs; docs/perf.md) */
__device__ __forceinline__ void ldm_x4(unsigned a, uint2 &b0, uint2 &b1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(b0.x), "=r"(b0.y), "=r"(b1.x), "=r"(b1.y)
                 : "r"(a));
}
#ifndef MM_LDM_X4
#define MM_LDM_X4 1
#endif
__device__ __forceinline__ unsigned mm_ldm_lane(int lane) {
    return (MM_LDM_X4 ? (lane >> 4) * 256 : 0) + ((lane >> 3) & 1) * 128 + (lane & 7) * 16;
}

/* acc[n] += fragments r (left k-tiles in the batch) x staged inputs b (the batch's first
 * k-tile, NT n-tiles of 32 uint2 per k-tile, in xb's order for NT), k-tiles in order */
template <int NT, int TERMS, int U>
__device__ __forceinline__ void mm_compute(float (&acc)[NT][4], const uint4 (&r)[U], const uint2 *b,
                                           int lane, int left) {
    const unsigned ba = smem_u32(b) + mm_ldm_lane(lane);
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (u < left) {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint2 bv;
                if constexpr (xb_core(NT, TERMS) && MM_LDM_X4) {
                    static_assert(NT % 2 == 0, "n-tiles in pairs");
                    if (n & 1) continue;
                    uint2 b1;
                    ldm_x4(ba + (u * NT + n) * 256, bv, b1);
                    mma_bf16(acc[n], r[u], bv);
                    mma_bf16(acc[n + 1], r[u], b1);
                    continue;
                } else if constexpr (xb_core(NT, TERMS)) { /* a whole group's core matrices */
                    ldm_x2(ba + (u * NT + n) * 256, bv);
                } else {
                    bv = b[(u * NT + n) * 32 + lane];
                }
                mma_bf16(acc[n], r[u], bv);
            }
        }
    }
}

/* val[i] = the pieces' sums of item i (row i / 128, output g * 128 + i % 128), added in block
 * order. The group's last piece to arrive runs it, so it is on the path to the next kernel:
 * each thread requests a float4 of items from every piece (eight at a time) before adding
 * any, one round trip to L2 where a loop over pieces and items would take several. */
#define MM_PIECES 8
__device__ __forceinline__ void mm_add_pieces(const mm_args &a, int g, int2 gp, int nitems,
                                              float4 *val) {
    const float4 *P = (const float4 *)a.part, z = make_float4(0.f, 0.f, 0.f, 0.f);
    const size_t SL = GPU_GROUP * 128 / 4; /* float4 per slot */
    /* the first block's piece is its last (slot 1) unless it starts the group */
    const float4 *first = P + (size_t)(2 * gp.x + (mm_start(a, gp.x) < g * a.KT)) * SL;
    const int np = gp.y - gp.x; /* pieces after the first */
    for (int i = threadIdx.x; i < nitems / 4; i += 256) {
        float4 v = __ldcg(first + i);
        for (int b0 = 0; b0 < np; b0 += MM_PIECES) {
            float4 p[MM_PIECES];
#pragma unroll
            for (int j = 0; j < MM_PIECES; j++)
                p[j] = b0 + j < np ? __ldcg(P + (size_t)(2 * (gp.x + 1 + b0 + j)) * SL + i) : z;
#pragma unroll
            for (int j = 0; j < MM_PIECES; j++)
                if (b0 + j < np) v.x += p[j].x, v.y += p[j].y, v.z += p[j].z, v.w += p[j].w;
        }
        val[i] = v;
    }
}

/* The end of a piece of strip group g: the block's sums (acc of each warp) into val, or into
 * the partial buffer (slot 0: the block's first piece, 1: its last) with the group's last
 * piece to arrive adding them up; then the epilogue, by whoever has the group's whole sums.
 * The residual epilogue's other inputs (the residual rows, the next norm's weights) are
 * copied into shared memory before the arrival, so the group's last piece waits for one
 * round trip (the others' sums) before it stores; so are the input rows' group sums of
 * squares (a.in_ss) and, past 16 rows, q|k|v's step parameters, norm weights and
 * frequencies. smem: mm_fin_smem(NT) bytes, free for reuse. */
template <int NT, int TERMS>
__device__ __forceinline__ bool mm_finish(const mm_args &a, const float (&acc)[NT][4], int g,
                                          bool whole, int slot, unsigned char *smem) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, blk = blockIdx.x, KT = a.KT;
    const int nitems = 128 * a.T; /* (t, warp, row): m contiguous within t */
#if DSPARK_LAB_MM == 2 /* measuring builds, results wrong: what the tail costs (docs/perf.md) */
    float keep = 0.f;     /* the products stay (a store depends on them), nothing else */
#pragma unroll
    for (int n = 0; n < NT; n++) keep += acc[n][0] + acc[n][1] + acc[n][2] + acc[n][3];
    if (keep == 1234.5f) a.part[blk] = keep;
    return false;
#endif
    /* each warp's 16 x 8NT tile of sums; a row's value adds its term columns in order */
    constexpr int S = mm_fin_row(NT);
    float *fin = (float *)smem, *val = fin + 8 * 16 * S;
    {
        float *f = fin + warp * 16 * S;
        int gq = lane >> 2, c = 2 * (lane & 3);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            f[gq * S + n * 8 + c] = acc[n][0];
            f[gq * S + n * 8 + c + 1] = acc[n][1];
            f[(gq + 8) * S + n * 8 + c] = acc[n][2];
            f[(gq + 8) * S + n * 8 + c + 1] = acc[n][3];
        }
    }
    /* the epilogue's other inputs, copied before the arrival: for the residual epilogue
     * [T][128] residual rows and [128] norm weights; with the input's norm deferred, the
     * input rows' [T][n_ssg] group sums (when they fit) */
    float *pre = val + nitems;
    __shared__ float inv[GPU_GROUP]; /* 1 / rms of the input rows (a.in_ss) */
    const bool ss_pre = a.in_ss && a.n_ssg <= 64 && a.epi != EPI_RESID;
    if (a.epi == EPI_RESID) {
        const bool nw = a.norm_w && a.out_ss;
        if (!(a.ldy & 3) && !((uintptr_t)a.y & 15) && !((uintptr_t)a.norm_w & 15)) {
            for (int c = threadIdx.x; c < 32 * a.T + (nw ? 32 : 0); c += 256) { /* 16 bytes */
                const int t = c >> 5, m = g * 128 + (c & 31) * 4;
                const int n = min(16, max(0, 4 * (a.M - m)));
                const float *src = t < a.T ? a.y + (size_t)(a.row0 + t) * a.ldy : a.norm_w;
                cp_async16_n(pre + 4 * c, n ? src + m : src, n);
            }
            cp_async_commit();
        } else { /* rows not 16-byte aligned */
            mm_resid_gather(a, g, nitems, pre);
        }
    } else if (ss_pre) {
        const double *ss = a.in_ss + (size_t)a.row0 * a.n_ssg;
        for (int i = threadIdx.x; i < a.T * a.n_ssg; i += 256) cp_async8((double *)pre + i, ss + i);
    }
    /* q|k|v past 16 rows: the rows' step parameters (up to their sequences), the norm weights
     * and the frequencies, after the group sums ([0, 512 T + 512) bytes of pre). Up to 16
     * rows they are read in place: the copies measured no faster there (docs/perf.md) */
    qkv_epi qe = a.qe;
    constexpr int SPB = (offsetof(step_params, ids) + 15) / 16 * 16;
    const int D = a.qe.D;
    if (a.epi == EPI_QKV && a.T > 16 && SPB + 10 * D <= MM_QKV_PRE && !(D & 3)) {
        unsigned char *qx = (unsigned char *)pre + 512 * a.T + 512;
        float *qn = (float *)(qx + SPB), *kn = qn + D, *fq = kn + D;
        const int nsp = SPB / 16, nw = D / 4, nf = D / 8;
        for (int c = threadIdx.x; c < nsp + 2 * nw + nf; c += 256) {
            if (c < nsp) {
                cp_async16(qx + 16 * c, (const unsigned char *)a.qe.sp + 16 * c);
            } else if (c < nsp + nw) {
                if (a.qe.q_norm) cp_async16(qn + 4 * (c - nsp), a.qe.q_norm + 4 * (c - nsp));
            } else if (c < nsp + 2 * nw) {
                if (a.qe.k_norm)
                    cp_async16(kn + 4 * (c - nsp - nw), a.qe.k_norm + 4 * (c - nsp - nw));
            } else {
                cp_async16(fq + 4 * (c - nsp - 2 * nw), a.qe.inv_freq + 4 * (c - nsp - 2 * nw));
            }
        }
        qe.sp = (const step_params *)qx, qe.inv_freq = fq;
        qe.q_norm = a.qe.q_norm ? qn : NULL, qe.k_norm = a.qe.k_norm ? kn : NULL;
    }
    cp_async_commit();
    __syncthreads();
    for (int i = threadIdx.x; i < nitems; i += 256) {
        int t = i >> 7, w = (i >> 4) & 7, r = i & 15;
        const float *f = fin + w * 16 * S + r * S;
        const int T = xb_core(NT, TERMS) ? a.T : 0; /* only a whole group's columns go by term */
        float v = xb_terms_sum(TERMS, f[xb_col(T, t, 0, TERMS)], f[xb_col(T, t, TERMS > 1, TERMS)],
                               f[xb_col(T, t, TERMS > 2 ? 2 : 0, TERMS)]);
        if (whole)
            val[i] = v;
        else
            a.part[((size_t)(2 * blk + slot) * GPU_GROUP + t) * 128 + (i & 127)] = v;
    }
    cp_async_wait0(); /* the block's copies land before it arrives or leaves */
    if (!whole) {
        const int2 gp = make_int2(mm_block_of(a, g * KT), mm_block_of(a, (g + 1) * KT - 1));
        if (!arrive_last(&a.cnt[g], (unsigned)(gp.y - gp.x + 1))) return false;
        mm_add_pieces(a, g, gp, nitems, (float4 *)val);
    }
    __syncthreads();
    if (a.in_ss) { /* 1 / rms of the input rows: a thread, or a warp, per row */
        if (ss_pre) {
            for (int t = threadIdx.x; t < a.T; t += 256)
                inv[t] = ss_inv_seq((const double *)pre + t * a.n_ssg, a.n_ssg, a.H_norm, a.eps);
        } else {
            mm_inv_warps(a, inv);
        }
        __syncthreads();
    }
#if DSPARK_LAB_MM == 1 /* the split sums, not the epilogues */
    return false;
#endif
    /* the outputs' group has this launch's rows (a row group's launch covers it whole), so its
     * xb order is this kernel's */
    mm_epilogue<TERMS, mm_cs(NT, TERMS), xb_core(NT, TERMS)>(a, g, val, nitems, inv, pre, qe,
                                                              mm_cs_table<NT, TERMS>(smem, a));
    return true;
}

#ifdef DSPARK_LAB_STAMPS /* measuring build: when each block of each launch reached its phases */
struct lab_rec {
    unsigned long long t[5]; /* entry, past the wait, last piece's products done, exit, first
                              * piece's products done */
    int blk, KT, MS, T, epi, nb, smid, mid; /* mid: an epilogue ran before the last piece */
};
#define LAB_RECS (1 << 18)
__device__ lab_rec lab_recs[LAB_RECS];
__device__ unsigned lab_nrec;
__device__ __forceinline__ unsigned long long lab_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif

/* Blocks own contiguous ranges of the flattened (strip group, k-tile) space (fixed per
 * matrix), so every block streams about the same bytes however the groups fall. A range is
 * cut at group boundaries into pieces; a piece that is a whole group goes straight to the
 * epilogue, otherwise its sums go to the partial buffer and the last piece of the group to
 * arrive adds them in block order and runs the epilogue (mm_finish). */
template <int NT, int TERMS> __global__ void __launch_bounds__(256, 2) k_mm(mm_args a) {
    constexpr int U = mm_unroll(NT), KC = mm_chunk(NT), CH = KC * NT * 32; /* uint2 per chunk */
    extern __shared__ __align__(16) unsigned char smem[];
    uint2 *bbuf = (uint2 *)smem; /* [2][CH]: input chunks during the loop */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, blk = blockIdx.x;
    const int KT = a.KT, s_begin = mm_start(a, blk), s_end = mm_start(a, blk + 1);
#ifdef DSPARK_LAB_STAMPS
    unsigned long long ts0 = lab_now(), ts1 = 0, ts2 = 0, ts_first = 0;
    int ran = 0, mid = 0;
#endif

    int c0 = s_begin;
    int g = c0 / KT, kb = c0 - g * KT, nk = min(s_end, (g + 1) * KT) - c0;
    const uint4 *wp = mm_wptr(a, g, kb, lane, warp);
    uint4 ra[U], rb[U];
    /* weights never change: fetch before waiting on the previous kernel, two batches into
     * registers and the next npre k-tiles (one run of memory) into shared memory */
    mm_fetch<U>(ra, wp, 0, nk);
    mm_fetch<U>(rb, wp, U, nk);
    const uint4 *pre = (const uint4 *)(smem + mm_smem(NT, TERMS));
    __shared__ __align__(8) unsigned long long pre_bar;
    int pre_end = 2 * U + max(0, min(a.npre, nk - 2 * U) / U * U); /* k-tiles [2U, pre_end) */
    bool pre_wait = pre_end > 2 * U;
    if (pre_wait && threadIdx.x == 0) {
        const unsigned bytes = (unsigned)(pre_end - 2 * U) * 4096u;
        mbar_init(&pre_bar, 1);
        mbar_init_fence();
        mbar_expect(&pre_bar, bytes);
        bulk_copy((void *)pre, a.w + ((size_t)g * KT + kb + 2 * U) * 8 * 32, bytes, &pre_bar);
    }
    /* batch b0's fragments: from shared memory while in [2U, pre_end) (first piece only) */
    auto fetch = [&](uint4 (&r)[U], int b0) {
        if (b0 < pre_end) {
            if (pre_wait) mbar_wait(&pre_bar, 0), pre_wait = false;
#pragma unroll
            for (int u = 0; u < U; u++)
                r[u] = lds128(pre + ((b0 - 2 * U + u) * 8 + warp) * 32 + lane);
        } else {
            mm_fetch<U>(r, wp, b0, nk);
        }
    };
    if (mm_cs(NT, TERMS) && a.epi == EPI_QKV) { /* the epilogue's RoPE, off its path */
        float2 *cs = mm_cs_table<NT, TERMS>(smem, a);
        const int half = a.qe.D / 2;
        for (int i = threadIdx.x; i < a.T * half; i += 256) {
            const int t = i / half, j = i - t * half;
            rope_cs(row_pos(a.qe.sp, a.row0 + t), a.qe.inv_freq[j], &cs[i].x, &cs[i].y);
        }
    }
    pdl_wait();
    pdl_launch();
#ifdef DSPARK_LAB_STAMPS
    ts1 = lab_now();
#endif

    for (;;) {
        const bool active = g * 8 + warp < a.MS;
        float acc[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

        const uint2 *xg = a.xb + (size_t)kb * NT * 32;
        const int nchunks = (nk + KC - 1) / KC;
        for (int i = threadIdx.x; i < min(KC, nk) * NT * 16; i += 256)
            cp_async16((uint4 *)bbuf + i, (const uint4 *)xg + i);
        cp_async_commit();
        cp_async_wait0();
        __syncthreads();
        if (nchunks > 1) {
            for (int i = threadIdx.x; i < min(KC, nk - KC) * NT * 16; i += 256)
                cp_async16((uint4 *)(bbuf + CH) + i,
                           (const uint4 *)(xg + (size_t)KC * NT * 32) + i);
            cp_async_commit();
        }
        /* at the first batch of input chunk c (c > 0): it has landed and chunk c - 1 is free */
        auto next_chunk = [&](int b0) {
            if (b0 == 0 || b0 % KC) return;
            int c = b0 / KC;
            cp_async_wait0();
            __syncthreads();
            if (c + 1 < nchunks) {
                const uint4 *src = (const uint4 *)(xg + (size_t)(c + 1) * KC * NT * 32);
                uint4 *dst = (uint4 *)(bbuf + ((c + 1) & 1) * CH);
                for (int i = threadIdx.x; i < min(KC, nk - (c + 1) * KC) * NT * 16; i += 256)
                    cp_async16(dst + i, src + i);
                cp_async_commit();
            }
        };
        for (int b0 = 0; b0 < nk; b0 += 2 * U) {
            next_chunk(b0);
            if (active)
                mm_compute<NT, TERMS, U>(acc, ra,
                                         bbuf + ((b0 / KC) & 1) * CH + (b0 % KC) * NT * 32, lane,
                                         nk - b0);
            fetch(ra, b0 + 2 * U);
            if (b0 + U >= nk) break;
            next_chunk(b0 + U);
            int b1 = b0 + U;
            if (active)
                mm_compute<NT, TERMS, U>(acc, rb,
                                         bbuf + ((b1 / KC) & 1) * CH + (b1 % KC) * NT * 32, lane,
                                         nk - b1);
            fetch(rb, b0 + 3 * U);
        }
        /* the next piece's first weights head for L2 while this one finishes */
        const int c1 = c0 + nk, g1 = g + 1;
        const int nk1 = c1 < s_end ? min(s_end, (g1 + 1) * KT) - c1 : 0;
        if (nk1 > 0 && !(lane & 7)) {
            const uint4 *wp1 = mm_wptr(a, g1, 0, lane, warp);
            for (int kt = 0; kt < min(nk1, 2 * U); kt++) prefetch_l2(wp1 + kt * MM_WS);
        }
        cp_async_wait0();
        __syncthreads(); /* the tiles below reuse the input buffers */

#ifdef DSPARK_LAB_STAMPS
        ts2 = lab_now();
        if (!ts_first) ts_first = ts2;
        {
            const int e = mm_finish<NT, TERMS>(a, acc, g, nk == KT, c0 != s_begin, smem);
            ran += e;
            if (e && nk1 > 0) mid = 1;
        }
#else
        mm_finish<NT, TERMS>(a, acc, g, nk == KT, c0 != s_begin, smem);
#endif
        if (nk1 <= 0) break;
        __syncthreads(); /* val and the input buffers are the same memory */
        c0 = c1, g = g1, kb = 0, nk = nk1, pre_end = 0;
        wp = mm_wptr(a, g, 0, lane, warp);
        mm_fetch<U>(ra, wp, 0, nk);
        mm_fetch<U>(rb, wp, U, nk);
    }
#ifdef DSPARK_LAB_STAMPS
    if (threadIdx.x == 0) {
        unsigned k = atomicAdd(&lab_nrec, 1u);
        if (k < LAB_RECS) {
            unsigned smid;
            asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
            lab_rec r = {{ts0, ts1, ts2, lab_now(), ts_first}, blk, a.KT, a.MS, a.T, ran, a.nb,
                         (int)smid, mid};
            lab_recs[k] = r;
        }
    }
#endif
}

/* ---- other weight types: one warp per output row ---- */

#define RB 8 /* rows per register block */

__global__ void k_mm_rows(const void *w, int dt, const uint16_t *xb, int T_chunk, int KT, int row0,
                          int n, int K, int M, int epi, float *y, int ldy, const float *bias,
                          int terms) {
    pdl_wait();
    pdl_launch();
    int m = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (m >= M) return;
    size_t row = (size_t)m * K;
    for (int r0 = 0; r0 < n; r0 += RB) {
        float acc[RB];
#pragma unroll
        for (int r = 0; r < RB; r++) acc[r] = 0.f;
        for (int i = lane; i < K; i += 32) {
            float wi = load_w(w, dt, row + i);
#pragma unroll
            for (int r = 0; r < RB; r++)
                if (r0 + r < n)
                    acc[r] = fmaf(wi, xb_get(xb, T_chunk, KT, row0 + r0 + r, i, terms), acc[r]);
        }
#pragma unroll
        for (int r = 0; r < RB; r++) {
            float s = acc[r];
            for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0 && r0 + r < n) {
                float *dst = y + (size_t)(row0 + r0 + r) * ldy + m;
                if (epi == EPI_RESID)
                    *dst = __ldcg(dst) + s;
                else
                    *dst = s + (bias ? bias[m] : 0.f);
            }
        }
    }
}

#ifdef DSPARK_LAB_STAMPS
/* the stamps of the launches since the last call, as text lines into f (NULL: none) */
int lab_stamps_take(FILE *f) {
    unsigned n = 0;
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpyFromSymbol(&n, lab_nrec, sizeof n));
    if (n > LAB_RECS) n = LAB_RECS;
    if (f && n) {
        lab_rec *r = (lab_rec *)malloc(n * sizeof *r);
        if (!r) return ERR_NOMEM;
        CK(cudaMemcpyFromSymbol(r, lab_recs, n * sizeof *r));
        for (unsigned i = 0; i < n; i++)
            fprintf(f, "%d %d %d %d %d %d %llu %llu %llu %llu %d %d %llu\n", r[i].KT, r[i].MS,
                    r[i].T, r[i].nb, r[i].blk, r[i].epi, r[i].t[0], r[i].t[1], r[i].t[2],
                    r[i].t[3], r[i].smid, r[i].mid, r[i].t[4]);
        free(r);
    }
    unsigned z = 0;
    CK(cudaMemcpyToSymbol(lab_nrec, &z, sizeof z));
    return OK;
}
#endif

/* ---- weight preparation ---- */

/* Fragment order (see struct dmat), the 8 strips of a group side by side per k-tile (a
 * block's warps read 4 KB runs, and a block's range of k-tiles is one run of memory). With
 * interleave, src holds [gate; up] (rows/2 each) and strip s takes rows of gate (s even) or up
 * (s odd) strip s / 2. MS is a multiple of 8. */
__global__ void k_relayout(uint4 *dst, const uint16_t *src, int M, int K, int MS, int KT,
                           int interleave) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)MS * KT * 32) return;
    const int lane = (int)(i & 31);
    const size_t f = i >> 5, f2 = f >> 3;
    const int kt = (int)(f2 % KT), s = (int)(f2 / KT) * 8 + (int)(f & 7);
    int g = lane >> 2, k0 = kt * 16 + 2 * (lane & 3);
    int half = M / 2;
    uint32_t e[2][4];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) { /* rows g and g + 8 */
        int r = g + 8 * hi;
        long m;
        bool ok;
        if (interleave) {
            long j = (long)(s >> 1) * 16 + r;
            ok = j < half;
            m = (s & 1) * (long)half + j;
        } else {
            m = (long)s * 16 + r;
            ok = m < M;
        }
        const int ks[4] = {k0, k0 + 1, k0 + 8, k0 + 9};
#pragma unroll
        for (int q = 0; q < 4; q++) e[hi][q] = ok && ks[q] < K ? src[m * K + ks[q]] : 0u;
    }
    dst[i] = make_uint4(e[0][0] | e[0][1] << 16, e[1][0] | e[1][1] << 16, e[0][2] | e[0][3] << 16,
                        e[1][2] | e[1][3] << 16);
}

/* The blocks of a matrix's launches, fixed per matrix and device so that a row's sums never
 * depend on the pass. Each strip group is split into ks K ranges (at least 8 k-tiles each)
 * when that makes at least 90% of the blocks that fit on the GPU at once (slots); otherwise
 * (gate/up of the Qwen3-8B shape: 192 groups on 264 slots) the flattened (group, k-tile)
 * space is cut into slots even ranges, which may cross groups (ks = 0). DSPARK_GPU_SK=0 keeps
 * the group split always, 2 takes even ranges always. */
static void mm_partition(const gpu_model *g, dmat *m) {
    const int G = (int)cdiv(m->MS, 8), KT = m->KT;
    const long long total = (long long)G * KT;
    int ks = g->slots / G;
    if (ks > KT / 8) ks = KT / 8;
    if (ks > 32) ks = 32;
    if (ks < 1) ks = 1;
    int even = g->even_split == 2 || (g->even_split == 1 && (long)G * ks * 10 < 9L * g->slots);
    long long nb = g->slots < total / 8 ? g->slots : total / 8;
    if (even && nb > (long long)G * ks && (total + 1) * nb < (1LL << 32)) {
        m->ks = 0, m->nb = (int)nb;
    } else {
        m->ks = ks, m->nb = G * ks;
    }
}

/* Describes m for src (row-major [M, K] in device memory; [gate; up] when interleave). BF16
 * weights are copied in fragment order into new device memory and src is no longer needed;
 * other types keep reading src. */
int mm_prepare(gpu_model *g, dmat *m, const void *src, int dtype, int M, int K, int interleave) {
    m->dtype = dtype, m->M = M, m->K = K, m->interleaved = 0;
    m->KT = (K + 15) / 16;
    if (dtype != DTYPE_BF16) {
        m->mma = 0, m->w = src, m->MS = (M + 15) / 16, m->nb = 0;
        return OK;
    }
    m->mma = 1;
    m->interleaved = interleave;
    m->MS = interleave ? 2 * ((M / 2 + 15) / 16) : (M + 15) / 16;
    mm_partition(g, m);
    size_t n = (size_t)cdiv(m->MS, 8) * 8 * m->KT * 32;
    void *dst;
    int rc = dev_alloc(g, &dst, n * sizeof(uint4));
    if (rc) return rc;
    k_relayout<<<cdiv(n, 256), 256>>>((uint4 *)dst, (const uint16_t *)src, M, K,
                                      (int)cdiv(m->MS, 8) * 8, m->KT, interleave);
    CK(cudaGetLastError());
    m->w = dst;
    return OK;
}

/* ---- launching ---- */

typedef void (*mm_kernel)(mm_args);
static_assert(GPU_NT_MAX == 12, "k_mm's instances");
/* [terms == 1][NT]: three terms take up to 12 n-tiles for 32 rows, one term 4 */
static const mm_kernel mm_kernels[2][12 + 1] = {
    {NULL, k_mm<1, 3>, k_mm<2, 3>, k_mm<3, 3>, k_mm<4, 3>, k_mm<5, 3>, k_mm<6, 3>, k_mm<7, 3>,
     k_mm<8, 3>, k_mm<9, 3>, k_mm<10, 3>, k_mm<11, 3>, k_mm<12, 3>},
    {NULL, k_mm<1, 1>, k_mm<2, 1>, k_mm<3, 1>, k_mm<4, 1>},
};

int mm_init(void) {
    for (int one = 0; one < 2; one++) {
        const int terms = one ? 1 : 3;
        for (int nt = 1; nt <= xb_ntiles(GPU_GROUP, terms); nt++)
            CK(cudaFuncSetAttribute(mm_kernels[one][nt],
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    mm_smem(nt, terms) + mm_pre_max(nt, terms) * 4096 +
                                        MM_CS_BYTES));
    }
    return mmg_init();
}

/* one launch: a group's rows (n <= GPU_GROUP), or all rows where mmg_wanted */
static cudaError_t mm_launch_part(gpu_model *g, const mm_call *c) {
    const dmat *w = c->w;
    int KT = w->KT, grp = c->row0 / GPU_GROUP;
    if (!w->mma) {
        return launch(k_mm_rows, dim3(cdiv((size_t)w->M * 32, 256)), dim3(256), 0, g->stream, w->w,
                      w->dtype, c->xb, c->T, KT, c->row0, c->n, w->K, w->M, c->epi, c->y, c->ldy,
                      c->bias, g->terms);
    }
    mm_args a;
    a.w = (const uint4 *)w->w;
    a.xb = (const uint2 *)c->xb + grp * xb_group_stride(KT);
    a.KT = KT, a.MS = w->MS, a.M = w->M;
    a.T = c->n, a.T_chunk = c->T, a.row0 = c->row0;
    a.ks = w->ks, a.total = cdiv(w->MS, 8) * (unsigned)KT, a.nb = w->nb;
    a.epi = c->epi, a.y = c->y, a.ldy = c->ldy, a.bias = c->bias;
    a.xb_out = c->xb_out, a.KT_out = w->interleaved ? (w->M / 2 + 15) / 16 : 0;
    a.part = g->part, a.cnt = g->cnt + CNT_MM;
    if (c->epi == EPI_QKV) a.qe = *c->qe;
    a.norm_w = c->epi == EPI_RESID ? c->norm_w : NULL, a.norm_out = c->norm_out;
    a.H_norm = g->H, a.KT_norm = g->KT_H, a.eps = g->d.rms_eps;
    a.out_ss = a.norm_w ? c->out_ss : NULL, a.in_ss = c->in_ss, a.n_ssg = g->n_ssg;
    if (c->n > GPU_GROUP) return mmg_launch(g, &a);
    const int terms = g->terms, NT = xb_ntiles(c->n, terms);
    a.npre = min(g->pre_kt, mm_pre_max(NT, terms));
    const int cs = c->epi == EPI_QKV && mm_cs(NT, terms) ? MM_CS_BYTES : 0;
    return launch(mm_kernels[terms == 1][NT], dim3(w->nb), dim3(256),
                  (size_t)(mm_smem(NT, terms) + a.npre * 4096 + cs), g->stream, a);
}

/* one launch over all rows (gemm.cu) where that fills the GPU, otherwise a launch per group of
 * GPU_GROUP rows (above); the same bits either way */
cudaError_t mm_launch(gpu_model *g, const mm_call *c) {
    /* a norm fused the old way needs every row group's launch to itself */
    const int step = mmg_wanted(g, c->w, c->n) && (!c->norm_w || c->out_ss) ? c->n : GPU_GROUP;
    for (int r = 0; r < c->n; r += step) {
        mm_call p = *c;
        p.row0 = c->row0 + r, p.n = c->n - r < step ? c->n - r : step;
        cudaError_t e = mm_launch_part(g, &p);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
