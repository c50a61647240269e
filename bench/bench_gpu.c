/* bench/bench_gpu.c: the CUDA forward's speed on one model folder: prefill tokens/s, B=1
 * decode tokens/s against the weight-read roofline, and the cost of a pass over k new tokens
 * (a verify round) relative to one. Build with `make CUDA=1 build/cuda/bench_gpu`; run on the
 * GPU machine: bench_gpu MODEL_DIR [bandwidth_GBps]. Minimum of several runs per point. */
#include "backend/gpu.h"
#include "base/timer.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

static double best_of(struct model *m, struct kv_cache *kv, int base, const int32_t *ids, int n,
                      float *logits, int reps) {
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        kv_truncate(kv, base);
        double t0 = timer_now();
        if (model_forward(m, kv, ids, n, logits, 1)) return -1;
        double t = timer_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [bandwidth_GBps, default 4300]\n", argv[0]);
        return 2;
    }
    double bw = argc > 2 ? atof(argv[2]) : 4300;
    struct model *m;
    if (model_load(argv[1], &(struct model_opts){.n_threads = 1, .gpu = 1}, &m)) return 1;
    const struct hf_config *c = model_config(m);
    int V = c->vocab_size, P = 512;
    struct kv_cache *kv;
    if (kv_new(m, P + 256, &kv)) return 1;
    int32_t *ids = malloc(sizeof(int32_t) * (P + 256));
    float *logits = malloc(sizeof(float) * (size_t)V * 32);
    for (int i = 0; i < P + 256; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    model_forward(m, kv, ids, 64, NULL, 0); /* warm-up */
    kv_truncate(kv, 0);
    double t0 = timer_now();
    model_forward(m, kv, ids, P, NULL, 0);
    double pre = timer_now() - t0;
    double one = best_of(m, kv, P, ids + P, 1, logits, 20);
    double wb = (double)model_weight_bytes(m);
    printf("%s on %s: %.2f GB of weights per step\n", argv[1], gpu_device_name(), wb / 1e9);
    printf("prefill %d tokens: %.1f ms, %.0f tok/s\n", P, pre * 1e3, P / pre);
    printf("decode (B=1, context %d): %.3f ms/token, %.1f tok/s; roofline %.3f ms at %.0f GB/s: "
           "%.0f%%\n",
           P, one * 1e3, 1 / one, wb / (bw * 1e9) * 1e3, bw, 100 * (wb / (bw * 1e9)) / one);
    printf("verify cost by width (x one token):");
    for (int k = 2; k <= 32; k *= 2)
        printf("  %d: %.2fx", k, best_of(m, kv, P, ids + P, k, logits, 10) / one);
    printf("\n");
    kv_free(kv);
    model_free(m);
    free(ids), free(logits);
    return 0;
}
