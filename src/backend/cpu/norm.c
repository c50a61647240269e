/* backend/cpu/norm.c: RMSNorm and the SwiGLU activation. The sum of squares is accumulated
 * in double so the result does not depend on vector width. */
#include "backend/cpu/cpu.h"

#include <math.h>

void cpu_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

void cpu_rmsnorm(float *y, const float *x, const float *w, int n, int d, float eps, int bf16) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / d + (double)eps));
        if (bf16) {
            for (int i = 0; i < d; i++) yr[i] = bf16_round(w[i] * bf16_round(xr[i] * inv));
        } else {
            for (int i = 0; i < d; i++) yr[i] = w[i] * (xr[i] * inv);
        }
    }
}

void cpu_silu_mul(float *g, const float *u, size_t n, int bf16) {
    if (bf16) {
        for (size_t i = 0; i < n; i++)
            g[i] = bf16_round(bf16_round(g[i] / (1.0f + expf(-g[i]))) * u[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}
