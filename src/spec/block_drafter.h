/* spec/block_drafter.h: the state the DSpark and DFlash proposal functions share. Not public:
 * block_drafter.c owns the drafter shell (context, reset, free, running the blocks of one or
 * many sequences), dspark.c and dflash.c the two ways of turning a block's hidden states into
 * drafts, for many sequences at once. */
#ifndef DSPARK_SPEC_BLOCK_DRAFTER_H
#define DSPARK_SPEC_BLOCK_DRAFTER_H

#include "base/err.h"
#include "sample/dist.h"
#include "sample/rng.h"
#include "sample/sampler.h"
#include "spec/block_model.h"
#include "spec/drafter.h"

struct block_drafter {
    struct block_model *bm;
    struct block_state *st;
    struct block_drafter_opts o;
    struct sample_params sp;
    struct rng rng;
    struct sample_dist *dists; /* [block_size] draft distributions when sampling */
    void *dist_mem;
    int32_t *ids;  /* [block_size] block input */
    float *hidden; /* [block_size, H] */
    float *logits; /* [block_size, V] the rows that drafts come from (all rows on the GPU) */
    float *bias;   /* [V] Markov bias */
    int broken;    /* the context missed rows: no more drafts this sequence */
};

/* Picks a draft from logits[V]: argmax, or a draw from the truncated distribution slot i. */
int32_t block_pick(struct block_drafter *b, const float *logits, int i,
                   const struct sample_dist **q);
/* Drafts of n drafters of one model whose blocks have run (ids, hidden, and with have_logits
 * every block row's logits): up to k[i] into outs[i] (whose n is 0), each exactly what the
 * drafter proposes alone. */
void dspark_draft(struct block_drafter *const *bs, const int *k, struct draft *const *outs, int n,
                  int have_logits);
void dflash_draft(struct block_drafter *const *bs, const int *k, struct draft *const *outs, int n,
                  int have_logits);

#endif
