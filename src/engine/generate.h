/* engine/generate.h: plain autoregressive generation of one sequence: prefill the prompt,
 * then sample one token per forward until EOS or the token budget. The caller owns the
 * model and the sampler; gen_run() owns a KV cache for the duration of the call. Each
 * committed token is passed to the callback, which may stop generation by returning nonzero. */
#ifndef DSPARK_ENGINE_GENERATE_H
#define DSPARK_ENGINE_GENERATE_H

#include "model/model.h"
#include "sample/sampler.h"

#include <stdint.h>

struct gen_stats {
    int n_prompt, n_generated;
    double prefill_s, decode_s; /* wall time of the prefill and of the decode steps */
    int hit_eos;                /* stopped on an end-of-sequence token */
};

typedef int gen_token_fn(void *ctx, int32_t id);

struct gen_opts {
    int max_tokens;   /* new tokens at most */
    int ignore_eos;   /* keep going past EOS ids */
    const int32_t *extra_eos; /* further stop ids (e.g. the tokenizer's EOS), n_extra_eos of them */
    int n_extra_eos;
};

int gen_run(struct model *m, struct sampler *s, const int32_t *prompt, int n_prompt,
            const struct gen_opts *opts, gen_token_fn *on_token, void *ctx,
            struct gen_stats *stats);

#endif
