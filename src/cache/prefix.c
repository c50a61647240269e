/* cache/prefix.c: see prefix.h. Entries live in an array in LRU order (most recent last);
 * lookups compare token prefixes, which is cheap next to the prefill they save.
 * A hit gets a cache sharing the entry's rows (kv_new_shared): on the host its pages, the last
 * one copied only when the sequence writes into it. On a device, a hit that reuses a whole
 * entry nobody holds is lent the entry's own cache (no copy: the usual follow-up turn); the
 * entry stays listed, since its rows [0, n) stay valid while lent (the sequence only writes
 * after its prompt), and the lent cache comes back through prefix_cache_put(), which replaces
 * the entry with the longer sequence. A drafter context is never lent: the sequence copies its
 * rows. */
#include "cache/prefix.h"

#include "base/err.h"
#include "cache/spill.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

/* A file on disk is read only when it holds this many more tokens than the best entry in RAM:
 * reading and decompressing it costs about as much as prefilling that many tokens. */
#define SPILL_MIN_GAIN 64

struct entry {
    int32_t *tokens;
    int n;
    struct kv_cache *kv; /* owned, or lent to a running sequence */
    int lent;
    struct prefix_ctx ctx; /* owned; rows of at least n positions when ctx.tag != 0 */
    int saved;             /* in the spill folder whole already (before it was trimmed) */
};

struct prefix_cache {
    struct model *m;
    struct entry *e;
    int n, max_entries;
    size_t max_bytes;
    struct spill *spill; /* or NULL */
    struct prefix_stats st;
    float *disk_ctx; /* the drafter context of the last hit loaded from disk */
    size_t disk_ctx_cap;
};

int prefix_cache_new(struct model *m, const struct prefix_cache_opts *o,
                     struct prefix_cache **out) {
    *out = NULL;
    struct prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return ERR_NOMEM;
    pc->m = m;
    pc->max_entries = o->max_entries > 0 ? o->max_entries : 4;
    pc->max_bytes = o->max_bytes;
    if (!(pc->e = calloc((size_t)pc->max_entries, sizeof *pc->e))) {
        free(pc);
        return ERR_NOMEM;
    }
    if (o->spill_dir) {
        const struct hf_config *c = model_config(m);
        struct spill_geometry g = {c->n_layers, c->n_kv_heads, c->head_dim};
        int rc = spill_open(o->spill_dir, model_fingerprint(m), &g, o->spill_max_bytes, &pc->spill);
        if (rc) {
            prefix_cache_free(pc);
            return rc;
        }
    }
    *out = pc;
    return OK;
}

static size_t ctx_bytes(const struct prefix_ctx *c) {
    return c->rows ? sizeof(float) * (size_t)c->width * (size_t)c->n : 0;
}

/* The caches the entries hold into kvs (pc->n at most), lent ones aside (their rows are their
 * sequences'); returns their count. */
static int held_caches(const struct prefix_cache *pc, struct kv_cache **kvs) {
    int k = 0;
    for (int i = 0; i < pc->n; i++)
        if (!pc->e[i].lent) kvs[k++] = pc->e[i].kv;
    return k;
}

/* The memory the entries keep alive: their rows, each page or device base once, and their
 * drafter contexts. */
static size_t held_bytes(const struct prefix_cache *pc) {
    struct kv_cache *kvs[pc->n > 0 ? pc->n : 1];
    size_t b = 0;
    for (int i = 0; i < pc->n; i++) b += ctx_bytes(&pc->e[i].ctx);
    return b + kv_set_bytes(kvs, held_caches(pc, kvs));
}

/* st.bytes after the entries changed (a put, a lent entry) */
static void recount(struct prefix_cache *pc) {
    pc->st.bytes = held_bytes(pc);
}

static void unlink_entry(struct prefix_cache *pc, int i) {
    free(pc->e[i].ctx.rows);
    free(pc->e[i].tokens);
    memmove(pc->e + i, pc->e + i + 1, sizeof *pc->e * (size_t)(pc->n - i - 1));
    pc->n--;
}

/* Removes entry i; its cache is freed unless a sequence holds it. */
static void drop(struct prefix_cache *pc, int i) {
    struct kv_cache *kv = pc->e[i].lent ? NULL : pc->e[i].kv;
    unlink_entry(pc, i);
    kv_free(kv);
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = na < nb ? na : nb, l = 0;
    while (l < m && a[l] == b[l]) l++;
    return l;
}

