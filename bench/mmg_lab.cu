/* bench/mmg_lab.cu: how fast the prompt tile kernel's main loop (gemm.cu, k_mmg4) can run,
 * without its exactness or epilogue: a block of two warpgroups a SM, each k-tile one
 * wgmma.m64n128k16 a warpgroup with A (weights) from registers and B (inputs) from shared
 * memory, stages of MG_KS = 4 k-tiles in a ring of 6, each stage's wgmmas waited for in full
 * before its slot is released (k_mmg4's loop). Sums are not checked (timings only).
 *
 * It runs with the ring refilled from L2 by bulk copies as k_mmg4 does (copies) or never
 * refilled (smem: the products and shared-memory reads alone). Then grids of 128 x 128 tiles
 * over K = 4,096 (64 stages): a block a tile, and a persistent block a SM whose ring runs on
 * from one tile into the next, each tile ended by a stand-in epilogue of some length.
 * Last, k_mc: the weights of a stage multicast to the blocks of a cluster that share them
 * (each block copying 1 / CL of them to all), against plain copies, and what k_loop's tile end
 * costs beside (its stores, a run-time divisor, an outer loop over tiles).
 *
 *   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -o /tmp/mmg_lab bench/mmg_lab.cu
 *   /tmp/mmg_lab */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#include "backend/cuda/wgmma.cuh"

#define KS    4                /* k-tiles a stage */
#define ST    6                /* stages in the ring */
#define SA    (KS * 256)       /* uint4 of weights a stage (8 warps x 32 lanes x KS) */
#define STAGE (2 * SA)         /* and as many of inputs */
#define SMEM  (ST * STAGE * 16)

#if MG_WGMMA
/* a stage's products, waited for in full: the warp's weights of its KS k-tiles into
 * registers, a wgmma.m64n128k16 a k-tile with the inputs from shared memory */
__device__ __forceinline__ void stage_products(const uint4 *as, float (&d)[64], int warp,
                                               int lane) {
    const uint4 *bs = as + SA;
    uint4 af[KS];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) af[kk] = as[kk * 256 + warp * 32 + lane];
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KS; kk++) wgmma<128>(d, af[kk], wg_desc(bs + kk * 256));
    wg_commit();
    wg_wait0();
    wg_keep(d);
#pragma unroll
    for (int kk = 0; kk < KS; kk++) wg_keep(af[kk]);
    __syncwarp();
}
#endif

/* COPY: refill the ring from src (a region L2 holds). Tiles of per_tile stages (0: one tile
 * of nst), each ended by a stand-in epilogue: epi rounds of a 64-long fmaf chain over the
 * sums, which are then stored (64 KB a tile) and cleared. With ntiles > 0 the grid is
 * persistent: block b takes tiles b, b + grid, ... (nst is then computed here), and its ring
 * runs on across tiles, so the next tile's first stages are requested while this one's
 * epilogue runs. */
