/* bench/racecheck_probe.cu: does `compute-sanitizer --tool racecheck` understand a ring of
 * shared-memory slots filled by bulk copies (cp.async.bulk, completion on a "full" mbarrier)
 * and released by the readers on an "empty" mbarrier, the protocol of gemm.cu's k_mmg?
 * One block: thread 0 streams STAGES stages of 4 KB through SLOTS slots, 8 warps sum each
 * stage. `racecheck_probe 0` runs the protocol as k_mmg does; `racecheck_probe 1` leaves out
 * the producer's wait on "empty" (a real write-after-read race on the slots). Both check the
 * sums. If racecheck reports hazards for mode 0 as well, its reports on k_mmg say nothing.
 * Build: nvcc -O2 -arch=sm_90 -Isrc -o racecheck_probe bench/racecheck_probe.cu */
#include "backend/cuda/ring.cuh"

#include <cstdio>
#include <cstdlib>

#define SLOTS  2
#define STAGES 64
#define WORDS  1024 /* floats a stage (4 KB) */

__global__ void k_ring(const float *src, float *out, int skip_empty) {
    __shared__ __align__(128) float ring[SLOTS][WORDS];
    __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        ring_init(full, empty, SLOTS, 8);
    }
    __syncthreads();
    if (tid == 0)
        for (int s = 0; s < SLOTS; s++)
            mbar_expect(&full[s], WORDS * 4), bulk_copy(ring[s], src + s * WORDS, WORDS * 4, &full[s]);
    float sum = 0.f;
    for (int s = 0; s < STAGES; s++) {
        if (tid == 0 && s > 0 && s - 1 + SLOTS < STAGES) { /* stage s - 1's slot, refilled */
            const int r = s - 1 + SLOTS;
            if (!skip_empty) mbar_wait(&empty[r % SLOTS], ((s - 1) / SLOTS) & 1);
            mbar_expect(&full[r % SLOTS], WORDS * 4);
            bulk_copy(ring[r % SLOTS], src + (size_t)r * WORDS, WORDS * 4, &full[r % SLOTS]);
        }
        mbar_wait(&full[s % SLOTS], (s / SLOTS) & 1);
        for (int i = warp * 128 + lane; i < warp * 128 + 128; i += 32) sum += ring[s % SLOTS][i];
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s % SLOTS]);
    }
    out[tid] = sum;
}

int main(int argc, char **argv) {
    int skip = argc > 1 ? atoi(argv[1]) : 0;
    size_t n = (size_t)STAGES * WORDS;
    float *h = (float *)malloc(n * sizeof(float)), *src, *out, ho[256];
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 7);
    if (cudaMalloc(&src, n * sizeof(float)) || cudaMalloc(&out, sizeof ho)) return 1;
    cudaMemcpy(src, h, n * sizeof(float), cudaMemcpyHostToDevice);
    k_ring<<<1, 256>>>(src, out, skip);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("error: %s\n", cudaGetErrorString(e));
        return 1;
    }
    cudaMemcpy(ho, out, sizeof ho, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int t = 0; t < 256; t++) { /* thread t sums words 128 w + lane + 32 i of every stage */
        double want = 0;
        for (int s = 0; s < STAGES; s++)
            for (int i = (t >> 5) * 128 + (t & 31); i < (t >> 5) * 128 + 128; i += 32)
                want += h[(size_t)s * WORDS + i];
        bad += ho[t] != (float)want;
    }
    printf("mode %d (%s): %d of 256 sums wrong\n", skip,
           skip ? "no wait on empty" : "the ring's protocol", bad);
    return 0;
}