/* Saves entry i to the spill folder (when there is one) unless it is there already. */
static void save(struct prefix_cache *pc, int i) {
    struct entry *e = &pc->e[i];
    if (pc->spill && !e->saved)
        e->saved = spill_save_ctx(pc->spill, e->tokens, e->n, e->kv, e->ctx.tag, e->ctx.width,
                                  e->ctx.rows) == OK;
}

/* Whether an entry with a context of tag `have` serves every request that one with `need`
 * serves (a context-less entry serves only requests without a drafter context). */
static int covers(uint64_t have, uint64_t need) {
    return !need || have == need;
}

/* Leaves RAM: saved to the spill folder first when there is one. */
static void evict(struct prefix_cache *pc, int i) {
    save(pc, i);
    drop(pc, i);
}

/* Frees about `excess` bytes of the least recently used entry if it can (the newest too, when
 * it alone is over the limit). A device entry first
 * gives up the room it kept for a follow-up turn, which loses no position. Then, saved whole to
 * the spill folder first, it gives up its last pages that no other cache holds (its prefix,
 * which other requests are likelier to share, stays reusable). An entry left shorter than
 * PREFIX_MIN_TOKENS or holding only tokens another entry holds too, a lent one, and one that
 * could free nothing (its last page, or a device entry's rows, shared) leave RAM whole. */
static void shrink_oldest(struct prefix_cache *pc, size_t excess) {
    struct entry *e = &pc->e[0];
    if (e->lent) {
        evict(pc, 0);
        return;
    }
    size_t before = kv_bytes(e->kv);
    kv_fit(e->kv);
    const size_t room = before - kv_bytes(e->kv);
    if (room >= excess) return;
    excess -= room, before -= room;
    if (!before) { /* a device entry of its base's rows only: nothing of its own to give up */
        drop(pc, 0);
        return;
    }
    save(pc, 0);
    /* a page's rows and, with a drafter context, its context rows */
    const int page = 1 << KV_PAGE_SHIFT;
    size_t per =
        kv_page_bytes(e->kv) + (e->ctx.rows ? sizeof(float) * (size_t)e->ctx.width * page : 0);
    int n = kv_trim_own(e->kv, (int)((excess + per - 1) / per));
    int covered = 0;
    for (int i = 1; i < pc->n && !covered; i++)
        covered = covers(pc->e[i].ctx.tag, e->ctx.tag) &&
                  common_prefix(pc->e[i].tokens, pc->e[i].n, e->tokens, n) == n;
    if (kv_bytes(e->kv) >= before || n < PREFIX_MIN_TOKENS || covered) {
        drop(pc, 0);
        return;
    }
    pc->st.trimmed_tokens += e->n - n;
    e->n = n;
    if (e->ctx.rows && e->ctx.n > n) {
        float *r = realloc(e->ctx.rows, sizeof(float) * (size_t)e->ctx.width * (size_t)n);
        if (r) e->ctx.rows = r;
        e->ctx.n = n;
    }
}

void prefix_cache_free(struct prefix_cache *pc) {
    if (!pc) return;
    while (pc->n) evict(pc, 0); /* oldest first: the newest file is the last to be evicted */
    spill_close(pc->spill);
    free(pc->disk_ctx);
    free(pc->e);
    free(pc);
}

/* Moves entry i to the most recently used end. */
static void touch(struct prefix_cache *pc, int i) {
    struct entry e = pc->e[i];
    memmove(pc->e + i, pc->e + i + 1, sizeof *pc->e * (size_t)(pc->n - i - 1));
    pc->e[pc->n - 1] = e;
}

/* The first len rows of RAM entry i in a cache that shares them. A host cache shares the
 * entry's pages. A device cache is lent the entry's own cache when it reuses the whole entry
 * and nobody holds it (a device share of a share would copy the rows past the first share). */
static struct kv_cache *from_ram(struct prefix_cache *pc, int i, int len, int cap) {
    struct entry *e = &pc->e[i];
    struct kv_cache *kv = NULL;
    if (!kv_paged(e->kv) && !e->lent && len == e->n && kv_capacity(e->kv) >= cap) {
        e->lent = 1;
        kv = e->kv;
    } else if (kv_new_shared(pc->m, cap, e->kv, len, &kv) == OK) {
        pc->st.shared_tokens += kv_shared(kv);
    } else {
        kv = NULL;
    }
    if (kv) touch(pc, i);
    return kv;
}

