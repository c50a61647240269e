/* tune/controller.c: see controller.h. */
#include "tune/controller.h"

#include <string.h>

/* ---- costs ---- */

/* One pass of n_seqs sequences of w rows each: the single-sequence curve, the measured
 * batched passes, linear in the sequence count between them and beyond the largest. */
static double pass_seconds(const struct tune_costs *c, int w, int n_seqs) {
    double lo_n = 1, lo = c->verify[w];
    if (n_seqs <= 1 || !c->n_batches) return n_seqs <= 1 ? lo : lo * n_seqs;
    for (int b = 0; b < c->n_batches; b++) {
        double hi_n = c->batch[b], hi = c->grid[b][w];
        if (n_seqs <= hi_n) return lo + (hi - lo) * (n_seqs - lo_n) / (hi_n - lo_n);
        lo_n = hi_n, lo = hi;
    }
    return lo * n_seqs / lo_n;
}

double tune_round_seconds(const struct tune_costs *c, int k, int n_seqs, int free_drafts) {
    if (k < 0) k = 0;
    if (k > c->max_cap) k = c->max_cap;
    int n = n_seqs > 1 ? n_seqs : 1;
    return pass_seconds(c, k + 1, n) + n * ((free_drafts ? 0 : c->draft[k]) + c->overhead);
}

/* ---- acceptance ---- */

void tune_est_init(struct tune_est *e) {
    memset(e, 0, sizeof *e);
}

void tune_est_observe(struct tune_est *e, int drafted, int accepted) {
    if (drafted <= 0) return;
    if (drafted > TUNE_MAX_CAP) drafted = TUNE_MAX_CAP;
    if (accepted > drafted) accepted = drafted;
    for (int i = 1; i <= TUNE_MAX_CAP; i++) {
        e->tried[i] *= 1 - TUNE_DECAY;
        e->kept[i] *= 1 - TUNE_DECAY;
    }
    /* positions 1..accepted were kept; the one after them, if drafted, was tried and lost */
    for (int i = 1; i <= accepted + 1 && i <= drafted; i++) {
        e->tried[i] += 1;
        e->kept[i] += i <= accepted;
    }
}

void tune_est_cap_weight(struct tune_est *e, double rounds) {
    if (e->tried[1] <= rounds) return;
    double f = rounds / e->tried[1];
    for (int i = 1; i <= TUNE_MAX_CAP; i++) e->tried[i] *= f, e->kept[i] *= f;
}

double tune_est_accept(const struct tune_est *e, int i) {
    double a = TUNE_PRIOR;
    if (i > TUNE_MAX_CAP) i = TUNE_MAX_CAP;
    for (int j = 1; j <= i; j++) a = (e->kept[j] + TUNE_SHRINK * a) / (e->tried[j] + TUNE_SHRINK);
    return a;
}

double tune_est_tokens(const struct tune_est *e, int k) {
    double tokens = 1, survive = 1, a = TUNE_PRIOR;
    if (k > TUNE_MAX_CAP) k = TUNE_MAX_CAP;
    for (int i = 1; i <= k; i++) {
        a = (e->kept[i] + TUNE_SHRINK * a) / (e->tried[i] + TUNE_SHRINK);
        survive *= a;
        tokens += survive;
    }
    return tokens;
}

double tune_est_rate(const struct tune_est *e) {
    double tried = 0, kept = 0;
    for (int i = 1; i <= TUNE_MAX_CAP; i++) tried += e->tried[i], kept += e->kept[i];
    return tried > 0 ? kept / tried : TUNE_PRIOR;
}

/* ---- choice ---- */

int tune_best_cap(const struct tune_costs *c, const struct tune_est *e, int n_seqs, int free_drafts,
                  double *rates) {
    int best = 0;
    double best_rate = -1;
    for (int k = 0; k <= c->max_cap; k++) {
        double s = tune_round_seconds(c, k, n_seqs, free_drafts);
        double r = s > 0 ? tune_est_tokens(e, k) / s : 0;
        if (rates) rates[k] = r;
        if (r > best_rate) best = k, best_rate = r;
    }
    return best;
}

void tune_ctl_init(struct tune_ctl *c, const struct tune_costs *costs, int free_drafts,
                   const struct tune_est *prior) {
    memset(c, 0, sizeof *c);
    c->costs = costs;
    c->free_drafts = free_drafts;
    for (int x = 0; x < 2; x++) {
        c->cap[x] = -1;
        c->gap[x] = TUNE_PROBE_EVERY;
        if (prior) {
            c->est[x] = prior[x];
            tune_est_cap_weight(&c->est[x], 8);
        } else {
            tune_est_init(&c->est[x]);
        }
    }
}

int tune_ctl_cap(struct tune_ctl *c, int n_seqs) {
    int x = c->ctx;
    if (c->cap[x] < 0 || c->rounds[x] >= TUNE_REPICK) {
        double rates[TUNE_MAX_CAP + 1] = {0};
        int best = tune_best_cap(c->costs, &c->est[x], n_seqs, c->free_drafts, rates);
        if (c->cap[x] < 0 || rates[best] > rates[c->cap[x]] * (1 + TUNE_HYSTERESIS)) {
            if (best && !c->cap[x]) c->parked[x] = 0, c->gap[x] = TUNE_PROBE_EVERY;
            c->cap[x] = best;
        }
        c->rate[x] = rates[c->cap[x]];
        c->rounds[x] = 0;
    }
    c->rounds[x]++;
    if (c->cap[x] > 0) return c->cap[x];
    if (++c->parked[x] < c->gap[x]) return 0;
    c->parked[x] = 0;
    c->gap[x] = c->gap[x] * 2 < TUNE_PROBE_MAX ? c->gap[x] * 2 : TUNE_PROBE_MAX;
    return c->costs->max_cap > 0 ? 1 : 0;
}

void tune_ctl_observe(struct tune_ctl *c, int drafted, int accepted, struct tune_est *shared) {
    if (drafted <= 0) return; /* nothing learnt; the context stays */
    tune_est_observe(&c->est[c->ctx], drafted, accepted);
    if (shared) tune_est_observe(&shared[c->ctx], drafted, accepted);
    c->ctx = accepted >= drafted;
}

int tune_ctl_current(const struct tune_ctl *c, double *rate) {
    int x = c->ctx;
    if (rate) *rate = c->rate[x];
    return c->cap[x] < 0 ? 0 : c->cap[x];
}
