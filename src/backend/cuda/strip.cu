/* backend/cuda/strip.cu: the residual matmuls (o, down) of passes of up to 5 rows without
 * split sums in global memory, for matrices whose strip groups gemv.cu splits into ks <= 8 K
 * pieces (the Qwen3-8B shape: 8). A block is one (strip group, K piece), as in gemv.cu: its 8
 * warps take the group's 8 strips over the piece's k-tiles, in order from zero with the same
 * mma, the piece's inputs in shared memory. The group's 8 pieces are one thread-block
 * cluster: rank r adds strip r's 16 outputs over the pieces, in piece order, reading the
 * other ranks' sums from their shared memory (distributed shared memory), runs the residual
 * epilogue, and gives its values to rank 0, which adds the deferred RMSNorm's sum of squares
 * of the group's 128 outputs in gemv.cu's order. The bits of gemv.cu's partial buffer and
 * counter, without them. DSPARK_GPU_STRIP=1 takes this path where ks = 8, =2 wherever
 * ks <= 8 (tests: models/pycoder's o has 3 pieces, its down 8). */
#include "backend/cuda/mm.cuh"
#include "backend/cuda/ring.cuh"

#include <stdlib.h>

#define ST_WARPS 8   /* warps a block, a strip each */
#define ST_NTMAX 2   /* n-tiles: passes of up to 5 rows */
#define ST_ROWS  5   /* rows of ST_NTMAX n-tiles */
#define ST_KTMAX 112 /* k-tiles of a piece whose inputs fit the shared memory (down: 96) */
#define ST_XC    16  /* k-tiles of a chunk of inputs */
/* k-tiles a register batch, two batches in flight (4: 80 registers, so that three blocks fit
 * on an SM and every group's cluster of 8 is resident at once: two blocks an SM leave the
 * H200 30 clusters, the Qwen3-8B shape's o and down need 32) */
#ifndef ST_U1
#define ST_U1 4
#endif
#ifndef ST_MINB
#define ST_MINB 3
#endif
#define ST_U(NT) ((NT) == 1 ? ST_U1 : 4)