/* A new cache holding hit's rows, and with width > 0 its drafter context in pc->disk_ctx. */
static struct kv_cache *from_disk(struct prefix_cache *pc, const struct spill_hit *hit,
                                  const int32_t *prompt, int cap, int width) {
    size_t need = (size_t)width * (size_t)hit->n;
    if (need > pc->disk_ctx_cap) {
        float *p = realloc(pc->disk_ctx, sizeof(float) * need);
        if (!p) return NULL;
        pc->disk_ctx = p, pc->disk_ctx_cap = need;
    }
    struct kv_cache *kv = NULL;
    if (kv_new(pc->m, cap, &kv)) return NULL;
    if (spill_load_ctx(pc->spill, hit, prompt, kv, pc->disk_ctx, width)) kv_free(kv), kv = NULL;
    return kv;
}

struct kv_cache *prefix_cache_take(struct prefix_cache *pc, const int32_t *prompt, int n, int cap,
                                   int *n_reused) {
    const float *ctx_rows;
    return prefix_cache_take_ctx(pc, prompt, n, cap, 0, 0, n_reused, &ctx_rows);
}

/* The RAM entry sharing the longest prefix with prompt[0..n - 1) (its length in *len), among
 * those with a drafter context of this tag (width < 0: any width), or -1. */
static int best_entry(const struct prefix_cache *pc, const int32_t *prompt, int n, uint64_t tag,
                      int width, int *len) {
    int best = -1;
    *len = 0;
    for (int i = 0; i < pc->n; i++) {
        const struct entry *e = &pc->e[i];
        if (tag && (e->ctx.tag != tag || (width >= 0 && e->ctx.width != width))) continue;
        int l = common_prefix(e->tokens, e->n, prompt, n - 1);
        if (l > *len) best = i, *len = l;
    }
    return best;
}

/* Whether a file holding `disk` tokens is read instead of an entry holding `ram`. */
static int disk_wins(int disk, int ram) {
    return disk >= PREFIX_MIN_TOKENS && disk >= ram + SPILL_MIN_GAIN;
}

int prefix_cache_peek(struct prefix_cache *pc, const int32_t *prompt, int n, uint64_t tag) {
    int len, best = best_entry(pc, prompt, n, tag, -1, &len);
    if (best < 0 || len < PREFIX_MIN_TOKENS || !kv_paged(pc->e[best].kv)) return 0;
    struct spill_hit hit = {.n = 0};
    if (pc->spill) spill_match_ctx(pc->spill, prompt, n, n - 1, tag, &hit);
    return disk_wins(hit.n, len) ? 0 : len;
}

int prefix_cache_shares(const struct prefix_cache *pc, const struct kv_cache *kv) {
    struct kv_cache *kvs[pc->n > 0 ? pc->n : 1];
    int k = held_caches(pc, kvs);
    return k ? kv_shared_with(kv, kvs, k) : 0;
}

struct kv_cache *prefix_cache_take_ctx(struct prefix_cache *pc, const int32_t *prompt, int n,
                                       int cap, uint64_t tag, int width, int *n_reused,
                                       const float **ctx_rows) {
    int best_len, best = best_entry(pc, prompt, n, tag, width, &best_len);
    struct spill_hit hit = {.n = 0};
    *ctx_rows = NULL;
    if (pc->spill) spill_match_ctx(pc->spill, prompt, n, n - 1, tag, &hit);
    struct kv_cache *kv = NULL;
    *n_reused = 0;
    if (disk_wins(hit.n, best_len) && (kv = from_disk(pc, &hit, prompt, cap, tag ? width : 0))) {
        *n_reused = hit.n;
        if (tag) *ctx_rows = pc->disk_ctx;
    }
    if (!kv && best_len >= PREFIX_MIN_TOKENS) {
        const float *rows = pc->e[best].ctx.rows; /* from_ram() reorders the entries */
        if ((kv = from_ram(pc, best, best_len, cap))) {
            *n_reused = best_len;
            if (tag) *ctx_rows = rows;
        }
    }
    if (!kv) {
        pc->st.misses++;
        return NULL;
    }
    pc->st.hits++;
    pc->st.reused_tokens += *n_reused;
    recount(pc);
    return kv;
}

