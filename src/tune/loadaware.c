/* tune/loadaware.c: see loadaware.h. */
#include "tune/loadaware.h"

#include "tune/controller.h"

#include <stdlib.h>

double tune_batch_seconds(const struct tune_costs *c, int b) {
    int w = c->max_cap + 1; /* the widest pass measured */
    if (b <= w) return c->verify[b < 1 ? 1 : b];
    double slope = w >= 2 ? c->verify[w] - c->verify[w - 1] : c->verify[1];
    if (slope < 0) slope = 0;
    return c->verify[w] + slope * (b - w);
}

/* Candidates ordered by a, highest first; ties by sequence, then position, so a sequence's
 * drafts come in order (its a is non-increasing). */
static int by_survival(const void *x, const void *y) {
    const struct tune_la_cand *p = x, *q = y;
    if (p->a != q->a) return p->a > q->a ? -1 : 1;
    if (p->r != q->r) return p->r - q->r;
    return p->j - q->j;
}

void tune_load_aware(const struct tune_costs *c, int R, const int *n, const float *const *a,
                     int *len, struct tune_la_cand *cand, int *best) {
    int b = R, m = 0; /* tokens in the batch; candidates */
    for (int r = 0; r < R; r++) {
        len[r] = a[r] ? 0 : n[r];
        if (!a[r]) b += n[r];
        for (int j = 0; a[r] && j < n[r]; j++)
            if (a[r][j] > 0) cand[m++] = (struct tune_la_cand){a[r][j], r, j};
    }
    qsort(cand, (size_t)m, sizeof *cand, by_survival);
    for (int r = 0; r < R; r++) best[r] = len[r];
    double tau = R, best_rate = tau / tune_batch_seconds(c, b);
    for (int i = 0; i < m; i++) {
        int r = cand[i].r, j = cand[i].j;
        if (j != len[r]) break; /* out of prefix order: a was not non-increasing */
        len[r] = j + 1;
        b++;
        tau += cand[i].a;
        double rate = tau / tune_batch_seconds(c, b);
        if (rate <= best_rate) break; /* the early stop */
        best_rate = rate;
        for (int k = 0; k < R; k++) best[k] = len[k];
    }
    for (int r = 0; r < R; r++) len[r] = best[r];
}
