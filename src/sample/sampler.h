/* sample/sampler.h: one sequence's sampler: its parameters, its penalty counts, its rng and
 * its distribution scratch, behind a single handle. Per step: id = sampler_sample(s, logits),
 * then sampler_accept(s, id) once the token is committed. The verify loop uses the parts
 * (sampler_counts, sampler_rng, sampler_build_dist) with the building blocks in penalty.h, dist.h
 * and residual.h. sampler_new() allocates everything once; no step allocates except
 * sampler_accept() growing the count table. Not thread-safe; one sampler per sequence. */
#ifndef DSPARK_SAMPLE_SAMPLER_H
#define DSPARK_SAMPLE_SAMPLER_H

#include <stdint.h>

#include "sample/dist.h"
#include "sample/penalty.h"
#include "sample/rng.h"

struct sample_params {
    float temperature;       /* <= 0: greedy (top_k and top_p are then ignored) */
    float top_p;             /* >= 1: off */
    int top_k;               /* <= 0: off */
    float presence_penalty;  /* OpenAI semantics, over the completion only */
    float frequency_penalty; /* ditto; 0 and 0 leave the logits untouched */
    uint64_t seed;           /* the rng is seeded from this by sampler_new and sampler_reset */
};

struct sampler;

/* NULL on allocation failure or n_vocab <= 0. The sampler copies *params. */
struct sampler *sampler_new(const struct sample_params *params, int n_vocab);
void sampler_free(struct sampler *s); /* NULL is a no-op */
/* Forgets the counts and reseeds the rng from params.seed: a new completion. */
void sampler_reset(struct sampler *s);

/* Applies the penalties to logits[0..n_vocab) IN PLACE (the caller's array holds the
 * penalised logits afterwards; take raw logprobs before this call), then returns the greedy
 * id (T <= 0) or a draw from the truncated distribution. Does not update the counts.
 * Returns a token id, or ERR_ARG when the logits are unusable: all NaN or -inf, or (when
 * sampling) a +inf among them. */
int32_t sampler_sample(struct sampler *s, float *logits);

/* Records a committed token in the counts: OK, ERR_NOMEM, or ERR_ARG for an id outside
 * the vocabulary. */
int sampler_accept(struct sampler *s, int32_t id);

/* Penalises logits in place with the counts plus extra[0..n_extra) (verify row i passes
 * drafts d_1..d_i), then builds the truncated distribution in the sampler's scratch, valid
 * until the next call that uses it. Not for greedy samplers (returns ERR_ARG). */
int sampler_build_dist(struct sampler *s, float *logits, const int32_t *extra, int n_extra,
                       const struct sample_dist **out);

/* sampler_build_dist() with no extras over logits that already carry the penalties (a device
 * applied them): builds without applying them again. */
int sampler_build_dist_penalised(struct sampler *s, const float *logits,
                                 const struct sample_dist **out);

/* sampler_build_dist() from a row's summary (sample_row_summarize(), or a GPU's) instead of
 * its logits: the same distribution, bit for bit. penalised: the summary is of logits that
 * carry the sampler's penalties already (else a sampler with penalties cannot use it).
 * ERR_UNSUPPORTED when the summary does not suffice (then build from the row): penalties
 * not applied, no truncation, a nucleus past the summary's candidates, or a summary that
 * holds none. */
int sampler_build_dist_sparse(struct sampler *s, const struct sample_row_summary *sum,
                              int penalised, const struct sample_dist **out);

const struct sample_params *sampler_params(const struct sampler *s);
struct penalty_counts *sampler_counts(struct sampler *s);
struct rng *sampler_rng(struct sampler *s);
int sampler_n_vocab(const struct sampler *s);

#endif
