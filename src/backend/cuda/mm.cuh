/* backend/cuda/mm.cuh: what the matmul kernels share (gemv.cu for passes of up to GPU_GROUP
 * rows, gemm.cu for longer ones): the launch arguments, the tensor-core and copy helpers, the
 * flattened (strip group, k-tile) partition that fixes every row's order of sums, and the
 * epilogues. Both kernels add each row's products in the same order with the same mma, so a
 * row's result is the same bits whichever kernel computed it. */
#ifndef DSPARK_BACKEND_CUDA_MM_CUH
#define DSPARK_BACKEND_CUDA_MM_CUH

#include <float.h>

#include "backend/cuda/cuda.cuh"

/* ---- device helpers ---- */

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ void mma_bf16(float c[4], uint4 a, uint2 b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
}

/* The block's arrival at a counter that n blocks of the grid share, once all its threads'
 * stores are done: true in every thread of the last block to arrive, which then sees the
 * stores every block made before arriving (and resets the counter). Thread 0's
 * acquire-release atomic carries the whole block's stores, ordered before it by the barrier
 * (as CUTLASS's semaphores do), instead of a fence in every thread. */
__device__ __forceinline__ bool arrive_last(unsigned *cnt, unsigned n) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned old;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(cnt) : "memory");
        last = old == n - 1;
        if (last) *cnt = 0;
    }
    __syncthreads();
    return last;
}

__device__ __forceinline__ float silu_mul(float gv, float uv) {
    return gv / (1.0f + expf(-gv)) * uv;
}
/* silu_mul's quotient g / d (d = 1 + expf(-g)) without the division's slow-path branch: the
 * approximate reciprocal and the three fused steps of nvcc's own fast path. For finite g != 0
 * and d < 2^64 (silu_fast_ok) it is the same bits as the division, for every such float g
 * (bench/silu_bits.cu checks all 2^32); elsewhere the caller divides. Without the branch a
 * thread's 8 quotients interleave, where each division waited for its check before the next. */
__device__ __forceinline__ float silu_fast(float g, float d) {
    float r;
    asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(d));
    r = fmaf(r, fmaf(-d, r, 1.0f), r);
    const float q = fmaf(g, r, 0.0f);
    return fmaf(r, fmaf(-d, q, g), q);
}
__device__ __forceinline__ bool silu_fast_ok(float g, float d) {
    return fabsf(g) > 0.0f && fabsf(g) <= FLT_MAX && d < 0x1p64f;
}
/* silu_mul of 8 features at once, the same bits: the quotients by silu_fast, all 8 divided
 * where any of them is out of its range */
__device__ __forceinline__ void silu_mul8(const float *gv, const float *uv, float s, float *h) {
    float gs[8], d[8];
    bool ok = true;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        gs[e] = gv[e] * s, d[e] = 1.0f + expf(-gs[e]);
        h[e] = silu_fast(gs[e], d[e]);
        ok = ok && silu_fast_ok(gs[e], d[e]);
    }
    if (!ok)
#pragma unroll
        for (int e = 0; e < 8; e++) h[e] = gs[e] / d[e];
#pragma unroll
    for (int e = 0; e < 8; e++) h[e] = h[e] * (uv[e] * s);
}

struct mm_args {
    const uint4 *w;    /* fragments [MS][KT][32] */
    const uint2 *xb;   /* this group's B operand [KT][NT][32] */
    int KT, MS, M; /* M: real rows (both halves when interleaved) */
    int T, T_chunk, row0;
    int epi;
    float *y;
    int ldy;
    const float *bias;
    uint16_t *xb_out;
    int KT_out;
    int ks;         /* > 0: each group split into ks K ranges; 0: even ranges (mm_start) */
    unsigned total; /* groups x KT */
    int nb;         /* blocks of the matrix's decode launch: the pieces (mm_partition) */
    float *part;    /* [nb][2][GPU_GROUP][128]: each block's first and last piece */
    unsigned *cnt;
    qkv_epi qe;          /* EPI_QKV */
    const float *norm_w; /* EPI_RESID: then the RMSNorm of the rows into norm_out */
    uint16_t *norm_out;
    int H_norm, KT_norm;
    float eps;
    double *out_ss;      /* with norm_w: the norm deferred (mm_call) */
    const double *in_ss; /* the row sums are scaled by 1 / rms of these first */
    int n_ssg;
    int npre; /* k-tiles a decode block brings into shared memory before its wait (gemv.cu) */
};

