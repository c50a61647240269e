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
    if (kv->gpu) {
        int rc = gpu_kv_grow(kv->gpu, cap, kv->len, (int)((size_t)kv->n_layers * kv->n_kv_heads),
                             kv->head_dim);
        if (!rc) kv->cap = cap;
        return rc;
    }
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

/* Rows [0, n) of every (layer, head), K then V: the export layout [2][n_layers][n_kv_heads][n][D]
 * matches the cache's own with cap = n, so a cache with cap == n is one block. */
static size_t heads_of(const struct kv_cache *kv) {
    return (size_t)kv->n_layers * (size_t)kv->n_kv_heads;
}

size_t kv_row_floats(const struct kv_cache *kv) {
    return 2 * heads_of(kv) * (size_t)kv->head_dim;
}

int kv_copy_prefix(struct kv_cache *dst, const struct kv_cache *src, int n) {
    if (!dst->gpu != !src->gpu) return ERR_UNSUPPORTED;
    if (n < 0 || n > src->len || n > dst->cap || dst->n_layers != src->n_layers ||
        dst->n_kv_heads != src->n_kv_heads || dst->head_dim != src->head_dim)
        return ERR_ARG;
    if (dst->gpu) {
        int rc = gpu_kv_copy(dst->gpu, src->gpu, n, (int)heads_of(src), src->head_dim);
        if (!rc) dst->len = n;
        return rc;
    }
    size_t D = (size_t)src->head_dim, rows = sizeof(float) * (size_t)n * D;
    for (size_t h = 0; h < heads_of(src); h++) {
        memcpy(dst->k + h * (size_t)dst->cap * D, src->k + h * (size_t)src->cap * D, rows);
        memcpy(dst->v + h * (size_t)dst->cap * D, src->v + h * (size_t)src->cap * D, rows);
    }
    dst->len = n;
    return OK;
}

int kv_export(const struct kv_cache *kv, int n, float *out) {
    if (n < 0 || n > kv->len) return ERR_ARG;
    if (kv->gpu) return gpu_kv_export(kv->gpu, n, (int)heads_of(kv), kv->head_dim, out);
    size_t D = (size_t)kv->head_dim, per = (size_t)n * D, H = heads_of(kv);
    for (size_t h = 0; h < H; h++) {
        memcpy(out + h * per, kv->k + h * (size_t)kv->cap * D, sizeof(float) * per);
        memcpy(out + (H + h) * per, kv->v + h * (size_t)kv->cap * D, sizeof(float) * per);
    }
    return OK;
}

int kv_import(struct kv_cache *kv, const float *in, int n_in, int n) {
    if (n < 0 || n > n_in || n > kv->cap) return ERR_ARG;
    if (kv->gpu) {
        int rc = gpu_kv_import(kv->gpu, in, n_in, n, (int)heads_of(kv), kv->head_dim);
        if (!rc) kv->len = n;
        return rc;
    }
    size_t D = (size_t)kv->head_dim, per = (size_t)n_in * D, H = heads_of(kv);
    for (size_t h = 0; h < H; h++) {
        memcpy(kv->k + h * (size_t)kv->cap * D, in + h * per, sizeof(float) * (size_t)n * D);
        memcpy(kv->v + h * (size_t)kv->cap * D, in + (H + h) * per, sizeof(float) * (size_t)n * D);
    }
    kv->len = n;
    return OK;
}

void kv_compact(struct kv_cache *kv) {
    if (kv->gpu || kv->len >= kv->cap) return;
    int cap = kv->len > 0 ? kv->len : 1;
    size_t D = (size_t)kv->head_dim, H = heads_of(kv);
    /* the new stride is smaller, so moving heads in order never overwrites one not yet moved */
    for (size_t h = 1; h < H; h++) {
        memmove(kv->k + h * (size_t)cap * D, kv->k + h * (size_t)kv->cap * D,
                sizeof(float) * (size_t)kv->len * D);
        memmove(kv->v + h * (size_t)cap * D, kv->v + h * (size_t)kv->cap * D,
                sizeof(float) * (size_t)kv->len * D);
    }
    size_t bytes = sizeof(float) * H * (size_t)cap * D;
    float *k = realloc(kv->k, bytes), *v = realloc(kv->v, bytes);
    if (k) kv->k = k; /* a failed shrink keeps the larger block, which is still valid */
    if (v) kv->v = v;
    kv->cap = cap;
}
