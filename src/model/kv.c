/* model/kv.c: a per-sequence KV cache, float32.
 * Host caches are paged: a table of KV_PAGE-position pages, each reference-counted, so that
 * caches share any run of whole pages (a prefix, a share of a share, two entries of the prefix
 * cache that hold the same tokens) and a cache copies a page only when it writes one it
 * shares. Memory follows the positions written, not the capacity. Device caches keep their
 * rows in device memory, the first positions possibly another device cache's (a base).
 * Rollback is a length change: rows past len are overwritten later. */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* heads = n_layers * n_kv_heads blocks of rows */
static size_t heads_of(const struct kv_cache *kv) {
    return (size_t)kv->n_layers * (size_t)kv->n_kv_heads;
}

/* ---- host pages ---- */

static size_t page_floats(const struct kv_cache *kv) {
    return 2 * heads_of(kv) * KV_PAGE * (size_t)kv->head_dim;
}

static size_t page_bytes(const struct kv_cache *kv) {
    return sizeof(struct kv_page) + sizeof(float) * page_floats(kv);
}

static struct kv_page *page_new(const struct kv_cache *kv) {
    size_t b = (page_bytes(kv) + 63) & ~(size_t)63;
    struct kv_page *p = aligned_alloc(64, b);
    if (!p) {
        log_error("cannot allocate KV memory for %d more positions (%.1f MB)", KV_PAGE,
                  (double)b / 1e6);
        log_hint("use a smaller context (--ctx), fewer concurrent sequences (--max-batch) or a "
                 "smaller --kv-pool-mb");
        return NULL;
    }
    p->refs = 1, p->mark = 0;
    return p;
}

static void page_drop(struct kv_page *p) {
    if (p && --p->refs == 0) free(p);
}

static int pages_for(int positions) {
    return (positions + KV_PAGE - 1) >> KV_PAGE_SHIFT;
}

/* the positions of [0, n) in page i */
static int page_positions(int n, int i) {
    int end = (i + 1) << KV_PAGE_SHIFT;
    return (end < n ? end : n) - (i << KV_PAGE_SHIFT);
}

/* A page table of at least `slots` entries, the new ones empty. */
static int table_grow(struct kv_cache *kv, int slots) {
    if (slots <= kv->n_pages) return OK;
    struct kv_page **t = realloc(kv->pages, sizeof *t * (size_t)slots);
    if (!t) return ERR_NOMEM;
    memset(t + kv->n_pages, 0, sizeof *t * (size_t)(slots - kv->n_pages));
    kv->pages = t, kv->n_pages = slots;
    return OK;
}

/* Drops the pages from table slot `first` on. */
static void release_from(struct kv_cache *kv, int first) {
    for (int i = first; i < kv->n_pages; i++) page_drop(kv->pages[i]), kv->pages[i] = NULL;
}

/* Rows [r0, r1) of every (K/V, layer, head) of page s into page d. */
static void copy_page_rows(const struct kv_cache *kv, struct kv_page *d, const struct kv_page *s,
                           int r0, int r1) {
    size_t D = (size_t)kv->head_dim, n = sizeof(float) * (size_t)(r1 - r0) * D;
    for (size_t h = 0; h < 2 * heads_of(kv); h++)
        memcpy(d->rows + (h * KV_PAGE + (size_t)r0) * D, s->rows + (h * KV_PAGE + (size_t)r0) * D,
               n);
}

int kv_writable(struct kv_cache *kv, int from, int to) {
    if (kv->gpu || to <= from) return OK;
    if (table_grow(kv, pages_for(to))) return ERR_NOMEM;
    for (int i = from >> KV_PAGE_SHIFT; i < pages_for(to); i++) {
        struct kv_page *p = kv->pages[i];
        if (p && p->refs == 1) continue;
        struct kv_page *q = page_new(kv);
        if (!q) return ERR_NOMEM;
        int keep = from - (i << KV_PAGE_SHIFT); /* rows of a shared page below `from` */
        if (p && keep > 0) copy_page_rows(kv, q, p, 0, keep);
        kv->pages[i] = q;
        page_drop(p);
    }
    return OK;
}

