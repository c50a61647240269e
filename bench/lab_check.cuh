/* bench/lab_check.cuh: LAB_CK(call) for the standalone CUDA programs of bench/ (the labs and
 * the bit checks): a CUDA runtime call whose error is printed with its place, exit status 1 */
#ifndef DSPARK_BENCH_LAB_CHECK_CUH
#define DSPARK_BENCH_LAB_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define LAB_CK(x)                                                                                  \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
