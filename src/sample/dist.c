/* sample/dist.c: building truncated distributions and drawing from them.
 * Three paths, chosen by the truncation asked for:
 *  - none: exp over the vocabulary in id order, no sort (vectorised, a few passes);
 *  - top-k: one pass with a k-entry min-heap, which also collects every logit that could
 *    tie the k-th; only those candidates are exponentiated and sorted;
 *  - nucleus only: exp over the vocabulary, then only the tokens within a few nats of the
 *    max logit are sorted (widening when their mass falls short of top_p).
 * sample_dist_build_sparse() runs the same top-k and first nucleus stage over a row
 * summary's candidates, sharing their code, so the two give the same bits. */
#include "sample/dist.h"

#include <assert.h>
#include <math.h>

#include "base/err.h"
#include "sample/kern.h"
#include "sample/rng.h"

enum {
    CHUNK = SAMPLE_DRAW_CHUNK, /* draw granularity: one double add per chunk while skipping */
    SPAN = SAMPLE_DRAW_SPAN * SAMPLE_DRAW_CHUNK, /* and one per span of chunks before that */
    BLOCK = 64, /* top-k: logits tested at once against the heap minimum */
};

size_t sample_dist_bytes(int n_vocab) {
    return (size_t)n_vocab * 6 * 4;
}

void sample_dist_init(struct sample_dist *d, void *mem, int n_vocab) {
    assert(n_vocab > 0 && mem);
    char *p = mem;
    size_t n = (size_t)n_vocab * 4;
    *d = (struct sample_dist){0};
    d->n_vocab = n_vocab;
    d->ids = (int32_t *)(void *)p;
    d->probs = (float *)(void *)(p + n);
    d->e = (float *)(void *)(p + 2 * n);
    d->keys = (uint32_t *)(void *)(p + 3 * n);
    d->tmp_key = (uint32_t *)(void *)(p + 4 * n);
    d->tmp_id = (int32_t *)(void *)(p + 5 * n);
}

/* ---- mass and draws ---- */

/* Sum of one chunk in a fixed order: eight lanes (j, j + 8, ...) then a tree, which
 * vectorises; a partial chunk is summed left to right. */
