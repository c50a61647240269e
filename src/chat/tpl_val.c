/* chat/tpl_val.c: allocation, reference counting, strings, lists and dicts of the template
 * engine's values, and Python's equality, ordering and truth rules over them. */
#include "chat/tpl_val.h"

#include "chat/tpl_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- budget ---- */

static _Thread_local struct tv_budget *budget;
static _Thread_local int too_deep;

int tv_take_too_deep(void) {
    int d = too_deep;
    too_deep = 0;
    return d;
}

void tv_budget_begin(struct tv_budget *b) {
    budget = b;
}
void tv_budget_end(void) {
    budget = NULL;
}

void *tv_alloc(size_t n) {
    if (budget) {
        if (n > budget->cap - budget->used) return NULL;
        budget->used += n;
    }
    void *p = malloc(n ? n : 1);
    if (!p && budget) budget->used -= n;
    return p;
}

void *tv_realloc(void *p, size_t old_n, size_t new_n) {
    if (budget && new_n > old_n) {
        if (new_n - old_n > budget->cap - budget->used) return NULL;
        budget->used += new_n - old_n;
    }
    void *q = realloc(p, new_n ? new_n : 1);
    if (!q) {
        if (budget && new_n > old_n) budget->used -= new_n - old_n;
        return NULL;
    }
    if (budget && new_n < old_n)
        budget->used -= old_n - new_n < budget->used ? old_n - new_n : budget->used;
    return q;
}

void tv_free(void *p, size_t n) {
    if (!p) return;
    if (budget) budget->used -= n < budget->used ? n : budget->used;
    free(p);
}

/* ---- strings ---- */

int tv_str_new(const char *s, size_t len, struct tv *out) {
    struct tv_str *p = tv_alloc(sizeof *p + len + 1);
    if (!p) return -1;
    p->rc = 1;
    p->markup = 0;
    p->len = len;
    size_t n_cp = 0, hi = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        n_cp += (c & 0xC0) != 0x80;
        hi |= c & 0x80;
    }
    p->n_cp = n_cp;
    p->ascii = !hi;
    if (len) memcpy(p->s, s, len);
    p->s[len] = 0;
    out->t = TV_STR;
    out->u.s = p;
    return 0;
}

int tv_str_cat(const struct tv_str *a, const struct tv_str *b, struct tv *out) {
    struct tv_str *p = tv_alloc(sizeof *p + a->len + b->len + 1);
    if (!p) return -1;
    p->rc = 1;
    p->markup = 0;
    p->len = a->len + b->len;
    p->n_cp = a->n_cp + b->n_cp;
    p->ascii = a->ascii && b->ascii;
    memcpy(p->s, a->s, a->len);
    memcpy(p->s + a->len, b->s, b->len);
    p->s[p->len] = 0;
    out->t = TV_STR;
    out->u.s = p;
    return 0;
}

/* ---- lists ---- */

int tv_list_new(enum tv_list_kind kind, size_t cap, struct tv *out) {
    struct tv_list *l = tv_alloc(sizeof *l);
    if (!l) return -1;
    memset(l, 0, sizeof *l);
    l->rc = 1;
    l->kind = (uint8_t)kind;
    l->depth = 1;
    if (cap) {
        l->v = tv_alloc(cap * sizeof *l->v);
        if (!l->v) {
            tv_free(l, sizeof *l);
            return -1;
        }
        l->cap = cap;
    }
    out->t = TV_LIST;
    out->u.l = l;
    return 0;
}

int tv_list_push(struct tv *list, struct tv v) {
    struct tv_list *l = list->u.l;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct tv *nv = tv_realloc(l->v, l->cap * sizeof *nv, cap * sizeof *nv);
        if (!nv) {
            tv_drop(&v);
            return -1;
        }
        l->v = nv;
        l->cap = cap;
    }
    unsigned d = tv_depth(&v) + 1;
    if (d > TV_MAX_DEPTH) {
        too_deep = 1;
        tv_drop(&v);
        return -1;
    }
    if (d > l->depth) l->depth = (uint16_t)d;
    l->v[l->n++] = v;
    return 0;
}

