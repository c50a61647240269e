/* backend/cuda/cuda.cuh: what the CUDA backend's files share (not for use outside
 * src/backend/cuda): the model and cache as they live on the device, the layout of matmul
 * inputs ("xb", below), the per-pass parameters that captured graphs read from device memory,
 * and launch helpers. Kernels are static in their files; each file exports host launchers.
 * Shapes: T rows, H hidden, D head_dim, QD = n_heads*D, KD = n_kv*D, I ffn, V vocab. */
#ifndef DSPARK_BACKEND_CUDA_CUH
#define DSPARK_BACKEND_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/gpu.h"
#include "base/err.h"
#include "base/log.h"
#include "tensor/dtype.h"
}

/* rows per pass at most (gpu_model.rows, a model's chunk); step_params holds a byte per row and
 * the q|k|v epilogues copy it whole into shared memory */
#define GPU_ROWS_MAX  512
#define GPU_GROUP     32  /* rows per matmul launch; graphs are captured for 1..GPU_GROUP rows */
#define GPU_TERMS     3   /* bf16 terms per matmul input value, at most (below) */
#define GPU_NT_MAX    ((GPU_TERMS * GPU_GROUP + 7) / 8) /* n-tiles of a full group of 3 terms */
#define GPU_SEQS      32  /* sequences per pass (continuous batching) */
#define ATT_SPAN      64  /* keys per attention work item, at fixed absolute positions */
#ifndef ATT_ROWS
#define ATT_ROWS 8 /* rows per attention work item */
#endif
#define ATT_COOP_ROWS 2   /* items of at most this many rows spread each row over the block */
enum { ATT_ONEBUF, ATT_FEW, ATT_ONE, ATT_PROMPT, ATT_KINDS }; /* attention kernels (attn_choose) */
#define ATT_THREADS   256 /* threads per attention block */
#define ATT_GMAX      16  /* query heads per kv head the attention kernel serves */
#define ATT_SCRATCH   ((size_t)512 << 20) /* attention partials: more rows a launch up to this */

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            log_error("CUDA: %s (%s:%d)", cudaGetErrorString(e_), __FILE__, __LINE__);             \
            return ERR_UNSUPPORTED;                                                                \
        }                                                                                          \
    } while (0)

/* ---- the B operand of a matmul ("xb") ----
 * A matmul input x[T, K] (float32) is stored as `terms` bfloat16 terms per value, a model's
 * choice (gpu_model.terms): three, hi + mid + lo, whose sum is x exactly, so tensor-core
 * products of bf16 weights with them are exact float32 products (the default); or one, x
 * rounded to bf16 as PyTorch's bf16 models take their matmul inputs: a third of the
 * tensor-core products and of the input staged for passes of many rows, other bits
 * (docs/perf.md, "Inputs of fewer terms"). The rows of a chunk come in groups of GPU_GROUP; a
 * group of n rows has NT = ceil(terms n / 8) n-tiles of 8 columns (xb_col: in a whole group,
 * n-tile terms j + s holds term s of rows 8j..8j+7, so that a row's terms meet in one lane of
 * an mma's sums; otherwise column terms r + s holds term s of row r). For each 16-wide k-tile
 * and n-tile, 256 bytes hold the n-tile's inputs, in one of two orders (xb_core):
 * - in a group with as many n-tiles as a whole one (the prompt kernel's wgmma reads these
 *   from shared memory as they are, gemm.cu): two 8 x 8 core matrices, k 0-7 then k 8-15, each
 *   8 columns of 16 bytes (8 k in order), where lane 4 c + q of an mma.m16n8k16 finds its B
 *   fragment in words 4 c + q and 32 + 4 c + q;
 * - in smaller groups (decode steps and short verify passes): mma.m16n8k16's B-fragment order,
 *   lane 4 c + q's two words side by side (k 2q, 2q + 1, then k 2q + 8, 2q + 9), one 8-byte load.
 * A row's result never depends on which column it occupies, so it is the same whatever n is.
 * Groups are GPU_NT_MAX n-tiles apart whatever the terms. */
__host__ __device__ constexpr int xb_ntiles(int rows, int terms) {
    return (terms * rows + 7) / 8;
}
/* uint2 units per group: the stride between groups of a chunk */
__host__ __device__ inline size_t xb_group_stride(int KT) {
    return (size_t)KT * GPU_NT_MAX * 32;
}
/* the column of term s of row r in a group of `rows` rows */
__host__ __device__ constexpr int xb_col(int rows, int r, int s, int terms) {
    return terms > 1 && rows == GPU_GROUP ? 8 * (terms * (r >> 3) + s) + (r & 7) : terms * r + s;
}
/* whether a group of NT n-tiles holds them as core matrices */
__host__ __device__ constexpr bool xb_core(int NT, int terms) {
    return NT == xb_ntiles(GPU_GROUP, terms);
}