/* measuring builds, results wrong (LAB_BUILDS q2 .. q4 of bench/gpu_pack.sh), to locate what
 * q|k|v's epilogue spends: without the q/k norm's sum (2), its stores all but never made (3),
 * or every row's 1 / rms of the deferred input norm taken as 1 without reading its sums, in
 * every epilogue (4). (1, without RoPE's trig, went with the prompt kernels' trig.) */
#ifndef DSPARK_LAB_QKV
#define DSPARK_LAB_QKV 0
#endif

/* RoPE's cos and sin at position pos for frequency f: the angle in float, as the CPU takes
 * it, its cos and sin in double */
__device__ __forceinline__ void rope_cs(int pos, float f, float *c, float *sn) {
    const float ang = (float)pos * f;
    *c = (float)cos((double)ang), *sn = (float)sin((double)ang);
}

/* The last block of a strip group has rows [128 b, 128 b + 128) of q|k|v for every row t in
 * val[t * 128 + i]: whole heads (D divides 128), normed, rotated and stored here. It is on
 * the path to the next kernel, so each warp requests what it reads before it stores. With
 * CS the rows' RoPE cos and sin are in cs[t * D / 2 + i] (computed before the wait, gemv.cu,
 * or once a pass, rope_table_launch), else computed here: the same values. A warp keeps one
 * head (its 8 / (128 / D)-th rows) and takes U rows at a time, all their reads and arithmetic
 * before their stores, so that the rows' chains (the step parameters' loads, the norm's
 * shuffles) overlap: U = 2 for the prompt kernels' many rows, 1 for decode steps. */
template <bool CS, int U = 1>
__device__ __forceinline__ void qkv_epilogue(const qkv_epi &e, const float *val, int T, int row0,
                                             int M, int g, const float2 *cs) {
    const int D = e.D, half = D / 2, QD = e.nh * D, KD = e.nkv * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hpb = 128 / D;
    const int hh = warp % hpb, m0 = g * 128 + hh * D; /* the warp's head: 8 % hpb == 0 */
    if (m0 >= M) return;
    const int kind = m0 < QD        ? 0
                     : m0 < QD + KD ? 1
                                    : 2,
              h = kind == 0 ? m0 / D : (m0 - QD - (kind - 1) * KD) / D;
    const float *nw = kind == 2 ? NULL : kind == 0 ? e.q_norm : e.k_norm;
    /* this lane's norm weights and frequencies (D <= 128: two pairs a lane) */
    float wa[2], wb[2], fr[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = lane + 32 * j;
        const bool in = kind != 2 && i < half;
        fr[j] = in && !CS ? e.inv_freq[i] : 0.f;
        wa[j] = in && nw ? nw[i] : 0.f;
        wb[j] = in && nw ? nw[i + half] : 0.f;
    }
    const int step = 8 / hpb; /* rows between a warp's turns */
    for (int t0 = warp / hpb; t0 < T; t0 += U * step) {
        int t[U];
        bool ok[U];
        kv_row kr[U];
        int pos[U];
        const float *x[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            ok[u] = t0 + u * step < T;
            t[u] = ok[u] ? t0 + u * step : t0; /* past the rows: read row t0, store nothing */
            kr[u] = row_cache(e.sp, row0 + t[u], e.layer, e.nkv, h, D);
            pos[u] = row_pos(e.sp, row0 + t[u]);
            x[u] = val + t[u] * 128 + hh * D;
        }
        if (kind == 2) {
#pragma unroll
            for (int u = 0; u < U; u++)
                if (ok[u])
                    for (int d = lane; d < D; d += 32) kv_put(kr[u], 1, d, x[u][d]);
            continue;
        }
        float inv[U];
#pragma unroll
        for (int u = 0; u < U; u++) inv[u] = 1.f;
        if (nw && DSPARK_LAB_QKV != 2) {
            double ss[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                ss[u] = 0;
                for (int d = lane; d < D; d += 32) ss[u] += (double)x[u][d] * x[u][d];
            }
            for (int o = 16; o; o >>= 1)
#pragma unroll
                for (int u = 0; u < U; u++) ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], o);
#pragma unroll
            for (int u = 0; u < U; u++) inv[u] = (float)(1.0 / sqrt(ss[u] / D + (double)e.eps));
        }
        float ra[U][2], rb[U][2];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int i = lane + 32 * j;
                if (i >= half) break;
                float a = x[u][i], b = x[u][i + half];
                if (nw) a = wa[j] * (a * inv[u]), b = wb[j] * (b * inv[u]);
                float c, sn;
                if (CS) {
                    const float2 v = cs[t[u] * half + i];
                    c = v.x, sn = v.y;
                } else {
                    rope_cs(pos[u], fr[j], &c, &sn);
                }
                ra[u][j] = a * c - b * sn, rb[u][j] = b * c + a * sn;
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (!ok[u]) break;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int i = lane + 32 * j;
                if (i >= half) break;
                if (DSPARK_LAB_QKV == 3 && ra[u][j] != -1.5e-38f) continue; /* made: never */
                if (kind == 0) {
                    float *o = e.q + ((size_t)(row0 + t[u]) * e.nh + h) * D;
                    o[i] = ra[u][j], o[i + half] = rb[u][j];
                } else {
                    kv_put(kr[u], 0, i, ra[u][j]), kv_put(kr[u], 0, i + half, rb[u][j]);
                }
            }
        }
    }
}

