/* backend/cuda/ring.cuh: bulk copies into shared memory that complete on an mbarrier, and the
 * mbarrier operations of a ring of stages (a block is its own cluster), and tensor copies:
 * gemm.cu's prompt matmul, and bench/racecheck_probe.cu, which runs the same ring under
 * racecheck. */
#ifndef DSPARK_BACKEND_CUDA_RING_CUH
#define DSPARK_BACKEND_CUDA_RING_CUH

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count)
                 : "memory");
}
/* after mbarrier.init: the barriers are seen initialized by the copies that complete on them
 * (and by the blocks of the cluster) */
__device__ __forceinline__ void mbar_init_fence(void) {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* a ring of n slots, by one thread before the block's first barrier: full[i] completes on its
 * one arrival (the copier's expect) and its copies' bytes, empty[i] on `consumers` arrivals */
__device__ __forceinline__ void ring_init(unsigned long long *full, unsigned long long *empty,
                                          int n, unsigned consumers) {
    for (int i = 0; i < n; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], consumers);
    mbar_init_fence();
}
__device__ __forceinline__ void mbar_expect(unsigned long long *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long *b, unsigned parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra W;\n"
                 "}" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                          unsigned long long *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
}

/* a box of a 4-dimensional tensor map (in kernel-parameter space) into dst, 128-byte
 * aligned, completing on b */
__device__ __forceinline__ void tma_load_4d(void *dst, const void *tm, int c0, int c1, int c2,
                                            int c3, unsigned long long *b) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(smem_u32(dst)),
                 "l"(tm), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(b))
                 : "memory");
}
__device__ __forceinline__ void tma_prefetch(const void *tm) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(tm) : "memory");
}

#endif
