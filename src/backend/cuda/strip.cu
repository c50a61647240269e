/* backend/cuda/strip.cu: the residual matmuls (o, down) of passes of up to 5 rows without
 * split sums, for matrices whose strip groups gemv.cu splits into ks <= 8 K pieces (the
 * Qwen3-8B shape: 8). A block is one strip of 16 outputs; its 8 warps take the group's pieces,
 * one each, each piece's k-tiles in order from zero with the same mma, and the block
 * adds the pieces in piece order in shared memory: the bits of gemv.cu's partial buffer and
 * counter, without them. The 8 strips of a group are one thread-block cluster, so the
 * deferred RMSNorm's sum of squares of the group's 128 outputs is added by rank 0 from its
 * ranks' shared memory (distributed shared memory), in gemv.cu's order.
 * DSPARK_GPU_STRIP=1 takes this path where ks = 8, =2 wherever ks <= 8 (tests: models/pycoder's
 * o has 3 pieces, its down 8). Off by default until measured on a GPU (docs/perf.md). */
#include "backend/cuda/mm.cuh"
#include "backend/cuda/ring.cuh"

#define ST_WARPS 8   /* warps a block, a piece each */
#define ST_NTMAX 2   /* n-tiles: passes of up to 5 rows */
#define ST_ROWS  5   /* rows of ST_NTMAX n-tiles */
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

template <int NT>
__global__ void __launch_bounds__(ST_WARPS * 32, ST_MINB) k_strip(mm_args a) {
    constexpr int S = 8 * NT + 1, U = ST_U(NT); /* S: floats per row of a piece's tile */
    __shared__ float fin[8][16 * S];  /* each piece's sums */
    __shared__ float vals[ST_ROWS * 16]; /* the strip's new residual values, row-major */
    __shared__ double red[ST_ROWS * 4];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, KT = a.KT;
    const int s = blockIdx.x, g = s >> 3, j = s & 7;
    const bool active = s < a.MS;
    /* piece warp of ks: k-tiles [k0, k1) (none past ks) */
    const int ks = a.ks;
    const int k0 = KT * min(warp, ks) / ks, k1 = KT * min(warp + 1, ks) / ks;
    const uint4 *wp = a.w + ((size_t)g * KT * 8 + j) * 32 + lane; /* + k * 256 */
    const uint2 *xp = a.xb + lane;                                 /* + (k NT + n) * 32 */
    auto fetch_w = [&](uint4 (&r)[U], int kb) {
#pragma unroll
        for (int u = 0; u < U; u++)
            r[u] = kb + u < k1 ? ld_stream(wp + (size_t)(kb + u) * 256) : make_uint4(0, 0, 0, 0);
    };
    auto fetch_x = [&](uint2 (&b)[U][NT], int kb) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int n = 0; n < NT; n++)
                b[u][n] = kb + u < k1 ? __ldcg(xp + ((size_t)(kb + u) * NT + n) * 32)
                                      : make_uint2(0, 0);
    };
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] = 0.f;
    auto compute = [&](const uint4 (&r)[U], const uint2 (&b)[U][NT], int kb) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u < k1) {
#pragma unroll
                for (int n = 0; n < NT; n++) mma_bf16(acc[n], r[u], b[u][n]);
            }
        }
    };

    /* the residual epilogue's inputs of this thread's item (row t, output r), and weights
     * before the wait: they never change */
    uint4 wa[U], wb[U];
    uint2 xa[U][NT], xb[U][NT];
    fetch_w(wa, k0);
    fetch_w(wb, k0 + U);
    pdl_wait();
    pdl_launch();
    const int it = threadIdx.x, t = it >> 4, r = it & 15, m = g * 128 + j * 16 + r;
    const bool item = t < a.T && m < a.M;
    const bool defer = a.norm_w && a.out_ss;
    const float res = item ? __ldcg(a.y + (size_t)(a.row0 + t) * a.ldy + m) : 0.f;
    const float nw = item && defer ? a.norm_w[m] : 0.f;
    fetch_x(xa, k0);
    fetch_x(xb, k0 + U);
    if (active) {
        for (int kb = k0; kb < k1; kb += 2 * U) {
            compute(wa, xa, kb);
            fetch_w(wa, kb + 2 * U);
            fetch_x(xa, kb + 2 * U);
            if (kb + U >= k1) break;
            compute(wb, xb, kb + U);
            fetch_w(wb, kb + 3 * U);
            fetch_x(xb, kb + 3 * U);
        }
    }
    /* each piece's tile; a row's value adds its three columns in order, then the pieces in
     * order (gemv.cu's mm_finish and mm_add_pieces) */
    {
        const int gq = lane >> 2, c = 2 * (lane & 3);
        float *f = fin[warp];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            f[gq * S + n * 8 + c] = acc[n][0], f[gq * S + n * 8 + c + 1] = acc[n][1];
            f[(gq + 8) * S + n * 8 + c] = acc[n][2], f[(gq + 8) * S + n * 8 + c + 1] = acc[n][3];
        }
    }
    __syncthreads();
    if (it < ST_ROWS * 16) {
        float nv = 0.f; /* outside the rows or the matrix: nothing to the sum of squares */
        if (item) {
            float v = 0.f;
#pragma unroll
            for (int p = 0; p < 8; p++) {
                if (p >= ks) break;
                const float *f = fin[p] + r * S + 3 * t;
                const float pv = (f[0] + f[1]) + f[2];
                v = p ? v + pv : pv;
            }
            nv = res + v;
            a.y[(size_t)(a.row0 + t) * a.ldy + m] = nv;
            if (defer) xb_put(a.norm_out, a.T_chunk, a.KT_norm, a.row0 + t, m, nw * nv);
        }
        vals[it] = nv;
    }
    if (!defer) return; /* no cluster barrier is pending: every block of the cluster returns */
    __syncwarp();       /* the barriers below are .aligned: the warp together again */
    st_arrive();        /* this strip's values are ready */
    st_wait();
    if (st_rank() == 0) { /* the group's sums of squares, as mm_epilogue adds them */
        __shared__ float grp[ST_ROWS * 128];
        for (int i = threadIdx.x; i < a.T * 128; i += ST_WARPS * 32) {
            const int tt = i >> 7, o = i & 127;
            grp[i] = st_ld(st_map(vals + tt * 16 + (o & 15), (unsigned)(o >> 4)));
        }
        __syncthreads();
        mm_group_ss<ST_WARPS>(a, g, grp, red);
    }
    st_arrive(); /* rank 0 has read every strip's values: they may leave */
    st_wait();
}