/* ---- dicts ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int tv_hashable(const struct tv *v) {
    if (v->t == TV_LIST && v->u.l->kind == TL_TUPLE) { /* a tuple hashes when its items do */
        for (size_t i = 0; i < v->u.l->n; i++)
            if (!tv_hashable(&v->u.l->v[i])) return 0;
        return 1;
    }
    return v->t == TV_NONE || v->t == TV_BOOL || v->t == TV_INT || v->t == TV_FLOAT ||
           v->t == TV_STR || v->t == TV_UNDEF || v->t == TV_FUNC || v->t == TV_LOOP ||
           (v->t == TV_LIST && (v->u.l->kind == TL_GEN || v->u.l->kind == TL_RANGE));
}

static uint64_t hash_of(const struct tv *v) {
    switch (v->t) {
    case TV_STR:
        return hash_bytes(v->u.s->s, v->u.s->len);
    case TV_BOOL:
    case TV_INT:
        return mix((uint64_t)v->u.i);
    case TV_FLOAT:
        if (v->u.f == floor(v->u.f) && fabs(v->u.f) < 9.2e18) return mix((uint64_t)(int64_t)v->u.f);
        {
            uint64_t bits;
            memcpy(&bits, &v->u.f, sizeof bits);
            return mix(bits);
        }
    case TV_LIST: {
        if (v->u.l->kind == TL_GEN) return mix((uint64_t)(uintptr_t)v->u.l); /* by identity */
        uint64_t h = 7;
        for (size_t i = 0; i < v->u.l->n; i++) h = mix(h * 31 + hash_of(&v->u.l->v[i]));
        return h;
    }
    case TV_FUNC:
        return mix((uint64_t)(uintptr_t)v->u.fn);
    default:
        return (uint64_t)v->t * 0x9E3779B97F4A7C15ull;
    }
}

static int index_build(struct tv_dict *d, size_t cap) {
    uint32_t *ix = tv_alloc(cap * sizeof *ix);
    if (!ix) return -1;
    memset(ix, 0, cap * sizeof *ix);
    for (size_t e = 0; e < d->n; e++) {
        size_t j = hash_of(&d->k[e]) & (cap - 1);
        while (ix[j]) j = (j + 1) & (cap - 1);
        ix[j] = (uint32_t)(e + 1);
    }
    tv_free(d->index, d->index_cap * sizeof *d->index);
    d->index = ix;
    d->index_cap = cap;
    return 0;
}

static long dict_find(const struct tv_dict *d, const struct tv *key) {
    if (!d->index) {
        for (size_t e = 0; e < d->n; e++)
            if (tv_equal(&d->k[e], key)) return (long)e;
        return -1;
    }
    size_t j = hash_of(key) & (d->index_cap - 1);
    while (d->index[j]) {
        size_t e = d->index[j] - 1;
        if (tv_equal(&d->k[e], key)) return (long)e;
        j = (j + 1) & (d->index_cap - 1);
    }
    return -1;
}

int tv_dict_new(enum tv_dict_kind kind, size_t cap, struct tv *out) {
    struct tv_dict *d = tv_alloc(sizeof *d);
    if (!d) return -1;
    memset(d, 0, sizeof *d);
    d->rc = 1;
    d->kind = (uint8_t)kind;
    d->depth = 1;
    if (cap) {
        d->k = tv_alloc(cap * sizeof *d->k);
        d->v = tv_alloc(cap * sizeof *d->v);
        if (!d->k || !d->v) {
            tv_free(d->k, cap * sizeof *d->k);
            tv_free(d->v, cap * sizeof *d->v);
            tv_free(d, sizeof *d);
            return -1;
        }
        d->cap = cap;
    }
    out->t = TV_DICT;
    out->u.d = d;
    return 0;
}

int tv_dict_set(struct tv *dict, struct tv key, struct tv val, int *unhashable) {
    struct tv_dict *d = dict->u.d;
    if (unhashable) *unhashable = 0;
    if (!tv_hashable(&key)) {
        if (unhashable) *unhashable = 1;
        goto fail;
    }
    unsigned dep = tv_depth(&val) + 1;
    if (dep > TV_MAX_DEPTH) {
        too_deep = 1;
        goto fail;
    }
    long e = dict_find(d, &key);
    if (e >= 0) {
        tv_drop(&key);
        tv_drop(&d->v[e]);
        d->v[e] = val;
    } else {
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 4;
            struct tv *nk = tv_realloc(d->k, d->cap * sizeof *nk, cap * sizeof *nk);
            if (!nk) goto fail;
            d->k = nk;
            struct tv *nv = tv_realloc(d->v, d->cap * sizeof *nv, cap * sizeof *nv);
            if (!nv) goto fail;
            d->v = nv;
            d->cap = cap;
        }
        d->k[d->n] = key;
        d->v[d->n] = val;
        d->n++;
        if (d->index && d->n * 2 > d->index_cap) {
            if (index_build(d, d->index_cap * 2)) return d->n--, -1;
        } else if (d->index) {
            size_t j = hash_of(&key) & (d->index_cap - 1);
            while (d->index[j]) j = (j + 1) & (d->index_cap - 1);
            d->index[j] = (uint32_t)d->n;
        } else if (d->n > 8 && index_build(d, 32)) {
            return d->n--, -1;
        }
    }
    if (dep > d->depth) d->depth = (uint16_t)dep;
    return 0;
