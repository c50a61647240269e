/* model/kv.c: a per-sequence KV cache, float32, [layer][kv_head][pos][D], whose first
 * positions may be another cache's rows, shared (a reference-counted base: the prefix cache
 * hands one entry's rows to every sequence that starts with them, without a copy). Rollback is
 * a length change: rows past len are simply overwritten later. */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* heads = n_layers * n_kv_heads blocks of rows */
static size_t heads_of(const struct kv_cache *kv) {
    return (size_t)kv->n_layers * (size_t)kv->n_kv_heads;
}

/* kv's own rows: rows positions per head */
static int alloc_own(struct kv_cache *kv, int rows) {
    size_t n = heads_of(kv) * (size_t)(rows > 0 ? rows : 1) * (size_t)kv->head_dim;
    kv->k = malloc(n * sizeof(float));
    kv->v = malloc(n * sizeof(float));
    if (kv->k && kv->v) return OK;
    free(kv->k), free(kv->v);
    kv->k = kv->v = NULL;
    log_error("cannot allocate a KV cache of %d positions (%.1f MB)", rows,
              2.0 * (double)n * 4 / 1e6);
    log_hint("use a smaller context (--ctx)");
    return ERR_NOMEM;
}

static struct kv_cache *kv_shell(const struct model *m, int cap) {
    const struct hf_config *c = &m->cfg;
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->n_layers = c->n_layers, kv->n_kv_heads = c->n_kv_heads, kv->head_dim = c->head_dim;
    kv->cap = cap, kv->refs = 1;
    return kv;
}

int kv_new(const struct model *m, int max_ctx, struct kv_cache **out) {
    *out = NULL;
    if (max_ctx <= 0 || max_ctx > m->cfg.max_pos) max_ctx = m->cfg.max_pos;
    struct kv_cache *kv = kv_shell(m, max_ctx);
    if (!kv) return ERR_NOMEM;
    int rc = m->gpu ? gpu_kv_new(m->gpu, max_ctx, &kv->gpu) /* K/V in device memory */
                    : alloc_own(kv, max_ctx);
    if (rc) {
        kv_free(kv);
        return rc;
    }
    *out = kv;
    return OK;
}

void kv_free(struct kv_cache *kv) {
    if (!kv || --kv->refs > 0) return; /* still another cache's base */
    gpu_kv_free(kv->gpu);
    kv_free(kv->base);
    free(kv->k);
    free(kv->v);
    free(kv);
}

/* Positions [from, n) of every (layer, head) of src into dst's own rows. */
static void copy_rows(struct kv_cache *dst, const struct kv_cache *src, int from, int n) {
    size_t bytes = sizeof(float) * (size_t)dst->head_dim;
    for (int l = 0; l < dst->n_layers; l++)
        for (int h = 0; h < dst->n_kv_heads; h++)
            for (int j = from; j < n; j++) {
                memcpy(kv_row(dst, 0, l, h, j), kv_row(src, 0, l, h, j), bytes);
                memcpy(kv_row(dst, 1, l, h, j), kv_row(src, 1, l, h, j), bytes);
            }
}

int kv_new_shared(const struct model *m, int max_ctx, struct kv_cache *src, int n,
                  struct kv_cache **out) {
    *out = NULL;
    if (max_ctx <= 0 || max_ctx > m->cfg.max_pos) max_ctx = m->cfg.max_pos;
    if (n < 0 || n > src->len || n > max_ctx) return ERR_ARG;
    if (!m->gpu != !src->gpu) return ERR_UNSUPPORTED; /* a host and a device cache */
    struct kv_cache *kv = kv_shell(m, max_ctx);
    if (!kv) return ERR_NOMEM;
    /* a base has no base: src's own rows past its base are copied */
    struct kv_cache *base = src->base ? src->base : src;
    kv->nb = src->base && src->nb < n ? src->nb : n;
    kv->base = base;
    base->refs++;
    int rc;
    if (m->gpu) {
        rc = gpu_kv_new_shared(m->gpu, max_ctx, base->gpu, kv->nb, &kv->gpu);
        if (!rc) rc = gpu_kv_copy(kv->gpu, src->gpu, kv->nb, n, (int)heads_of(kv), kv->head_dim);
    } else {
        rc = alloc_own(kv, max_ctx - kv->nb);
        if (!rc) copy_rows(kv, src, kv->nb, n);
    }
    if (rc) {
        kv_free(kv);
        return rc;
    }
    kv->len = n;
    *out = kv;
    return OK;
}

/* Makes kv hold its first n positions in rows of its own, with no base. */
static int unshare(struct kv_cache *kv, int n) {
    if (kv->gpu) {
        int rc = gpu_kv_unshare(kv->gpu, n, (int)heads_of(kv), kv->head_dim);
        if (rc) return rc;
    } else {
        struct kv_cache flat = *kv;
        flat.base = NULL, flat.nb = 0, flat.k = flat.v = NULL;
        int rc = alloc_own(&flat, kv->cap);
        if (rc) return rc;
        copy_rows(&flat, kv, 0, n);
        free(kv->k), free(kv->v);
        kv->k = flat.k, kv->v = flat.v;
    }
    kv_free(kv->base);
    kv->base = NULL, kv->nb = 0;
    return OK;
}

