/* bench/mmg_lab.cu: how fast the prompt tile kernel's main loop (gemm.cu, k_mmg4) can run,
 * without its exactness or epilogue: a block of two warpgroups a SM, each k-tile one
 * wgmma.m64n128k16 a warpgroup with A (weights) from registers and B (inputs) from shared
 * memory, stages of MG_KS = 4 k-tiles in a ring of 6. Sums are not checked (timings only).
 *
 * Forms (the first column of the output):
 *   wait0    each stage's wgmmas waited for in full before the slot is released (k_mmg4's
 *            loop today)
 *   wait1    a stage's wgmmas left in flight while the next stage's are issued; the slot
 *            two stages back released
 *   ss       as wait1, A from shared memory too (no register loads of the weights)
 * wait1 and ss index their two register sets by the stage's parity at run time, so those
 * live in local memory here: their numbers say nothing of the forms. Each runs with the ring
 * refilled from L2 by bulk copies as k_mmg4 does (copies) or never refilled (smem: the
 * products and shared-memory reads alone). Then grids of 128 x 128 tiles over K = 4,096 (64
 * stages): a block a tile, and a persistent block a SM whose ring runs on from one tile into
 * the next, each tile ended by a stand-in epilogue of some length.
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
__device__ __forceinline__ void wg_wait1(void) {
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}
/* m64n128k16 with A from shared memory (descriptor da), B from shared memory (db) */
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,"
                 "%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,"
                 "%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
                 "%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db));
}
#endif

/* FORM 0 wait0, 1 wait1, 2 ss; COPY: refill the ring from src (a region L2 holds). Tiles of
 * per_tile stages (0: one tile of nst), each ended by a stand-in epilogue: epi rounds of a
 * 64-long fmaf chain over the sums, which are then stored (64 KB a tile) and cleared. With
 * ntiles > 0 the grid is persistent: block b takes tiles b, b + grid, ... (nst is then
 * computed here), and its ring runs on across tiles, so the next tile's first stages are
 * requested while this one's epilogue runs. */
template <int FORM, bool COPY>
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
    uint4 af[2][KS];
    for (int s = 0; s < nst; s++) {
        /* the slot to refill: one stage back (wait0) or two (wait1, ss) */
        const int back = FORM == 0 ? 1 : 2;
        if (COPY && tid == 0 && s >= back && s - back + ST < nst) {
            const int r = s - back + ST;
            mbar_wait(&empty[r % ST], ((s - back) / ST) & 1);
            copy(r);
        }
        if (COPY) mbar_wait(&full[s % ST], (s / ST) & 1);
        const uint4 *as = sm + (s % ST) * STAGE, *bs = as + SA;
        if (FORM != 2)
#pragma unroll
            for (int kk = 0; kk < KS; kk++) af[s & 1][kk] = as[kk * 256 + warp * 32 + lane];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            if (FORM == 2)
                wgmma_ss(d, wg_desc(as + kk * 256 + (warp >> 2) * 128), wg_desc(bs + kk * 256));
            else
                wgmma<128>(d, af[s & 1][kk], wg_desc(bs + kk * 256));
        }
        wg_commit();
        if (FORM == 0) {
            wg_wait0();
            wg_keep(d);
#pragma unroll
            for (int kk = 0; kk < KS; kk++) wg_keep(af[s & 1][kk]);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s % ST]);
        } else {
            wg_wait1(); /* stage s - 1's wgmmas are done: its slot is free */
#pragma unroll
            for (int kk = 0; kk < KS; kk++) wg_keep(af[(s - 1) & 1][kk]);
            __syncwarp();
            if (lane == 0 && s > 0) mbar_arrive(&empty[(s - 1) % ST]);
        }
        if ((s + 1) % per_tile == 0 && s + 1 < nst) { /* a tile's end (the last: below) */
            if (FORM != 0) {
                wg_wait0();
                wg_keep(d);
            }
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
    wg_wait0();
    wg_keep(d);
    float acc = 0.f;
    for (int k = 0; k < epi; k++)
#pragma unroll
        for (int i = 0; i < 64; i++) acc = fmaf(acc, 0.999f, d[i]);
    if (nst > 0) { /* the last tile's sums */
        const int tile = ntiles > 0 ? (int)blockIdx.x + (nst / per_tile - 1) * (int)gridDim.x
                                    : (int)blockIdx.x;
        float4 *o = (float4 *)out + ((size_t)tile * 256 + tid) * 16;
#pragma unroll
        for (int i = 0; i < 16; i++)
            o[i] = make_float4(d[4 * i] + acc, d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]);
    }
#endif
}

/* blocks: sms (one a SM, nst stages each) or, with tiles, that many tiles of 64 stages (a
 * 128 x 128 tile over K = 4,096): a block each (new blocks as SMs free up, each filling its
 * ring afresh), or with persist a block a SM taking them in turn; epi: the stand-in
 * epilogue's rounds */
template <int FORM, bool COPY>
static void run(const char *name, const uint4 *src, int nchunk, float *out, int sms,
                int tiles = 0, bool persist = false, int epi = 0) {
    const int nst = tiles ? 64 : 4096; /* stages a tile */
    const int blocks = tiles && !persist ? tiles : sms;
    cudaFuncSetAttribute(k_loop<FORM, COPY>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < 4; r++) {
        cudaEventRecord(e0);
        k_loop<FORM, COPY><<<blocks, 256, SMEM>>>(src, nchunk, nst, out, tiles ? 64 : 0, epi,
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
        printf("%-6s %-6s %4d tiles%s, epilogue %3d: %7.1f TFLOP/s  %6.1f us  (%s)\n", name,
               COPY ? "copies" : "smem", tiles, persist ? " persistent" : "", epi,
               flop / best / 1e9, best * 1e3, cudaGetErrorString(cudaGetLastError()));
    else
        printf("%-6s %-6s %7.1f TFLOP/s  %6.3f us a stage  (%s)\n", name, COPY ? "copies" : "smem",
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
    run<0, false>("wait0", src, nchunk, out, sms);
    run<1, false>("wait1", src, nchunk, out, sms);
    run<2, false>("ss", src, nchunk, out, sms);
    run<0, true>("wait0", src, nchunk, out, sms);
    run<1, true>("wait1", src, nchunk, out, sms);
    run<2, true>("ss", src, nchunk, out, sms);
    /* gate/up's 768 tiles and o's 128 at 512 rows, without an epilogue */
    run<0, true>("wait0", src, nchunk, out, sms, 768);
    run<0, true>("wait0", src, nchunk, out, sms, 128);
    run<0, false>("wait0", src, nchunk, out, sms, 768);
    /* a block a tile against a persistent block a SM, with stand-in epilogues of 0, 50 and
     * 100 rounds (a round: a 64-long fmaf chain) */
    for (int epi : {0, 50, 100}) {
        run<0, true>("wait0", src, nchunk, out, sms, 768, false, epi);
        run<0, true>("wait0", src, nchunk, out, sms, 768, true, epi);
    }
    return 0;
}