fail:
    tv_drop(&key);
    tv_drop(&val);
    return -1;
}

struct tv *tv_dict_get(const struct tv_dict *d, const struct tv *key) {
    if (!tv_hashable(key)) return NULL;
    long e = dict_find(d, key);
    return e >= 0 ? &d->v[e] : NULL;
}

struct tv *tv_dict_get_str(const struct tv_dict *d, const char *key, size_t len) {
    if (!d->index) {
        for (size_t e = 0; e < d->n; e++)
            if (d->k[e].t == TV_STR && d->k[e].u.s->len == len && !memcmp(d->k[e].u.s->s, key, len))
                return &d->v[e];
        return NULL;
    }
    size_t j = hash_bytes(key, len) & (d->index_cap - 1);
    while (d->index[j]) {
        size_t e = d->index[j] - 1;
        if (d->k[e].t == TV_STR && d->k[e].u.s->len == len && !memcmp(d->k[e].u.s->s, key, len))
            return &d->v[e];
        j = (j + 1) & (d->index_cap - 1);
    }
    return NULL;
}

/* ---- references ---- */

struct tv tv_ref(struct tv v) {
    int32_t *rc = NULL;
    switch (v.t) {
    case TV_STR:
        rc = &v.u.s->rc;
        break;
    case TV_LIST:
        rc = &v.u.l->rc;
        break;
    case TV_DICT:
        rc = &v.u.d->rc;
        break;
    case TV_FUNC:
        rc = tpl_func_rc(v.u.fn);
        break;
    case TV_LOOP:
        rc = tpl_loop_rc(v.u.loop);
        break;
    default:
        break;
    }
    if (rc && *rc >= 0) ++*rc;
    return v;
}

static void list_free(struct tv_list *l) {
    for (size_t i = 0; i < l->n; i++) tv_drop(&l->v[i]);
    if (l->err) {
        struct tv e = {.t = TV_STR};
        e.u.s = l->err;
        tv_drop(&e);
    }
    tv_free(l->v, l->cap * sizeof *l->v);
    tv_free(l, sizeof *l);
}

void tpl_dict_clear(struct tv_dict *d) {
    for (size_t i = 0; i < d->n; i++) {
        tv_drop(&d->k[i]);
        tv_drop(&d->v[i]);
    }
    tv_free(d->k, d->cap * sizeof *d->k);
    tv_free(d->v, d->cap * sizeof *d->v);
    tv_free(d->index, d->index_cap * sizeof *d->index);
    d->k = d->v = NULL;
    d->index = NULL;
    d->n = d->cap = d->index_cap = 0;
}

void tv_drop(struct tv *v) {
    switch (v->t) {
    case TV_STR:
        if (v->u.s->rc >= 0 && --v->u.s->rc == 0) tv_free(v->u.s, sizeof *v->u.s + v->u.s->len + 1);
        break;
    case TV_LIST:
        if (v->u.l->rc >= 0 && --v->u.l->rc == 0) list_free(v->u.l);
        break;
    case TV_DICT:
        if (v->u.d->rc >= 0 && --v->u.d->rc == 0) {
            tpl_dict_clear(v->u.d);
            tv_free(v->u.d, sizeof *v->u.d);
        }
        break;
    case TV_FUNC:
        tpl_func_release(v->u.fn);
        break;
    case TV_LOOP:
        tpl_loop_release(v->u.loop);
        break;
    default:
        break;
    }
    v->t = TV_UNDEF;
    v->u.hint = NULL;
}

/* ---- properties ---- */

int tv_is_str(const struct tv *v) {
    return v->t == TV_STR;
}
int tv_is_number(const struct tv *v) {
    return v->t == TV_BOOL || v->t == TV_INT || v->t == TV_FLOAT;
}

