/* tests/unit/test_cpu_ops.c: the float32 helpers of backend/cpu/ops.c against double references,
 * on lengths around the vector width. */
#include "backend/cpu/cpu.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static const int lens[] = {0, 1, 5, 15, 16, 17, 31, 32, 33, 63, 128, 1000};
#define N_LENS (int)(sizeof lens / sizeof *lens)

TEST(dot_axpy_scale_add) {
    float a[1000], b[1000], y[1000], y0[1000];
    for (int li = 0; li < N_LENS; li++) {
        int n = lens[li];
        for (int i = 0; i < n; i++) a[i] = frand(), b[i] = frand(), y[i] = y0[i] = frand();
        double s = 0, abs_s = 0;
        for (int i = 0; i < n; i++) s += (double)a[i] * b[i], abs_s += fabs((double)a[i] * b[i]);
        CHECK_NEAR(cpu_dot(a, b, n), s, 1e-6 * abs_s + 1e-30);
        cpu_axpy(y, 0.5f, a, n);
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= fabs(y[i] - (y0[i] + 0.5 * a[i])) <= 1e-6;
        CHECK(ok);
        cpu_scale(y, 2.0f, n);
        for (int i = 0; i < n; i++) ok &= fabs(y[i] - 2 * (y0[i] + 0.5 * a[i])) <= 3e-6;
        CHECK(ok);
        for (int i = 0; i < n; i++) y[i] = y0[i];
        cpu_add(y, a, (size_t)n);
        for (int i = 0; i < n; i++) ok &= y[i] == y0[i] + a[i];
        CHECK(ok);
    }
    /* axpy leaves elements past n alone */
    for (int i = 0; i < 40; i++) y[i] = 1.0f;
    cpu_axpy(y, 1.0f, a, 17);
    CHECK(y[17] == 1.0f && y[39] == 1.0f);
}

TEST(exp_accuracy) {
    float x[1000], y[1000];
    int n = 1000;
    double worst = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < n; i++) x[i] = frand() * 87.0f;
        cpu_exp(y, x, n);
        for (int i = 0; i < n; i++) {
            double want = exp((double)x[i]);
            double rel = fabs(y[i] - want) / want;
            if (rel > worst) worst = rel;
        }
    }
    CHECK(worst < 4e-7); /* about 3 ulp */
    float sp[7] = {-INFINITY, INFINITY, 0.0f, -200.0f, 100.0f, -87.0f, NAN}, r[7];
    cpu_exp(r, sp, 7);
    CHECK(r[0] == 0.0f);
    CHECK(isinf(r[1]) && r[1] > 0);
    CHECK(r[2] == 1.0f);
    CHECK(r[3] == 0.0f);
    CHECK(isinf(r[4]));
    CHECK_NEAR(r[5], exp(-87.0), 1e-6 * exp(-87.0));
    CHECK(isnan(r[6]));
    /* in place */
    for (int i = 0; i < 33; i++) x[i] = frand();
    for (int i = 0; i < 33; i++) y[i] = x[i];
    cpu_exp(x, x, 33);
    int ok = 1;
    for (int i = 0; i < 33; i++) ok &= fabs(x[i] - exp((double)y[i])) <= 1e-6 * exp((double)y[i]);
    CHECK(ok);
}

TEST(softmax) {
    float x[1000], x0[1000];
    for (int li = 1; li < N_LENS; li++) {
        int n = lens[li];
        for (int i = 0; i < n; i++) x[i] = x0[i] = frand() * 10;
        x[n / 2] = x0[n / 2] = -INFINITY; /* a masked position */
        if (n == 1) x[0] = x0[0] = 3.0f;
        cpu_softmax(x, n);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = x0[i] > mx ? x0[i] : mx;
        for (int i = 0; i < n; i++) sum += exp((double)x0[i] - mx);
        int ok = 1;
        double total = 0;
        for (int i = 0; i < n; i++) {
            double want = exp((double)x0[i] - mx) / sum;
            ok &= fabs(x[i] - want) <= 1e-6 * want + 1e-9;
            total += x[i];
        }
        CHECK(ok);
        CHECK_NEAR(total, 1.0, 1e-5);
    }
    float m[3] = {-INFINITY, -INFINITY, -INFINITY};
    cpu_softmax(m, 3);
    CHECK(m[0] == 0.0f && m[2] == 0.0f);
}

int main(void) {
    RUN(dot_axpy_scale_add);
    RUN(exp_accuracy);
    RUN(softmax);
    return test_report();
}
