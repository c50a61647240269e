/* spec/lookup.c: drafter-free n-gram prompt lookup. For every n in [min_n, max_n] an index
 * maps each n-gram of the sequence to the end positions of its two most recent occurrences.
 * Indexing is incremental (each new token adds max_n - min_n + 1 entries) and a proposal costs
 * O(max_n - min_n + 1) lookups, so the whole generation stays O(n). A proposal tries the
 * longest n first, skips the occurrence that is the current suffix itself, and copies the
 * tokens that followed the latest earlier occurrence.
 *
 * Scaled drafts (lookup mode): a proposal is no longer than the stretch, counted back from the
 * suffix, over which the text matches the earlier occurrence (up to MATCH_MAX tokens). A short
 * match, likely a coincidence, risks a short draft; inside a copied passage the drafts grow
 * with it. With verify rows that cost a small part of a step, this lets lookup fire on
 * n-grams down to a single token without slowing text that does not repeat. */
#include "spec/drafter.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

struct slot {
    uint64_t key; /* hash of (n, tokens); 0 = empty */
    int32_t last; /* end (exclusive) of the latest occurrence */
    int32_t prev; /* end of the one before, or -1 */
};

#define MATCH_MAX 64

struct lookup {
    int min_n, max_n;
    int scaled;    /* drafts no longer than the match behind them */
    int n_indexed; /* seq[0..n_indexed) has been added to the index */
    uint64_t head; /* hash of the indexed sequence's first tokens, to detect a new sequence */
    struct slot *slots;
    size_t n_slots; /* power of two */
    size_t n_used;
};

static uint64_t hash_ngram(const int32_t *t, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h ? h : 1;
}

static struct slot *find_slot(struct slot *slots, size_t n_slots, uint64_t key) {
    size_t i = (size_t)key & (n_slots - 1);
    while (slots[i].key && slots[i].key != key) i = (i + 1) & (n_slots - 1);
    return &slots[i];
}

static int grow(struct lookup *L) {
    size_t n = L->n_slots ? L->n_slots * 2 : 1024;
    struct slot *s = calloc(n, sizeof *s);
    if (!s) return ERR_NOMEM;
    for (size_t i = 0; i < L->n_slots; i++)
        if (L->slots[i].key) *find_slot(s, n, L->slots[i].key) = L->slots[i];
    free(L->slots);
    L->slots = s;
    L->n_slots = n;
    return OK;
}

/* Records the n-grams that end at position end (exclusive). */
static int index_end(struct lookup *L, const int32_t *seq, int end) {
    for (int n = L->min_n; n <= L->max_n && n <= end; n++) {
        if ((L->n_used + 1) * 2 > L->n_slots) {
            int rc = grow(L);
            if (rc) return rc;
        }
        struct slot *s = find_slot(L->slots, L->n_slots, hash_ngram(seq + end - n, n));
        if (!s->key) {
            s->key = hash_ngram(seq + end - n, n);
            s->prev = -1;
            L->n_used++;
        } else {
            s->prev = s->last;
        }
        s->last = end;
    }
    return OK;
}

static void lookup_reset(struct drafter *d) {
    struct lookup *L = d->ctx;
    if (L->slots) memset(L->slots, 0, L->n_slots * sizeof *L->slots);
    L->n_used = 0;
    L->n_indexed = 0;
}

static int lookup_propose(struct drafter *d, const int32_t *seq, int n_seq, int n_max,
                          struct draft *out) {
    struct lookup *L = d->ctx;
    out->n = 0;
    /* a sequence that is not an extension of the indexed one starts over */
    int probe = n_seq < 8 ? n_seq : 8;
    uint64_t head = hash_ngram(seq, probe);
    if (L->n_indexed > n_seq || (L->n_indexed >= 8 && head != L->head) ||
        (L->n_indexed < 8 && L->n_indexed > 0))
        lookup_reset(d);
    if (L->n_indexed == 0 && n_seq >= 8) L->head = head;
    if (n_seq < 8 && L->n_indexed < n_seq) lookup_reset(d); /* short: re-index each time */
    while (L->n_indexed < n_seq) {
        int rc = index_end(L, seq, ++L->n_indexed);
        if (rc) return rc;
    }
    if (n_seq < 8) L->n_indexed = n_seq;
    for (int n = L->max_n; n >= L->min_n; n--) {
        if (n > n_seq) continue;
        const int32_t *suffix = seq + n_seq - n;
        struct slot *s = find_slot(L->slots, L->n_slots, hash_ngram(suffix, n));
        if (!s->key) continue;
        int end = s->last == n_seq ? s->prev : s->last;
        if (end < n || end >= n_seq) continue; /* nothing follows it yet */
        if (memcmp(seq + end - n, suffix, sizeof(int32_t) * (size_t)n) != 0) continue;
        int k = n_seq - end < n_max ? n_seq - end : n_max;
        if (L->scaled) {
            int ml = n; /* tokens matching before the two positions */
            while (ml < MATCH_MAX && ml < k && end - ml - 1 >= 0 &&
                   seq[end - ml - 1] == seq[n_seq - ml - 1])
                ml++;
            if (k > ml) k = ml;
        }
        for (int i = 0; i < k; i++) {
            out->ids[i] = seq[end + i];
            out->q[i] = NULL;
        }
        out->n = k;
        return OK;
    }
    return OK;
}

static void lookup_free(struct drafter *d) {
    struct lookup *L = d->ctx;
    if (L) free(L->slots);
    free(L);
    d->ctx = NULL;
}

static const struct drafter_ops lookup_ops = {
    .name = "lookup",
    .propose = lookup_propose,
    .reset = lookup_reset,
    .free = lookup_free,
};

int lookup_drafter_new(int min_n, int max_n, int scaled, struct drafter *out) {
    if (min_n < 1 || max_n < min_n || max_n > 64) return ERR_ARG;
    struct lookup *L = calloc(1, sizeof *L);
    if (!L) return ERR_NOMEM;
    L->min_n = min_n;
    L->max_n = max_n;
    L->scaled = scaled;
    if (grow(L)) {
        free(L);
        return ERR_NOMEM;
    }
    out->ops = &lookup_ops;
    out->ctx = L;
    return OK;
}
