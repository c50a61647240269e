/* backend/cpu/cpu.h: the CPU kernels. Activations are float32; weights are F32, F16 or BF16
 * ([m, k] row-major, m = out features). Every kernel is batch-invariant: the value computed
 * for one row depends only on that row's inputs, never on how many rows share the call or on
 * the thread count, so a verify pass over k tokens gives bit-identical rows to k single steps.
 * Kernels split work over the pool's threads; the pool must not be used concurrently. */
#ifndef DSPARK_BACKEND_CPU_H
#define DSPARK_BACKEND_CPU_H

#include "base/thread.h"
#include "tensor/dtype.h"

/* y[n, m] = x[n, k] · W[m, k]^T (+ bias[m] when bias != NULL). y must not alias x. */
void cpu_matmul(struct pool *pool, float *y, const float *x, const void *w, enum dtype wt,
                const float *bias, int n, int k, int m);

#endif
