/* tokenizer/util.c: byte buffers, piece lists, id lists and UTF-8 helpers for the tokenizer. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- buffers ---- */

int tok_buf_reserve(struct tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX / 2 - b->n) return ERR_NOMEM;
    if (b->n + extra + 1 <= b->cap) return OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return ERR_NOMEM;
    b->p = p;
    b->cap = cap;
    return OK;
}

int tok_buf_add(struct tok_buf *b, const void *p, size_t n) {
    int rc = tok_buf_reserve(b, n);
    if (rc) return rc;
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return OK;
}

void tok_buf_free(struct tok_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int pieces_grow(struct tok_pieces *l) {
    if (l->n < l->cap) return OK;
    size_t cap = l->cap ? l->cap * 2 : 16;
    struct tok_piece *v = realloc(l->v, cap * sizeof *v);
    if (!v) return ERR_NOMEM;
    l->v = v;
    l->cap = cap;
    return OK;
}

int tok_pieces_add(struct tok_pieces *l, const char *p, size_t n, int first) {
    if (!n) return OK;
    int rc = pieces_grow(l);
    if (rc) return rc;
    size_t off = l->buf.n;
    if ((rc = tok_buf_add(&l->buf, p, n))) return rc;
    l->v[l->n++] = (struct tok_piece){.off = off, .len = n, .id = -1, .first = (uint8_t)first};
    return OK;
}

int tok_pieces_add_id(struct tok_pieces *l, int32_t id) {
    int rc = pieces_grow(l);
    if (rc) return rc;
    l->v[l->n++] = (struct tok_piece){.off = 0, .len = 0, .id = id, .first = 0};
    return OK;
}

void tok_pieces_reset(struct tok_pieces *l) {
    l->n = 0;
    l->buf.n = 0;
}

void tok_pieces_free(struct tok_pieces *l) {
    tok_buf_free(&l->buf);
    free(l->v);
    memset(l, 0, sizeof *l);
}

int tok_ids_add(struct tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return ERR_NOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return OK;
}

/* ---- UTF-8 ---- */

int tok_utf8_next(const char *s, size_t n, int32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    *cp = -1;
    if (c < 0x80) {
        *cp = (int32_t)c;
        return 1;
    }
    int len;
    int32_t v, min;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 1;
    if ((size_t)len > n) return 1;
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) return 1;
        v = (v << 6) | (u[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 1;
    *cp = v;
    return len;
}

int tok_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int32_t cp;
        int k = tok_utf8_next(s + i, n - i, &cp);
        if (cp < 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

int tok_utf8_put(char *dst, int32_t cp) {
    return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)dst);
}

int tok_is_space(int32_t cp) {
    if (cp < 0) return 0;
    if ((cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680)
        return 1;
    if ((cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
        cp == 0x205f || cp == 0x3000)
        return 1;
    return 0;
}

int tok_is_word(int32_t cp) {
    if (cp < 0) return 0;
    if (cp == 0x200c || cp == 0x200d) return 1;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

int tok_is_numeric(int32_t cp) {
    if (cp < 0) return 0;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
