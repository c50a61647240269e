/* bench/bench_sample.c: the CPU sampler alone on one row of logits, as every sampled token of a
 * model with a vocabulary of that size pays it (after penalties): sample_dist_build() and one
 * sample_dist_draw(), for no truncation, nucleus only, top-k with nucleus, and greedy. The
 * logits are random, with one token in 97 raised, so that a nucleus holds a few hundred
 * tokens. Times are the minimum of REPS runs, in microseconds.
 *
 *   make build/bench_sample && build/bench_sample [VOCAB] [REPS]   (default 151936 200)
 */
#include "base/timer.h"
#include "sample/dist.h"
#include "sample/rng.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int V = argc > 1 ? atoi(argv[1]) : 151936, reps = argc > 2 ? atoi(argv[2]) : 200;
    if (V < 64 || reps < 1) {
        fprintf(stderr, "usage: bench_sample [VOCAB >= 64] [REPS >= 1]\n");
        return 2;
    }
    float *logits = malloc(sizeof(float) * (size_t)V);
    void *mem = malloc(sample_dist_bytes(V));
    if (!logits || !mem) return 1;
    struct rng r;
    rng_seed(&r, 1);
    for (int i = 0; i < V; i++) logits[i] = 8.0f * (rng_float(&r) - 0.5f) + (i % 97 ? 0 : 6);
    struct sample_dist d;
    sample_dist_init(&d, mem, V);
    static const struct {
        const char *name;
        float top_p;
        int top_k;
    } cases[] = {{"temperature 0.7, no truncation", 1.0f, 0},
                 {"temperature 0.7, top_p 0.9", 0.9f, 0},
                 {"temperature 0.7, top_k 40, top_p 0.95", 0.95f, 40}};
    printf("vocabulary %d, minimum of %d runs\n", V, reps);
    long sink = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double best = 1e9;
        for (int i = 0; i < reps; i++) {
            double t0 = timer_now();
            if (sample_dist_build(&d, logits, 0.7f, cases[c].top_k, cases[c].top_p)) return 1;
            sink += sample_dist_draw(&d, &r);
            double t = timer_now() - t0;
            best = t < best ? t : best;
        }
        printf("  %-40s %8.1f us  (%d tokens kept)\n", cases[c].name, best * 1e6, d.n);
    }
    double best = 1e9;
    for (int i = 0; i < reps; i++) {
        double t0 = timer_now();
        sink += sample_greedy(logits, V);
        double t = timer_now() - t0;
        best = t < best ? t : best;
    }
    printf("  %-40s %8.1f us\n", "greedy", best * 1e6);
    free(logits), free(mem);
    return sink < 0;
}