/* The residual epilogue's other inputs, a float at a time: pre[t * 128 + i] the residual of
 * row t, output g * 128 + i, then (with the next norm deferred) pre[nitems + i] its weight */
__device__ __forceinline__ void mm_resid_gather(const mm_args &a, int g, int nitems, float *pre) {
    const bool nw = a.norm_w && a.out_ss;
    for (int i = threadIdx.x; i < nitems + (nw ? 128 : 0); i += 256) {
        const int t = i >> 7, m = g * 128 + (i & 127);
        pre[i] = m >= a.M  ? 0.f
                 : t < a.T ? __ldcg(a.y + (size_t)(a.row0 + t) * a.ldy + m)
                           : a.norm_w[m];
    }
}
/* inv[t] = 1 / rms of input row t (a.in_ss) for rows [0, a.T), a warp per row */
__device__ __forceinline__ void mm_inv_warps(const mm_args &a, float *inv) {
    for (int t = threadIdx.x >> 5; t < a.T; t += 8) {
        const float v = ss_inv_warp(a.in_ss + (size_t)(a.row0 + t) * a.n_ssg, a.n_ssg, a.H_norm,
                                    a.eps);
        if ((threadIdx.x & 31) == 0) inv[t] = v;
    }
}
/* mm_resid_gather's values by asynchronous 16-byte copies, every one requested before any
 * is waited for (the caller commits and waits); pre 16-byte aligned. False, with nothing
 * requested, where a row or the norm's weights are not 16-byte aligned. */
__device__ __forceinline__ bool mm_resid_request(const mm_args &a, int g, int nitems, float *pre) {
    const bool nw = a.norm_w && a.out_ss;
    if ((a.ldy & 3) || ((uintptr_t)a.y & 15) || (nw && ((uintptr_t)a.norm_w & 15))) return false;
    for (int i = threadIdx.x * 4; i < nitems + (nw ? 128 : 0); i += 1024) {
        const int t = i >> 7, m = g * 128 + (i & 127), n = max(0, min(4, a.M - m)) * 4;
        const float *src = t < a.T ? a.y + (size_t)(a.row0 + t) * a.ldy + m : a.norm_w + m;
        cp_async16_n(pre + i, n ? src : a.y, n); /* zeros past the matrix */
    }
    return true;
}
/* mm_epilogue's inputs gathered in place (the prompt-chunk kernels, whose epilogue is not on
 * a decode pass's path): inv[t], 1 / rms of input row t (a.in_ss; a thread a row, the same
 * bits as mm_inv_warps; with inv_ready, the caller has them), and pre, whose copies are all
 * in flight at once (a load a float, each waited for before the next, took most of o's and
 * down's time at 512 rows) */