template <bool COPY>
__global__ void __launch_bounds__(256, 1)
    k_loop(const uint4 *src, int nchunk, int nst, float *out, int per_tile, int epi, int ntiles) {
#if MG_WGMMA
    if (ntiles > 0)
        nst = per_tile * ((ntiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x);
    if (per_tile <= 0) per_tile = nst;
    extern __shared__ __align__(128) uint4 sm[];
    __shared__ __align__(8) unsigned long long full[ST], empty[ST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    if (tid == 0) {
        ring_init(full, empty, ST, 8);
    }
    for (int i = tid; i < ST * STAGE; i += 256) sm[i] = make_uint4(0x3f803f80u, 0, 0, 0x3f80u);
    __syncthreads();
    auto copy = [&](int s) {
        const uint4 *p = src + (size_t)((blockIdx.x * 131 + s) % nchunk) * STAGE;
        mbar_expect(&full[s % ST], STAGE * 16u);
        bulk_copy(sm + (s % ST) * STAGE, p, SA * 16u, &full[s % ST]);
        bulk_copy(sm + (s % ST) * STAGE + SA, p + SA, SA * 16u, &full[s % ST]);
    };
    if (COPY && tid == 0)
        for (int s = 0; s < ST && s < nst; s++) copy(s);
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.f;
    for (int s = 0; s < nst; s++) {
        if (COPY && tid == 0 && s > 0 && s - 1 + ST < nst) { /* stage s - 1's slot */
            const int r = s - 1 + ST;
            mbar_wait(&empty[r % ST], ((s - 1) / ST) & 1);
            copy(r);
        }
        if (COPY) mbar_wait(&full[s % ST], (s / ST) & 1);
        stage_products(sm + (s % ST) * STAGE, d, warp, lane);
        if (lane == 0) mbar_arrive(&empty[s % ST]);
        if ((s + 1) % per_tile == 0) { /* a tile's end */
            float acc = 0.f;
            for (int k = 0; k < epi; k++)
#pragma unroll
                for (int i = 0; i < 64; i++) acc = fmaf(acc, 0.999f, d[i]);
            const int tile = ntiles > 0 ? (int)blockIdx.x + (s / per_tile) * (int)gridDim.x
                                        : (int)blockIdx.x;
            float4 *o = (float4 *)out + ((size_t)tile * 256 + tid) * 16;
#pragma unroll
            for (int i = 0; i < 16; i++)
                o[i] = make_float4(d[4 * i] + acc, d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]);
#pragma unroll
            for (int i = 0; i < 64; i++) d[i] = 0.f;
        }
    }
#endif
}

/* ---- weights multicast in a cluster of CL blocks: the blocks of a cluster take the same
 * weight stages (one strip of outputs, CL tiles of rows), each copies 1 / CL of a stage's
 * weights into every block of the cluster at once, and its own inputs; a slot is refilled
 * once every warp of every block has released it. nst stages a block, ring refilled from L2
 * as in k_loop<true>, no epilogue. */
__device__ __forceinline__ void mc_copy(void *dst, const void *src, unsigned bytes,
                                        unsigned long long *b, unsigned short mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b)), "h"(mask)
                 : "memory");
}
/* an arrival on block rank's copy of b: release at cluster scope (REL) or the default, CTA */
template <bool REL>
__device__ __forceinline__ void mc_arrive(unsigned long long *b, unsigned rank) {
    if (REL)
        asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                     "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}" ::"r"(
                         smem_u32(b)),
                     "r"(rank)
                     : "memory");
    else
        asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                     "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}" ::"r"(smem_u32(b)),
                     "r"(rank)
                     : "memory");
}
__device__ __forceinline__ void cluster_sync_all(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
}

/* ARR: how a warp releases a slot: 0 a local arrival (CL = 1), 1 remote arrivals at the
 * default (CTA) scope, 2 remote arrivals released at cluster scope. V, what k_loop<true> does
 * beside: 1 its inputs from the weights' chunk (+ SA), 2 a tile's sums stored and cleared
 * every 64 stages, 4 that tile end's test by a run-time divisor, 8 tiles as an outer loop */
