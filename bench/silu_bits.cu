/* bench/silu_bits.cu: whether the prompt matmuls' SwiGLU (silu_mul8, mm.cuh) gives the same
 * bits as the decode matmuls' (silu_mul): g / (1 + expf(-g)) x u, whose quotient silu_mul8
 * takes by silu_fast, without the division's slow-path branch, where silu_fast_ok holds.
 *
 * - Every float g (all 2^32 bit patterns): silu_fast(g, d) against the division g / d, where
 *   silu_fast_ok(g, d); how many g take it, and how many of those differ (NaNs equal NaNs).
 * - The same with __fdividef (2 ulp) in silu_fast's place: the check can fail.
 * - silu_mul8 against silu_mul over random rows of 8 (g, u) with a random scale s, g over
 *   exponents of +-40, some of each row's g extreme (0, +-inf, NaN, below -88).
 * Exit status 1 when anything differs.
 *
 *   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -o /tmp/silu_bits bench/silu_bits.cu
 *   /tmp/silu_bits */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/mm.cuh"
#include "lab_check.cuh"

__device__ __forceinline__ bool same_bits(float a, float b) {
    return __float_as_uint(a) == __float_as_uint(b) || (isnan(a) && isnan(b));
}

/* n[0]: g taking the fast quotient; of those, n[1] differing, n[2] differing with __fdividef
 * in its place; first[0 .. 1]: the first differing g of each */
__global__ void k_all(unsigned long long *n, unsigned *first) {
    unsigned long long c[3] = {0, 0, 0};
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (1ull << 32);
         i += (uint64_t)gridDim.x * blockDim.x) {
        const float g = __uint_as_float((unsigned)i), d = 1.0f + expf(-g), ref = g / d;
        if (!silu_fast_ok(g, d)) continue;
        c[0]++;
        if (!same_bits(silu_fast(g, d), ref)) {
            c[1]++;
            atomicMin(first, (unsigned)i);
        }
        if (!same_bits(__fdividef(g, d), ref)) {
            c[2]++;
            atomicMin(first + 1, (unsigned)i);
        }
    }
    for (int k = 0; k < 3; k++) atomicAdd(n + k, c[k]);
}

__device__ float rnd(uint64_t *s) { /* xorshift: a float of random sign, exponent +-40 */
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    const unsigned b = (unsigned)(*s >> 11);
    return (b & 1 ? -1.0f : 1.0f) * ldexpf(1.0f + (b >> 9) * 0x1p-23f, (int)((b >> 1) % 81) - 40);
}

/* rows of 8: silu_mul8 against silu_mul, n[0] rows, n[1] values differing */
__global__ void k_rows(unsigned long long *n, int rows) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    uint64_t st = 0x9e3779b97f4a7c15ull * (i + 1);
    float gv[8], uv[8], h[8];
    const float s = fabsf(rnd(&st)) * 0x1p-30f; /* 1 / rms: positive */
    for (int e = 0; e < 8; e++) gv[e] = rnd(&st), uv[e] = rnd(&st);
    const int k = (int)(st % 97); /* some rows with an extreme g */
    if (k < 8) gv[k] = k & 1 ? 0.0f : -1000.0f;
    if (k == 8) gv[3] = __int_as_float(0x7fc00000);
    if (k == 9) gv[5] = -INFINITY;
    silu_mul8(gv, uv, s, h);
    int bad = 0;
    for (int e = 0; e < 8; e++) bad += !same_bits(h[e], silu_mul(gv[e] * s, uv[e] * s));
    atomicAdd(n, 1ull);
    if (bad) atomicAdd(n + 1, (unsigned long long)bad);
}

int main(void) {
    unsigned long long *n, hn[5];
    unsigned *first, hf[2] = {~0u, ~0u};
    LAB_CK(cudaMalloc(&n, sizeof hn));
    LAB_CK(cudaMalloc(&first, sizeof hf));
    LAB_CK(cudaMemset(n, 0, sizeof hn));
    LAB_CK(cudaMemcpy(first, hf, sizeof hf, cudaMemcpyHostToDevice));
    k_all<<<132 * 16, 256>>>(n, first);
    const int rows = 1 << 22;
    k_rows<<<rows / 256, 256>>>(n + 3, rows);
    LAB_CK(cudaGetLastError());
    LAB_CK(cudaMemcpy(hn, n, sizeof hn, cudaMemcpyDeviceToHost));
    LAB_CK(cudaMemcpy(hf, first, sizeof hf, cudaMemcpyDeviceToHost));
    printf("silu_fast: %llu of 2^32 floats g take it; %llu differ from the division", hn[0], hn[1]);
    if (hn[1]) printf(" (first g 0x%08x)", hf[0]);
    printf("\n__fdividef in its place (the check can fail): %llu of %llu differ (first g 0x%08x)\n",
           hn[2], hn[0], hf[1]);
    printf("silu_mul8 against silu_mul: %llu rows of 8, %llu values differ\n", hn[3], hn[4]);
    const int fail = hn[1] || hn[4] || !hn[2] || hn[0] < (1ull << 31);
    puts(fail ? "FAIL" : "ok");
    return fail;
}
