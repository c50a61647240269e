/* cache/prefix.c: see prefix.h. Entries live in an array in LRU order (most recent last);
 * lookups compare token prefixes, which is cheap next to the prefill they save. */
#include "cache/prefix.h"

#include "model/model.h"

#include <stdlib.h>
#include <string.h>

struct entry {
    int32_t *tokens;
    int n;
    struct kv_cache *kv;
};

struct prefix_cache {
    struct entry *e;
    int n, max_entries;
    size_t max_bytes;
    struct prefix_stats st;
};

struct prefix_cache *prefix_cache_new(int max_entries, size_t max_bytes) {
    struct prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->max_entries = max_entries > 0 ? max_entries : 4;
    pc->max_bytes = max_bytes;
    if (!(pc->e = calloc((size_t)pc->max_entries, sizeof *pc->e))) {
        free(pc);
        return NULL;
    }
    return pc;
}

static void drop(struct prefix_cache *pc, int i) {
    pc->st.bytes -= kv_bytes(pc->e[i].kv);
    kv_free(pc->e[i].kv);
    free(pc->e[i].tokens);
    memmove(pc->e + i, pc->e + i + 1, sizeof *pc->e * (size_t)(pc->n - i - 1));
    pc->n--;
}

void prefix_cache_free(struct prefix_cache *pc) {
    if (!pc) return;
    while (pc->n) drop(pc, pc->n - 1);
    free(pc->e);
    free(pc);
}

struct kv_cache *prefix_cache_take(struct prefix_cache *pc, const int32_t *prompt, int n,
                                   int *n_reused) {
    int best = -1, best_len = 0;
    for (int i = 0; i < pc->n; i++) {
        int m = pc->e[i].n < n - 1 ? pc->e[i].n : n - 1, l = 0;
        while (l < m && pc->e[i].tokens[l] == prompt[l]) l++;
        if (l > best_len) best = i, best_len = l;
    }
    *n_reused = 0;
    if (best < 0 || best_len < PREFIX_MIN_TOKENS) {
        pc->st.misses++;
        return NULL;
    }
    struct kv_cache *kv = pc->e[best].kv;
    pc->st.bytes -= kv_bytes(kv);
    free(pc->e[best].tokens);
    memmove(pc->e + best, pc->e + best + 1, sizeof *pc->e * (size_t)(pc->n - best - 1));
    pc->n--;
    kv_truncate(kv, best_len);
    *n_reused = best_len;
    pc->st.hits++;
    pc->st.reused_tokens += best_len;
    return kv;
}

void prefix_cache_put(struct prefix_cache *pc, const int32_t *tokens, int n, struct kv_cache *kv) {
    int32_t *t = n > 0 ? malloc(sizeof(int32_t) * (size_t)n) : NULL;
    if (!t || n < PREFIX_MIN_TOKENS) {
        free(t);
        kv_free(kv);
        return;
    }
    memcpy(t, tokens, sizeof(int32_t) * (size_t)n);
    kv_truncate(kv, n);
    if (pc->n == pc->max_entries) drop(pc, 0);
    pc->e[pc->n++] = (struct entry){t, n, kv};
    pc->st.bytes += kv_bytes(kv);
    while (pc->max_bytes && pc->st.bytes > pc->max_bytes && pc->n > 1) drop(pc, 0);
}

struct prefix_stats prefix_cache_stats(const struct prefix_cache *pc) {
    struct prefix_stats s = pc->st;
    s.entries = pc->n;
    return s;
}