template <int CL, int ARR, int V = 0>
__global__ void __launch_bounds__(256, 1) k_mc(const uint4 *src, int nchunk, int nst, float *out,
                                               int per_tile) {
#if MG_WGMMA
    extern __shared__ __align__(128) uint4 sm[];
    __shared__ __align__(8) unsigned long long full[ST], empty[ST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    if (tid == 0) {
        ring_init(full, empty, ST, 8 * CL);
    }
    for (int i = tid; i < ST * STAGE; i += 256) sm[i] = make_uint4(0x3f803f80u, 0, 0, 0x3f80u);
    cluster_sync_all();
    const int cid = blockIdx.x / CL;
    auto copy = [&](int s) {
        const uint4 *pa = src + (size_t)((cid * 131 + s) % nchunk) * STAGE;
        const uint4 *pb =
            (V & 1 ? pa : src + (size_t)((blockIdx.x * 71 + s) % nchunk) * STAGE) + SA;
        uint4 *d = sm + (s % ST) * STAGE;
        mbar_expect(&full[s % ST], STAGE * 16u);
        if (CL > 1)
            mc_copy(d + rank * (SA / CL), pa + rank * (SA / CL), SA / CL * 16u, &full[s % ST],
                    (unsigned short)((1u << CL) - 1));
        else
            bulk_copy(d, pa, SA * 16u, &full[s % ST]);
        bulk_copy(d + SA, pb, SA * 16u, &full[s % ST]);
    };
    if (tid == 0)
        for (int s = 0; s < ST && s < nst; s++) copy(s);
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.f;
    auto stage = [&](int s) {
        if (tid == 0 && s > 0 && s - 1 + ST < nst) {
            const int r = s - 1 + ST;
            mbar_wait(&empty[r % ST], ((s - 1) / ST) & 1);
            copy(r);
        }
        mbar_wait(&full[s % ST], (s / ST) & 1);
        stage_products(sm + (s % ST) * STAGE, d, warp, lane);
        if (ARR == 0 && lane == 0) mbar_arrive(&empty[s % ST]);
        if (ARR > 0 && lane < CL) mc_arrive<ARR == 2>(&empty[s % ST], lane);
    };
    auto tile_end = [&](int s) {
        float4 *o = (float4 *)out +
                    ((size_t)(blockIdx.x + s / 64 * gridDim.x) % 1024 * 256 + tid) * 16;
#pragma unroll
        for (int i = 0; i < 16; i++)
            o[i] = make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]);
#pragma unroll
        for (int i = 0; i < 64; i++) d[i] = 0.f;
    };
    if (V & 8) /* 8: tiles of 64 stages as an outer loop, the sums read only there */
        for (int t = 0; t < nst; t += 64) {
            for (int s = t; s < t + 64 && s < nst; s++) stage(s);
            if (V & 2) tile_end(t + 63);
        }
    else
        for (int s = 0; s < nst; s++) {
            stage(s);
            if ((V & 2) && (V & 4 ? (s + 1) % per_tile == 0 : (s + 1) % 64 == 0)) tile_end(s);
        }
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 64; i++) acc += d[i];
    if (acc == 12345.f) sm[0].x = 1; /* keep the sums */
    cluster_sync_all(); /* no block leaves while a peer may still copy into it */
#endif
}

