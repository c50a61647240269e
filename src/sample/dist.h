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

/* Whether top_k and top_p leave all n_vocab tokens to the distribution (both disabled, as
 * above): then a token's probability follows from the row's max and total alone
 * (sample_prob_untruncated), wherever the row was computed */
static inline int sample_untruncated(int top_k, float top_p, int n_vocab) {
    return (top_k <= 0 || top_k >= n_vocab) && !(top_p < 1);
}

/* ---- building from a row summary ----
 * A device that computed the logits can reduce each row to a summary: the max, the total
 * mass, and the few tokens that truncation can keep. The host then builds the distribution
 * from the summary, with the same bits as sample_dist_build() on the whole row, without
 * copying the row back. sample_row_summarize() is the reference a device must match bit
 * for bit: kern_max(); the total in kern_sum()'s order (kern.h), of kern_exp() (its fmaf()
 * calls are part of it) at (logit - max) * inv_t; inv_t = 1.0f / temperature correctly
 * rounded; and the nucleus threshold as two float operations, max - (NATS * temperature),
 * without a fused multiply-add. (The sign of a zero max changes none of the results.) */

/* The nucleus's first window: its candidates are the logits >= max - this * temperature. */
#define SAMPLE_NUCLEUS_NATS 8.0f

/* What a row of logits must tell the host for sample_dist_build_sparse(), for one setting of
 * temperature, top_k and top_p. Candidates:
 *  - top-k (0 < top_k < n_vocab): every token whose logit is >= the top_k-th largest logit,
 *    ties included: the tokens sample_dist_build() keeps before its nucleus;
 *  - else nucleus (top_p < 1): every token whose logit is >= the threshold above;
 *  - else none (n = 0): sample_prob_untruncated() gives any token's probability.
 * n = -1 when a logit is NaN, max is not finite, temperature <= 0, or the candidates would
 * exceed the caller's capacity. */
struct sample_row_summary {
    float max; /* kern_max(logits) */
    /* kern_exp_shift()'s sum over the whole row at (max, 1 / temperature); 0 when max is not
     * finite or temperature <= 0 */
    double total;
    /* candidates in ids[] and logits[], in increasing id order; -1: the row itself is needed */
    int n;
    int32_t *ids;  /* [cap] caller's arrays */
    float *logits; /* [cap] */
};

/* The reference summary of logits[0..n_vocab); s->ids and s->logits hold cap entries. */
void sample_row_summarize(const float *logits, int n_vocab, float temperature, int top_k,
                          float top_p, int cap, struct sample_row_summary *s);

/* Builds into d what sample_dist_build(d, row, temperature, top_k, top_p) would, bit for
 * bit, from s, the row's summary for the same temperature, top_k and top_p. Returns OK;
 * ERR_ARG where sample_dist_build() would (temperature <= 0, max not finite); or
 * ERR_UNSUPPORTED when the summary does not suffice and the caller must build from the row:
 * s->n < 0; no truncation (a draw needs every probability); or a nucleus that reaches below
 * the candidates' window (sample_dist_build() would widen it); also for top-k candidates
 * fewer than top_k, which no NaN-free row gives. On error d is left empty. A superset of
 * the candidates (still in id order) gives the same result. */
int sample_dist_build_sparse(struct sample_dist *d, const struct sample_row_summary *s,
                             float temperature, int top_k, float top_p);

/* The probability sample_dist_build() gives a token with this logit when it truncates
 * nothing (its probs[id]), from the row's max and total (a summary's), same bits. */
float sample_prob_untruncated(float logit, float max, double total, float temperature);

/* Recomputes d->mass after a caller edited probs[0..n) by hand (tests, custom drafters). */
void sample_dist_update(struct sample_dist *d);

/* Draws one token: one rng_double() u, then sample_dist_draw_u(d, u). */
int32_t sample_dist_draw(const struct sample_dist *d, struct rng *r);
/* The entry a uniform u in [0, 1) picks. The entries are cut into chunks of SAMPLE_DRAW_CHUNK
 * (summed in eight lanes and a tree; a short last chunk in order) and the chunks into spans of
 * SAMPLE_DRAW_SPAN (their chunks' sums added in order); mass is the spans' sums added in order.
 * A running double total walks the spans, then the chunks of the first span that takes it
 * past u * mass, then the entries of the first such chunk: the first positive entry that
 * takes it past is the result. Should rounding leave the target unreached at any level, the
 * last positive entry. Three short walks, so that a device can repeat them on one thread
 * (backend/cuda/sample.cu does, for untruncated rows). */
int32_t sample_dist_draw_u(const struct sample_dist *d, double u);
#define SAMPLE_DRAW_CHUNK 64 /* entries a chunk */
#define SAMPLE_DRAW_SPAN  32 /* chunks a span */

/* Probability of id (0 if absent). O(1) for an unsorted dist, O(n) for a sorted one. */
float sample_dist_prob(const struct sample_dist *d, int32_t id);

/* Index of the largest logit; ties go to the lowest id, NaN is ignored (0 if all NaN). */
int32_t sample_greedy(const float *logits, int n_vocab);

#endif
