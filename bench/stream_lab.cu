/* bench/stream_lab.cu: the floor of a decode step's weight streams on this GPU, without any
 * matmul arithmetic, split sums or epilogues: launches back to back with programmatic
 * dependent launch, each streaming one matrix of the Qwen3-8B shape's sizes (rotating over
 * 2.3 GB, so L2 holds none of them) with the decode matmul's load pattern: 264 blocks of 256
 * threads, two batches of U 16-byte loads a thread in flight, the first two batches requested
 * before the wait on the previous launch, 128 floats stored at a block's end. Schedules:
 *   fixed        each block a contiguous range (as mm_partition's);
 *   queue N      items of N k-tiles (4 KB each), the first the block's own, the next from an
 *                atomic counter, requested one item ahead (balances blocks that stream at
 *                different rates);
 *   interleaved  fixed ranges laid out so that the blocks' loads of a moment are contiguous;
 *   grid-stride  the plain read of profile.cu;
 * and the fixed chain with shared memory that lets 4, 3 or 2 blocks share an SM.
 *
 *   nvcc -O3 -arch=sm_90a -o /tmp/stream_lab bench/stream_lab.cu && /tmp/stream_lab
 *
 * Prints microseconds per launch and bandwidth, and the sum for one layer's four matrices. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "lab_check.cuh"

#define KTILE 256 /* uint4 per k-tile of a block: 8 warps x 32 lanes */

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <int U>
__device__ __forceinline__ void fetch(uint4 (&r)[U], const uint4 *p, int b0, int nk) {
#pragma unroll
    for (int u = 0; u < U; u++)
        r[u] = b0 + u < nk ? ld_stream(p + (size_t)(b0 + u) * KTILE) : make_uint4(0, 0, 0, 0);
}
template <int U> __device__ __forceinline__ unsigned use(const uint4 (&r)[U]) {
    unsigned s = 0;
#pragma unroll
    for (int u = 0; u < U; u++) s ^= r[u].x + r[u].y * 3u + r[u].z * 5u + r[u].w * 7u;
    return s;
}

struct args {
    const uint4 *w; /* the matrix: ntiles k-tiles of KTILE uint4 */
    int ntiles, item; /* item: k-tiles a queue item (0: fixed ranges) */
    unsigned *ctr;    /* the launch's queue counter (zero before) */
    float *out;       /* [items or blocks][128] */
};

/* stream k-tiles [t0, t0 + nk) with two batches in flight, ra and rb already holding the first
 * two; returns the xor of what was read */
template <int U>
__device__ __forceinline__ unsigned stream(const uint4 *p, int nk, uint4 (&ra)[U], uint4 (&rb)[U]) {
    unsigned s = 0;
    for (int b0 = 0; b0 < nk; b0 += 2 * U) {
        s ^= use<U>(ra);
        fetch<U>(ra, p, b0 + 2 * U, nk);
        if (b0 + U >= nk) break;
        s ^= use<U>(rb);
        fetch<U>(rb, p, b0 + 3 * U, nk);
    }
    return s;
}

__device__ __forceinline__ void finish(float *out, unsigned s, float *red) {
    /* an item's 128 sums: through shared memory, as mm_finish's tile */
    red[threadIdx.x] = (float)(s & 0xffff);
    __syncthreads();
    if (threadIdx.x < 128) out[threadIdx.x] = red[threadIdx.x] + red[threadIdx.x + 128];
    __syncthreads();
}

template <int U> __global__ void __launch_bounds__(256, 2) k_fixed(args a) {
    __shared__ float red[256];
    const int t0 = (int)((long long)a.ntiles * blockIdx.x / gridDim.x);
    const int t1 = (int)((long long)a.ntiles * (blockIdx.x + 1) / gridDim.x);
    const uint4 *p = a.w + (size_t)t0 * KTILE + threadIdx.x;
    uint4 ra[U], rb[U];
    fetch<U>(ra, p, 0, t1 - t0);
    fetch<U>(rb, p, U, t1 - t0);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned s = stream<U>(p, t1 - t0, ra, rb);
    finish(a.out + (size_t)blockIdx.x * 128, s, red);
}

/* fixed ranges laid out interleaved: k-tile j of block b at (j * blocks + b), so the blocks'
 * loads of a moment fall in one contiguous region */
