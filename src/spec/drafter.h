/* spec/drafter.h: the interface every drafter implements. A drafter proposes tokens to
 * follow a sequence; spec/verify.c alone decides which of them are kept. A drafter may keep
 * state across rounds (an n-gram index, a draft model's KV cache) but must derive it from the
 * sequence it is given: tokens it proposed that were rejected simply do not appear in the
 * next call's sequence, and the drafter rolls its state back to match. One drafter serves one
 * sequence at a time; reset() starts a new one. Drafters sharing a model can propose for many
 * sequences in one call (propose_batch), each getting what it would get alone. */
#ifndef DSPARK_SPEC_DRAFTER_H
#define DSPARK_SPEC_DRAFTER_H

#include <stdint.h>

struct sample_dist;

struct draft {
    int32_t *ids;                 /* [cap] proposed tokens, in order */
    const struct sample_dist **q; /* [cap] distribution ids[i] was drawn from; NULL: one-hot */
    int n;                        /* tokens proposed */
    int cap;
    /* [cap] or NULL: when set, a drafter with a confidence head writes conf[i], its estimate of
     * the chance that drafts 0..i are all kept (non-increasing); others leave it alone */
    float *conf;
};

struct drafter;
struct drafter_ops {
    const char *name;
    /* Proposes up to n_max (<= out->cap) tokens to follow seq[0..n_seq), the prompt plus the
     * committed output; seq[n_seq - 1] is the newest token, which the target has not run yet.
     * Sets out->n (0 when it has nothing worth verifying). Returns OK or an error code. */
    int (*propose)(struct drafter *d, const int32_t *seq, int n_seq, int n_max, struct draft *out);
    void (*reset)(struct drafter *d); /* forget everything: a new sequence follows */
    void (*free)(struct drafter *d);
    /* Optional, for drafters that read the target's hidden states: the tapped layers' outputs
     * taps[n, n_taps * H] of the committed positions pos0..pos0+n-1, from the target's own
     * forward passes (prefill and verify). */
    int (*observe)(struct drafter *d, const float *taps, int pos0, int n);
    /* Optional: propose() for n sequences at once, each drafter with its own sequence, cap and
     * output, every proposal exactly what propose() would make (drafters that share one model
     * run its passes for all of them together). */
    int (*propose_batch)(struct drafter *const *ds, const int32_t *const *seqs, const int *n_seqs,
                         const int *n_max, struct draft *const *outs, int n);
    /* Optional, with ctx_tag and ctx_width: the state observe() built for the committed
     * positions, as rows[n, ctx_width] of positions 0..n, to keep with a prefix-cache entry.
     * ctx_save writes the first n positions it holds and returns how many (it may hold fewer);
     * ctx_load, right after reset(), makes rows[0..n) the state, as if observe() had seen
     * those positions' taps; only rows saved under the same ctx_tag fit. */
    int (*ctx_save)(struct drafter *d, float *rows, int n);
    int (*ctx_load)(struct drafter *d, const float *rows, int n);
};

struct drafter {
    const struct drafter_ops *ops;
    void *ctx;
    const int *tap_layers; /* target layers the drafter reads (observe), or NULL */
    int n_taps;
    uint64_t ctx_tag; /* what saved rows come from (a digest of the weights), or 0: none */
    int ctx_width;    /* floats per position of a saved row */
};

static inline void drafter_free(struct drafter *d) {
    if (d && d->ops) d->ops->free(d);
}

/* ---- constructors (one file each) ---- */

struct model;
struct sample_params;

/* lookup.c: n-gram prompt lookup over the sequence, n-grams of min_n..max_n tokens; scaled:
 * drafts no longer than the matched stretch behind them. */
int lookup_drafter_new(int min_n, int max_n, int scaled, struct drafter *out);
/* draft_model.c: a small model sharing the target's tokenizer. The drafter does not own dm.
 * With temperature > 0 it samples drafts from its own truncated distribution (sp's
 * temperature, top_k, top_p) and reports it in draft.q; otherwise drafts are greedy. */
int draft_model_drafter_new(struct model *dm, const struct sample_params *sp, int max_draft,
                            struct drafter *out);

/* block_drafter.c: DSpark or DFlash (the checkpoint's architecture decides) over bm, for a
 * sequence of up to cap positions. confidence_threshold (DSpark, 0 = off) truncates the block:
 * with per_slot == 0 at the first draft whose survival product (the chance that it and every
 * draft before it are accepted) falls below it, keeping at least one; with per_slot == 1 at
 * the first draft whose own confidence is below it, possibly none (DeepSpec's rule). */
struct block_model;
struct block_drafter_opts {
    int max_draft;
    int cap;
    float confidence_threshold;
    int per_slot;
};
int block_drafter_new(struct block_model *bm, const struct sample_params *sp,
                      const struct block_drafter_opts *o, struct drafter *out);

#endif
