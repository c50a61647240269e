/* sample/rng.h: a small seeded pseudo-random generator (xoshiro256**, seeded through
 * splitmix64). The same seed always gives the same stream on every platform, so a request's
 * "seed" reproduces its output. A struct rng is a plain value: embed it, copy it to fork a
 * stream. Not thread-safe per object; one rng per sequence. */
#ifndef DSPARK_SAMPLE_RNG_H
#define DSPARK_SAMPLE_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4]; /* generator state; never all zero after rng_seed() */
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);              /* 64 uniform bits */
float rng_float(struct rng *r);                /* uniform in [0, 1), 24-bit resolution */
double rng_double(struct rng *r);              /* uniform in [0, 1), 53-bit resolution */
uint32_t rng_below(struct rng *r, uint32_t n); /* uniform in [0, n); n > 0 */

#endif