template <int U> __global__ void __launch_bounds__(256, 2) k_inter(args a) {
    __shared__ float red[256];
    const int R = (a.ntiles + gridDim.x - 1) / gridDim.x;
    const int t0 = (int)((long long)a.ntiles * blockIdx.x / gridDim.x);
    const int t1 = (int)((long long)a.ntiles * (blockIdx.x + 1) / gridDim.x);
    (void)R;
    const uint4 *p = a.w + (size_t)blockIdx.x * KTILE + threadIdx.x;
    uint4 ra[U], rb[U];
    const int nk = t1 - t0;
    auto fetchi = [&](uint4 (&r)[U], int b0) {
#pragma unroll
        for (int u = 0; u < U; u++)
            r[u] = b0 + u < nk ? ld_stream(p + (size_t)(b0 + u) * gridDim.x * KTILE)
                               : make_uint4(0, 0, 0, 0);
    };
    fetchi(ra, 0);
    fetchi(rb, U);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned s = 0;
    for (int b0 = 0; b0 < nk; b0 += 2 * U) {
        s ^= use<U>(ra);
        fetchi(ra, b0 + 2 * U);
        if (b0 + U >= nk) break;
        s ^= use<U>(rb);
        fetchi(rb, b0 + 3 * U);
    }
    finish(a.out + (size_t)blockIdx.x * 128, s, red);
}

/* the profile's plain read: a grid-stride loop, 4 loads in flight a thread */
__global__ void k_gridread(args a) {
    const uint4 *p = a.w;
    size_t n = (size_t)a.ntiles * KTILE, stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 x = ld_stream(p + i), y = ld_stream(p + i + stride);
        uint4 z = ld_stream(p + i + 2 * stride), w = ld_stream(p + i + 3 * stride);
        acc ^= x.x ^ y.y ^ z.z ^ w.w;
    }
    for (; i < n; i += stride) acc ^= ld_stream(p + i).x;
    if (acc == 0x9e3779b9u) a.out[0] = (float)acc;
}

/* items of a.item k-tiles: the first is the block's own, the next ones from the queue (the
 * next index requested one item ahead, its first two batches before the item's end) */
template <int U> __global__ void __launch_bounds__(256, 2) k_queue(args a) {
    __shared__ float red[256];
    __shared__ int nxt[2];
    const int nitems = (a.ntiles + a.item - 1) / a.item;
    int it = blockIdx.x;
    uint4 ra[U], rb[U];
    const uint4 *p = a.w + (size_t)it * a.item * KTILE + threadIdx.x;
    int nk = min(a.item, a.ntiles - it * a.item);
    fetch<U>(ra, p, 0, nk);
    fetch<U>(rb, p, U, nk);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    int k = 0;
    if (threadIdx.x == 0) nxt[0] = gridDim.x + (int)atomicAdd(a.ctr, 1u);
    for (;;) {
        unsigned s = stream<U>(p, nk, ra, rb);
        __syncthreads(); /* nxt[k] written */
        const int it1 = nxt[k];
        k ^= 1;
        const uint4 *p1 = a.w + (size_t)it1 * a.item * KTILE + threadIdx.x;
        const int nk1 = it1 < nitems ? min(a.item, a.ntiles - it1 * a.item) : 0;
        if (nk1 > 0) {
            fetch<U>(ra, p1, 0, nk1);
            fetch<U>(rb, p1, U, nk1);
            if (threadIdx.x == 0) nxt[k] = gridDim.x + (int)atomicAdd(a.ctr, 1u);
        }
        finish(a.out + (size_t)it * 128, s, red);
        if (nk1 <= 0) break;
        it = it1, p = p1, nk = nk1;
    }
}

typedef void (*kern)(args);

/* launches `n` streams of `bytes` each, back to back with programmatic dependent launch;
 * returns microseconds per launch (the best of 3 runs) */
static double run(kern k, int blocks, const uint4 *buf, size_t buf_bytes, size_t bytes, int item,
                  unsigned *ctrs, float *out, int n, int smem = 0, int threads = 256) {
    const int ntiles = (int)(bytes / (KTILE * 16));
    const int per = (int)(buf_bytes / bytes);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(threads), cfg.attrs = at, cfg.numAttrs = 1;
    cfg.dynamicSmemBytes = smem;
    LAB_CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cudaEvent_t e0, e1;
    LAB_CK(cudaEventCreate(&e0));
    LAB_CK(cudaEventCreate(&e1));
    double best = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        LAB_CK(cudaMemset(ctrs, 0, n * sizeof(unsigned)));
        LAB_CK(cudaEventRecord(e0));
        for (int i = 0; i < n; i++) {
            args a = {buf + (size_t)(i % per) * ntiles * KTILE, ntiles, item, ctrs + i, out};
            LAB_CK(cudaLaunchKernelEx(&cfg, k, a));
        }
        LAB_CK(cudaEventRecord(e1));
        LAB_CK(cudaEventSynchronize(e1));
        float ms;
        LAB_CK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep && ms * 1e3 / n < best) best = ms * 1e3 / n; /* rep 0 warms up */
    }
    return best;
}

