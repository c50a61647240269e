/* bench/wgmma_bits.cu: whether Hopper's warpgroup mma (wgmma.m64nNk16, bf16 in, f32 sums)
 * adds a k-tile's products into its accumulator with the same bits as mma.sync.m16n8k16, the
 * instruction the decode and prompt matmuls use (gemv.cu, gemm.cu). If it does, the prompt
 * kernel could move to wgmma and keep its rows equal to decode steps bit for bit.
 *
 * Each trial: 64 x 16 A (weights) and 16 x N B (inputs) of random bf16 over a wide range of
 * exponents, and a random f32 accumulator; a chain of NK k-tiles from it, for N = 8, 64 and
 * 192 (a prompt tile's 64 rows of three terms). mma.sync runs it as 4 warps of 16 rows, an
 * n-tile at a time; wgmma as one warpgroup with A from registers and B from shared memory
 * (no swizzle, K-major core matrices). Prints how many sums differ, and the same with the
 * layout's two offsets swapped (wrong sums: the check can fail), and the mma.sync sums'
 * largest error against double sums (they are the products they mean). Exit status 1 when
 * the right layout's sums differ.
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

#include "lab_check.cuh"

#define NK 8 /* k-tiles a chain */

/* A: [NK][64][16] bf16 row-major per k-tile; B: [NK][N][16] bf16 (n rows, k contiguous: the
 * mma's "col" B); C, D: [64][N] f32 */
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

/* a thread's accumulators of n-tile j (the m16n8 layout, warp w's rows 16w..16w+15) */
#define ACC_IDX(j, i)                                                                             \
    ((16 * warp + g + ((i) >> 1) * 8) * N + 8 * (j) + c + ((i) & 1))

template <int N>
__global__ void k_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int trials) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = 2 * (lane & 3);
    for (int t = blockIdx.x; t < trials; t += gridDim.x) {
        const uint16_t *At = A + (size_t)t * NK * 64 * 16, *Bt = B + (size_t)t * NK * N * 16;
        const float *Ct = C + (size_t)t * 64 * N;
        float *Dt = D + (size_t)t * 64 * N;
        for (int j = 0; j < N / 8; j++) {
            float d[4];
            for (int i = 0; i < 4; i++) d[i] = Ct[ACC_IDX(j, i)];
            for (int k = 0; k < NK; k++) {
                uint32_t a[4], b[2];
                a_frag(At + k * 64 * 16, 16 * warp, lane, a);
                const uint16_t *bk = Bt + ((size_t)k * N + 8 * j + g) * 16;
                b[0] = pack(bk + c), b[1] = pack(bk + c + 8);
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                             "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            }
            for (int i = 0; i < 4; i++) Dt[ACC_IDX(j, i)] = d[i];
        }
    }
}

/* the shared-memory matrix descriptor: start, leading and stride byte offsets (>> 4), no
 * swizzle */
__device__ __forceinline__ uint64_t desc(const void *p, unsigned lbo, unsigned sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32;
}

__device__ __forceinline__ void wgmma_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void wgmma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19"
                 ",%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_n192(float (&d)[96], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19"
                 ",%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%"
                 "37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54"
                 ",%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%"
                 "72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89"
                 ",%90,%91,%92,%93,%94,%95}, "
                 "{%96,%97,%98,%99}, %100, p, 1, 1, 0;\n}"
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
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
                   "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
                   "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
                   "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
                   "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

template <int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (N == 8) wgmma_n8(d, a, db);
    if constexpr (N == 64) wgmma_n64(d, a, db);
    if constexpr (N == 192) wgmma_n192(d, a, db);
}

/* B of one k-tile in shared memory as 8 x 16-byte core matrices (8 n rows, 8 k each): core
 * (n / 8, k / 8) at (2 (n / 8) + k / 8) x 128 bytes, so the leading (K) byte offset is 128 and
 * the stride (N) byte offset 256; lbo_k: 0 swaps the two (a wrong layout: the check must see
 * it) */
