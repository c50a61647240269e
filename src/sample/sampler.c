/* sample/sampler.c: the per-sequence sampler, composed of penalty counts, rng and one
 * distribution scratch block. */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "base/err.h"

struct sampler {
    struct sample_params params;
    struct penalty_counts counts;
    struct rng rng;
    struct sample_dist dist;
    void *dist_mem; /* sample_dist_bytes(n_vocab), owned */
    int n_vocab;
};

struct sampler *sampler_new(const struct sample_params *params, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    struct sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dist_mem = malloc(sample_dist_bytes(n_vocab));
    if (!s->dist_mem) {
        free(s);
        return NULL;
    }
    s->params = *params;
    s->n_vocab = n_vocab;
    penalty_init(&s->counts);
    sample_dist_init(&s->dist, s->dist_mem, n_vocab);
    rng_seed(&s->rng, params->seed);
    return s;
}

void sampler_free(struct sampler *s) {
    if (!s) return;
    penalty_deinit(&s->counts);
    free(s->dist_mem);
    free(s);
}

void sampler_reset(struct sampler *s) {
    penalty_clear(&s->counts);
    rng_seed(&s->rng, s->params.seed);
}

int sampler_build_dist_penalised(struct sampler *s, const float *logits,
                                 const struct sample_dist **out) {
    const struct sample_params *p = &s->params;
    *out = NULL;
    if (!(p->temperature > 0)) return ERR_ARG;
    int err = sample_dist_build(&s->dist, logits, p->temperature, p->top_k, p->top_p);
    if (err) return err;
    *out = &s->dist;
    return OK;
}

int sampler_build_dist(struct sampler *s, float *logits, const int32_t *extra, int n_extra,
                       const struct sample_dist **out) {
    const struct sample_params *p = &s->params;
    *out = NULL;
    if (!(p->temperature > 0)) return ERR_ARG; /* before the logits are touched */
    penalty_apply(&s->counts, p->presence_penalty, p->frequency_penalty, logits, s->n_vocab, extra,
                  n_extra);
    return sampler_build_dist_penalised(s, logits, out);
}

int sampler_build_dist_sparse(struct sampler *s, const struct sample_row_summary *sum,
                              int penalised, const struct sample_dist **out) {
    const struct sample_params *p = &s->params;
    *out = NULL;
    if (!(p->temperature > 0)) return ERR_ARG;
    if (!penalised && (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f))
        return ERR_UNSUPPORTED;
    int err = sample_dist_build_sparse(&s->dist, sum, p->temperature, p->top_k, p->top_p);
    if (err) return err;
    *out = &s->dist;
    return OK;
}

int32_t sampler_sample(struct sampler *s, float *logits) {
    const struct sample_params *p = &s->params;
    if (!(p->temperature > 0)) {
        penalty_apply(&s->counts, p->presence_penalty, p->frequency_penalty, logits, s->n_vocab,
                      NULL, 0);
        int32_t id = sample_greedy(logits, s->n_vocab);
        return logits[id] > -INFINITY ? id : ERR_ARG;
    }
    const struct sample_dist *d;
    int err = sampler_build_dist(s, logits, NULL, 0, &d);
    if (err) return err;
    return sample_dist_draw(d, &s->rng);
}

int sampler_accept(struct sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab) return ERR_ARG;
    return penalty_add(&s->counts, id);
}

const struct sample_params *sampler_params(const struct sampler *s) {
    return &s->params;
}
struct penalty_counts *sampler_counts(struct sampler *s) {
    return &s->counts;
}
struct rng *sampler_rng(struct sampler *s) {
    return &s->rng;
}
int sampler_n_vocab(const struct sampler *s) {
    return s->n_vocab;
}
