/* backend/cuda/ring.cuh: bulk copies into shared memory that complete on an mbarrier, and the
 * mbarrier operations of a ring of stages: gemm.cu's prompt matmul (a block alone, or a
 * cluster of two sharing a stage's weights), and bench/racecheck_probe.cu, which runs the
 * same ring under racecheck. */
#ifndef DSPARK_BACKEND_CUDA_RING_CUH
#define DSPARK_BACKEND_CUDA_RING_CUH

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count)
                 : "memory");
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

/* the wait of a slot that blocks of the cluster release (their arrivals are releases at
 * cluster scope) */
__device__ __forceinline__ void mbar_wait_cluster(unsigned long long *b, unsigned parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "W: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra W;\n"
                 "}" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
/* an arrival on the barrier at b's place in block `rank` of the cluster */
__device__ __forceinline__ void mbar_arrive_peer(unsigned long long *b, unsigned rank) {
    asm volatile("{\n"
                 ".reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n"
                 "}" ::"r"(smem_u32(b)),
                 "r"(rank)
                 : "memory");
}
/* bytes from global memory to dst's place in each block of the cluster that mask names, each
 * completing on the mbarrier at b's place in that block */
__device__ __forceinline__ void bulk_copy_mc(void *dst, const void *src, unsigned bytes,
                                             unsigned long long *b, unsigned short mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b)), "h"(mask)
                 : "memory");
}
/* every thread of every block of the cluster */
__device__ __forceinline__ void cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

#endif
