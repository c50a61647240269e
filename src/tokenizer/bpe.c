/* tokenizer/bpe.c: byte-pair encoding of one pre-token, following HF's BPE model: characters
 * are looked up in the vocabulary (with byte fallback to <0xNN> tokens, or the unknown token),
 * then merges are applied lowest rank first, leftmost first among equal ranks, through a binary
 * heap: O(n log n) for a pre-token of n characters. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>

struct sym {
    int32_t id;
    int32_t prev, next; /* neighbours, -1: none */
    uint32_t len;       /* bytes covered; 0 once merged into its left neighbour */
};

struct cand {
    uint32_t rank;
    uint32_t pos; /* index of the left symbol */
    int32_t new_id;
};

struct heap {
    struct cand *v;
    size_t n;
};

static inline int cand_less(const struct cand *a, const struct cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int cand_cmp(const void *a, const void *b) {
    return cand_less(a, b) ? -1 : cand_less(b, a) ? 1 : 0;
}

static void heap_push(struct heap *h, struct cand c) {
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static struct cand heap_pop(struct heap *h) {
    struct cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct cand *best = &last;
        if (l < h->n && cand_less(&h->v[l], best)) m = l, best = &h->v[l];
        if (r < h->n && cand_less(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static inline int find_merge(const struct tokenizer *t, int32_t a, int32_t b, uint32_t *rank,
                             int32_t *new_id) {
    uint64_t v;
    if (!hash_u64_get(&t->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v)) return 0;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return 1;
}

static void push_pair(const struct tokenizer *t, struct heap *h, const struct sym *sy,
                      int32_t pos) {
    int32_t nx = sy[pos].next;
    struct cand c;
    if (nx >= 0 && find_merge(t, sy[pos].id, sy[nx].id, &c.rank, &c.new_id)) {
        c.pos = (uint32_t)pos;
        heap_push(h, c);
    }
}

static void add_sym(struct sym *sy, size_t *m, int32_t id, uint32_t len) {
    size_t i = (*m)++;
    sy[i] = (struct sym){.id = id, .prev = (int32_t)i - 1, .next = -1, .len = len};
    if (i) sy[i - 1].next = (int32_t)i;
}

/* The initial symbols: one per character (HF's BPE::merge_word). Returns their count. */
static size_t initial_symbols(const struct tokenizer *t, const char *s, size_t n, struct sym *sy) {
    size_t m = 0, i = 0;
    uint32_t unk_len = 0; /* bytes of a pending unknown token */
    while (i < n) {
        int32_t cp;
        size_t k = (size_t)tok_utf8_next(s + i, n - i, &cp);
        int32_t id = hash_str_get(&t->vocab, s + i, k);
        if (id >= 0) {
            if (unk_len) add_sym(sy, &m, t->unk_id, unk_len), unk_len = 0;
            add_sym(sy, &m, id, (uint32_t)k);
        } else {
            int have_bytes = t->byte_fallback;
            for (size_t j = 0; j < k && have_bytes; j++)
                have_bytes = t->byte_id[(uint8_t)s[i + j]] >= 0;
            if (have_bytes) {
                /* As HF does, a pending unknown token is flushed only by the next known
                 * character, so it lands after these byte tokens. */
                for (size_t j = 0; j < k; j++) add_sym(sy, &m, t->byte_id[(uint8_t)s[i + j]], 1);
            } else if (t->unk_id >= 0) {
                if (unk_len && !t->fuse_unk) add_sym(sy, &m, t->unk_id, unk_len), unk_len = 0;
                unk_len += (uint32_t)k;
            }
        }
        i += k;
    }
    if (unk_len) add_sym(sy, &m, t->unk_id, unk_len);
    return m;
}

int tok_bpe(const struct tokenizer *t, const char *s, size_t n, struct tok_ids *ids) {
    if (!n) return OK;
    if (t->ignore_merges) {
        int32_t id = hash_str_get(&t->vocab, s, n);
        if (id >= 0) return tok_ids_add(ids, id);
    }
    if (n > (size_t)INT32_MAX / 4) return ERR_NOMEM;
    struct sym sy_small[64];
    struct cand heap_small[3 * 64];
    struct sym *sy = sy_small;
    struct heap h = {heap_small, 0};
    if (n > 64) {
        sy = malloc(n * sizeof *sy);
        h.v = malloc(3 * n * sizeof *h.v);
        if (!sy || !h.v) {
            free(sy);
            free(h.v);
            return ERR_NOMEM;
        }
    }
    size_t m = initial_symbols(t, s, n, sy);
    /* The first candidates, sorted, are consumed in order; the heap only holds the pairs that
     * merges create. The next candidate is the smaller of the two fronts. */
    struct cand *init = h.v + 2 * n;
    size_t n_init = 0, next_init = 0;
    int sorted = 1;
    for (size_t i = 0; i + 1 < m; i++) {
        struct cand c = {.pos = (uint32_t)i};
        if (!find_merge(t, sy[i].id, sy[i + 1].id, &c.rank, &c.new_id)) continue;
        if (n_init && cand_less(&c, &init[n_init - 1])) sorted = 0;
        init[n_init++] = c;
    }
    if (!sorted) qsort(init, n_init, sizeof *init, cand_cmp);
    while (h.n || next_init < n_init) {
        struct cand c;
        if (next_init < n_init && (!h.n || cand_less(&init[next_init], &h.v[0])))
            c = init[next_init++];
        else
            c = heap_pop(&h);
        struct sym *a = &sy[c.pos];
        if (!a->len || a->next < 0) continue;
        struct sym *b = &sy[a->next];
        uint32_t rank;
        int32_t new_id;
        /* Skip stale entries: the pair at pos must still merge into the same token. */
        if (!find_merge(t, a->id, b->id, &rank, &new_id) || new_id != c.new_id) continue;
        a->id = new_id;
        a->len += b->len;
        a->next = b->next;
        b->len = 0;
        if (a->next >= 0) sy[a->next].prev = (int32_t)c.pos;
        if (a->prev >= 0) push_pair(t, &h, sy, a->prev);
        push_pair(t, &h, sy, (int32_t)c.pos);
    }
    int rc = OK;
    for (int32_t i = m ? 0 : -1; i >= 0 && !rc; i = sy[i].next) rc = tok_ids_add(ids, sy[i].id);
    if (sy != sy_small) {
        free(sy);
        free(h.v);
    }
    return rc;
}