/* the bf16 unit of term s of x[t, k]; CORE: the group's order where the caller knows it (1 core
 * matrices, 0 fragment order; -1: from the group's rows) */
template <int CORE = -1>
__device__ inline size_t xb_index(int T, int KT, int t, int k, int s, int terms) {
    int grp = t / GPU_GROUP, r = t % GPU_GROUP;
    int rows = T - grp * GPU_GROUP < GPU_GROUP ? T - grp * GPU_GROUP : GPU_GROUP;
    /* fragment order is never a whole group's, whose columns alone go by term */
    int NT = xb_ntiles(rows, terms), c = CORE ? xb_col(rows, r, s, terms) : terms * r + s;
    int kk = k & 15;
    size_t tile = grp * xb_group_stride(KT) + ((size_t)(k >> 4) * NT + (c >> 3)) * 32; /* uint2 */
    if (CORE < 0 ? xb_core(NT, terms) : CORE)
        return tile * 4 + ((kk >> 3) * 8 + (c & 7)) * 8 + (kk & 7);
    return ((tile + (c & 7) * 4 + ((kk & 7) >> 1)) * 2 + (kk >> 3)) * 2 + (kk & 1);
}

/* a value from its terms' products (unused terms: any), added in the order fixed for all
 * kernels: (hi + mid) + lo */
__host__ __device__ inline float xb_terms_sum(int terms, float h, float m, float l) {
    return terms == 1 ? h : terms == 2 ? h + m : (h + m) + l;
}

/* x as three bf16 terms t[0], t[1], t[2]: x rounded, then what each rounding left, rounded */
__device__ __forceinline__ void xb_terms(float x, uint16_t t[3]) {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    float r = x - __bfloat162float(h);
    __nv_bfloat16 m = __float2bfloat16_rn(r);
    __nv_bfloat16 l = __float2bfloat16_rn(r - __bfloat162float(m));
    t[0] = __bfloat16_as_ushort(h), t[1] = __bfloat16_as_ushort(m), t[2] = __bfloat16_as_ushort(l);
}

template <int CORE = -1>
__device__ inline void xb_put(uint16_t *xb, int T, int KT, int t, int k, float x, int terms) {
    uint16_t b[3];
    xb_terms(x, b);
    xb[xb_index<CORE>(T, KT, t, k, 0, terms)] = b[0];
    if (terms > 1) xb[xb_index<CORE>(T, KT, t, k, 1, terms)] = b[1];
    if (terms > 2) xb[xb_index<CORE>(T, KT, t, k, 2, terms)] = b[2];
}

/* x[t, k..k+3], k % 4 == 0: per term, two 32-bit words (pairs k, k+1 and k+2, k+3) */
template <int CORE = -1>
__device__ inline void xb_put4(uint16_t *xb, int T, int KT, int t, int k, float4 x, int terms) {
    float v[4] = {x.x, x.y, x.z, x.w};
    uint32_t w[3][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint16_t b[3];
        xb_terms(v[i], b);
        w[0][i] = b[0], w[1][i] = b[1], w[2][i] = b[2];
    }
    uint32_t *xw = (uint32_t *)xb;
#pragma unroll
    for (int s = 0; s < GPU_TERMS; s++) {
        if (s >= terms) break;
        size_t i0 = xb_index<CORE>(T, KT, t, k, s, terms) / 2;
        const size_t i1 = CORE >= 0 ? i0 + 2 - CORE : xb_index<CORE>(T, KT, t, k + 2, s, terms) / 2;
        xw[i0] = w[s][0] | w[s][1] << 16;
        xw[i1] = w[s][2] | w[s][3] << 16;
    }
}

/* x[t, k..k+7], k % 8 == 0: per term one 16-byte store where the 8 units lie side by side
 * (a group of core matrices), else a store a unit */
template <int CORE = -1>
__device__ inline void xb_put8(uint16_t *xb, int T, int KT, int t, int k, const float *x,
                               int terms) {
    uint32_t w[GPU_TERMS][4] = {};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint16_t b[3];
        xb_terms(x[i], b);
#pragma unroll
        for (int s = 0; s < GPU_TERMS; s++) w[s][i >> 1] |= (uint32_t)b[s] << 16 * (i & 1);
    }