__device__ __forceinline__ unsigned st_rank(void) {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void st_arrive(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void st_wait(void) {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* rank q's copy of this block's shared float p, as a shared::cluster address */
__device__ __forceinline__ unsigned st_map(const float *p, unsigned q) {
    unsigned r;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(q));
    return r;
}
__device__ __forceinline__ float st_ld(unsigned addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void st_st(unsigned addr, float v) {
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

template <int NT>
__global__ void __launch_bounds__(ST_WARPS * 32, ST_MINB) k_strip(mm_args a) {
    constexpr int S = 8 * NT + 1, U = ST_U(NT); /* S: floats per row of a strip's tile */
    extern __shared__ __align__(16) unsigned char st_smem[];
    uint2 *xs = (uint2 *)st_smem;          /* the piece's inputs [k1 - k0][NT][32] */
    __shared__ float fin[ST_WARPS][16 * S]; /* each strip's sums over this piece */
    __shared__ float grp[ST_ROWS * 128];    /* rank 0: the group's new values, row-major */
    __shared__ double red[ST_ROWS * 4];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, KT = a.KT, ks = a.ks;
    const int g = blockIdx.x >> 3, p = blockIdx.x & 7; /* p: the piece, the cluster rank */
    const int k0 = KT * min(p, ks) / ks, k1 = KT * min(p + 1, ks) / ks;
    const uint4 *wp = a.w + ((size_t)g * KT * 8 + warp) * 32 + lane; /* + k * 256 */
    const int kw = g * 8 + warp < a.MS ? k1 : k0; /* strips past the matrix: no weights */
    auto fetch_w = [&](uint4 (&r)[U], int kb) {
#pragma unroll
        for (int u = 0; u < U; u++)
            r[u] = kb + u < kw ? ld_stream(wp + (size_t)(kb + u) * 256) : make_uint4(0, 0, 0, 0);
    };
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] = 0.f;
    auto compute = [&](const uint4 (&r)[U], int kb) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u < k1) {
                const uint2 *xb = xs + (size_t)(kb + u - k0) * NT * 32 + lane;
#pragma unroll
                for (int n = 0; n < NT; n++) mma_bf16(acc[n], r[u], xb[n * 32]);
            }
        }
    };
    /* weights never change: two batches requested before the wait */
    uint4 wa[U], wb[U];
    fetch_w(wa, k0);
    fetch_w(wb, k0 + U);
    /* the piece's inputs come in chunks of ST_XC k-tiles, each a bulk copy on its own
     * mbarrier, so that the products start when the first chunk has landed */
    __shared__ __align__(8) unsigned long long xbar[ST_KTMAX / ST_XC];
    const int nch = (k1 - k0 + ST_XC - 1) / ST_XC;
    if (threadIdx.x == 0) {
        for (int c = 0; c < nch; c++) mbar_init(&xbar[c], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    pdl_wait();
    pdl_launch();
    if (threadIdx.x == 0) {
        for (int c = 0; c < nch; c++) {
            const int kc = k0 + c * ST_XC, n = min(ST_XC, k1 - kc);
            const unsigned bytes = (unsigned)(n * NT * 32 * sizeof(uint2));
            mbar_expect(&xbar[c], bytes);
            bulk_copy(xs + (size_t)c * ST_XC * NT * 32, a.xb + (size_t)kc * NT * 32, bytes,
                      &xbar[c]);
        }
    }
    /* this thread's item of the epilogue (rank p finishes strip p): row t, output m */
    const int it = threadIdx.x, t = it >> 4, r = it & 15, m = g * 128 + p * 16 + r;
    const bool item = t < a.T && m < a.M;
    const bool defer = a.norm_w && a.out_ss;
    const float res = item ? __ldcg(a.y + (size_t)(a.row0 + t) * a.ldy + m) : 0.f;
    const float nw = item && defer ? a.norm_w[m] : 0.f;
    int landed = 0; /* chunks seen complete */
    for (int kb = k0; kb < k1; kb += 2 * U) {
        /* the chunks of k-tiles [kb, kb + 2U) (U divides ST_XC) */
        for (int need = min((kb + 2 * U - 1 - k0) / ST_XC + 1, nch); landed < need; landed++)
            mbar_wait(&xbar[landed], 0);
        compute(wa, kb);
        fetch_w(wa, kb + 2 * U);
        if (kb + U >= k1) break;
        compute(wb, kb + U);
        fetch_w(wb, kb + 3 * U);
    }
    { /* strip warp's tile of this piece */
        const int gq = lane >> 2, c = 2 * (lane & 3);
        float *f = fin[warp];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            f[gq * S + n * 8 + c] = acc[n][0], f[gq * S + n * 8 + c + 1] = acc[n][1];
            f[(gq + 8) * S + n * 8 + c] = acc[n][2], f[(gq + 8) * S + n * 8 + c + 1] = acc[n][3];
        }
    }
    __syncwarp(); /* the barriers below are .aligned: the warp together again */
    st_arrive();  /* every piece's sums are ready */
    st_wait();
    if (it < a.T * 16) {
        /* a row's value adds its three columns in order, then the pieces in order (gemv.cu's
         * mm_finish and mm_add_pieces): strip p's tile of piece q is rank q's fin[p] */
        float nv = 0.f; /* outside the matrix: nothing to the sum of squares */
        if (item) {
            float f[8][3];
            const unsigned at = smem_u32(&fin[p][r * S + 3 * t]);
#pragma unroll
            for (int q = 0; q < 8; q++) {
                if (q >= ks) break;
                unsigned ra;
                asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(at), "r"(q));
#pragma unroll
                for (int c = 0; c < 3; c++) f[q][c] = st_ld(ra + 4 * c);
            }
            float v = 0.f;
#pragma unroll
            for (int q = 0; q < 8; q++) {
                if (q >= ks) break;
                const float pv = (f[q][0] + f[q][1]) + f[q][2];
                v = q ? v + pv : pv;
            }
            nv = res + v;
            a.y[(size_t)(a.row0 + t) * a.ldy + m] = nv;
            if (defer) xb_put(a.norm_out, a.T_chunk, a.KT_norm, a.row0 + t, m, nw * nv);
        }
        if (defer) st_st(st_map(&grp[t * 128 + p * 16 + r], 0), nv);
    }
    __syncwarp();
    st_arrive(); /* every rank has read the others' sums and given rank 0 its values */
    st_wait();
    if (defer && p == 0) mm_group_ss<ST_WARPS>(a, g, grp, red);
}

