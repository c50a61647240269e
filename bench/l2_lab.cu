/* bench/l2_lab.cu: how many bytes a second bulk copies bring into shared memory from L2 (a
 * region that L2 holds) and from HBM, one block an SM, a ring of slots as gemm.cu's prompt
 * kernel keeps, no arithmetic. It bounds a prompt tile kernel that stages weights and inputs
 * from L2: FLOPs a staged byte times this rate.
 *
 *   nvcc -O3 -arch=sm_90a -Isrc -o /tmp/l2_lab bench/l2_lab.cu && /tmp/l2_lab */
#include <cstdio>
#include <cuda_runtime.h>

#include "backend/cuda/ring.cuh"

#define SLOTS 6

/* each block copies `iters` chunks of `chunk` bytes from region [0, region) (its own walk
 * through it) into a ring of SLOTS slots; warp 0 lane 0 issues, all warps release */
__global__ void __launch_bounds__(256, 1)
    k_stream(const char *src, size_t region, unsigned chunk, int iters, unsigned *sink) {
    extern __shared__ __align__(128) char sm[];
    __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        ring_init(full, empty, SLOTS, 8);
    }
    __syncthreads();
    const size_t nchunk = region / chunk;
    auto at = [&](int i) {
        return src + ((size_t)blockIdx.x * 7919 + (size_t)i * gridDim.x) % nchunk * chunk;
    };
    if (tid == 0)
        for (int i = 0; i < SLOTS && i < iters; i++)
            mbar_expect(&full[i], chunk), bulk_copy(sm + i * chunk, at(i), chunk, &full[i]);
    unsigned acc = 0;
    for (int i = 0; i < iters; i++) {
        if (tid == 0 && i > 0 && i - 1 + SLOTS < iters) {
            const int r = i - 1 + SLOTS;
            mbar_wait(&empty[r % SLOTS], ((i - 1) / SLOTS) & 1);
            mbar_expect(&full[r % SLOTS], chunk);
            bulk_copy(sm + (r % SLOTS) * chunk, at(r), chunk, &full[r % SLOTS]);
        }
        mbar_wait(&full[i % SLOTS], (i / SLOTS) & 1);
        acc += ((const unsigned *)(sm + (i % SLOTS) * chunk))[tid];
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[i % SLOTS]);
    }
    if (acc == 0x12345678u) sink[blockIdx.x] = acc;
    (void)warp;
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t big = (size_t)1 << 30;
    char *buf;
    unsigned *sink;
    cudaMalloc(&buf, big);
    cudaMalloc(&sink, 4096 * 4);
    cudaMemset(buf, 1, big);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const unsigned chunks[] = {8192, 16384, 32768};
    const size_t regions[] = {(size_t)8 << 20, (size_t)24 << 20, big};
    const int grids[] = {1, 2};
    for (size_t region : regions)
        for (unsigned chunk : chunks)
            for (int gm : grids) {
                const int smem = SLOTS * chunk;
                if (smem > 200 * 1024 / gm) continue;
                cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
                const int iters = (int)(((size_t)4 << 30) / chunk / (sms * gm));
                float best = 1e30f;
                for (int r = 0; r < 4; r++) {
                    cudaEventRecord(e0);
                    k_stream<<<sms * gm, 256, smem>>>(buf, region, chunk, iters, sink);
                    cudaEventRecord(e1);
                    cudaEventSynchronize(e1);
                    float ms;
                    cudaEventElapsedTime(&ms, e0, e1);
                    if (r && ms < best) best = ms;
                }
                const double bytes = (double)iters * chunk * sms * gm;
                printf("region %5zu MB, chunk %2u KB, %d block(s) an SM: %.2f TB/s (%s)\n",
                       region >> 20, chunk >> 10, gm, bytes / best / 1e9,
                       cudaGetErrorString(cudaGetLastError()));
            }
    return 0;
}
