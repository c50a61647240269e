/* cache/prefix.h: a RAM prefix cache. Each entry is a finished sequence's KV cache with the
 * tokens it holds; a new request takes the entry sharing the longest prefix with its prompt
 * (at least PREFIX_MIN_TOKENS), rolls it back to that prefix and prefills only the rest.
 * Entries are checked out (owned by the sequence while it runs) and put back when it ends;
 * the least recently used ones are dropped beyond max_entries or max_bytes. Because every
 * kernel is batch-invariant, a reused prefix gives bit-identical results to prefilling it.
 * One thread (the engine's) uses a cache; it owns the entries it holds. */
#ifndef DSPARK_CACHE_PREFIX_H
#define DSPARK_CACHE_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#define PREFIX_MIN_TOKENS 16

struct kv_cache;
struct prefix_cache;

struct prefix_stats {
    long hits, misses;
    long reused_tokens; /* prompt tokens not prefilled thanks to the cache */
    int entries;
    size_t bytes;
};

struct prefix_cache *prefix_cache_new(int max_entries, size_t max_bytes);
void prefix_cache_free(struct prefix_cache *pc); /* NULL is a no-op */
/* The entry with the longest common prefix with prompt[0..n), capped at n - 1 so the last
 * prompt token is always run; NULL when none shares PREFIX_MIN_TOKENS. The caller owns the
 * returned cache, whose first *n_reused positions hold prompt[0..*n_reused). */
struct kv_cache *prefix_cache_take(struct prefix_cache *pc, const int32_t *prompt, int n,
                                   int *n_reused);
/* Gives kv (holding tokens[0..n)) to the cache; it may be freed at once. */
void prefix_cache_put(struct prefix_cache *pc, const int32_t *tokens, int n, struct kv_cache *kv);
struct prefix_stats prefix_cache_stats(const struct prefix_cache *pc);

#endif