/* ---- the cache ---- */

static struct kv_cache *kv_shell(const struct model *m, int cap) {
    const struct hf_config *c = &m->cfg;
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->n_layers = c->n_layers, kv->n_kv_heads = c->n_kv_heads, kv->head_dim = c->head_dim;
    kv->cap = cap, kv->refs = 1;
    kv->es = m->gpu ? gpu_model_kv_bytes(m->gpu) : (int)sizeof(float);
    return kv;
}

static int clamp_ctx(const struct model *m, int max_ctx) {
    return max_ctx <= 0 || max_ctx > m->cfg.max_pos ? m->cfg.max_pos : max_ctx;
}

int kv_new(const struct model *m, int max_ctx, struct kv_cache **out) {
    *out = NULL;
    max_ctx = clamp_ctx(m, max_ctx);
    struct kv_cache *kv = kv_shell(m, max_ctx);
    if (!kv) return ERR_NOMEM;
    int rc = m->gpu ? gpu_kv_new(m->gpu, max_ctx, &kv->gpu) /* K/V in device memory */
                    : table_grow(kv, pages_for(max_ctx));
    if (rc) {
        kv_free(kv);
        return rc;
    }
    *out = kv;
    return OK;
}

void kv_free(struct kv_cache *kv) {
    if (!kv || --kv->refs > 0) return; /* still another device cache's base */
    gpu_kv_free(kv->gpu);
    kv_free(kv->base);
    release_from(kv, 0);
    free(kv->pages);
    free(kv);
}

int kv_new_shared(const struct model *m, int max_ctx, struct kv_cache *src, int n,
                  struct kv_cache **out) {
    *out = NULL;
    max_ctx = clamp_ctx(m, max_ctx);
    if (n < 0 || n > src->len || n > max_ctx) return ERR_ARG;
    if (!m->gpu != !src->gpu) return ERR_UNSUPPORTED; /* a host and a device cache */
    struct kv_cache *kv = kv_shell(m, max_ctx);
    if (!kv) return ERR_NOMEM;
    int rc;
    if (m->gpu) {
        /* a base has no base: src's own rows past its base are copied */
        struct kv_cache *base = src->base ? src->base : src;
        kv->nb = src->base && src->nb < n ? src->nb : n;
        kv->base = base;
        base->refs++;
        rc = gpu_kv_new_shared(m->gpu, max_ctx, base->gpu, kv->nb, &kv->gpu);
        if (!rc) rc = gpu_kv_copy(kv->gpu, src->gpu, kv->nb, n, (int)heads_of(kv), kv->head_dim);
    } else if (!(rc = table_grow(kv, pages_for(max_ctx)))) {
        for (int i = 0; i < pages_for(n); i++) (kv->pages[i] = src->pages[i])->refs++;
    }
    if (rc) {
        kv_free(kv);
        return rc;
    }
    kv->len = n;
    *out = kv;
    return OK;
}

