/* bench/wgmma_bits.cu: whether Hopper's warpgroup mma (wgmma.m64n8k16, bf16 in, f32 sums)
 * adds a k-tile's products into its accumulator with the same bits as mma.sync.m16n8k16, the
 * instruction the decode and prompt matmuls use (gemv.cu, gemm.cu). If it does, the prompt
 * kernel could move to wgmma and keep its rows equal to decode steps bit for bit.
 *
 * Each trial: 64 x 16 A (weights) and 16 x 8 B (inputs) of random bf16 over a wide range of
 * exponents, and a random f32 accumulator; a chain of NK k-tiles from it. mma.sync runs it as
 * 4 warps of 16 rows, wgmma as one warpgroup with A from registers and B from shared memory
 * (no swizzle, K-major core matrices). Prints how many of the 512 sums differ, over all
 * trials, and the largest difference against a double-precision reference (to show both are
 * the products it means).
 *
 *   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_bits bench/wgmma_bits.cu
 *   /tmp/wgmma_bits */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));           \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#define NK 8 /* k-tiles a chain */

/* A: [NK][64][16] bf16 row-major per k-tile; B: [NK][8][16] bf16 (n rows, k contiguous: the
 * mma's "col" B); C, D: [64][8] f32 */
__device__ __forceinline__ uint32_t pack(const uint16_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 16;
}

/* the A fragment of rows r0..r0+15 (mma.m16n8k16's layout) */
__device__ __forceinline__ void a_frag(const uint16_t *A, int r0, int lane, uint32_t a[4]) {
    const int g = lane >> 2, c = 2 * (lane & 3);
    a[0] = pack(A + (r0 + g) * 16 + c);
    a[1] = pack(A + (r0 + g + 8) * 16 + c);
    a[2] = pack(A + (r0 + g) * 16 + c + 8);
    a[3] = pack(A + (r0 + g + 8) * 16 + c + 8);
}

__global__ void k_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int trials) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = 2 * (lane & 3);
    for (int t = blockIdx.x; t < trials; t += gridDim.x) {
        const uint16_t *At = A + (size_t)t * NK * 64 * 16, *Bt = B + (size_t)t * NK * 8 * 16;
        const float *Ct = C + (size_t)t * 64 * 8;
        float d[4] = {Ct[(16 * warp + g) * 8 + c], Ct[(16 * warp + g) * 8 + c + 1],
                      Ct[(16 * warp + g + 8) * 8 + c], Ct[(16 * warp + g + 8) * 8 + c + 1]};
        for (int k = 0; k < NK; k++) {
            uint32_t a[4], b[2];
            a_frag(At + k * 64 * 16, 16 * warp, lane, a);
            b[0] = pack(Bt + k * 128 + g * 16 + c);
            b[1] = pack(Bt + k * 128 + g * 16 + c + 8);
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
        }
        float *Dt = D + (size_t)t * 64 * 8;
        Dt[(16 * warp + g) * 8 + c] = d[0], Dt[(16 * warp + g) * 8 + c + 1] = d[1];
        Dt[(16 * warp + g + 8) * 8 + c] = d[2], Dt[(16 * warp + g + 8) * 8 + c + 1] = d[3];
    }
}

/* the shared-memory matrix descriptor: start, leading and stride byte offsets (>> 4), no
 * swizzle */
__device__ __forceinline__ uint64_t desc(const void *p, unsigned lbo, unsigned sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32;
}

/* B of one k-tile in shared memory as two 8 x 16-byte core matrices (n rows, 8 k each): k
 * 0-7 at 0, k 8-15 at 128 bytes; lbo_first: whether the leading byte offset is that 128 */