#pragma unroll
    for (int s = 0; s < GPU_TERMS; s++) {
        if (s >= terms) break;
        const size_t i0 = xb_index<CORE>(T, KT, t, k, s, terms);
        if (xb_index<CORE>(T, KT, t, k + 7, s, terms) == i0 + 7 && !((uintptr_t)(xb + i0) & 15)) {
            *(uint4 *)(xb + i0) = make_uint4(w[s][0], w[s][1], w[s][2], w[s][3]);
        } else {
            for (int i = 0; i < 8; i++)
                xb[xb_index<CORE>(T, KT, t, k + i, s, terms)] =
                    (uint16_t)(w[s][i >> 1] >> 16 * (i & 1));
        }
    }
}

__device__ inline float xb_get(const uint16_t *xb, int T, int KT, int t, int k, int terms) {
    float h = __bfloat162float(__ushort_as_bfloat16(__ldcg(xb + xb_index(T, KT, t, k, 0, terms))));
    if (terms == 1) return h;
    float m = __bfloat162float(__ushort_as_bfloat16(__ldcg(xb + xb_index(T, KT, t, k, 1, terms))));
    if (terms == 2) return h + m;
    float l = __bfloat162float(__ushort_as_bfloat16(__ldcg(xb + xb_index(T, KT, t, k, 2, terms))));
    return (h + m) + l;
}

