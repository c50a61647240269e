/* sample/penalty.h: per-sequence token counts and OpenAI-style presence/frequency penalties
 * over the completion: logit[v] -= presence * [count_v > 0] + frequency * count_v.
 * The counts keep only tokens that were seen (a dense list plus a hash index), so adding a
 * token is O(1) and applying the penalties is O(distinct tokens seen), never O(vocab).
 * The caller embeds struct penalty_counts and owns it; it owns its arrays until
 * penalty_deinit(). Not thread-safe for writers; penalty_apply() only reads. */
#ifndef DSPARK_SAMPLE_PENALTY_H
#define DSPARK_SAMPLE_PENALTY_H

#include <stdint.h>

struct penalty_counts {
    int32_t *ids;    /* [n_seen] distinct token ids, in first-seen order */
    int32_t *counts; /* [n_seen] occurrences of ids[i] (always >= 1) */
    int32_t *slots;  /* [n_slots] hash index: position in ids, or -1 for an empty slot */
    int n_seen;
    int cap;     /* capacity of ids and counts */
    int n_slots; /* 0 or a power of two, at least 2 * cap */
};

void penalty_init(struct penalty_counts *c); /* empty; allocates nothing */
void penalty_deinit(struct penalty_counts *c);
void penalty_clear(struct penalty_counts *c);          /* forget all counts, keep the memory */
int penalty_add(struct penalty_counts *c, int32_t id); /* OK or ERR_NOMEM; id >= 0 */
int32_t penalty_count(const struct penalty_counts *c, int32_t id);

/* What penalising subtracts from a logit seen count (>= 1) times: presence + frequency *
 * count, rounded once to float. penalty_apply() subtracts exactly this; a device that
 * applies the penalties subtracts it too. */
float penalty_amount(float presence, float frequency, int32_t count);

/* Penalises logits[0..n_vocab) in place as if the tokens extra[0..n_extra) had been added to
 * c (duplicates count), without changing c. Row i of a verify block passes the drafts
 * d_1..d_i as extra. Every penalised logit is computed from its original value in one step
 * with the total count, so the result is bit-identical to adding the extras first. Does
 * nothing when presence == frequency == 0. Cost O(n_seen + n_extra^2). */
void penalty_apply(const struct penalty_counts *c, float presence, float frequency, float *logits,
                   int n_vocab, const int32_t *extra, int n_extra);

#endif