unsigned tv_depth(const struct tv *v) {
    switch (v->t) {
    case TV_LIST:
        return v->u.l->depth;
    case TV_DICT:
        return v->u.d->kind == TD_DICT ? v->u.d->depth : 0; /* namespaces: see teardown */
    case TV_LOOP:
        return tpl_loop_depth(v->u.loop);
    case TV_FUNC:
        return tpl_func_depth(v->u.fn);
    default:
        return 0;
    }
}

int tv_truthy(const struct tv *v) {
    switch (v->t) {
    case TV_UNDEF:
    case TV_NONE:
        return 0;
    case TV_BOOL:
    case TV_INT:
        return v->u.i != 0;
    case TV_FLOAT:
        return v->u.f != 0.0;
    case TV_STR:
        return v->u.s->len != 0;
    case TV_LIST:
        return v->u.l->kind == TL_GEN || v->u.l->n != 0;
    case TV_DICT:
        return v->u.d->kind == TD_NS || v->u.d->n != 0;
    default:
        return 1;
    }
}

int64_t tv_len(const struct tv *v) {
    switch (v->t) {
    case TV_UNDEF:
        return 0;
    case TV_STR:
        return (int64_t)v->u.s->n_cp;
    case TV_LIST:
        return v->u.l->kind == TL_GEN ? -1 : (int64_t)v->u.l->n;
    case TV_DICT:
        return v->u.d->kind == TD_NS ? -1 : (int64_t)v->u.d->n;
    case TV_LOOP:
        return tpl_loop_length(v->u.loop);
    default:
        return -1;
    }
}

static int num_of(const struct tv *v, double *f, int64_t *i) {
    if (v->t == TV_BOOL || v->t == TV_INT) {
        *i = v->u.i;
        *f = (double)v->u.i;
        return 1;
    }
    if (v->t == TV_FLOAT) {
        *f = v->u.f;
        return 2;
    }
    return 0;
}

int tv_equal(const struct tv *a, const struct tv *b) {
    double fa, fb;
    int64_t ia = 0, ib = 0;
    int na = num_of(a, &fa, &ia), nb = num_of(b, &fb, &ib);
    if (na && nb) return na == 1 && nb == 1 ? ia == ib : fa == fb;
    if (a->t != b->t) return 0;
    switch (a->t) {
    case TV_UNDEF:
    case TV_NONE:
        return 1;
    case TV_STR:
        return a->u.s == b->u.s ||
               (a->u.s->len == b->u.s->len && !memcmp(a->u.s->s, b->u.s->s, a->u.s->len));
    case TV_LIST: {
        const struct tv_list *x = a->u.l, *y = b->u.l;
        if (x == y) return 1;
        /* a list never equals a tuple, a range or a dict view; generators only themselves */
        if (x->kind != y->kind || x->kind == TL_GEN || x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++)
            if (!tv_equal(&x->v[i], &y->v[i])) return 0;
        return 1;
    }
    case TV_DICT: {
        const struct tv_dict *x = a->u.d, *y = b->u.d;
        if (x == y) return 1;
        if (x->kind == TD_NS || y->kind == TD_NS || x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            const struct tv *w = tv_dict_get(y, &x->k[i]);
            if (!w || !tv_equal(&x->v[i], w)) return 0;
        }
        return 1;
    }
    case TV_FUNC:
        return a->u.fn == b->u.fn;
    case TV_LOOP:
        return a->u.loop == b->u.loop;
    default:
        return 0;
    }
}

int tv_less(const struct tv *a, const struct tv *b, int *lt) {
    double fa, fb;
    int64_t ia = 0, ib = 0;
    int na = num_of(a, &fa, &ia), nb = num_of(b, &fb, &ib);
    if (na && nb) {
        *lt = na == 1 && nb == 1 ? ia < ib : fa < fb;
        return 0;
    }
    if (a->t == TV_STR && b->t == TV_STR) {
        size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
        int c = memcmp(a->u.s->s, b->u.s->s, n);
        *lt = c < 0 || (c == 0 && a->u.s->len < b->u.s->len);
        return 0;
    }
    if (a->t == TV_LIST && b->t == TV_LIST && a->u.l->kind == b->u.l->kind &&
        (a->u.l->kind == TL_LIST || a->u.l->kind == TL_TUPLE)) {
        const struct tv_list *x = a->u.l, *y = b->u.l;
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (tv_equal(&x->v[i], &y->v[i])) continue;
            return tv_less(&x->v[i], &y->v[i], lt);
        }
        *lt = x->n < y->n;
        return 0;
    }
    return -1;
}
