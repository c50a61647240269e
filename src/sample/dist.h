/* sample/dist.h: truncated sampling distributions and draws from them.
 * sample_dist_build() turns logits into trunc(softmax(logits / T)): top-k first (keep every
 * logit >= the k-th largest, ties kept), then nucleus over the result (keep tokens whose
 * cumulative probability before them is < top_p; at least one), renormalised. Ranking is by
 * logit, descending, ties broken by lower id first; NaN and -inf logits get probability 0.
 * Memory: the caller gives sample_dist_init() a block of sample_dist_bytes(n_vocab) bytes
 * (4-byte aligned) and keeps ownership; building never allocates. One dist per thread. */
#ifndef DSPARK_SAMPLE_DIST_H
#define DSPARK_SAMPLE_DIST_H

#include <stddef.h>
#include <stdint.h>

struct rng;

struct sample_dist {
    /* The distribution: entries [0, n). With truncation (sorted = 1) the kept tokens in rank
     * order, zero-probability tail removed. Without truncation (sorted = 0) the whole
     * vocabulary with ids[i] == i: sorting 150k entries would cost more than the rest of
     * the step, and no consumer needs the order. */
    int32_t *ids; /* [n_vocab] token ids */
    float *probs; /* [n_vocab] probabilities; they sum to 1 within float rounding */
    int n;        /* entries in use, >= 1 after a successful build */
    int sorted;   /* 1: rank order (probs non-increasing); 0: id order, full vocab */
    double mass;  /* sum of probs[0..n) in the order sample_dist_draw() adds them */
    int n_vocab;
    /* scratch, carved from the same block */
    float *e;          /* [n_vocab] unnormalised probabilities, or the top-k heap */
    uint32_t *keys;    /* [n_vocab] sort keys */
    uint32_t *tmp_key; /* [n_vocab] */
    int32_t *tmp_id;   /* [n_vocab] */
};

size_t sample_dist_bytes(int n_vocab);
void sample_dist_init(struct sample_dist *d, void *mem, int n_vocab);

/* Builds the distribution from logits[0..n_vocab) (read only). temperature must be > 0;
 * top_k <= 0 or >= n_vocab disables top-k; top_p >= 1 disables nucleus. Returns OK, or
 * ERR_ARG for temperature <= 0 or when no logit is finite (the dist is then empty). */
int sample_dist_build(struct sample_dist *d, const float *logits, float temperature, int top_k,
                      float top_p);

/* Recomputes d->mass after a caller edited probs[0..n) by hand (tests, custom drafters). */
void sample_dist_update(struct sample_dist *d);

/* Draws one token: one rng_double() u, then the first entry whose cumulative mass exceeds
 * u * mass. Zero-probability entries are never drawn. */
int32_t sample_dist_draw(const struct sample_dist *d, struct rng *r);

/* Probability of id (0 if absent). O(1) for an unsorted dist, O(n) for a sorted one. */
float sample_dist_prob(const struct sample_dist *d, int32_t id);

/* Index of the largest logit; ties go to the lowest id, NaN is ignored (0 if all NaN). */
int32_t sample_greedy(const float *logits, int n_vocab);

#endif