typedef void (*st_kernel)(mm_args);
static const st_kernel st_kernels[ST_NTMAX + 1] = {NULL, k_strip<1>, k_strip<2>};
static int st_fit[ST_NTMAX + 1]; /* clusters of 8 that fit at once; 0 unknown, -1 none */

/* k_strip's launch for w: a block per strip, a cluster per group (at[0]), and with pdl the
 * programmatic dependent launch (at[1]) */
static void st_config(const dmat *w, cudaLaunchAttribute at[2], int pdl, cudaLaunchConfig_t *cfg) {
    *cfg = cudaLaunchConfig_t{};
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 8, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = gpu_pdl_on;
    cfg->gridDim = dim3(cdiv(w->MS, 8) * 8), cfg->blockDim = dim3(ST_WARPS * 32);
    cfg->attrs = at, cfg->numAttrs = pdl ? 2 : 1;
}

/* how many clusters of 8 of each k_strip fit on the GPU at once: asked once, when the first
 * matrix that could take them is prepared (not while a graph is being captured) */
void strip_probe(const gpu_model *g, const dmat *w) {
    if (!g->strip || w->ks < 1 || w->ks > 8) return;
    for (int nt = 1; nt <= ST_NTMAX; nt++) {
        if (st_fit[nt]) continue;
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at[2];
        st_config(w, at, 0, &cfg);
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, st_kernels[nt], &cfg) != cudaSuccess) {
            cudaGetLastError();
            n = 0;
        }
        st_fit[nt] = n > 0 ? n : -1;
        log_info("strip.cu: %d clusters of 8 blocks fit at once for %d n-tile(s); a matrix of "
                 "%d strips needs %d", n, nt, w->MS, cdiv(w->MS, 8));
    }
}

/* whether a launch of w for a pass of NT n-tiles can take k_strip: ks = 8 pieces (g->strip
 * 2: 1 to 8), a residual epilogue whose norm, if any, is deferred and whose input's is not
 * (k_strip does not scale by 1 / rms), at most ST_NTMAX n-tiles,
 * and every cluster of the launch (a group each) resident at once (strip_probe) */
int strip_ok(const gpu_model *g, const dmat *w, const mm_args *a, int NT) {
    if (!g->strip || NT > ST_NTMAX || a->epi != EPI_RESID || a->in_ss) return 0;
    if (g->strip == 1 ? w->ks != 8 : w->ks < 1 || w->ks > 8) return 0;
    if (a->norm_w && !a->out_ss) return 0;
    return st_fit[NT] >= (int)cdiv(w->MS, 8);
}

cudaError_t strip_launch(gpu_model *g, const dmat *w, const mm_args *a, int NT) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[2];
    st_config(w, at, 1, &cfg);
    cfg.stream = g->stream;
    return cudaLaunchKernelEx(&cfg, st_kernels[NT], *a);
}
