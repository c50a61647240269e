/* spec/drafter.h: the interface every drafter implements. A drafter proposes tokens to
 * follow a sequence; spec/verify.c alone decides which of them are kept. A drafter may keep
 * state across rounds (an n-gram index, a draft model's KV cache) but must derive it from the
 * sequence it is given: tokens it proposed that were rejected simply do not appear in the
 * next call's sequence, and the drafter rolls its state back to match. One drafter serves one
 * sequence at a time; reset() starts a new one. */
#ifndef DSPARK_SPEC_DRAFTER_H
#define DSPARK_SPEC_DRAFTER_H

#include <stdint.h>

struct sample_dist;

struct draft {
    int32_t *ids;                 /* [cap] proposed tokens, in order */
    const struct sample_dist **q; /* [cap] distribution ids[i] was drawn from; NULL: one-hot */
    int n;                        /* tokens proposed */
    int cap;
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
};

struct drafter {
    const struct drafter_ops *ops;
    void *ctx;
};

static inline void drafter_free(struct drafter *d) {
    if (d && d->ops) d->ops->free(d);
}

/* ---- constructors (one file each) ---- */

struct model;
struct sample_params;

/* lookup.c: n-gram prompt lookup over the sequence, n-grams of min_n..max_n tokens. */
int lookup_drafter_new(int min_n, int max_n, struct drafter *out);
/* draft_model.c: a small model sharing the target's tokenizer. The drafter does not own dm.
 * With temperature > 0 it samples drafts from its own truncated distribution (sp's
 * temperature, top_k, top_p) and reports it in draft.q; otherwise drafts are greedy. */
int draft_model_drafter_new(struct model *dm, const struct sample_params *sp, int max_draft,
                            struct drafter *out);

#endif