/* Makes a device cache hold its first n positions in rows of its own, with no base. */
static int unshare(struct kv_cache *kv, int n) {
    int rc = gpu_kv_unshare(kv->gpu, n, (int)heads_of(kv), kv->head_dim);
    if (rc) return rc;
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

int kv_paged(const struct kv_cache *kv) {
    return !kv->gpu;
}

int kv_shared(const struct kv_cache *kv) {
    if (kv->gpu) return kv->nb;
    int n = 0;
    for (int i = 0; i < pages_for(kv->len); i++)
        if (kv->pages[i] && kv->pages[i]->refs > 1) n += page_positions(kv->len, i);
    return n;
}

const struct kv_cache *kv_base(const struct kv_cache *kv) {
    return kv->base;
}

void kv_truncate(struct kv_cache *kv, int n) {
    if (n < 0) n = 0;
    if (n < kv->len) kv->len = n;
    /* positions below a device cache's shared ones will be written: they must become rows of
     * its own (without the memory for that, the forward refuses to write below the share).
     * A host cache copies a shared page when it writes it. */
    if (kv->base && n < kv->nb) unshare(kv, n);
}

int kv_reserve(struct kv_cache *kv, int cap) {
    if (cap <= kv->cap) return OK;
    int rc = kv->gpu ? gpu_kv_grow(kv->gpu, cap, kv->len, (int)heads_of(kv), kv->head_dim)
                     : table_grow(kv, pages_for(cap));
    if (!rc) kv->cap = cap;
    return rc;
}

/* A device cache's own rows (its base counts with the base). */
static size_t device_bytes(const struct kv_cache *kv) {
    return 2 * (size_t)kv->es * heads_of(kv) * (size_t)(kv->cap - kv->nb) * (size_t)kv->head_dim;
}

size_t kv_page_bytes(const struct kv_cache *kv) {
    return kv->gpu ? (size_t)kv->es * page_floats(kv) : page_bytes(kv);
}

size_t kv_bytes(const struct kv_cache *kv) {
    if (kv->gpu) return device_bytes(kv);
    size_t n = 0;
    for (int i = 0; i < kv->n_pages; i++) n += kv->pages[i] != NULL;
    return n * page_bytes(kv);
}

/* page visit stamps of kv_set_bytes() and kv_shared_with() (one thread uses a model's caches) */
static _Thread_local unsigned stamp;

size_t kv_set_bytes(struct kv_cache *const *kvs, int n) {
    size_t b = 0;
    stamp++;
    for (int i = 0; i < n; i++) {
        const struct kv_cache *kv = kvs[i];
        if (kv->gpu) {
            b += device_bytes(kv);
            const struct kv_cache *base = kv->base;
            int seen = !base; /* a base counts once, and not at all when it is in the set */
            for (int j = 0; j < n && !seen; j++)
                seen = kvs[j] == base || (j < i && kvs[j]->base == base);
            if (!seen) b += device_bytes(base);
            continue;
        }
        for (int p = 0; p < kv->n_pages; p++) {
            struct kv_page *pg = kv->pages[p];
            if (!pg || pg->mark == stamp) continue;
            pg->mark = stamp;
            b += page_bytes(kv);
        }
    }
    return b;
}

int kv_shared_with(const struct kv_cache *kv, struct kv_cache *const *set, int n) {
    if (kv->gpu) return 0;
    stamp++;
    for (int i = 0; i < n; i++) {
        if (set[i]->gpu) continue;
        for (int p = 0; p < set[i]->n_pages; p++)
            if (set[i]->pages[p]) set[i]->pages[p]->mark = stamp;
    }
    int shared = 0;
    for (int i = 0; i < pages_for(kv->len); i++)
        if (kv->pages[i] && kv->pages[i]->mark == stamp) shared += page_positions(kv->len, i);
    return shared;
}

int kv_adopt(struct kv_cache *kv, const struct kv_cache *from, int n) {
    if (kv->gpu || from->gpu || n > kv->len || n > from->len) return 0;
    int adopted = 0;
    size_t pb = sizeof(float) * page_floats(kv);
    for (int i = 0; i < n >> KV_PAGE_SHIFT; i++) { /* whole pages only */
        struct kv_page *p = kv->pages[i], *q = from->pages[i];
        if (p == q || memcmp(p->rows, q->rows, pb)) continue;
        q->refs++;
        page_drop(p);
        kv->pages[i] = q;
        adopted += KV_PAGE;
    }
    return adopted;
}

/* The export layout is [2][n_layers][n_kv_heads][n][D]: K rows, then V rows. */
size_t kv_row_floats(const struct kv_cache *kv) {
    return 2 * heads_of(kv) * (size_t)kv->head_dim;
}

/* Positions [0, n) of every (K/V, layer, head) between a host cache and the export layout of
 * n_flat >= n positions (to_flat: cache -> flat), a page's run of rows at a time. */
static void move_flat(const struct kv_cache *kv, float *flat, int n_flat, int n, int to_flat) {
    size_t D = (size_t)kv->head_dim;
    for (size_t h = 0; h < 2 * heads_of(kv); h++) /* (K/V, layer, head) in export order */
        for (int j = 0; j < n; j += KV_PAGE) {
            size_t bytes = sizeof(float) * D * (size_t)(n - j < KV_PAGE ? n - j : KV_PAGE);
            float *row = kv->pages[j >> KV_PAGE_SHIFT]->rows + h * KV_PAGE * D;
            float *f = flat + (h * (size_t)n_flat + (size_t)j) * D;
            if (to_flat)
                memcpy(f, row, bytes);
            else
                memcpy(row, f, bytes);
        }
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
    dst->len = 0;
    if (kv_writable(dst, 0, n)) return ERR_NOMEM;
    for (int i = 0; i < pages_for(n); i++)
        copy_page_rows(dst, dst->pages[i], src->pages[i], 0, page_positions(n, i));
    dst->len = n;
    return OK;
}

int kv_export(const struct kv_cache *kv, int n, float *out) {
    if (n < 0 || n > kv->len) return ERR_ARG;
    if (kv->gpu) return gpu_kv_export(kv->gpu, n, (int)heads_of(kv), kv->head_dim, out);
    move_flat(kv, out, n, n, 1);
    return OK;
}

int kv_import(struct kv_cache *kv, const float *in, int n_in, int n) {
    if (n < 0 || n > n_in || n > kv->cap) return ERR_ARG;
    if (kv->gpu) {
        if (kv->base && unshare(kv, 0)) return ERR_NOMEM;
        int rc = gpu_kv_import(kv->gpu, in, n_in, n, (int)heads_of(kv), kv->head_dim);
        if (!rc) kv->len = n;
        return rc;
    }
    kv->len = 0;
    if (kv_writable(kv, 0, n)) return ERR_NOMEM;
    move_flat(kv, (float *)in, n_in, n, 0);
    kv->len = n;
    return OK;
}

/* A device cache's room cut to cap positions: a new allocation of the rows kept, the old one
 * freed */
static int shrink_device(struct kv_cache *kv, int cap) {
    int rc = gpu_kv_shrink(kv->gpu, cap, (int)heads_of(kv), kv->head_dim);
    if (!rc) kv->cap = cap;
    return rc;
}

int kv_fit(struct kv_cache *kv) {
    if (!kv->gpu || kv->refs > 1 || kv->cap <= kv->len) return OK;
    return shrink_device(kv, kv->len);
}

/* kv_trim_own() of a device cache */
static int trim_device(struct kv_cache *kv, int max_pages) {
    if (kv->refs > 1) return kv->len; /* another cache reads its rows */
    int n = (pages_for(kv->len) - max_pages) << KV_PAGE_SHIFT;
    if (n < kv->nb) n = kv->nb;
    if (n >= kv->len || shrink_device(kv, n)) return kv->len;
    return kv->len = n;
}

int kv_trim_own(struct kv_cache *kv, int max_pages) {
    if (kv->gpu) return trim_device(kv, max_pages);
    int p = pages_for(kv->len) - 1, last = p - max_pages;
    while (p >= 0 && p > last && kv->pages[p] && kv->pages[p]->refs == 1) p--;
    int n = (p + 1) << KV_PAGE_SHIFT;
    if (n < kv->len) {
        kv->len = n;
        release_from(kv, p + 1);
    }
    return kv->len;
}

void kv_compact(struct kv_cache *kv) {
    if (kv->gpu) return;
    release_from(kv, pages_for(kv->len)); /* rows past len: rolled-back drafts */
}