int kv_len(const struct kv_cache *kv) {
    return kv->len;
}

int kv_capacity(const struct kv_cache *kv) {
    return kv->cap;
}

int kv_shared(const struct kv_cache *kv) {
    return kv->nb;
}

const struct kv_cache *kv_base(const struct kv_cache *kv) {
    return kv->base;
}

void kv_truncate(struct kv_cache *kv, int n) {
    if (n < 0) n = 0;
    if (n < kv->len) kv->len = n;
    /* positions below the shared ones will be written: they must become rows of kv's own
     * (without the memory for that, the forward refuses to write below the share) */
    if (kv->base && n < kv->nb) unshare(kv, n);
}

int kv_reserve(struct kv_cache *kv, int cap) {
    if (cap <= kv->cap) return OK;
    if (kv->gpu) {
        int rc = gpu_kv_grow(kv->gpu, cap, kv->len, (int)heads_of(kv), kv->head_dim);
        if (!rc) kv->cap = cap;
        return rc;
    }
    struct kv_cache grown = *kv;
    grown.cap = cap, grown.k = grown.v = NULL;
    int rc = alloc_own(&grown, cap - kv->nb);
    if (rc) return rc;
    copy_rows(&grown, kv, kv->nb, kv->len);
    free(kv->k), free(kv->v);
    kv->k = grown.k, kv->v = grown.v, kv->cap = cap;
    return OK;
}

size_t kv_bytes(const struct kv_cache *kv) { /* own rows: a shared base counts with its owner */
    return 2 * sizeof(float) * heads_of(kv) * (size_t)(kv->cap - kv->nb) * (size_t)kv->head_dim;
}

/* The export layout is [2][n_layers][n_kv_heads][n][D]: K rows, then V rows. */
size_t kv_row_floats(const struct kv_cache *kv) {
    return 2 * heads_of(kv) * (size_t)kv->head_dim;
}

int kv_copy_prefix(struct kv_cache *dst, const struct kv_cache *src, int n) {
    if (!dst->gpu != !src->gpu || dst->base) return ERR_UNSUPPORTED;
    if (n < 0 || n > src->len || n > dst->cap || dst->n_layers != src->n_layers ||
        dst->n_kv_heads != src->n_kv_heads || dst->head_dim != src->head_dim)
        return ERR_ARG;
    if (dst->gpu) {
        int rc = gpu_kv_copy(dst->gpu, src->gpu, 0, n, (int)heads_of(src), src->head_dim);
        if (!rc) dst->len = n;
        return rc;
    }
    copy_rows(dst, src, 0, n);
    dst->len = n;
    return OK;
}

int kv_export(const struct kv_cache *kv, int n, float *out) {
    if (n < 0 || n > kv->len) return ERR_ARG;
    if (kv->gpu) return gpu_kv_export(kv->gpu, n, (int)heads_of(kv), kv->head_dim, out);
    size_t D = (size_t)kv->head_dim, H = heads_of(kv), bytes = sizeof(float) * D;
    for (int l = 0; l < kv->n_layers; l++)
        for (int h = 0; h < kv->n_kv_heads; h++) {
            size_t at = ((size_t)l * kv->n_kv_heads + h) * (size_t)n * D;
            for (int j = 0; j < n; j++) {
                memcpy(out + at + (size_t)j * D, kv_row(kv, 0, l, h, j), bytes);
                memcpy(out + H * (size_t)n * D + at + (size_t)j * D, kv_row(kv, 1, l, h, j), bytes);
            }
        }
    return OK;
}

int kv_import(struct kv_cache *kv, const float *in, int n_in, int n) {
    if (n < 0 || n > n_in || n > kv->cap) return ERR_ARG;
    if (kv->base && unshare(kv, 0)) return ERR_NOMEM;
    if (kv->gpu) {
        int rc = gpu_kv_import(kv->gpu, in, n_in, n, (int)heads_of(kv), kv->head_dim);
        if (!rc) kv->len = n;
        return rc;
    }
    if (kv->base && unshare(kv, 0)) return ERR_NOMEM;
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
    int rows_old = kv->cap - kv->nb, rows = kv->len - kv->nb > 0 ? kv->len - kv->nb : 1;
    int held = kv->len - kv->nb > 0 ? kv->len - kv->nb : 0;
    size_t D = (size_t)kv->head_dim, H = heads_of(kv);
    /* the new stride is smaller, so moving heads in order never overwrites one not yet moved */
    for (size_t h = 1; h < H; h++) {
        memmove(kv->k + h * (size_t)rows * D, kv->k + h * (size_t)rows_old * D,
                sizeof(float) * (size_t)held * D);
        memmove(kv->v + h * (size_t)rows * D, kv->v + h * (size_t)rows_old * D,
                sizeof(float) * (size_t)held * D);
    }
    size_t bytes = sizeof(float) * H * (size_t)rows * D;
    float *k = realloc(kv->k, bytes), *v = realloc(kv->v, bytes);
    if (k) kv->k = k; /* a failed shrink keeps the larger block, which is still valid */
    if (v) kv->v = v;
    kv->cap = kv->nb + rows;
}