static double chunk_sum(const float *p, int n) {
    double s[8] = {0};
    if (n < CHUNK) {
        for (int i = 0; i < n; i++) s[0] += (double)p[i];
        return s[0];
    }
    for (int i = 0; i < CHUNK; i += 8)
        for (int j = 0; j < 8; j++) s[j] += (double)p[i + j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* Sum of one span (up to SPAN entries): its chunks' sums added in order. */
static double span_sum(const float *p, int n) {
    double s = 0;
    for (int i = 0; i < n; i += CHUNK) s += chunk_sum(p + i, n - i < CHUNK ? n - i : CHUNK);
    return s;
}

/* The spans' sums added in order. */
static double mass_of(const float *p, int n) {
    double m = 0;
    for (int i = 0; i < n; i += SPAN) m += span_sum(p + i, n - i < SPAN ? n - i : SPAN);
    return m;
}

void sample_dist_update(struct sample_dist *d) {
    d->mass = mass_of(d->probs, d->n);
}

int32_t sample_dist_draw(const struct sample_dist *d, struct rng *r) {
    return sample_dist_draw_u(d, rng_double(r));
}

/* The entry of span p[0..n) that takes the running total cum past target, or -1. */
static int span_draw(const float *p, int n, double cum, double target) {
    for (int i = 0; i < n; i += CHUNK) {
        int len = n - i < CHUNK ? n - i : CHUNK;
        double c = chunk_sum(p + i, len);
        if (cum + c > target) {
            for (int j = 0; j < len; j++) {
                cum += (double)p[i + j];
                if (cum > target && p[i + j] > 0) return i + j;
            }
            return -1;
        }
        cum += c;
    }
    return -1;
}

int32_t sample_dist_draw_u(const struct sample_dist *d, double u) {
    assert(d->n > 0);
    const float *p = d->probs;
    double target = u * d->mass, cum = 0;
    for (int i = 0; i < d->n; i += SPAN) {
        int len = d->n - i < SPAN ? d->n - i : SPAN;
        double s = span_sum(p + i, len);
        if (cum + s > target) {
            int j = span_draw(p + i, len, cum, target);
            if (j >= 0) return d->ids[i + j];
            break;
        }
        cum += s;
    }
    /* Rounding (summing a span or a chunk in another order, or u * mass == mass) left the
     * target unreached: take the last entry with positive probability. */
    int j = d->n - 1;
    while (j > 0 && !(p[j] > 0)) j--;
    return d->ids[j];
}

float sample_dist_prob(const struct sample_dist *d, int32_t id) {
    if (!d->sorted) return id >= 0 && id < d->n ? d->probs[id] : 0.0f;
    for (int i = 0; i < d->n; i++)
        if (d->ids[i] == id) return d->probs[i];
    return 0.0f;
}

int32_t sample_greedy(const float *logits, int n_vocab) {
    return kern_argmax(logits, n_vocab);
}

/* ---- candidate selection ---- */

static void sift_down(float *h, int n, int i) {
    float v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (!(h[c] < v)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* The k-th largest of vals[0..n) (0 < k <= n; NaN counts as -inf), with heap[0..k) as
 * scratch: a min-heap of the k largest so far. With cand, the position of every value >= the
 * heap minimum when it is seen goes to cand[0..*n_cand), in increasing order: that covers
 * every value >= the result, ties included (the minimum only rises). Blocks with no value
 * >= the minimum are skipped by a vectorised test. */
static float kth_largest(float *heap, int k, const float *vals, int n, int32_t *cand, int *n_cand) {
    int nc = 0;
    for (int i = 0; i < k; i++) {
        heap[i] = vals[i] == vals[i] ? vals[i] : -INFINITY;
        if (cand) cand[nc++] = i;
    }
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(heap, k, i);
    float h0 = heap[0];
    for (int i = k; i < n;) {
        int end = n - i < BLOCK ? n : i + BLOCK;
        if (end - i == BLOCK) {
            int hit = 0;
            for (int j = 0; j < BLOCK; j++) hit |= vals[i + j] >= h0;
            if (!hit) {
                i = end;
                continue;
            }
        }
        for (; i < end; i++) {
            float v = vals[i];
            if (v >= h0) {
                if (cand) cand[nc++] = i;
                if (v > h0) {
                    heap[0] = v;
                    sift_down(heap, k, 0);
                    h0 = heap[0];
                }
            }
        }
    }
    if (n_cand) *n_cand = nc;
    return h0;
}

/* Top-k over vals[0..n) (the row, or a summary's candidates): positions of every value >=
 * the k-th largest go to ids[0..m) in rank order, ties by lower position first; returns m. */
static int select_top_k(struct sample_dist *d, const float *vals, int n, int k) {
    int n_cand, m = 0;
    int32_t *cand = d->tmp_id;
    float h0 = kth_largest(d->e, k, vals, n, cand, &n_cand);
    for (int j = 0; j < n_cand; j++) {
        float v = vals[cand[j]];
        if (v >= h0) {
            d->ids[m] = cand[j];
            d->keys[m++] = kern_key_desc(v);
        }
    }
    kern_sort(d->keys, d->ids, d->tmp_key, d->tmp_id, m);
    return m;
}

/* probs[0..m) hold unnormalised mass in rank order; cuts the nucleus against total (the
 * mass of the distribution it is taken from), drops a zero tail, renormalises. */
static void finish(struct sample_dist *d, int m, double total, float top_p) {
    float *p = d->probs;
    int keep = m;
    if (top_p < 1) {
        double target = (double)top_p * total, cum = 0;
        keep = 0;
        do cum += (double)p[keep++];
        while (keep < m && cum < target);
    }
    while (keep > 1 && !(p[keep - 1] > 0)) keep--;
    double s = 0;
    for (int j = 0; j < keep; j++) s += (double)p[j];
    for (int j = 0; j < keep; j++) p[j] = (float)((double)p[j] / s);
    d->n = keep;
    d->sorted = 1;
    d->mass = mass_of(p, keep);
}

/* After select_top_k(): probs[j] = exp of vals[ids[j]] against the top one, their total in
 * rank order, ids mapped through id_of (NULL: positions are ids), then finish(). */
static int top_k_finish(struct sample_dist *d, const float *vals, const int32_t *id_of, int m,
                        float inv_t, float top_p) {
    float max = m > 0 ? vals[d->ids[0]] : NAN;
    if (!isfinite(max)) return ERR_ARG;
    double total = 0;
    for (int j = 0; j < m; j++) {
        d->probs[j] = kern_exp((vals[d->ids[j]] - max) * inv_t);
        total += (double)d->probs[j];
    }
    if (id_of)
        for (int j = 0; j < m; j++) d->ids[j] = id_of[d->ids[j]];
    finish(d, m, total, top_p);
    return OK;
}

/* Nucleus without top-k: d->e gets exp for the whole vocabulary (sum *total). The tokens
 * within NUCLEUS_NATS[s] nats of the max (a logit threshold, so they are a prefix of the
 * ranking) go to ids[0..m) in rank order with probs[j] = e[ids[j]], widening s until their
 * mass reaches top_p * total; the nucleus is then inside them. The margin on the first
 * test and the check after sorting keep summation-order rounding from cutting it short. */
static const float NUCLEUS_NATS[] = {SAMPLE_NUCLEUS_NATS, 24.0f, INFINITY};

static float nucleus_thr(float max, float t, int stage) {
    float w = NUCLEUS_NATS[stage] * t; /* rounded before the subtraction: no FMA */
    return max - w;
}

/* One stage's test, shared by the full and the sparse nucleus: ids[0..m) hold the stage's
 * positions in id order with their keys, s the sum of e[] over them in that order. Returns
 * 1 when the stage holds the nucleus (always for the last): ids are then in rank order and
 * probs[j] = e[ids[j]]. */
static int nucleus_take(struct sample_dist *d, int m, double s, const float *e, double target,
                        int last) {
    if (s < target * (1 + 1e-9) && !last) return 0;
    kern_sort(d->keys, d->ids, d->tmp_key, d->tmp_id, m);
    s = 0;
    for (int j = 0; j < m; j++) s += (double)(d->probs[j] = e[d->ids[j]]);
    return s >= target || last;
}

static int select_nucleus(struct sample_dist *d, const float *logits, float max, float t,
                          float top_p, double *total) {
    int n = d->n_vocab, last = (int)(sizeof NUCLEUS_NATS / sizeof *NUCLEUS_NATS) - 1;
    *total = kern_exp_shift(d->e, logits, n, max, 1.0f / t);
    double target = (double)top_p * *total;
    for (int stage = 0;; stage++) {
        float thr = nucleus_thr(max, t, stage);
        int m = 0;
        double s = 0;
        for (int i = 0; i < n; i += BLOCK) {
            int end = n - i < BLOCK ? n : i + BLOCK, hit = 0;
            if (end - i == BLOCK) { /* a vectorised test skips blocks with no candidate */
                for (int j = 0; j < BLOCK; j++) hit |= logits[i + j] >= thr;
                if (!hit) continue;
            }
            for (int j = i; j < end; j++)
                if (logits[j] >= thr) {
                    s += (double)d->e[j];
                    d->ids[m] = j;
                    d->keys[m++] = kern_key_desc(logits[j]);
                }
        }
        if (nucleus_take(d, m, s, d->e, target, stage == last)) return m;
    }
}

int sample_dist_build(struct sample_dist *d, const float *logits, float temperature, int top_k,
                      float top_p) {
    int n = d->n_vocab;
    d->n = 0;
    d->sorted = 0;
    d->mass = 0;
    if (!(temperature > 0)) return ERR_ARG;
    if (top_k >= n) top_k = 0;
    float inv_t = 1.0f / temperature;
    if (top_k > 0) {
        int m = select_top_k(d, logits, n, top_k);
        return top_k_finish(d, logits, NULL, m, inv_t, top_p);
    }
    float max = kern_max(logits, n);
    if (!isfinite(max)) return ERR_ARG;
    if (!(top_p < 1)) {
        /* sample_prob_untruncated() repeats this arithmetic */
        double total = kern_exp_shift(d->probs, logits, n, max, inv_t);
        float inv = (float)(1.0 / total);
        for (int i = 0; i < n; i++) d->probs[i] *= inv;
        for (int i = 0; i < n; i++) d->ids[i] = i;
        d->n = n;
        d->mass = mass_of(d->probs, n);
        return OK;
    }
    double total;
    int m = select_nucleus(d, logits, max, temperature, top_p, &total);
    finish(d, m, total, top_p);
    return OK;
}

float sample_prob_untruncated(float logit, float max, double total, float temperature) {
    float inv_t = 1.0f / temperature;
    return kern_exp((logit - max) * inv_t) * (float)(1.0 / total);
}

/* ---- summaries ---- */

/* Tokens with logit >= thr into s (id order); n = -1 past cap. */
static void collect(const float *logits, int n_vocab, float thr, int cap,
                    struct sample_row_summary *s) {
    int m = 0;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] >= thr) {
            if (m == cap) {
                s->n = -1;
                return;
            }
            s->ids[m] = i;
            s->logits[m++] = logits[i];
        }
    s->n = m;
}

void sample_row_summarize(const float *logits, int n_vocab, float temperature, int top_k,
                          float top_p, int cap, struct sample_row_summary *s) {
    s->max = kern_max(logits, n_vocab);
    s->total = 0;
    s->n = -1;
    if (!isfinite(s->max) || !(temperature > 0)) return;
    s->total = kern_exp_sum(logits, n_vocab, s->max, 1.0f / temperature);
    int nan = 0;
    for (int i = 0; i < n_vocab; i++) nan |= logits[i] != logits[i];
    if (nan) return;
    if (top_k >= n_vocab) top_k = 0;
    if (top_k > 0) {
        if (top_k > cap) return; /* at least top_k tokens are kept */
        /* s->logits serves as the heap until the candidates overwrite it */
        float kth = kth_largest(s->logits, top_k, logits, n_vocab, NULL, NULL);
        collect(logits, n_vocab, kth, cap, s);
    } else if (top_p < 1) {
        collect(logits, n_vocab, nucleus_thr(s->max, temperature, 0), cap, s);
    } else {
        s->n = 0;
    }
}

/* The same steps as sample_dist_build(), over the candidates: positions in s stand for ids
 * until the end (they are in id order, so ties still go to the lower id), and exp, sums and
 * sorts see the same values in the same order. */
int sample_dist_build_sparse(struct sample_dist *d, const struct sample_row_summary *s,
                             float temperature, int top_k, float top_p) {
    d->n = 0;
    d->sorted = 0;
    d->mass = 0;
    if (!(temperature > 0) || !isfinite(s->max)) return ERR_ARG;
    if (top_k >= d->n_vocab) top_k = 0;
    if (s->n < 0 || (top_k <= 0 && !(top_p < 1))) return ERR_UNSUPPORTED;
    assert(s->n <= d->n_vocab);
    float inv_t = 1.0f / temperature;
    if (top_k > 0) {
        /* A NaN-free row keeps >= top_k tokens; fewer is not a summary of one. */
        if (s->n < top_k) return ERR_UNSUPPORTED;
        int m = select_top_k(d, s->logits, s->n, top_k);
        return top_k_finish(d, s->logits, s->ids, m, inv_t, top_p);
    }
    /* nucleus: stage 0 of select_nucleus(), e[] indexed by position */
    float max = s->max, thr = nucleus_thr(max, temperature, 0);
    int m = 0;
    double sum = 0;
    for (int i = 0; i < s->n; i++) {
        float v = s->logits[i];
        if (v >= thr) { /* a superset of the window may have been given */
            sum += (double)(d->e[i] = kern_exp((v - max) * inv_t));
            d->ids[m] = i;
            d->keys[m++] = kern_key_desc(v);
        }
    }
    if (!nucleus_take(d, m, sum, d->e, (double)top_p * s->total, 0)) return ERR_UNSUPPORTED;
    for (int j = 0; j < m; j++) d->ids[j] = s->ids[d->ids[j]];
    finish(d, m, s->total, top_p);
    return OK;
}
