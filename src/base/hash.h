/* base/hash.h: two small open-addressing hash maps (linear probing, power-of-two tables).
 * hash_str maps byte strings to int32 values; it does not copy keys: the caller keeps each key's
 * bytes alive and unchanged for the life of the map. hash_u64 maps uint64 keys to uint64
 * values; the key HASH_U64_EMPTY is reserved and cannot be stored. Neither map supports removal.
 * Lookups on a const map are thread-safe; inserts are not. */
#ifndef DSPARK_BASE_HASH_H
#define DSPARK_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_U64_EMPTY UINT64_MAX

struct hash_str_slot {
    const char *key; /* NULL: empty slot */
    uint32_t len;    /* key length in bytes */
    uint32_t hash;   /* low 32 bits of the key's hash, to skip most key compares */
    int32_t val;
};

struct hash_str {
    struct hash_str_slot *slots;
    size_t cap; /* power of two, or 0 before the first insert */
    size_t n;   /* number of keys */
};

struct hash_u64_slot {
    uint64_t key; /* HASH_U64_EMPTY: empty slot */
    uint64_t val;
};

struct hash_u64 {
    struct hash_u64_slot *slots;
    size_t cap;
    size_t n;
};

uint64_t hash_bytes(const void *p, size_t len);

/* Zeroed structs are valid empty maps; hash_*_reserve() avoids regrowth when n is known. */
int hash_str_reserve(struct hash_str *h, size_t n);
/* Inserts or overwrites. Returns OK or ERR_NOMEM. *old (when not NULL) gets the replaced value,
 * or -1 when the key was new. */
int hash_str_put(struct hash_str *h, const char *key, size_t len, int32_t val, int32_t *old);
/* Returns the value, or -1 when the key is absent. */
int32_t hash_str_get(const struct hash_str *h, const char *key, size_t len);
void hash_str_free(struct hash_str *h);

int hash_u64_reserve(struct hash_u64 *h, size_t n);
int hash_u64_put(struct hash_u64 *h, uint64_t key, uint64_t val);
/* Returns 1 and sets *val when found, 0 otherwise. */
int hash_u64_get(const struct hash_u64 *h, uint64_t key, uint64_t *val);
void hash_u64_free(struct hash_u64 *h);

#endif