/* element i of a row-major weight in its stored type */
__device__ __forceinline__ float load_w(const void *p, int dt, size_t i) {
    if (dt == DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* RMSNorm of one row by a block of 256 threads into xb row t (of a T-row chunk): the sum of
 * squares in double, as on the CPU, in a fixed tree; the row's loads are issued together
 * (H <= 8192). The standalone kernel and the fused matmul epilogue share it, so both give the
 * same bits. */
#define NORM_V4 8
template <int CORE = -1>
__device__ inline void norm_row(const float *x, const float *w, int H, float eps, uint16_t *xb,
                                int T, int KT, int t, double *red, int terms) {
    const float4 *xr = (const float4 *)x;
    const int n4 = H / 4;
    float4 v[NORM_V4];
    double ss = 0;
#pragma unroll
    for (int j = 0; j < NORM_V4; j++) {
        int i = threadIdx.x + 256 * j;
        if (i < n4) v[j] = __ldcg(xr + i);
    }
#pragma unroll
    for (int j = 0; j < NORM_V4; j++) {
        int i = threadIdx.x + 256 * j;
        if (i < n4)
            ss += (double)v[j].x * v[j].x + (double)v[j].y * v[j].y + (double)v[j].z * v[j].z +
                  (double)v[j].w * v[j].w;
    }
    red[threadIdx.x] = ss;
    __syncthreads();
    for (int o = 128; o; o >>= 1) {
        if ((int)threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    float inv = (float)(1.0 / sqrt(red[0] / H + (double)eps));
    __syncthreads(); /* red is reused by the next row */
    const float4 *w4 = (const float4 *)w;
#pragma unroll
    for (int j = 0; j < NORM_V4; j++) {
        int i = threadIdx.x + 256 * j;
        if (i < n4) {
            float4 g = w4[i], y;
            y.x = g.x * (v[j].x * inv), y.y = g.y * (v[j].y * inv);
            y.z = g.z * (v[j].z * inv), y.w = g.w * (v[j].w * inv);
            xb_put4<CORE>(xb, T, KT, t, 4 * i, y, terms);
        }
    }
}

/* Deferred RMSNorm: the sum of squares of one 128-column group of a row, v[c] its values (0
 * past the row), four warp sums of 32 columns in lane order by a butterfly, then the four in
 * a fixed pairing. Every producer (matmul epilogue, k_prescale) adds in this order, so a
 * row's 1 / rms is the same bits whoever wrote it. */
__device__ __forceinline__ double ss_chunk(float v) { /* a warp's 32 values */
    double s = (double)v * v;
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}
__device__ __forceinline__ double ss_group(const double *chunk) {
    return (chunk[0] + chunk[1]) + (chunk[2] + chunk[3]);
}
/* 1 / rms of a row from its ng group sums of squares (ss_group), by a warp, in every lane:
 * the lanes request 32 group sums at once, and each lane adds them in order */
__device__ __forceinline__ float ss_inv_warp(const double *ss, int ng, int H, float eps) {
    const int lane = threadIdx.x & 31;
    double s = 0;
    for (int g0 = 0; g0 < ng; g0 += 32) {
        const double v = g0 + lane < ng ? __ldcg(ss + g0 + lane) : 0.0;
        for (int j = 0; j < 32 && g0 + j < ng; j++) s += __shfl_sync(0xffffffffu, v, j);
    }
    return (float)(1.0 / sqrt(s / H + (double)eps));
}

/* s += x[0] + ... + x[N - 1], added in order once all N loads are in flight */
template <int N>
__device__ __forceinline__ void ss_add_run(double &s, const double *x) {
    double v[N];
#pragma unroll
    for (int j = 0; j < N; j++) v[j] = __ldcg(x + j);
#pragma unroll
    for (int j = 0; j < N; j++) s += v[j];
}

/* the same by one thread from the sums in memory: 32 loads in flight (a 4,096-wide row's
 * sums in one round trip), then their adds in order (the prompt kernels, a thread a row: a
 * warp's chain of shuffles a row took a quarter of a 128-row tile's time) */
__device__ __forceinline__ float ss_inv_thread(const double *ss, int ng, int H, float eps) {
    double s = 0;
    int g = 0;
    for (; g + 32 <= ng; g += 32) ss_add_run<32>(s, ss + g);
    for (; g + 8 <= ng; g += 8) ss_add_run<8>(s, ss + g);
    for (; g < ng; g++) s += __ldcg(ss + g);
    return (float)(1.0 / sqrt(s / H + (double)eps));
}

/* the same from the group sums in shared memory, by one thread: the same adds in the same
 * order, so the same bits */
__device__ __forceinline__ float ss_inv_seq(const double *ss, int ng, int H, float eps) {
    double s = 0;
    for (int g = 0; g < ng; g++) s += ss[g];
    return (float)(1.0 / sqrt(s / H + (double)eps));
}

/* ---- asynchronous copies into shared memory (16 bytes a thread; groups committed in turn,
 * waited for until at most N are still in flight) ---- */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
/* the same with only the first n bytes from gmem (0 <= n <= 16), the rest zeros */
__device__ __forceinline__ void cp_async16_n(void *smem, const void *gmem, int n) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait0(void) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait1(void) {
    asm volatile("cp.async.wait_group 1;" ::: "memory");
}

/* ---- programmatic dependent launch ----
 * Every kernel waits for its predecessor before touching activations and only then lets its
 * successor start (the attention merge, whose successor reads only weights before its wait,
 * lets it start at once), so when a kernel starts, every kernel before its predecessor has
 * finished. Work before the wait may read weights, the pass parameters, and K/V rows of
 * positions before the pass (attention's first item), never write. */
/* DSPARK_LAB_NOWAIT: a measuring build whose results are wrong (bench_gpu --lab only): no
 * kernel waits for the one before it, which bounds what hiding the waits between kernels
 * could gain (docs/perf.md, "What the waits between kernels cost") */
__device__ __forceinline__ void pdl_wait(void) {
#ifndef DSPARK_LAB_NOWAIT
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch(void) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* Parameters of one pass, in device memory: copied in before each pass, so one captured graph
 * serves every position, every sequence's cache and every mix of sequences. The rows of a
 * pass are the rows of its sequences one after another. */
struct seq_params {
    int row0, n;    /* its rows [row0, row0 + n) of the pass */
    int pos0;       /* positions its cache held before this pass */
    int cap;        /* rows per head of its own (positions nb, nb + 1, ...) */
    void *kc, *vc;  /* its own rows, [n_layers][n_kv][cap][D] each (float, or bf16 with kv16) */
    int nb, bcap;   /* positions [0, nb) are rows of a base cache of bcap rows per head */
    const void *bk, *bv;
    int noncausal; /* its rows attend to all its rows of the pass (a drafter's block) */
    int kv16;      /* the caches hold bf16 (gpu_model.kv16) */
};
struct step_params {
    int n_seq;
    seq_params seq[GPU_SEQS];
    uint8_t row_seq[GPU_ROWS_MAX]; /* the sequence of each row */
    int32_t ids[GPU_ROWS_MAX];
    /* RoPE's cos and sin of row t for frequency j at rope[t * D / 2 + j] (D <= 128), which
     * every layer's prompt-tile q|k|v epilogue reads: a pass computes them on the device
     * before its layers where it may take the prompt tiles (rope_table_launch); the host's
     * copy (gpu_model.hsp) ends before it */
    float2 rope[GPU_ROWS_MAX * 64];
};
/* row t's position and cache line (layer, kv head h): a row of the sequence's own (a pass
 * writes at positions >= nb only) */
__device__ inline int row_pos(const step_params *sp, int t) {
    const seq_params &s = sp->seq[sp->row_seq[t]];
    return s.pos0 + t - s.row0;
}
/* the last position row t attends to: its own, or with noncausal its sequence's last row's */
__device__ inline int row_lim(const step_params *sp, int t) {
    const seq_params &s = sp->seq[sp->row_seq[t]];
    return s.noncausal ? s.pos0 + s.n - 1 : s.pos0 + t - s.row0;
}
/* where row t's key and value of (layer, kv head h) go: element `at` of k and of v */
struct kv_row {
    void *k, *v;
    size_t at;
    int kv16;
};
__device__ inline kv_row row_cache(const step_params *sp, int t, int layer, int nkv, int h, int D) {
    const seq_params &s = sp->seq[sp->row_seq[t]];
    return kv_row{s.kc, s.vc, (((size_t)layer * nkv + h) * s.cap + s.pos0 + t - s.row0 - s.nb) * D,
                  s.kv16};
}
/* element at + i of the row's key (v 0) or value (v 1): x, or x rounded to bf16 */
__device__ inline void kv_put(const kv_row &r, int v, int i, float x) {
    void *c = v ? r.v : r.k;
    if (r.kv16)
        ((__nv_bfloat16 *)c)[r.at + i] = __float2bfloat16_rn(x);
    else
        ((float *)c)[r.at + i] = x;
}

/* A weight matrix y = x · W^T with W [M, K]. On the tensor-core path (BF16 weights) W is stored
 * in fragments: [MS strips of 16 rows][KT tiles of 16 columns][32 lanes] x 16 bytes, each
 * lane's 8 values in mma.m16n8k16's A-fragment order, zero-padded past M and K. Otherwise W
 * stays row-major in its stored type (F32, F16, BF16 with odd shapes). */
struct dmat {
    const void *w;
    int dtype; /* enum dtype of the row-major form */
    int mma;   /* 1: fragment layout, tensor cores */
    int M, K, MS, KT;
    int nb;          /* blocks of a launch (fixed per matrix: results never depend on T) */
    int ks;          /* > 0: K ranges per strip group; 0: nb even ranges across groups */
    int interleaved; /* gate/up strips alternate (fused SwiGLU); M counts both halves */
};

struct dlayer {
    dmat qkv, o, gu, down;       /* qkv [QD + 2KD, H], o [H, QD], gu [2I, H], down [H, I] */
    float *bqkv;                 /* [QD + 2KD] or NULL */
    float *attn_norm, *ffn_norm; /* [H] */
    float *q_norm, *k_norm;      /* [D] or NULL */
};

struct gpu_graph {
    cudaGraphExec_t exec; /* NULL until captured */
};

#define GPU_MODES      5 /* no logits, last row, all rows, greedy last, greedy all */
#define GPU_MAX_LAYERS 256
#define MAX_TAPS_GPU   16 /* MODEL_MAX_TAPS */

/* a sampled row's summary header on the device (gpu_row_summary less its arrays) */
struct samp_head {
    float max, logit_t;
    double total;
    int n, drawn;
};
#define SAMP_CAP       GPU_SAMPLE_CAP
#define SAMP_MAX_VOCAB (2048 * 256) /* sample.cu's sums: 2048 blocks of 256 values a row */
/* one row to summarise: its logits row, its pass row (whose next input is its draft when it
 * has one) and its sequence's sampling settings */
struct samp_job {
    int lrow, prow, has_draft, top_k;
    float temp, inv_t, top_p;
    int draw;  /* 1: draw the row (untruncated) at u; 2: its argmax (greedy) */
    double u;
    /* penalties: entries [pen_at, + n_pen) of the pass's list apply unless their id is among
     * [ext_at, + n_ext), which apply instead (gpu_sample_req's lists) */
    int pen_at, n_pen, ext_at, n_ext;
    int eslot, pad; /* a draw's row of exps in samp_e (summary_launch sets it) */
};

struct gpu_model {
    gpu_model_desc d;
    /* a block drafter's: its context rows come from the target's taps (fc, hidden_norm) */
    dmat fc;
    float *hidden_norm;
    float *ctx_in; /* [rows, fc K] fused taps of a context chunk */
    uint16_t *xt;  /* their xb */
    float *hid;    /* [rows, H] rows after the final norm, brought back with the logits */
    dmat markov;   /* DSpark's Markov W2 [V, r] (markov.w NULL: none) */
    const void *markov_w1; /* W1 [V, r] row-major in its stored type */
    int markov_dtype;
    int H, D, QD, KD, I, V, QKV, G;
    int KT_H, KT_QD, KT_I; /* k-tiles of the matmul inputs */
    const void *embed;     /* row-major [V, H], stored type */
    int embed_dtype;
    dmat lm_head;
    float *final_norm, *inv_freq;
    dlayer *layers;
    /* activations, sized for g->rows rows */
    float *x;                   /* [T, H] the residual stream */
    float *qkv;                 /* [T, QD + 2KD] */
    float *q;                   /* [T, QD] after norm and RoPE */
    float *gu;                  /* [T, 2I] (matmuls without the fused SwiGLU) */
    uint16_t *xa;               /* xb of the attention input (K = H), also the final norm's */
    uint16_t *xo;               /* xb of the attention output (K = QD) */
    uint16_t *xf;               /* xb of the FFN input (K = H) */
    uint16_t *xh;               /* xb of the FFN hidden (K = I) */
    float *logits;              /* [T, V] */
    float *part;                /* matmul partial sums [blocks][2][GPU_GROUP][128] */
    unsigned *cnt;              /* matmul and attention arrival counters, left at 0 */
    float *att_acc;             /* [att_rows][n_heads][att_spans][D] per-span partials */
    float *att_ml;              /* [att_rows][n_heads][att_spans][2] */
    int att_spans;              /* spans the scratch holds (att_reserve: as the caches need) */
    int att_rows;               /* rows per attention launch (GPU_GROUP..rows) */
    int att_wide;               /* 0: GPU_GROUP rows per attention launch always */
    int att_grid;               /* attention blocks per launch (they loop over the work items) */
    int att_nb;  /* 2: the two-buffer attention kernel is there (one block a SM, loading the
                  * next item's tiles meanwhile), 1: only the one-buffer kernel (two a SM) */
    int att_kind; /* this pass's attention kernel (attn_choose): ATT_ONEBUF, ATT_FEW (at most
                   * att_few_items items: two buffers, a block a SM), ATT_ONE (k_attn1) or
                   * ATT_PROMPT (k_attnp, attn_prompt.cu) */
    int att_few_items; /* sms, or DSPARK_GPU_ATT_FEW times it */
    int att_one;       /* k_attn1's blocks a launch (0: never k_attn1; DSPARK_GPU_ATT1) */
    int attp_min;      /* passes with a sequence of this many rows whose rows reach position
                        * attp_pos take k_attnp (0: never; DSPARK_GPU_ATTP, _ATTP_POS) */
    int attp_pos;
    int attp_grid;     /* k_attnp's blocks a launch (0: no k_attnp for this head size) */
    int kv16;          /* KV caches in bf16, not float (DSPARK_GPU_KV=bf16): half the bytes */
    int att_reach;     /* the last position a row of the pass sees (attn_choose) */
    float *taps;                /* [rows][n_taps][H] hidden-state taps, or NULL */
    int tap_of[GPU_MAX_LAYERS]; /* tap slot of each layer, -1 for none */
    int n_taps;
    float *amax_v; /* argmax partials [T][ARGMAX_BLOCKS] */
    int *amax_i;
    int32_t *out_ids; /* [T] greedy tokens */
    step_params *dsp; /* device copy */
    step_params *hsp; /* pinned host copy */
    int32_t *hids;    /* pinned [rows] */
    int32_t *dsel;    /* [rows] the rows of a pass whose logits are wanted (MODE_SEL) */
    samp_head *samp, *hsamp;       /* [rows] sampling summaries (sample.cu), pinned copy */
    samp_job *jobs, *hjobs;        /* [rows] the rows they summarise, pinned copy */
    int32_t *samp_ids, *hsamp_ids; /* [rows][SAMP_CAP] their candidates */
    float *samp_lg, *hsamp_lg;
    float *samp_e;               /* [GPU_SEQS][V] the exps of rows drawn on the device */
    int32_t *pen_ids, *hpen_ids; /* [pen_cap] the pass's penalty lists, pinned copy */
    float *pen_amt, *hpen_amt;
    int pen_cap;
    unsigned n_pass; /* passes run: what gpu_logits_row checks */
    int32_t *hsel;    /* pinned copy */
    cudaStream_t stream;
    gpu_graph graphs[GPU_GROUP + 1][GPU_MODES][ATT_KINDS]; /* [rows][mode][att_kind] */
    int use_graphs, use_pdl, slots, even_split, early_merge, sel_rows;
    int prescale;         /* layers' norms deferred into the matmuls (mm_call.out_ss) */
    int att_early_kv, att_pre_kv; /* attn_args.early_kv, pre_kv */
    int merge_warp; /* passes of at least this many rows merge a warp a (row, head)
                     * (DSPARK_GPU_MERGE_WARP, default 2; 0: never, a block a (row, head)) */
    int merge_dims, merge_ch; /* launches of fewer (row, head) pairs than SMs past ATT_FEW merge on
                               * k_attn_merge_dims (0: never); its spans a chunk (0: MERGE_CH) */
    int pre_kt; /* mm_args.npre at most */
    int terms;  /* bf16 terms per matmul input value: 3 or 1 (the xb layout above) */
    double *ss_a, *ss_f;  /* [rows][n_ssg] group sums of squares behind xa and xf
                           * (NULL unless prescale) */
    int n_ssg;            /* 128-column groups of a hidden row */
    unsigned lab_skip; /* profile.cu only: kinds of a layer's work (1 << LAB_*) a pass leaves out */
    int sms;  /* streaming multiprocessors */
    int gemm; /* passes over GPU_GROUP rows: 1 one launch (gemm.cu) where it fills the GPU, 2
               * always, 0 never */
    int rows;  /* rows per pass: a prompt's chunk (DSPARK_GPU_ROWS, GPU_GROUP..GPU_ROWS_MAX) */
    int gemm4; /* of those, 128-row tiles with bf16 inputs (gemm.cu's k_mmg4): 1 where they
                * fill the GPU, 2 always, 0 never */
    int gemm4_tma; /* k_mmg4's inputs by tensor copies (DSPARK_GPU_GEMM4_TMA, default 1) */
    int gemm4_split; /* a last, short wave of those tiles split between block pairs
                      * (DSPARK_GPU_SPLIT: 1 where it is, 2 every tile that fits, 0 never) */
    int launch_err; /* first launch error since the last check */
    void **allocs;
    int n_allocs, cap_allocs;
};

struct gpu_kv {
    void *k, *v;  /* own rows: [n_layers][n_kv][cap - nb][D], row r holding position nb + r
                   * (float, or bf16 where the model's kv16) */
    int cap;        /* positions, the shared ones included */
    gpu_model *g;   /* its model (attention's scratch grows with the caches) */
    /* positions [0, nb) are the first rows of base's own rows (base has no base; it stays
     * alive while shared, kv_new_shared counts the references, and is read through this
     * pointer at every use, so it may grow meanwhile) */
    const gpu_kv *base;
    int nb;
};

/* bytes of a K/V cache element of model g: bf16 or float */
static inline size_t kv_elem_bytes(const gpu_model *g) {
    return g->kv16 ? 2 : sizeof(float);
}

/* the pass parameters of a sequence whose rows are [row0, row0 + n) at positions pos0.. */
static inline seq_params seq_of(int row0, int n, int pos0, const gpu_kv *kv, int noncausal) {
    seq_params s = {row0,   n,      pos0, kv->cap - kv->nb, kv->k, kv->v, kv->nb,
                    kv->nb ? kv->base->cap : 0,
                    kv->nb ? kv->base->k : NULL,
                    kv->nb ? kv->base->v : NULL,
                    noncausal,
                    kv->g->kv16};
    return s;
}

#define ARGMAX_BLOCKS 32
#define CNT_MM        0     /* matmul counters: [0, CNT_GRID) */
#define CNT_GRID      65000 /* matmul grid counter (fused RMSNorm) */
#define CNT_ATT       65536 /* the end of the counters */

/* ---- launching ---- */
extern int gpu_pdl_on; /* programmatic dependent launch for every kernel */

/* kern on grid in clusters of `cluster` blocks along x (1: no clusters) */
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_clusters(void (*kern)(KArgs...), dim3 grid, dim3 block,
                                          size_t smem, cudaStream_t st, unsigned cluster,
                                          Args... args) {
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = gpu_pdl_on;
    at[1].id = cudaLaunchAttributeClusterDimension;
    at[1].val.clusterDim.x = cluster, at[1].val.clusterDim.y = 1, at[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = cluster > 1 ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kern, static_cast<KArgs>(args)...);
}
template <typename... KArgs, typename... Args>
static inline cudaError_t launch(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t st, Args... args) {
    return launch_clusters(kern, grid, block, smem, st, 1u, args...);
}

static inline unsigned cdiv(size_t n, size_t per) {
    return (unsigned)((n + per - 1) / per);
}

/* ---- host side ---- */
int dev_alloc(gpu_model *g, void **p, size_t bytes); /* freed with the model (forward.cu) */
void drop_graphs(gpu_model *g); /* captured graphs to capture again (forward.cu) */
/* a layer's kinds of work, for the marginal cost of each in a whole pass (profile.cu) */
enum { LAB_QKV, LAB_ATTN, LAB_O, LAB_GU, LAB_DOWN, LAB_NORM, LAB_KINDS };
/* a pass of T rows, greedy ids of all (forward.cu) */
cudaError_t pass_enqueue(gpu_model *g, int T);
enum { EPI_STORE, EPI_RESID, EPI_SWIGLU, EPI_QKV };

/* What the fused q|k|v epilogue needs: per-head RMSNorm, RoPE, q out, k/v into the cache. */
struct qkv_epi {
    const step_params *sp;
    float *q; /* [T, nh, D] */
    const float *q_norm, *k_norm, *inv_freq;
    int nh, nkv, D, layer;
    float eps;
};

/* Rows [row0, row0 + n) of a chunk of T rows (row0 % GPU_GROUP == 0), in one launch or a
 * launch per GPU_GROUP rows (mm_launch chooses):
 * STORE y[row, m] = x·W^T (+ bias); RESID y[row, m] += x·W^T (and with norm_w, fragments
 * only, the RMSNorm of those rows into norm_out by the grid's last block); SWIGLU (interleaved
 * gate/up fragments only) writes silu(gate) * up into the xb out (K = M / 2); QKV (fragments,
 * head_dim dividing 128) finishes q/k/v as k_rope does. */
struct mm_call {
    const dmat *w;
    const uint16_t *xb; /* the chunk's B operand (K = w->K) */
    int T, row0, n;
    int epi;
    float *y;
    int ldy;
    const float *bias;
    uint16_t *xb_out;
    const qkv_epi *qe;
    const float *norm_w; /* RESID: then RMSNorm of the new rows into norm_out, or NULL */
    uint16_t *norm_out;
    double *out_ss;      /* with norm_w: deferred, see below */
    const double *in_ss; /* the sums of squares of rows whose RMSNorm this matmul finishes */
};
/* Deferred RMSNorm (g->prescale): a residual matmul with norm_w and out_ss writes w * x of its
 * new rows into norm_out and each 128-column group's sum of squares (ss_group) into
 * out_ss[row][group]; the next matmul, given them as in_ss, multiplies its row sums by
 * 1 / rms (ss_inv_warp) before its epilogue. No block waits for the whole row. */
cudaError_t mm_launch(gpu_model *g, const mm_call *c);
int mm_prepare(gpu_model *g, dmat *m, const void *src, int dtype, int M, int K, int interleave);
int mm_init(void); /* shared-memory limits of the matmul kernels */

cudaError_t rope_launch(gpu_model *g, const dlayer *l, int layer, int T);
cudaError_t rope_table_launch(gpu_model *g, int T); /* step_params.rope, where read */
cudaError_t attn_launch(gpu_model *g, int layer, int T);
void attn_choose(gpu_model *g); /* att_kind for the pass in g->hsp */
int attn_init(gpu_model *g, int spans);

cudaError_t embed_launch(gpu_model *g, int T);
cudaError_t tap_launch(gpu_model *g, int slot, int T); /* rows of x into tap slot */
cudaError_t norm_launch(gpu_model *g, uint16_t *xb, const float *w, int row0, int n);
/* xb = w * x of n rows and their group sums of squares into ss (deferred RMSNorm) */
cudaError_t prescale_launch(gpu_model *g, uint16_t *xb, const float *w, double *ss, int n);
cudaError_t norm_sel_launch(gpu_model *g, uint16_t *xb, const float *w, const int32_t *sel, int n);
cudaError_t swiglu_launch(gpu_model *g, int T);
cudaError_t argmax_launch(gpu_model *g, int n);
/* ---- sampling summaries (sample.cu) ---- */
/* whether a request keeps every token (its draws need the whole row) */
int summary_untruncated(const gpu_model *g, const gpu_sample_req *q);
/* whether the device decides a request's last row itself: greedy rows (their argmax after
 * the penalties) and an untruncated request's last row (drawn) */
int summary_draws(const gpu_model *g, const gpu_sample_req *q);
/* a request's penalty entries in a pass of rows rows (its lists) */
int summary_pen_entries(const gpu_sample_req *q, int rows);
/* 1 when the summaries' buffers are there for pen_need penalty entries, and with draws for
 * drawn rows (made on first use; a failure is cleared, and the pass then brings its rows
 * back instead) */
int summary_ready(gpu_model *g, int pen_need, int draws);
int summary_jobs(gpu_model *g, const gpu_sample_req *q, int dev_row, int pass_row, int rows,
                 int drafts, int first, int *n_pen);
/* the pass's penalty lists (n_pen entries) and its n jobs (g->hjobs) to the device, the
 * summaries into g->samp[0, n), and their copies back to the pinned g->hsamp.. */
cudaError_t summary_launch(gpu_model *g, int n, int n_pen);
void summary_read(gpu_model *g, gpu_sample_req *q, int first, int rows, int eager, int dev_row);
void summary_free(gpu_model *g);
cudaError_t split_launch(gpu_model *g, uint16_t *xb, const float *x, int K, int KT, int T);
/* xb rows t < n (K = r) = rows ids[t] (device) of the row-major [*, r] matrix w of type dt */
cudaError_t gather_launch(gpu_model *g, uint16_t *xb, const void *w, int dt, int r,
                          const int32_t *ids, int n);
cudaError_t unsplit_launch(gpu_model *g, float *x, const uint16_t *xb, int K, int KT, int T);

#endif
