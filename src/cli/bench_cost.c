/* cli/bench_cost.c: see bench_cost.h. Token ids are a fixed synthetic pattern: the cost of a
 * forward pass does not depend on which tokens it runs. */
#include "cli/bench_cost.h"

#include "base/err.h"
#include "base/timer.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

#define WARMUP 3
#define REPS   15

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int bench_cost(struct model *m, const char *name, int n_ctx, int max_width, cJSON *json) {
    const struct hf_config *c = model_config(m);
    if (n_ctx < 1) n_ctx = 1;
    if (n_ctx + max_width > c->max_pos) n_ctx = c->max_pos - max_width;
    if (n_ctx < 1 || max_width < 1) return ERR_ARG;
    struct kv_cache *kv = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_ctx + max_width));
    float *logits = malloc(sizeof(float) * (size_t)max_width * (size_t)c->vocab_size);
    int rc = ids && logits ? kv_new(m, n_ctx + max_width, &kv) : ERR_NOMEM;
    for (int i = 0; !rc && i < n_ctx + max_width; i++) ids[i] = 16 + (i * 37) % 1000;
    if (!rc) rc = model_forward(m, kv, ids, n_ctx, NULL, 0);
    cJSON *arr = NULL;
    if (!rc && json) {
        cJSON *o = cJSON_AddObjectToObject(json, name);
        cJSON_AddNumberToObject(o, "ctx", n_ctx);
        arr = cJSON_AddArrayToObject(o, "widths");
    }
    if (!rc)
        printf("\nforward cost of %s by width (context %d, median of %d):\n", name, n_ctx, REPS);
    double base = 0;
    for (int w = 1; !rc && w <= max_width; w++) {
        double t[REPS];
        for (int r = 0; !rc && r < WARMUP + REPS; r++) {
            double t0 = timer_now();
            rc = model_forward(m, kv, ids + n_ctx, w, logits, 1);
            if (r >= WARMUP) t[r - WARMUP] = timer_now() - t0;
            kv_truncate(kv, n_ctx);
        }
        if (rc) break;
        qsort(t, REPS, sizeof t[0], cmp_double);
        double ms = 1e3 * t[REPS / 2];
        if (w == 1) base = ms;
        printf("  width %2d: %7.3f ms  %5.2fx width 1  %6.3f ms per row\n", w, ms, ms / base,
               ms / w);
        if (arr) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "width", w);
            cJSON_AddNumberToObject(x, "ms", ms);
            cJSON_AddNumberToObject(x, "ratio", ms / base);
            cJSON_AddItemToArray(arr, x);
        }
    }
    kv_free(kv);
    free(logits);
    free(ids);
    return rc;
}
