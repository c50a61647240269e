/* tune/loadaware.h: load-aware, confidence-scheduled verification (DSpark paper, Alg. 1;
 * docs SPEC §1.6). In a batched step, every sequence with drafts reports the drafter's
 * survival products a[r][j] (the estimated chance that drafts 0..j are all kept; non-increasing
 * in j). Drafts are admitted best first, each adding one token to the forward batch and a[r][j]
 * expected tokens, while the predicted rate (expected tokens / seconds of the batch) keeps
 * rising; the first admission that does not raise it ends the search (that early stop is what
 * keeps the choice lossless). Verifying fewer drafts never changes which tokens are committed
 * under greedy decoding, and leaves sampled output an exact sample of the target. Pure: no
 * I/O, clock or allocation beyond the caller's arrays. */
#ifndef DSPARK_TUNE_LOADAWARE_H
#define DSPARK_TUNE_LOADAWARE_H

struct tune_costs;

/* Seconds of one forward of b tokens in total (b >= 1), from the calibrated pass costs
 * (linear past the widest width measured). */
double tune_batch_seconds(const struct tune_costs *c, int b);

/* A draft that may be admitted (caller-owned scratch, one per draft of the step). */
struct tune_la_cand {
    float a;
    int r, j;
};

/* R sequences, each with its pending token in the batch; sequence r has n[r] drafts with
 * survival products a[r][0..n[r]) (a[r] NULL: its drafts are kept as they are and only add to
 * the batch). Returns in len[r] how many of its drafts sequence r verifies. cand: room for the
 * sum of n[r]; best: room for R. */
void tune_load_aware(const struct tune_costs *c, int R, const int *n, const float *const *a,
                     int *len, struct tune_la_cand *cand, int *best);

#endif