__device__ __forceinline__ void mm_epi_gather(const mm_args &a, int g, int nitems, float *inv,
                                              float *pre, bool inv_ready = false) {
    const bool async = a.epi == EPI_RESID && mm_resid_request(a, g, nitems, pre);
    if (async) cp_async_commit();
    if (a.in_ss && !inv_ready)
        for (int t = threadIdx.x; t < a.T; t += 256)
            inv[t] = DSPARK_LAB_QKV == 4 ? 1.f :
                     ss_inv_thread(a.in_ss + (size_t)(a.row0 + t) * a.n_ssg, a.n_ssg, a.H_norm,
                                   a.eps);
    if (async)
        cp_async_wait0();
    else if (a.epi == EPI_RESID)
        mm_resid_gather(a, g, nitems, pre);
    __syncthreads();
}

/* the group's sum of squares of each row, from its four chunk sums in red (ss_group), into
 * out_ss, once every warp has stored its chunks */
__device__ __forceinline__ void mm_group_ss_out(const mm_args &a, int g, const double *red) {
    __syncthreads();
    for (int t = threadIdx.x; t < a.T; t += 256)
        a.out_ss[(size_t)(a.row0 + t) * a.n_ssg + g] = ss_group(red + 4 * t);
}
/* The deferred RMSNorm's sum of squares of group g for rows [0, a.T), from their 128 new
 * values val[t * 128 + i] (0 past the matrix) complete in shared memory, into out_ss: four
 * warp sums of 32 columns (ss_chunk) added by ss_group, so the same bits whichever kernel
 * (gemv.cu, gemm.cu) computes it. The block's 8 warps all call it; red: 4 a.T. */
__device__ __forceinline__ void mm_group_ss(const mm_args &a, int g, const float *val,
                                            double *red) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int c = warp; c < a.T * 4; c += 8) {
        double s = ss_chunk(val[c * 32 + lane]);
        if (lane == 0) red[c] = s;
    }
    mm_group_ss_out(a, g, red);
}
/* the same for the prompt kernels' 64 rows: a warp takes 4 of its 32 chunks at a time, their
 * shuffle chains (ss_chunk's steps) interleaved, where they had run one after another */
__device__ __forceinline__ void mm_group_ss4(const mm_args &a, int g, const float *val,
                                             double *red) {
    constexpr int U = 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = a.T * 4;
    for (int c0 = warp; c0 < n; c0 += 8 * U) {
        double s[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 8 * u;
            const float v = c < n ? val[c * 32 + lane] : 0.f;
            s[u] = (double)v * v;
        }
        for (int o = 16; o; o >>= 1)
#pragma unroll
            for (int u = 0; u < U; u++) s[u] += __shfl_xor_sync(0xffffffffu, s[u], o);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (lane == 0 && c0 + 8 * u < n) red[c0 + 8 * u] = s[u];
    }
    mm_group_ss_out(a, g, red);
}

/* The finished sums of strip group g (val[t * 128 + i]: row t, output g * 128 + i) into
 * their destination. With a fused RMSNorm, whoever finishes the last group normalises. What
 * the group's last piece reads besides the sums is in shared memory by now: inv, 1 / rms of
 * each input row when its norm is deferred (a.in_ss); pre, for the residual epilogue, the
 * group's residual rows [T][128] and the next norm's weights [128]; qe: a.qe, or its copy
 * whose step parameters, norm weights and frequencies are in shared memory. TERMS: of the
 * inputs it writes (the model's, as the matmul's own). */
