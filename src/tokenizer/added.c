/* tokenizer/added.c: finding added tokens (special or not) inside text. Matches are
 * leftmost-longest and do not overlap, as in HF's AddedVocabulary; single_word, lstrip and
 * rstrip are then applied to each match. The keys sit in a byte trie whose root has a direct
 * table, so text without any key's first byte costs one lookup per byte. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

static int32_t new_node(struct tok_trie *tr, uint8_t byte) {
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? tr->cap * 2 : 64;
        struct tok_trie_node *v = realloc(tr->nodes, cap * sizeof *v);
        if (!v) return -1;
        tr->nodes = v;
        tr->cap = cap;
    }
    tr->nodes[tr->n] =
        (struct tok_trie_node){.child = -1, .sibling = -1, .added = -1, .byte = byte};
    return (int32_t)tr->n++;
}

int tok_trie_add(struct tok_trie *tr, const char *key, size_t len, int32_t added) {
    if (!len) return OK;
    if (!tr->n) {
        if (new_node(tr, 0) < 0) return ERR_NOMEM;
        for (int i = 0; i < 256; i++) tr->root[i] = -1;
    }
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)key[i];
        int32_t c;
        if (node == 0) {
            c = tr->root[b];
        } else {
            c = tr->nodes[node].child;
            while (c >= 0 && tr->nodes[c].byte != b) c = tr->nodes[c].sibling;
        }
        if (c < 0) {
            if ((c = new_node(tr, b)) < 0) return ERR_NOMEM;
            if (node == 0) {
                tr->root[b] = c;
            } else {
                tr->nodes[c].sibling = tr->nodes[node].child;
                tr->nodes[node].child = c;
            }
        }
        node = c;
    }
    if (tr->nodes[node].added < 0) tr->nodes[node].added = added; /* the first key wins */
    return OK;
}

void tok_trie_free(struct tok_trie *tr) {
    free(tr->nodes);
    memset(tr, 0, sizeof *tr);
}

/* The longest key starting at s[0]: its end, with *added set; 0 when none. */
static size_t longest(const struct tok_trie *tr, const char *s, size_t n, int32_t *added) {
    size_t best = 0;
    int32_t node = tr->root[(uint8_t)s[0]];
    size_t i = 1;
    while (node >= 0) {
        if (tr->nodes[node].added >= 0) {
            best = i;
            *added = tr->nodes[node].added;
        }
        if (i >= n) break;
        uint8_t b = (uint8_t)s[i++];
        int32_t c = tr->nodes[node].child;
        while (c >= 0 && tr->nodes[c].byte != b) c = tr->nodes[c].sibling;
        node = c;
    }
    return best;
}

/* The character that ends at s[end] (exclusive), or -1. */
static int32_t char_before(const char *s, size_t end) {
    size_t p = end;
    while (p > 0 && end - p < 4) {
        p--;
        if (((unsigned char)s[p] & 0xc0) != 0x80) break;
    }
    if (p == end) return -1;
    int32_t cp;
    int k = tok_utf8_next(s + p, end - p, &cp);
    return (size_t)k == end - p ? cp : -1;
}

static int split_piece(const struct tokenizer *t, const struct tok_trie *tr, const char *s,
                       size_t n, int first, struct tok_pieces *out) {
    size_t done = 0, pos = 0;
    while (pos < n) {
        int32_t ai = -1;
        if (tr->root[(uint8_t)s[pos]] < 0) {
            pos++;
            continue;
        }
        size_t end = longest(tr, s + pos, n - pos, &ai);
        if (!end) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + end;
        const struct tok_added *a = &t->added[ai];
        pos = stop;
        if (a->single_word) {
            int32_t cp;
            int ok_left = start == 0 || !tok_is_word(char_before(s, start));
            int ok_right = stop == n || (tok_utf8_next(s + stop, n - stop, &cp), !tok_is_word(cp));
            if (!ok_left || !ok_right) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            for (;;) {
                int32_t cp = char_before(s, ns);
                if (!tok_is_space(cp)) break;
                char tmp[4];
                ns -= (size_t)tok_utf8_put(tmp, cp);
            }
            start = ns > done ? ns : done;
        }
        if (a->rstrip) {
            while (stop < n) {
                int32_t cp;
                int k = tok_utf8_next(s + stop, n - stop, &cp);
                if (!tok_is_space(cp)) break;
                stop += (size_t)k;
            }
            pos = stop;
        }
        int rc = OK;
        if (done < start) rc = tok_pieces_add(out, s + done, start - done, first && done == 0);
        if (!rc) rc = tok_pieces_add_id(out, a->id);
        if (rc) return rc;
        done = stop;
    }
    return tok_pieces_add(out, s + done, n - done, first && done == 0);
}

int tok_split_added(const struct tokenizer *t, const struct tok_trie *trie,
                    const struct tok_pieces *in, struct tok_pieces *out) {
    tok_pieces_reset(out);
    for (size_t i = 0; i < in->n; i++) {
        const struct tok_piece *pc = &in->v[i];
        int rc;
        if (pc->id >= 0)
            rc = tok_pieces_add_id(out, pc->id);
        else if (!trie->n)
            rc = tok_pieces_add(out, in->buf.p + pc->off, pc->len, pc->first);
        else
            rc = split_piece(t, trie, in->buf.p + pc->off, pc->len, pc->first, out);
        if (rc) return rc;
    }
    return OK;
}