int main(void) {
    const size_t buf_bytes = (size_t)2304 << 20;
    uint4 *buf;
    unsigned *ctrs;
    float *out;
    LAB_CK(cudaMalloc(&buf, buf_bytes + (16 << 20))); /* + interleaving's padding */
    LAB_CK(cudaMemset(buf, 1, buf_bytes + (16 << 20)));
    LAB_CK(cudaMalloc(&ctrs, 4096 * sizeof(unsigned)));
    LAB_CK(cudaMalloc(&out, (size_t)1 << 26));
    int sms;
    LAB_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int blocks = 2 * sms;
    /* the Qwen3-8B shape's matrices: o, q|k|v, down, gate/up */
    const size_t MB = (size_t)1 << 20, sizes[] = {32 * MB, 48 * MB, 96 * MB, 192 * MB};
    printf("%d SMs, %d blocks; us per launch (GB/s), 144 launches a run, best of 3\n", sms,
           blocks);
    printf("%-8s %-22s %-22s %-22s %-22s %-22s\n", "MB", "fixed U=4", "fixed U=8", "queue 8 kt",
           "queue 16 kt", "queue 32 kt");
    for (int s = 0; s < 4; s++) {
        const size_t b = sizes[s];
        double t[5];
        t[0] = run(k_fixed<4>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144);
        t[1] = run(k_fixed<8>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144);
        t[2] = run(k_queue<4>, blocks, buf, buf_bytes, b, 8, ctrs, out, 144);
        t[3] = run(k_queue<4>, blocks, buf, buf_bytes, b, 16, ctrs, out, 144);
        t[4] = run(k_queue<4>, blocks, buf, buf_bytes, b, 32, ctrs, out, 144);
        printf("%-8zu", b >> 20);
        for (int i = 0; i < 5; i++) printf(" %8.2f (%6.0f GB/s)  ", t[i], b / t[i] / 1e3);
        printf("\n");
    }
    printf("%-8s %-22s %-22s %-22s %-22s\n", "MB", "interleaved U=4", "interleaved U=8",
           "grid-stride 264x256", "grid-stride 1056x512");
    for (int s = 0; s < 4; s++) {
        const size_t b = sizes[s];
        double t[4];
        t[0] = run(k_inter<4>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144);
        t[1] = run(k_inter<8>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144);
        t[2] = run(k_gridread, blocks, buf, buf_bytes, b, 0, ctrs, out, 144);
        t[3] = run(k_gridread, 1056, buf, buf_bytes, b, 0, ctrs, out, 144, 0, 512);
        printf("%-8zu", b >> 20);
        for (int i = 0; i < 4; i++) printf(" %8.2f (%6.0f GB/s)  ", t[i], b / t[i] / 1e3);
        printf("\n");
    }
    /* one layer's chain, as a decode step runs it: q|k|v, o, gate/up, down */
    printf("layer chain (48+32+192+96 MB), us per layer:");
    for (int v = 0; v < 5; v++) {
        double tot = 0;
        for (int s = 0; s < 4; s++) {
            const size_t b = sizes[s == 0 ? 1 : s == 1 ? 0 : s];
            tot += v == 0   ? run(k_fixed<4>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144)
                   : v == 3 ? run(k_inter<4>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144)
                   : v == 4 ? run(k_inter<8>, blocks, buf, buf_bytes, b, 0, ctrs, out, 144)
                            : run(k_queue<4>, blocks, buf, buf_bytes, b, v == 1 ? 16 : 32, ctrs,
                                  out, 144);
        }
        const char *nm[] = {"fixed", "queue16", "queue32", "inter4", "inter8"};
        printf(" %s %.1f", nm[v], tot);
    }
    printf("\n");
    /* the same chain when a launch's blocks cannot share an SM with the next launch's: shared
     * memory for 4, 3 and 2 blocks an SM */
    const int occ_smem[] = {0, 50 << 10, 70 << 10, 100 << 10};
    for (int o = 0; o < 4; o++) {
        int nb;
        LAB_CK(cudaFuncSetAttribute(k_fixed<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                occ_smem[o]));
        LAB_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_fixed<4>, 256, occ_smem[o]));
        double tot = 0, t[4];
        for (int s = 0; s < 4; s++)
            tot += t[s] = run(k_fixed<4>, blocks, buf, buf_bytes, sizes[s], 0, ctrs, out, 144,
                              occ_smem[o]);
        printf("fixed U=4, %3d KB shared, %d blocks an SM: %.1f us a layer (o %.2f qkv %.2f down "
               "%.2f gate/up %.2f)\n",
               occ_smem[o] >> 10, nb, tot, t[0], t[1], t[2], t[3]);
    }
    return 0;
}