template <int TERMS, bool CS = false, int CORE = -1> /* CORE: the order of xb outputs (xb_index) */
__device__ __forceinline__ void mm_epilogue(const mm_args &a, int g, float *val, int nitems,
                                            const float *inv, const float *pre,
                                            const qkv_epi &qe, const float2 *cs = nullptr) {
    __shared__ double red[256]; /* the norm's sums: per thread, or per (row, 32 columns) */
    /* the prompt kernels' many rows, whole runs of 8 features (else the loop below) */
    const bool swiglu8 = a.epi == EPI_SWIGLU && CORE < 0 && (a.M / 2) % 8 == 0;
    if (a.in_ss && !swiglu8) {
        for (int i = threadIdx.x; i < nitems; i += 256) val[i] *= inv[i >> 7];
        __syncthreads();
    }
    if (swiglu8) {
        /* 8 features of a row a thread, scaled by the row's 1 / rms here and stored side by
         * side (the same operations on the same values as the pass above and the loop below) */
        for (int i = threadIdx.x; i < 8 * a.T; i += 256) {
            const int t = i >> 3, p = (i >> 1) & 3, r = (i & 1) * 8, j = (g * 4 + p) * 16 + r;
            if (g * 8 + 2 * p >= a.MS || j >= a.M / 2) continue;
            const float *gv = val + t * 128 + 2 * p * 16 + r, *uv = gv + 16;
            const float s = a.in_ss ? inv[t] : 1.f; /* x 1 is exact */
            float h[8];
            silu_mul8(gv, uv, s, h);
            xb_put8<CORE>(a.xb_out, a.T_chunk, a.KT_out, a.row0 + t, j, h, TERMS);
        }
        return;
    }
    if (a.epi == EPI_SWIGLU) { /* strips 2p and 2p+1 are gate and up of the same 16 features */
        for (int i = threadIdx.x; i < 64 * a.T; i += 256) {
            int t = i >> 6, p = (i >> 4) & 3, r = i & 15;
            int j = (g * 4 + p) * 16 + r;
            if (g * 8 + 2 * p >= a.MS || j >= a.M / 2) continue;
            float h = silu_mul(val[t * 128 + 2 * p * 16 + r], val[t * 128 + (2 * p + 1) * 16 + r]);
            xb_put<CORE>(a.xb_out, a.T_chunk, a.KT_out, a.row0 + t, j, h, TERMS);
        }
        return;
    }
    if (a.epi == EPI_QKV) {
        if (a.bias) {
            for (int i = threadIdx.x; i < nitems; i += 256) {
                int m = g * 128 + (i & 127);
                if (m < a.M) val[i] += a.bias[m];
            }
            __syncthreads();
        }
        /* the prompt kernels (only in passes of more than GPU_GROUP rows, mmg_wanted): RoPE's
         * cos and sin from the pass's table */
        if (CORE < 0)
            qkv_epilogue<true, 2>(qe, val, a.T, a.row0, a.M, g,
                                  qe.sp->rope + (size_t)a.row0 * (qe.D / 2));
        else
            qkv_epilogue<CS, 1>(qe, val, a.T, a.row0, a.M, g, cs);
        return;
    }
    const bool defer = a.epi == EPI_RESID && a.norm_w && a.out_ss;
    /* the prompt kernels' residual with the norm deferred, rows of whole runs of 8 (else the
     * loop below): 8 outputs of a row a thread, loaded and stored 16 bytes at a time (the same
     * operations as the loop below) */
    const bool resid8 =
        CORE < 0 && defer && a.M % 8 == 0 && !(a.ldy & 3) && !((uintptr_t)a.y & 15);
    for (int i = threadIdx.x * 8; resid8 && i < nitems; i += 256 * 8) {
        const int t = i >> 7, c = i & 127, m = g * 128 + c;
        if (m >= a.M) { /* past the matrix: nothing to the sum of squares */
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
            *(float4 *)(val + i) = z, *(float4 *)(val + i + 4) = z;
            continue;
        }
        float v[8], w[8];
#pragma unroll
        for (int e = 0; e < 8; e += 4) {
            const float4 p4 = *(const float4 *)(pre + i + e), v4 = *(const float4 *)(val + i + e),
                         n4 = *(const float4 *)(pre + nitems + c + e);
            v[e] = p4.x + v4.x, v[e + 1] = p4.y + v4.y, v[e + 2] = p4.z + v4.z;
            v[e + 3] = p4.w + v4.w;
            w[e] = n4.x * v[e], w[e + 1] = n4.y * v[e + 1], w[e + 2] = n4.z * v[e + 2];
            w[e + 3] = n4.w * v[e + 3];
            const float4 o4 = make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
            *(float4 *)(a.y + (size_t)(a.row0 + t) * a.ldy + m + e) = o4;
            *(float4 *)(val + i + e) = o4;
        }
        xb_put8<CORE>(a.norm_out, a.T_chunk, a.KT_norm, a.row0 + t, m, w, TERMS);
    }
    for (int i = threadIdx.x; !resid8 && i < nitems; i += 256) {
        int t = i >> 7, m = g * 128 + (i & 127);
        if (m >= a.M) {
            val[i] = 0.f; /* outside the row: nothing to the sum of squares */
            continue;
        }
        float *dst = a.y + (size_t)(a.row0 + t) * a.ldy + m;
        if (a.epi == EPI_RESID) {
            float v = pre[i] + val[i];
            *dst = v;
            if (defer) {
                val[i] = v;
                xb_put<CORE>(a.norm_out, a.T_chunk, a.KT_norm, a.row0 + t, m,
                             pre[nitems + (i & 127)] * v, TERMS);
            }
        } else {
            *dst = val[i] + (a.bias ? a.bias[m] : 0.f);
        }
    }
    if (defer) { /* this group's sums of squares; the next matmul finishes the norm */
        __syncthreads();
        if (CORE < 0)
            mm_group_ss4(a, g, val, red);
        else
            mm_group_ss(a, g, val, red);
        return;
    }
    if (a.epi == EPI_RESID && a.norm_w) {
        if (!arrive_last(a.cnt + CNT_GRID, (unsigned)(a.MS + 7) / 8)) return;
        for (int t = 0; t < a.T; t++)
            norm_row<CORE>(a.y + (size_t)(a.row0 + t) * a.ldy, a.norm_w, a.H_norm, a.eps,
                           a.norm_out, a.T_chunk, a.KT_norm, a.row0 + t, red, TERMS);
    }
}