/* Gives up kv: the entry it was lent from (if any) goes, then kv is freed. */
static void discard(struct prefix_cache *pc, struct kv_cache *kv) {
    for (int i = 0; i < pc->n; i++)
        if (pc->e[i].lent && pc->e[i].kv == kv) {
            unlink_entry(pc, i);
            break;
        }
    kv_free(kv);
}

void prefix_cache_put(struct prefix_cache *pc, const int32_t *tokens, int n, struct kv_cache *kv) {
    prefix_cache_put_ctx(pc, tokens, n, kv, NULL);
}

static void put_entry(struct prefix_cache *pc, const int32_t *tokens, int n, struct kv_cache *kv,
                      struct prefix_ctx *ctx) {
    struct prefix_ctx c = ctx && ctx->rows && ctx->tag ? *ctx : (struct prefix_ctx){0};
    if (ctx && !c.rows) free(ctx->rows);
    if (c.rows && n > c.n) n = c.n;
    if (c.rows) c.n = n;
    if (n < PREFIX_MIN_TOKENS || n > kv_len(kv)) {
        free(c.rows);
        discard(pc, kv);
        return;
    }
    for (int i = 0; i < pc->n; i++)
        if (pc->e[i].kv != kv && pc->e[i].n >= n && covers(pc->e[i].ctx.tag, c.tag) &&
            common_prefix(pc->e[i].tokens, pc->e[i].n, tokens, n) == n) {
            touch(pc, i); /* an entry already holds these tokens, maybe with more after them */
            free(c.rows);
            discard(pc, kv);
            return;
        }
    int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
    if (!t) {
        free(c.rows);
        discard(pc, kv);
        return;
    }
    memcpy(t, tokens, sizeof(int32_t) * (size_t)n);
    kv_truncate(kv, n);
    /* a device cache with room for a follow-up turn is kept as it is (it may be lent); a host
     * cache only frees the pages of rolled-back drafts */
    if (kv_paged(kv) || (kv_capacity(kv) - n > n && kv_capacity(kv) - n > PREFIX_CAP_STEP))
        kv_compact(kv);
    /* pages computed apart from an entry that holds the same tokens are swapped for the
     * entry's (the same bits): two cold requests over one system prompt keep one copy */
    for (int i = 0; i < pc->n; i++)
        if (pc->e[i].kv != kv && !pc->e[i].lent)
            pc->st.deduped_tokens +=
                kv_adopt(kv, pc->e[i].kv, common_prefix(pc->e[i].tokens, pc->e[i].n, tokens, n));
    for (int i = pc->n - 1; i >= 0; i--) /* entries this one extends (its own among them) go */
        if (pc->e[i].kv == kv ||
            (covers(c.tag, pc->e[i].ctx.tag) &&
             common_prefix(pc->e[i].tokens, pc->e[i].n, tokens, n) == pc->e[i].n))
            drop(pc, i);
    if (pc->n == pc->max_entries) evict(pc, 0);
    pc->e[pc->n++] = (struct entry){t, n, kv, 0, c, 0};
    /* the newest entry too, when it alone is over: the limit holds */
    for (size_t b; pc->max_bytes && (b = held_bytes(pc)) > pc->max_bytes && pc->n > 0;)
        shrink_oldest(pc, b - pc->max_bytes);
}

void prefix_cache_put_ctx(struct prefix_cache *pc, const int32_t *tokens, int n,
                          struct kv_cache *kv, struct prefix_ctx *ctx) {
    put_entry(pc, tokens, n, kv, ctx);
    recount(pc);
}

struct prefix_stats prefix_cache_stats(const struct prefix_cache *pc) {
    struct prefix_stats s = pc->st;
    s.entries = pc->n;
    if (pc->spill) {
        struct spill_stats ss = spill_stats(pc->spill);
        s.spill_writes = ss.writes, s.spill_reads = ss.reads, s.spill_rejects = ss.rejects;
        s.spill_dropped = ss.dropped, s.spill_pending = ss.pending;
        s.spill_files = ss.files, s.spill_bytes = ss.bytes;
    }
    return s;
}

void prefix_cache_flush(struct prefix_cache *pc) {
    if (pc->spill) spill_flush(pc->spill);
}