__global__ void k_wgmma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int trials,
                        int lbo_first) {
    __shared__ __align__(128) uint16_t bs[NK + 2][128]; /* + room for a wrong guess of the offsets */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = 2 * (lane & 3);
    for (int t = blockIdx.x; t < trials; t += gridDim.x) {
        const uint16_t *At = A + (size_t)t * NK * 64 * 16, *Bt = B + (size_t)t * NK * 8 * 16;
        __syncthreads();
        for (int i = threadIdx.x; i < NK * 128; i += 128) {
            const int k = i >> 7, n = (i >> 4) & 7, kk = i & 15;
            bs[k][(kk >> 3) * 64 + n * 8 + (kk & 7)] = Bt[k * 128 + n * 16 + kk];
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const float *Ct = C + (size_t)t * 64 * 8;
        float d[4] = {Ct[(16 * warp + g) * 8 + c], Ct[(16 * warp + g) * 8 + c + 1],
                      Ct[(16 * warp + g + 8) * 8 + c], Ct[(16 * warp + g + 8) * 8 + c + 1]};
        for (int k = 0; k < NK; k++) {
            uint32_t a[4];
            a_frag(At + k * 64 * 16, 16 * warp, lane, a);
            const uint64_t db = lbo_first ? desc(bs[k], 128, 256) : desc(bs[k], 256, 128);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, "
                         "{%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        }
        float *Dt = D + (size_t)t * 64 * 8;
        Dt[(16 * warp + g) * 8 + c] = d[0], Dt[(16 * warp + g) * 8 + c + 1] = d[1];
        Dt[(16 * warp + g + 8) * 8 + c] = d[2], Dt[(16 * warp + g + 8) * 8 + c + 1] = d[3];
    }
}

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float bf16_val(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double rnd(void) { return (rand() + 0.5) / ((double)RAND_MAX + 1); }
/* random values over 2^-e..2^e, either sign */
static float wide(int e) {
    return (float)((rand() & 1 ? -1 : 1) * ldexp(1 + rnd(), (int)(rnd() * 2 * e) - e));
}

int main(int argc, char **argv) {
    const int trials = argc > 1 ? atoi(argv[1]) : 20000;
    const size_t na = (size_t)trials * NK * 64 * 16, nb = (size_t)trials * NK * 128,
                 nc = (size_t)trials * 64 * 8;
    uint16_t *A = (uint16_t *)malloc(na * 2), *B = (uint16_t *)malloc(nb * 2);
    float *C = (float *)malloc(nc * 4), *D1 = (float *)malloc(nc * 4);
    float *D2 = (float *)malloc(nc * 4);
    srand(1);
    for (int t = 0; t < trials; t++) {
        /* a third of the trials: the weights' and inputs' usual range; then wide exponents,
         * then cancellation (inputs of both signs close in size) */
        const int kind = t % 3;
        for (size_t i = 0; i < (size_t)NK * 1024; i++)
            A[(size_t)t * NK * 1024 + i] = bf16_bits(kind == 1 ? wide(20) : wide(3) * 0.02f);
        for (size_t i = 0; i < (size_t)NK * 128; i++)
            B[(size_t)t * NK * 128 + i] = bf16_bits(kind == 1 ? wide(20) : wide(2));
        for (size_t i = 0; i < 512; i++)
            C[(size_t)t * 512 + i] = kind == 2 ? 0.f : kind == 1 ? wide(30) : wide(4);
    }
    uint16_t *dA, *dB;
    float *dC, *dD;
    CK(cudaMalloc(&dA, na * 2));
    CK(cudaMalloc(&dB, nb * 2));
    CK(cudaMalloc(&dC, nc * 4));
    CK(cudaMalloc(&dD, nc * 4));
    CK(cudaMemcpy(dA, A, na * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, nb * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C, nc * 4, cudaMemcpyHostToDevice));
    k_mma<<<264, 128>>>(dA, dB, dC, dD, trials);
    CK(cudaMemcpy(D1, dD, nc * 4, cudaMemcpyDeviceToHost));
    /* the reference, for the first trials: double sums of the chain */
    double worst_mma = 0;
    for (int t = 0; t < (trials < 300 ? trials : 300); t++)
        for (int r = 0; r < 64; r++)
            for (int n = 0; n < 8; n++) {
                double s = C[(size_t)t * 512 + r * 8 + n], mag = fabs(s);
                for (int k = 0; k < NK; k++)
                    for (int kk = 0; kk < 16; kk++) {
                        double p = (double)bf16_val(A[(((size_t)t * NK + k) * 64 + r) * 16 + kk]) *
                                   bf16_val(B[((size_t)t * NK + k) * 128 + n * 16 + kk]);
                        s += p, mag += fabs(p);
                    }
                double e = fabs(D1[(size_t)t * 512 + r * 8 + n] - s) / mag;
                if (e > worst_mma) worst_mma = e;
            }
    printf("mma.sync against double sums: largest error %.3g of the sum of magnitudes\n",
           worst_mma);
    for (int lf = 1; lf >= 0; lf--) {
        CK(cudaMemset(dD, 0, nc * 4));
        k_wgmma<<<264, 128>>>(dA, dB, dC, dD, trials, lf);
        CK(cudaGetLastError());
        CK(cudaMemcpy(D2, dD, nc * 4, cudaMemcpyDeviceToHost));
        size_t diff = 0, diff_kind[3] = {0, 0, 0};
        double worst = 0;
        for (size_t i = 0; i < nc; i++) {
            uint32_t u1, u2;
            memcpy(&u1, D1 + i, 4), memcpy(&u2, D2 + i, 4);
            if (u1 != u2) {
                diff++, diff_kind[(i / 512) % 3]++;
                double e = fabs((double)D1[i] - D2[i]) / (fabs(D1[i]) + 1e-30);
                if (e > worst) worst = e;
            }
        }
        printf("wgmma (leading byte offset %s): %zu of %zu sums differ from mma.sync (usual %zu, "
               "wide %zu, from zero %zu); largest relative difference %.3g\n",
               lf ? "128" : "256", diff, nc, diff_kind[0], diff_kind[1], diff_kind[2], worst);
    }
    return 0;
}