/* the best of three timed launches after an untimed first, in ms */
template <class F> static float best_ms(F launch) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < 4; r++) {
        cudaEventRecord(e0);
        launch();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r && ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

template <int CL, int ARR, int V = 0>
static void run_mc(const uint4 *src, float *out, int nchunk, int blocks, int nst) {
    cudaFuncSetAttribute(k_mc<CL, ARR, V>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(256), cfg.dynamicSmemBytes = SMEM;
    cfg.attrs = at, cfg.numAttrs = 1;
    const float best =
        best_ms([&] { cudaLaunchKernelEx(&cfg, k_mc<CL, ARR, V>, src, nchunk, nst, out, 64); });
    const double flop = 2.0 * 2 * KS * 64 * 128 * 16 * (double)nst * blocks;
    printf("multicast cluster %d, arrivals %d, V %d, %4d blocks x %4d stages: %7.1f TFLOP/s  "
           "%7.1f us  %6.3f us a stage  (%s)\n",
           CL, ARR, V, blocks, nst, flop / best / 1e9, best * 1e3, best * 1e3 / nst,
           cudaGetErrorString(cudaGetLastError()));
}

/* blocks: sms (one a SM, nst stages each) or, with tiles, that many tiles of 64 stages (a
 * 128 x 128 tile over K = 4,096): a block each (new blocks as SMs free up, each filling its
 * ring afresh), or with persist a block a SM taking them in turn; epi: the stand-in
 * epilogue's rounds */
template <bool COPY>
static void run(const uint4 *src, int nchunk, float *out, int sms,
                int tiles = 0, bool persist = false, int epi = 0) {
    const int nst = tiles ? 64 : 4096; /* stages a tile */
    const int blocks = tiles && !persist ? tiles : sms;
    cudaFuncSetAttribute(k_loop<COPY>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    const float best = best_ms([&] {
        k_loop<COPY><<<blocks, 256, SMEM>>>(src, nchunk, nst, out, tiles ? 64 : 0, epi,
                                            persist ? tiles : 0);
    });
    /* a stage: two warpgroups x KS k-tiles x 64 x 128 x 16 products */
    const double flop = 2.0 * 2 * KS * 64 * 128 * 16 * (double)nst * (tiles ? tiles : blocks);
    if (tiles)
        printf("%-6s %4d tiles%s, epilogue %3d: %7.1f TFLOP/s  %6.1f us  (%s)\n",
               COPY ? "copies" : "smem", tiles, persist ? " persistent" : "", epi,
               flop / best / 1e9, best * 1e3, cudaGetErrorString(cudaGetLastError()));
    else
        printf("%-6s %7.1f TFLOP/s  %6.3f us a stage  (%s)\n", COPY ? "copies" : "smem",
               flop / best / 1e9, best * 1e3 / nst, cudaGetErrorString(cudaGetLastError()));
}

/* bf16 pairs of values in (-1, 1) from a hash of the index: the bit toggling of real weights
 * and inputs (the tensor cores draw more power on them than on constants) */
__global__ void k_fill(uint32_t *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        /* sign, exponent 118..125 (2^-9 .. 2^-2), 7 random mantissa bits, twice */
        uint32_t a = (h & 0x8000u) | (118u + (h >> 4 & 7)) << 7 | (h >> 8 & 0x7f);
        uint32_t b = (h >> 16 & 0x8000u) | (118u + (h >> 20 & 7)) << 7 | (h >> 24 & 0x7f);
        p[i] = a | b << 16;
    }
}

int main(int argc, char **argv) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int nchunk = 256; /* 8 MB of stages: L2 holds them */
    uint4 *src;
    float *out;
    cudaMalloc(&src, (size_t)nchunk * STAGE * 16);
    cudaMemset(src, 0, (size_t)nchunk * STAGE * 16);
    /* "random": the stages hold random values (the ring's first contents stay constants) */
    const bool rnd = argc > 1 && argv[1][0] == 'r';
    if (rnd) k_fill<<<264, 256>>>((uint32_t *)src, (size_t)nchunk * STAGE * 4);
    printf("stages of %s\n", rnd ? "random values" : "zeros");
    cudaMalloc(&out, (size_t)1024 * 256 * 64 * 4); /* 64 sums a thread, up to 1,024 tiles */
    run<false>(src, nchunk, out, sms);
    run<true>(src, nchunk, out, sms);
    /* gate/up's 768 tiles and o's 128 at 512 rows, without an epilogue */
    run<true>(src, nchunk, out, sms, 768);
    run<true>(src, nchunk, out, sms, 128);
    run<false>(src, nchunk, out, sms, 768);
    /* a block a tile against a persistent block a SM, with stand-in epilogues of 0, 50 and
     * 100 rounds (a round: a 64-long fmaf chain) */
    for (int epi : {0, 50, 100}) {
        run<true>(src, nchunk, out, sms, 768, false, epi);
        run<true>(src, nchunk, out, sms, 768, true, epi);
    }
    /* the weights multicast to clusters of 1 (plain copies), 2 and 4 blocks: a block a SM
     * for 4,096 stages, and 768 blocks of 64 stages (gate/up's tiles at 512 rows) */
    for (int i = 0; i < 2; i++) {
        const int blocks = i ? 768 : sms / 4 * 4, nst = i ? 64 : 4096;
        run_mc<1, 0>(src, out, nchunk, blocks, nst);
        run_mc<1, 0, 1>(src, out, nchunk, blocks, nst);
        run_mc<1, 0, 2>(src, out, nchunk, blocks, nst);
        run_mc<1, 0, 6>(src, out, nchunk, blocks, nst);
        run_mc<1, 0, 7>(src, out, nchunk, blocks, nst);
        run_mc<1, 0, 8>(src, out, nchunk, blocks, nst);
        run_mc<1, 0, 10>(src, out, nchunk, blocks, nst);
        run_mc<1, 1>(src, out, nchunk, blocks, nst);
        run_mc<1, 2>(src, out, nchunk, blocks, nst);
        run_mc<2, 1>(src, out, nchunk, blocks, nst);
        run_mc<2, 1, 2>(src, out, nchunk, blocks, nst);
        run_mc<2, 2>(src, out, nchunk, blocks, nst);
        run_mc<4, 1>(src, out, nchunk, blocks, nst);
    }
    return 0;
}
