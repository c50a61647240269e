/* sample/logprobs.h: raw log-probabilities for the API's logprobs fields: log-softmax of the
 * logits as the model produced them (no temperature, no penalties), for the chosen token
 * and the top-N alternatives. Max-subtracted, with the normaliser summed in double.
 * struct logprobs is a plain value owned by the caller. Pure; thread-safe. */
#ifndef DSPARK_SAMPLE_LOGPROBS_H
#define DSPARK_SAMPLE_LOGPROBS_H

#include <stdint.h>

enum { LOGPROBS_MAX_TOP = 20 };

struct logprobs {
    float chosen;                      /* log p(chosen id) */
    int n_top;                         /* entries in top_ids / top */
    int32_t top_ids[LOGPROBS_MAX_TOP]; /* most likely first; ties: lower id first */
    float top[LOGPROBS_MAX_TOP];       /* log p of top_ids[i] */
};

/* log(sum(exp(logits))) over n_vocab entries; NaN entries count as -inf. */
double logprobs_lse(const float *logits, int n_vocab);

/* Fills out for chosen_id and the top_n (clamped to [0, LOGPROBS_MAX_TOP]) most likely
 * tokens; tokens with a NaN or -inf logit are never listed, so n_top may be smaller.
 * Returns OK, or ERR_ARG when chosen_id is out of range or no logit is finite. */
int logprobs_compute(const float *logits, int n_vocab, int32_t chosen_id, int top_n,
                     struct logprobs *out);

#endif