typedef void (*st_kernel)(mm_args);
static const st_kernel st_kernels[ST_NTMAX + 1] = {NULL, k_strip<1>, k_strip<2>};
static int st_fit[ST_NTMAX + 1]; /* clusters of 8 that fit at once; 0 unknown, -1 none */

/* the shared memory for a piece's inputs: ST_KTMAX k-tiles of NT n-tiles */
static int st_dyn(int NT) {
    return ST_KTMAX * NT * 32 * (int)sizeof(uint2);
}

/* k_strip's launch for w: a block per (group, piece), a cluster per group (at[0]) with the
 * scheduling policy of DSPARK_GPU_STRIP_POLICY (at[1]: 0 default, 1 spread, 2 load-balancing),
 * and with pdl the programmatic dependent launch (at[2]) */
static int st_policy = -1;
static void st_config(const dmat *w, int NT, cudaLaunchAttribute at[3], int pdl,
                      cudaLaunchConfig_t *cfg) {
    if (st_policy < 0) {
        const char *e = getenv("DSPARK_GPU_STRIP_POLICY");
        st_policy = e ? atoi(e) : 0;
    }
    *cfg = cudaLaunchConfig_t{};
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 8, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    at[1].val.clusterSchedulingPolicyPreference = (cudaClusterSchedulingPolicy)st_policy;
    at[2].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[2].val.programmaticStreamSerializationAllowed = gpu_pdl_on;
    cfg->gridDim = dim3(cdiv(w->MS, 8) * 8), cfg->blockDim = dim3(ST_WARPS * 32);
    cfg->dynamicSmemBytes = (size_t)st_dyn(NT);
    cfg->attrs = at, cfg->numAttrs = pdl ? 3 : 2;
}

/* how many clusters of 8 of each k_strip fit on the GPU at once: asked once, when the first
 * matrix that could take them is prepared (not while a graph is being captured) */
void strip_probe(const gpu_model *g, const dmat *w) {
    if (!g->strip || w->ks < 1 || w->ks > 8) return;
    for (int nt = 1; nt <= ST_NTMAX; nt++) {
        if (st_fit[nt]) continue;
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at[3];
        st_config(w, nt, at, 0, &cfg);
        int n = 0;
        if (cudaFuncSetAttribute(st_kernels[nt], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 st_dyn(nt)) != cudaSuccess ||
            cudaOccupancyMaxActiveClusters(&n, st_kernels[nt], &cfg) != cudaSuccess) {
            cudaGetLastError();
            n = 0;
        }
        st_fit[nt] = n > 0 ? n : -1;
        log_info("strip.cu: %d clusters of 8 blocks fit at once for %d n-tile(s); a matrix of "
                 "%d strips needs %d", n, nt, w->MS, cdiv(w->MS, 8));
    }
}

/* whether a launch of w for a pass of NT n-tiles can take k_strip: ks = 8 pieces (g->strip
 * 2: 1 to 8) of at most ST_KTMAX k-tiles, a residual epilogue whose norm, if any, is deferred
 * and whose input's is not (k_strip does not scale by 1 / rms), at most ST_NTMAX n-tiles,
 * and every cluster of the launch (a group each) resident at once (strip_probe) */
int strip_ok(const gpu_model *g, const dmat *w, const mm_args *a, int NT) {
    if (!g->strip || NT > ST_NTMAX || a->epi != EPI_RESID || a->in_ss) return 0;
    if (g->strip == 1 ? w->ks != 8 : w->ks < 1 || w->ks > 8) return 0;
    if (cdiv(w->KT, w->ks) > ST_KTMAX) return 0;
    if (a->norm_w && !a->out_ss) return 0;
    return st_fit[NT] >= (int)cdiv(w->MS, 8);
}

cudaError_t strip_launch(gpu_model *g, const dmat *w, const mm_args *a, int NT) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[3];
    st_config(w, NT, at, 1, &cfg);
    cfg.stream = g->stream;
    return cudaLaunchKernelEx(&cfg, st_kernels[NT], *a);
}