template <int N>
__global__ void k_wgmma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int trials,
                        int lbo_k) {
    __shared__ __align__(128) uint16_t bs[N * 16 + 1024]; /* + room for the wrong layout */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = 2 * (lane & 3);
    for (int t = blockIdx.x; t < trials; t += gridDim.x) {
        const uint16_t *At = A + (size_t)t * NK * 64 * 16, *Bt = B + (size_t)t * NK * N * 16;
        const float *Ct = C + (size_t)t * 64 * N;
        float d[N / 2];
        for (int j = 0; j < N / 8; j++)
            for (int i = 0; i < 4; i++) d[4 * j + i] = Ct[ACC_IDX(j, i)];
        for (int k = 0; k < NK; k++) {
            __syncthreads();
            for (int i = threadIdx.x; i < N * 16; i += 128) {
                const int n = i >> 4, kk = i & 15;
                bs[((n >> 3) * 2 + (kk >> 3)) * 64 + (n & 7) * 8 + (kk & 7)] =
                    Bt[((size_t)k * N + n) * 16 + kk];
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
            uint32_t a[4];
            a_frag(At + k * 64 * 16, 16 * warp, lane, a);
            const uint64_t db = lbo_k ? desc(bs, 128, 256) : desc(bs, 256, 128);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            wgmma<N>(d, a, db);
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        }
        float *Dt = D + (size_t)t * 64 * N;
        for (int j = 0; j < N / 8; j++)
            for (int i = 0; i < 4; i++) Dt[ACC_IDX(j, i)] = d[4 * j + i];
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

/* one width: returns the sums that differ from mma.sync's with the right layout */
template <int N> static size_t check(int trials) {
    const size_t na = (size_t)trials * NK * 64 * 16, nb = (size_t)trials * NK * N * 16,
                 nc = (size_t)trials * 64 * N;
    uint16_t *A = (uint16_t *)malloc(na * 2), *B = (uint16_t *)malloc(nb * 2);
    float *C = (float *)malloc(nc * 4), *D1 = (float *)malloc(nc * 4);
    float *D2 = (float *)malloc(nc * 4);
    srand(N);
    for (int t = 0; t < trials; t++) {
        /* a third of the trials: the weights' and inputs' usual range; then wide exponents,
         * then sums from zero */
        const int kind = t % 3;
        for (size_t i = 0; i < (size_t)NK * 1024; i++)
            A[(size_t)t * NK * 1024 + i] = bf16_bits(kind == 1 ? wide(20) : wide(3) * 0.02f);
        for (size_t i = 0; i < (size_t)NK * N * 16; i++)
            B[(size_t)t * NK * N * 16 + i] = bf16_bits(kind == 1 ? wide(20) : wide(2));
        for (size_t i = 0; i < (size_t)64 * N; i++)
            C[(size_t)t * 64 * N + i] = kind == 2 ? 0.f : kind == 1 ? wide(30) : wide(4);
    }
    uint16_t *dA, *dB;
    float *dC, *dD;
    LAB_CK(cudaMalloc(&dA, na * 2));
    LAB_CK(cudaMalloc(&dB, nb * 2));
    LAB_CK(cudaMalloc(&dC, nc * 4));
    LAB_CK(cudaMalloc(&dD, nc * 4));
    LAB_CK(cudaMemcpy(dA, A, na * 2, cudaMemcpyHostToDevice));
    LAB_CK(cudaMemcpy(dB, B, nb * 2, cudaMemcpyHostToDevice));
    LAB_CK(cudaMemcpy(dC, C, nc * 4, cudaMemcpyHostToDevice));
    k_mma<N><<<264, 128>>>(dA, dB, dC, dD, trials);
    LAB_CK(cudaMemcpy(D1, dD, nc * 4, cudaMemcpyDeviceToHost));
    /* the reference, for the first trials: double sums of the chain */
    double worst_mma = 0;
    for (int t = 0; t < (trials < 60 ? trials : 60); t++)
        for (int r = 0; r < 64; r++)
            for (int n = 0; n < N; n++) {
                double s = C[((size_t)t * 64 + r) * N + n], mag = fabs(s);
                for (int k = 0; k < NK; k++)
                    for (int kk = 0; kk < 16; kk++) {
                        double p = (double)bf16_val(A[(((size_t)t * NK + k) * 64 + r) * 16 + kk]) *
                                   bf16_val(B[(((size_t)t * NK + k) * N + n) * 16 + kk]);
                        s += p, mag += fabs(p);
                    }
                double e = fabs(D1[((size_t)t * 64 + r) * N + n] - s) / mag;
                if (e > worst_mma) worst_mma = e;
            }
    printf("N = %d, %d trials of %d k-tiles: mma.sync against double sums: largest error %.3g "
           "of the sum of magnitudes\n",
           N, trials, NK, worst_mma);
    size_t right = 0;
    for (int lk = 1; lk >= 0; lk--) {
        LAB_CK(cudaMemset(dD, 0, nc * 4));
        k_wgmma<N><<<264, 128>>>(dA, dB, dC, dD, trials, lk);
        LAB_CK(cudaGetLastError());
        LAB_CK(cudaMemcpy(D2, dD, nc * 4, cudaMemcpyDeviceToHost));
        size_t diff = 0, diff_kind[3] = {0, 0, 0};
        double worst = 0;
        for (size_t i = 0; i < nc; i++) {
            uint32_t u1, u2;
            memcpy(&u1, D1 + i, 4), memcpy(&u2, D2 + i, 4);
            if (u1 != u2) {
                diff++, diff_kind[i / ((size_t)64 * N) % 3]++;
                double e = fabs((double)D1[i] - D2[i]) / (fabs(D1[i]) + 1e-30);
                if (e > worst) worst = e;
            }
        }
        printf("  wgmma.m64n%dk16, %s layout: %zu of %zu sums differ from mma.sync's (usual "
               "%zu, wide %zu, from zero %zu); largest relative difference %.3g\n",
               N, lk ? "the right" : "a wrong", diff, nc, diff_kind[0], diff_kind[1],
               diff_kind[2], worst);
        if (lk) right = diff;
    }
    LAB_CK(cudaFree(dA));
    LAB_CK(cudaFree(dB));
    LAB_CK(cudaFree(dC));
    LAB_CK(cudaFree(dD));
    free(A), free(B), free(C), free(D1), free(D2);
    return right;
}

int main(int argc, char **argv) {
    const int trials = argc > 1 ? atoi(argv[1]) : 20000;
    size_t bad = check<8>(trials) + check<64>(trials / 8) + check<192>(trials / 24);
    printf("%s\n", bad ? "DIFFERENT" : "the same bits");
    return bad != 0;
}