/* The block's weights for (strip group g, k-tiles [kb, kb + n)): this warp's fragments */
__device__ __forceinline__ const uint4 *mm_wptr(const mm_args &a, int g, int kb, int lane,
                                                int warp) {
    return a.w + (((size_t)g * a.KT + kb) * 8 + warp) * 32 + lane; /* strips past MS: zeros */
}

/* Where block b's range of the flattened (strip group, k-tile) space starts (b = nb: the
 * end), and the block whose range holds k-tile i: with ks, K range b % ks of group b / ks;
 * otherwise even ranges cut anywhere. */
__device__ __forceinline__ int mm_start(const mm_args &a, int b) {
    if (a.ks) return (b / a.ks) * a.KT + a.KT * (b % a.ks) / a.ks;
    return (int)(a.total * (unsigned)b / (unsigned)a.nb); /* < 2^32 (mm_partition) */
}
__device__ __forceinline__ int mm_block_of(const mm_args &a, int i) {
    if (a.ks) return (i / a.KT) * a.ks + ((i % a.KT + 1) * a.ks - 1) / a.KT;
    return (int)(((unsigned)(i + 1) * (unsigned)a.nb - 1) / a.total);
}

int mmg_init(void);
int mmg_wanted(const gpu_model *g, const dmat *w, int T); /* one launch for all T rows */
cudaError_t mmg_launch(gpu_model *g, const mm_args *a); /* a->T > GPU_GROUP rows from row 0 */

#endif
