/* backend/cuda/wgmma.cuh: Hopper's warpgroup mma (wgmma.m64nNk16, bf16 products summed in
 * float32) for the prompt kernel (gemm.cu), with A (the weights, a warp's strip of 16 rows
 * in mma.m16n8k16's fragment order) from registers and B (the inputs, xb's core matrices)
 * from shared memory. On the H200 it gives the same bits as mma.sync.m16n8k16 over the same
 * k-tiles (bench/wgmma_bits.cu: 36.9 M sums), so rows keep the bits of decode steps. Only
 * code built for sm_90a has it (MG_WGMMA). */
#ifndef DSPARK_BACKEND_CUDA_WGMMA_CUH
#define DSPARK_BACKEND_CUDA_WGMMA_CUH

#include "backend/cuda/ring.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MG_WGMMA 1
#else
#define MG_WGMMA 0
#endif

#if MG_WGMMA
/* the shared-memory descriptor of B: k halves (core matrices) 128 bytes apart, n-tiles 256, no
 * swizzle */
__device__ __forceinline__ uint64_t wg_desc(const void *p) {
    return (uint64_t)((smem_u32(p) >> 4) & 0x3fff) | (uint64_t)(128 >> 4) << 16 |
           (uint64_t)(256 >> 4) << 32;
}
__device__ __forceinline__ void wg_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_wait0(void) {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
/* the compiler must not touch r before the wgmma reading or writing it has been waited for */
template <int N> __device__ __forceinline__ void wg_keep(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void wg_keep(uint4 &r) {
    asm volatile("" : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)::"memory");
}

__device__ __forceinline__ void wgmma_n96(float (&d)[48], uint4 a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,"
                 "%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,"
                 "%41,%42,%43,%44,%45,%46,%47}, "
                 "{%48,%49,%50,%51}, %52, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db));
}

__device__ __forceinline__ void wgmma_n32(float (&d)[16], uint4 a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
                 "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db));
}

__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint4 a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,"
                 "%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,"
                 "%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
                 "%60,%61,%62,%63}, "
                 "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}"
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
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db));
}

/* d[N / 2] += the warpgroup's 64 rows of A x B (N columns) */
template <int N> __device__ __forceinline__ void wgmma(float (&d)[N / 2], uint4 a, uint64_t db) {
    if constexpr (N == 96) wgmma_n96(d, a, db);
    if constexpr (N == 32) wgmma_n32(d, a, db);
    if constexpr (N == 128) wgmma_n128(d, a, db);
}
#endif

#endif
