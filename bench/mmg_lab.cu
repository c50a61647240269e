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
        for (int i = 0; i < ST; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], 8);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
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
        const uint4 *as = sm + (s % ST) * STAGE, *bs = as + SA;
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
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < 4; r++) {
        cudaEventRecord(e0);
        k_loop<COPY><<<blocks, 256, SMEM>>>(src, nchunk, nst, out, tiles ? 64 : 0, epi,
                                            persist ? tiles : 0);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r && ms < best) best = ms;
    }
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

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int nchunk = 256; /* 8 MB of stages: L2 holds them */
    uint4 *src;
    float *out;
    cudaMalloc(&src, (size_t)nchunk * STAGE * 16);
    cudaMemset(src, 0, (size_t)nchunk * STAGE * 16);
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
    return 0;
}
