/* cache/prefix.h: the prefix cache. Each entry is a token sequence and the KV rows of those
 * tokens. A new request gets a cache that shares the first positions of the entry sharing the
 * longest prefix with its prompt (at least PREFIX_MIN_TOKENS), and prefills only the rest.
 * Host caches share by page (model/model.h: reference-counted pages of KV_PAGE positions), so
 * any prefix of any entry is reused without a copy, by any number of concurrent sequences, and
 * entries that hold the same tokens hold the same pages (a conversation's turns, requests over
 * one system prompt, also when two of them computed it at once). Entries stay in the cache
 * while sequences use them, and a client that goes away never takes an entry with it. A
 * sequence's cache must come back through prefix_cache_put() (with n = 0 when its contents are
 * unknown), and before prefix_cache_free(). A finished sequence's entry replaces the entries it
 * extends (a conversation's earlier turns). The least recently used entry leaves RAM beyond
 * max_entries; beyond max_bytes it first gives up a device cache's room for a follow-up turn,
 * then its last pages that no other cache holds, page by page from the end, keeping its prefix,
 * and leaves when it would be shorter than PREFIX_MIN_TOKENS. The limit holds: an entry alone
 * over it keeps only what fits. With a spill folder an entry is saved there whole before it is
 * trimmed or leaves (cache/spill.h) and found again, also after a restart, when RAM holds no prefix
 * as long. Because every kernel is batch-invariant, a reused prefix gives results
 * bit-identical to prefilling it. The KV cache keeps every position (sliding-window models
 * mask by position), so sliding-window models are reused exactly as well.
 * An entry may also hold a drafter's context for its positions (struct prefix_ctx: what a
 * DSpark or DFlash drafter built from the target's taps), so that a follow-up turn restores
 * the drafter as well; a request that needs one is only given entries with a context of its
 * drafter's tag. Entries saved to the spill folder keep their context (cache/spill.h).
 * One thread (the engine's) uses a cache; it owns the entries it holds. */
#ifndef DSPARK_CACHE_PREFIX_H
#define DSPARK_CACHE_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#define PREFIX_MIN_TOKENS 16
#define PREFIX_CAP_STEP                                                                            \
    256 /* sequences' cache capacities are rounded up to this (device                              \
         * caches: a follow-up turn's sequence is then lent the entry) */

struct kv_cache;
struct model;
struct prefix_cache;

struct prefix_cache_opts {
    int max_entries;        /* entries kept in RAM (<= 0: 4) */
    size_t max_bytes;       /* RAM the entries may hold (0: no limit) */
    const char *spill_dir;  /* evicted entries are saved here (NULL: they are dropped) */
    size_t spill_max_bytes; /* the folder's budget for this model's files (0: no limit) */
};

/* A drafter's context for positions 0..n: rows[n, width] (spec/drafter.h, ctx_save), made by
 * the drafter identified by tag (0: no context). */
struct prefix_ctx {
    uint64_t tag;
    int width, n;
    float *rows;
};

struct prefix_stats {
    long hits, misses;
    long reused_tokens;  /* prompt tokens not prefilled thanks to the cache */
    long shared_tokens;  /* of those, tokens whose rows a sequence reads from an entry (no copy) */
    long deduped_tokens; /* tokens of finished sequences stored once with an entry's pages */
    long trimmed_tokens; /* tokens the least recently used entries gave up to --kv-cache-mb */
    int entries;
    size_t bytes;
    /* the spill folder */
    long spill_writes, spill_reads, spill_rejects, spill_dropped;
    int spill_files;
    size_t spill_bytes, spill_pending;
};

/* A cache for model m's sequences. ERR_IO when the spill folder cannot be used. */
int prefix_cache_new(struct model *m, const struct prefix_cache_opts *o, struct prefix_cache **out);
/* Saves what RAM holds to the spill folder (when there is one), then frees. NULL is a no-op. */
void prefix_cache_free(struct prefix_cache *pc);
/* A new KV cache of capacity cap for a sequence starting with prompt[0..n), holding the
 * longest cached prefix of it (capped at n - 1, so the last prompt token is always run), whose
 * length goes to *n_reused. NULL (and 0) when no entry shares PREFIX_MIN_TOKENS. The caller
 * owns the returned cache. */
struct kv_cache *prefix_cache_take(struct prefix_cache *pc, const int32_t *prompt, int n, int cap,
                                   int *n_reused);
/* prefix_cache_take() for a sequence whose drafter needs its context restored: with tag != 0
 * only entries (and files) holding a context of that tag and width count; *ctx_rows then
 * points to the context rows [*n_reused, width] of the reused positions (valid until the
 * next call on the cache). With tag == 0 it is prefix_cache_take() (*ctx_rows = NULL). */
struct kv_cache *prefix_cache_take_ctx(struct prefix_cache *pc, const int32_t *prompt, int n,
                                       int cap, uint64_t tag, int width, int *n_reused,
                                       const float **ctx_rows);
/* The positions of prompt[0..n) that prefix_cache_take_ctx() with this tag would give a
 * sequence in pages it shares with an entry (rows it holds no memory of its own for): 0 when it
 * would read them from a file, be lent a device entry's cache, or find nothing. No side
 * effects: the server counts a request's K/V against --kv-pool-mb with it. */
int prefix_cache_peek(struct prefix_cache *pc, const int32_t *prompt, int n, uint64_t tag);
/* kv's positions in pages that an entry in RAM holds too: those the cache's bytes count. A
 * sequence's share falls to 0 when the entry it shared leaves RAM, and its pages are then its
 * own (the server counts them against --kv-pool-mb again). 0 for a device cache. */
int prefix_cache_shares(const struct prefix_cache *pc, const struct kv_cache *kv);
/* Gives kv (holding tokens[0..n)) to the cache; it may be freed at once. Every cache that
 * prefix_cache_take() returned must come back here, with n = 0 if it cannot be trusted. */
void prefix_cache_put(struct prefix_cache *pc, const int32_t *tokens, int n, struct kv_cache *kv);
/* The same with the drafter's context (NULL: none): the entry keeps min(n, ctx->n) positions,
 * and the cache takes ctx->rows (malloc'd), also when it keeps nothing. */
void prefix_cache_put_ctx(struct prefix_cache *pc, const int32_t *tokens, int n,
                          struct kv_cache *kv, struct prefix_ctx *ctx);
struct prefix_stats prefix_cache_stats(const struct prefix_cache *pc);
/* Waits until the entries given to the spill folder are written (they are written by a thread
 * of their own). */
void prefix_cache_flush(struct prefix_cache *pc);

#endif
