/* spec/verify.h: one speculative round, the only place the acceptance rule lives. The target
 * runs the pending token plus k drafts in one forward pass; row i of its logits decides
 * position i: greedy keeps the longest prefix of drafts equal to the target's argmax, sampling
 * accepts draft d with probability min(1, p(d)/q(d)) and draws a rejection from
 * norm(max(0, p - q)); the token after the last accepted draft (correction or bonus) is
 * always committed. p is the target's distribution after penalties (counting the tokens
 * committed before that row), temperature, top-k and top-p, so every committed token is an
 * exact sample of what plain decoding would sample. Tokens are committed one by one through a
 * callback, which may end the round early (EOS, stop string, token budget). */
#ifndef DSPARK_SPEC_VERIFY_H
#define DSPARK_SPEC_VERIFY_H

#include "model/model.h"
#include "sample/logprobs.h"
#include "spec/drafter.h"

#include <stdint.h>

struct kv_cache;
struct sampler;
struct sample_dist;
struct gpu_sample_req;

#define VERIFY_MAX_DRAFT 64

struct verify {
    struct model *m;
    struct kv_cache *kv;
    struct sampler *s;
    int max_draft;    /* drafts per round at most */
    int top_logprobs; /* < 0: no logprobs; else report the chosen token and this many others */
    float *logits;    /* [max_draft + 1, vocab] */
    float *raw;       /* [vocab] a row before penalties, for logprobs */
    float *dense;     /* [vocab] zeros, scratch of sample_residual */
    float *taps;      /* [max_draft + 1, tap_width] the target's taps of the last round, or NULL */
    /* Plain greedy rounds (temperature 0, no penalties, no logprobs) on a GPU target: the
     * target reports only each row's greedy token into ids[], not its logits. */
    int greedy_ids;
    int32_t *ids; /* [max_draft + 1] */
    /* Other rounds on a GPU target (sampled, or greedy with penalties; no logprobs): the
     * target reports each row's sampling summary (backend/gpu.h) and keeps its logits on the
     * device; it applies the penalties first, takes greedy rows' argmax, and without
     * truncation draws the last row at the number the rng will give it. A row's logits come
     * back only when its decision needs the whole distribution (a rejected untruncated
     * draft's residual, or a nucleus wider than the summary). The decisions are those the
     * logits would give, bit for bit. NULL otherwise (or with DSPARK_GPU_SAMPLE_SUMMARY=0). */
    struct gpu_sample_req *req;
    /* with penalties, the lists req carries for the device to apply them (backend/gpu.h) */
    int32_t *pen_ids, *ext_ids;
    float *pen_amt, *ext_amt;
    int *ext_at, *ext_n; /* [max_draft + 1] */
    int pen_cap;
    int n_summarised; /* rounds decided from summaries */
    int n_fetched;    /* rows of those whose logits came back */
};

/* Receives each committed token (and its raw logprobs when asked for); nonzero stops. */
typedef int verify_commit_fn(void *ctx, int32_t id, const struct logprobs *lp);

/* tap_width > 0: each round also records the target's hidden-state taps (model_set_taps())
 * of its rows into v->taps, tap_width floats per row. */
int verify_init(struct verify *v, struct model *m, struct kv_cache *kv, struct sampler *s,
                int max_draft, int top_logprobs, int tap_width);
void verify_deinit(struct verify *v);

/* Runs one round. The cache must hold every token before `pending`. On return it holds every
 * token before the new pending token (the last one committed): rejected rows are rolled back.
 * *n_accepted counts the drafts kept; *stopped is set when the callback ended the round.
 * Returns OK or an error code (then generation must end). */
int verify_round(struct verify *v, int32_t pending, const struct draft *d, verify_commit_fn *cb,
                 void *ctx, int *n_accepted, int *stopped);
/* The target pass of a round over in[0..n) as v decides from it: every row's logits into
 * v->logits, or with greedy_ids only their greedy tokens into v->ids; taps into v->taps. */
struct model_batch_item verify_item(struct verify *v, const int32_t *in, int n);
/* The decision half of verify_round(), on logits already in v->logits (rows 0..d->n), or with
 * greedy_ids on the greedy tokens in v->ids: commits through cb and leaves the cache alone.
 * Exposed so tests can replay one round many times. */
int verify_decide(struct verify *v, const struct draft *d, verify_commit_fn *cb, void *ctx,
                  int *n_accepted, int *stopped);

#endif
