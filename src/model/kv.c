/* model/kv.c: a contiguous per-sequence KV cache, float32, [layer][kv_head][pos][D].
 * Rollback is a length change: rows past len are simply overwritten later. */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

int kv_new(const struct model *m, int max_ctx, struct kv_cache **out) {
    *out = NULL;
    const struct hf_config *c = &m->cfg;
    if (max_ctx <= 0 || max_ctx > c->max_pos) max_ctx = c->max_pos;
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return ERR_NOMEM;
    kv->n_layers = c->n_layers;
    kv->n_kv_heads = c->n_kv_heads;
    kv->head_dim = c->head_dim;
    kv->cap = max_ctx;
    if (m->gpu) { /* the K/V live in device memory */
        int rc = gpu_kv_new(m->gpu, max_ctx, &kv->gpu);
        if (rc) {
            free(kv);
            return rc;
        }
        *out = kv;
        return OK;
    }
    size_t n = (size_t)c->n_layers * c->n_kv_heads * (size_t)max_ctx * c->head_dim;
    kv->k = malloc(n * sizeof(float));
    kv->v = malloc(n * sizeof(float));
    if (!kv->k || !kv->v) {
        log_error("cannot allocate a KV cache of %d positions (%.1f MB)", max_ctx,
                  2.0 * (double)n * 4 / 1e6);
        log_hint("use a smaller context (--ctx)");
        kv_free(kv);
        return ERR_NOMEM;
    }
    *out = kv;
    return OK;
}

void kv_free(struct kv_cache *kv) {
    if (!kv) return;
    gpu_kv_free(kv->gpu);
    free(kv->k);
    free(kv->v);
    free(kv);
}

int kv_len(const struct kv_cache *kv) {
    return kv->len;
}
int kv_capacity(const struct kv_cache *kv) {
    return kv->cap;
}

void kv_truncate(struct kv_cache *kv, int n) {
    if (n < 0) n = 0;
    if (n < kv->len) kv->len = n;
}

int kv_reserve(struct kv_cache *kv, int cap) {
    if (cap <= kv->cap) return OK;
    if (kv->gpu) return ERR_UNSUPPORTED; /* device caches do not grow yet */
    size_t D = (size_t)kv->head_dim, heads = (size_t)kv->n_layers * kv->n_kv_heads;
    float *k = malloc(sizeof(float) * heads * (size_t)cap * D);
    float *v = malloc(sizeof(float) * heads * (size_t)cap * D);
    if (!k || !v) {
        free(k), free(v);
        return ERR_NOMEM;
    }
    for (size_t h = 0; h < heads; h++) { /* [layer][head][pos][D]: each head's rows move */
        memcpy(k + h * (size_t)cap * D, kv->k + h * (size_t)kv->cap * D,
               sizeof(float) * (size_t)kv->len * D);
        memcpy(v + h * (size_t)cap * D, kv->v + h * (size_t)kv->cap * D,
               sizeof(float) * (size_t)kv->len * D);
    }
    free(kv->k), free(kv->v);
    kv->k = k, kv->v = v, kv->cap = cap;
    return OK;
}

size_t kv_bytes(const struct kv_cache *kv) {
    return 2 * sizeof(float) * (size_t)kv->n_layers * kv->n_kv_heads * (size_t)kv->cap *
           (size_t)kv->head_dim;
}
