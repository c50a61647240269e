/* sample/residual.h: the accept/reject step of speculative sampling. A draft token d drawn
 * from q is accepted when u < p(d) / max(q(d), 1e-9); on rejection the committed token is
 * drawn from norm(max(0, p - q)), so every committed token is an exact sample of p. The
 * verify loop that walks a block of drafts lives in spec/; these are its building blocks.
 * All functions only read the dists; each uses one rng_double() draw (a residual that
 * falls back to p uses a second). */
#ifndef DSPARK_SAMPLE_RESIDUAL_H
#define DSPARK_SAMPLE_RESIDUAL_H

#include <stdint.h>

struct rng;
struct sample_dist;

/* 1 to accept a draft whose target probability is p and draft probability is q. A one-hot
 * draft (n-gram lookup) passes q = 1. */
int sample_accept(struct rng *r, float p, float q);

/* Draws from norm(max(0, p - q)) over p's support. dense is n_vocab floats, all zero on entry
 * and again on return (q is scattered into it and cleared). Falls back to a draw from p when
 * the residual mass is below 1e-9. Cost O(p->n + q->n). */
int32_t sample_residual(const struct sample_dist *p, const struct sample_dist *q, float *dense,
                        struct rng *r);

/* The residual for a one-hot draft: p with the draft token removed, renormalised. */
int32_t sample_residual_onehot(const struct sample_dist *p, int32_t draft, struct rng *r);

#endif
