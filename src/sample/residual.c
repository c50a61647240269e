/* sample/residual.c: acceptance test and residual draws for speculative sampling. The
 * residual is walked twice (mass, then the draw) with the same arithmetic, so the draw
 * always lands inside the residual's support. */
#include "sample/residual.h"

#include <assert.h>

#include "sample/dist.h"
#include "sample/rng.h"

enum { NO_TOKEN = -1 };

int sample_accept(struct rng *r, float p, float q) {
    double u = rng_double(r);
    double qq = q > 1e-9f ? (double)q : 1e-9;
    return u < (double)p / qq;
}

/* Residual of entry j: p minus q at its id (q from dense), or minus the one-hot draft. */
static double resid(const struct sample_dist *p, const float *dense, int32_t draft, int j) {
    double q = dense ? (double)dense[p->ids[j]] : (p->ids[j] == draft ? 1.0 : 0.0);
    double x = (double)p->probs[j] - q;
    return x > 0 ? x : 0;
}

static int32_t draw_residual(const struct sample_dist *p, const float *dense, int32_t draft,
                             struct rng *r) {
    double mass = 0;
    for (int j = 0; j < p->n; j++) mass += resid(p, dense, draft, j);
    double u = rng_double(r);
    if (!(mass >= 1e-9)) return NO_TOKEN;
    double target = u * mass, cum = 0;
    int last = 0;
    for (int j = 0; j < p->n; j++) {
        double x = resid(p, dense, draft, j);
        if (x > 0) {
            last = j;
            cum += x;
            if (cum > target) return p->ids[j];
        }
    }
    return p->ids[last];
}

int32_t sample_residual(const struct sample_dist *p, const struct sample_dist *q, float *dense,
                        struct rng *r) {
    assert(p->n > 0 && q->n > 0);
    for (int j = 0; j < q->n; j++) dense[q->ids[j]] = q->probs[j];
    int32_t id = draw_residual(p, dense, NO_TOKEN, r);
    for (int j = 0; j < q->n; j++) dense[q->ids[j]] = 0.0f;
    return id != NO_TOKEN ? id : sample_dist_draw(p, r);
}

int32_t sample_residual_onehot(const struct sample_dist *p, int32_t draft, struct rng *r) {
    assert(p->n > 0);
    int32_t id = draw_residual(p, NULL, draft, r);
    return id != NO_TOKEN ? id : sample_dist_draw(p, r);
}
