/* sample/logprobs.c: log-sum-exp and top-N selection for logprobs. The top-N list is kept
 * sorted by insertion; a logit enters only when strictly larger than the current N-th, so
 * among equal logits the earlier (lower) id stays. */
#include "sample/logprobs.h"

#include <math.h>

#include "base/err.h"
#include "sample/kern.h"

enum {
    LSE_BLOCK = 1024, /* logits exponentiated per step into a stack buffer */
    TOP_BLOCK = 64,   /* logits tested at once against the N-th best */
};

double logprobs_lse(const float *logits, int n_vocab) {
    float max = kern_max(logits, n_vocab);
    if (!isfinite(max)) return max;
    /* Exponentiate in float blocks (vectorised), accumulate in double: every term is
     * <= 1 and the sum is >= 1, so float terms cost at most ~1e-7 relative. */
    float buf[LSE_BLOCK];
    double s = 0;
    for (int i = 0; i < n_vocab; i += LSE_BLOCK) {
        int len = n_vocab - i < LSE_BLOCK ? n_vocab - i : LSE_BLOCK;
        s += kern_exp_shift(buf, logits + i, len, max, 1.0f);
    }
    return (double)max + log(s);
}

int logprobs_compute(const float *logits, int n_vocab, int32_t chosen_id, int top_n,
                     struct logprobs *out) {
    out->n_top = 0;
    out->chosen = -INFINITY;
    if (chosen_id < 0 || chosen_id >= n_vocab) return ERR_ARG;
    double lse = logprobs_lse(logits, n_vocab);
    if (!isfinite(lse)) return ERR_ARG;
    out->chosen = (float)((double)logits[chosen_id] - lse);
    if (top_n > LOGPROBS_MAX_TOP) top_n = LOGPROBS_MAX_TOP;
    if (top_n > n_vocab) top_n = n_vocab;
    if (top_n <= 0) return OK;
    float val[LOGPROBS_MAX_TOP];
    int n = 0;
    for (int i = 0; i < n_vocab;) {
        int end = n_vocab - i < TOP_BLOCK ? n_vocab : i + TOP_BLOCK;
        if (n == top_n && end - i == TOP_BLOCK) { /* full list: skip blocks that cannot enter */
            int hit = 0;
            for (int j = 0; j < TOP_BLOCK; j++) hit |= logits[i + j] > val[n - 1];
            if (!hit) {
                i = end;
                continue;
            }
        }
        for (; i < end; i++) {
            float v = logits[i];
            if (!(v > -INFINITY)) continue; /* NaN and -inf: impossible tokens are not listed */
            if (n == top_n && !(v > val[n - 1])) continue;
            int j = n < top_n ? n++ : n - 1;
            for (; j > 0 && v > val[j - 1]; j--) {
                val[j] = val[j - 1];
                out->top_ids[j] = out->top_ids[j - 1];
            }
            val[j] = v;
            out->top_ids[j] = i;
        }
    }
    out->n_top = n;
    for (int j = 0; j < n; j++) out->top[j] = (float)((double)val[j] - lse);
    return OK;
}
