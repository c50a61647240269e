/* tests/unit/dists.h: a sample_dist with its own memory, for the sampler's tests. */
#ifndef DSPARK_TESTS_DISTS_H
#define DSPARK_TESTS_DISTS_H

#include "sample/dist.h"

#include <stdlib.h>

static inline struct sample_dist *dist_new(int n_vocab) {
    struct sample_dist *d = malloc(sizeof *d);
    sample_dist_init(d, malloc(sample_dist_bytes(n_vocab)), n_vocab);
    return d;
}

static inline void dist_free(struct sample_dist *d) {
    free(d->ids); /* ids is the start of the block */
    free(d);
}

#endif
