/* base/hash.c: see hash.h. Tables stay at most half full, so probe runs are short. */
#include "base/hash.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

/* ---- hashing ---- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t hash_bytes(const void *p, size_t len) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = mix64(h ^ w) + 0x632be59bd9b4e019ULL;
        s += 8;
        len -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < len; i++) w |= (uint64_t)s[i] << (8 * i);
    return mix64(h ^ w);
}

static size_t cap_for(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    return cap;
}

/* ---- string keys ---- */

static void str_insert_slot(struct hash_str_slot *slots, size_t cap, struct hash_str_slot s) {
    size_t i = s.hash & (cap - 1);
    while (slots[i].key) i = (i + 1) & (cap - 1);
    slots[i] = s;
}

int hash_str_reserve(struct hash_str *h, size_t n) {
    if (n > (SIZE_MAX / 2) / sizeof(struct hash_str_slot)) return ERR_NOMEM;
    size_t cap = cap_for(n);
    if (cap <= h->cap) return OK;
    struct hash_str_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return ERR_NOMEM;
    for (size_t i = 0; i < h->cap; i++)
        if (h->slots[i].key) str_insert_slot(slots, cap, h->slots[i]);
    free(h->slots);
    h->slots = slots;
    h->cap = cap;
    return OK;
}

static struct hash_str_slot *str_find(const struct hash_str *h, const char *key, size_t len,
                                      uint32_t hv) {
    if (!h->cap) return NULL;
    size_t i = hv & (h->cap - 1);
    for (;;) {
        struct hash_str_slot *s = &h->slots[i];
        if (!s->key) return s;
        if (s->hash == hv && s->len == len && memcmp(s->key, key, len) == 0) return s;
        i = (i + 1) & (h->cap - 1);
    }
}

int hash_str_put(struct hash_str *h, const char *key, size_t len, int32_t val, int32_t *old) {
    if (old) *old = -1;
    if (len > UINT32_MAX) return ERR_NOMEM;
    if ((h->n + 1) * 2 > h->cap) {
        int rc = hash_str_reserve(h, (h->n + 1) * 2);
        if (rc) return rc;
    }
    uint32_t hv = (uint32_t)hash_bytes(key, len);
    struct hash_str_slot *s = str_find(h, key, len, hv);
    if (s->key) {
        if (old) *old = s->val;
        s->val = val;
        return OK;
    }
    s->key = key ? key : "";
    s->len = (uint32_t)len;
    s->hash = hv;
    s->val = val;
    h->n++;
    return OK;
}

int32_t hash_str_get(const struct hash_str *h, const char *key, size_t len) {
    if (len > UINT32_MAX) return -1;
    struct hash_str_slot *s = str_find(h, key, len, (uint32_t)hash_bytes(key, len));
    return s && s->key ? s->val : -1;
}

void hash_str_free(struct hash_str *h) {
    free(h->slots);
    memset(h, 0, sizeof *h);
}

/* ---- uint64 keys ---- */

static void u64_insert_slot(struct hash_u64_slot *slots, size_t cap, struct hash_u64_slot s) {
    size_t i = mix64(s.key) & (cap - 1);
    while (slots[i].key != HASH_U64_EMPTY) i = (i + 1) & (cap - 1);
    slots[i] = s;
}

int hash_u64_reserve(struct hash_u64 *h, size_t n) {
    if (n > (SIZE_MAX / 2) / sizeof(struct hash_u64_slot)) return ERR_NOMEM;
    size_t cap = cap_for(n);
    if (cap <= h->cap) return OK;
    struct hash_u64_slot *slots = malloc(cap * sizeof *slots);
    if (!slots) return ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) slots[i].key = HASH_U64_EMPTY;
    for (size_t i = 0; i < h->cap; i++)
        if (h->slots[i].key != HASH_U64_EMPTY) u64_insert_slot(slots, cap, h->slots[i]);
    free(h->slots);
    h->slots = slots;
    h->cap = cap;
    return OK;
}

int hash_u64_put(struct hash_u64 *h, uint64_t key, uint64_t val) {
    if (key == HASH_U64_EMPTY) return ERR_ARG;
    if ((h->n + 1) * 2 > h->cap) {
        int rc = hash_u64_reserve(h, (h->n + 1) * 2);
        if (rc) return rc;
    }
    size_t i = mix64(key) & (h->cap - 1);
    while (h->slots[i].key != HASH_U64_EMPTY && h->slots[i].key != key) i = (i + 1) & (h->cap - 1);
    if (h->slots[i].key == HASH_U64_EMPTY) h->n++;
    h->slots[i].key = key;
    h->slots[i].val = val;
    return OK;
}

int hash_u64_get(const struct hash_u64 *h, uint64_t key, uint64_t *val) {
    if (!h->cap || key == HASH_U64_EMPTY) return 0;
    size_t i = mix64(key) & (h->cap - 1);
    for (;;) {
        const struct hash_u64_slot *s = &h->slots[i];
        if (s->key == key) {
            *val = s->val;
            return 1;
        }
        if (s->key == HASH_U64_EMPTY) return 0;
        i = (i + 1) & (h->cap - 1);
    }
}

void hash_u64_free(struct hash_u64 *h) {
    free(h->slots);
    memset(h, 0, sizeof *h);
}
