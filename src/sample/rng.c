/* sample/rng.c: xoshiro256** (Blackman and Vigna) with its state filled by splitmix64, so
 * any 64-bit seed, zero included, gives a valid, well-mixed state. */
#include "sample/rng.h"

#include <assert.h>

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    /* splitmix64 is a bijection of a counter, so four consecutive outputs are never all
     * zero; the assert documents the invariant xoshiro needs. */
    assert((r->s[0] | r->s[1] | r->s[2] | r->s[3]) != 0);
}

uint64_t rng_next(struct rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float rng_float(struct rng *r) {
    return (float)(rng_next(r) >> 40) * 0x1.0p-24f;
}

double rng_double(struct rng *r) {
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

uint32_t rng_below(struct rng *r, uint32_t n) {
    assert(n > 0);
    /* Multiply-shift maps 32 random bits onto [0, n); reject the short first interval so
     * every value is exactly equally likely. */
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint64_t m = (rng_next(r) >> 32) * (uint64_t)n;
        if ((uint32_t)m >= threshold) return (uint32_t)(m >> 32);
    }
}
