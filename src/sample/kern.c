/* sample/kern.c: reductions and the stable key sort behind sample/dist.c. The sort is an
 * LSD radix sort, with insertion sort for short inputs; its cost is linear in n, which
 * matters when a nucleus holds many tokens. */
#include "sample/kern.h"

#include <math.h>

/* Max and argmax keep LANES running values in an array and update it with a plain
 * element-wise loop, which compilers vectorise; a scalar reduction would not be, because
 * reordering max over NaN and signed zeros is not exact. */
enum { LANES = 64 };

float kern_max(const float *x, int n) {
    float acc[LANES];
    for (int j = 0; j < LANES; j++) acc[j] = -INFINITY;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float best = -INFINITY;
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    for (int j = 0; j < LANES; j++) best = acc[j] > best ? acc[j] : best;
    return best;
}

int32_t kern_argmax(const float *x, int n) {
    float acc[LANES];
    int32_t at[LANES]; /* first index where lane j reached acc[j]; -1 while still -inf */
    for (int j = 0; j < LANES; j++) {
        acc[j] = -INFINITY;
        at[j] = -1;
    }
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            int gt = x[i + j] > acc[j];
            acc[j] = gt ? x[i + j] : acc[j];
            at[j] = gt ? i + j : at[j];
        }
    float best = -INFINITY;
    int32_t best_at = -1;
    for (int j = 0; j < LANES; j++)
        if (at[j] >= 0 && (acc[j] > best || (acc[j] == best && at[j] < best_at))) {
            best = acc[j];
            best_at = at[j];
        }
    for (; i < n; i++) /* the tail's indices are above every lane's */
        if (x[i] > best) {
            best = x[i];
            best_at = i;
        }
    return best_at >= 0 ? best_at : 0;
}

double kern_sum(const float *x, int n) {
    double s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += (double)x[i + j];
    for (; i < n; i++) s[0] += (double)x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double kern_exp_shift(float *y, const float *x, int n, float max, float inv_t) {
    for (int i = 0; i < n; i++) y[i] = kern_exp((x[i] - max) * inv_t);
    return kern_sum(y, n);
}

static void insertion_sort(uint32_t *key, int32_t *id, int n) {
    for (int i = 1; i < n; i++) {
        uint32_t k = key[i];
        int32_t v = id[i];
        int j = i;
        for (; j > 0 && key[j - 1] > k; j--) {
            key[j] = key[j - 1];
            id[j] = id[j - 1];
        }
        key[j] = k;
        id[j] = v;
    }
}

/* LSD radix sort on three digits of 11, 11 and 10 bits; all three histograms come from one
 * read pass, and a digit that every key shares costs no scatter pass. */
enum { DIGIT_BITS = 11, N_DIGIT = 1 << DIGIT_BITS };

void kern_sort(uint32_t *key, int32_t *id, uint32_t *tmp_key, int32_t *tmp_id, int n) {
    if (n <= 64) {
        insertion_sort(key, id, n);
        return;
    }
    static const int shift[3] = {0, DIGIT_BITS, 2 * DIGIT_BITS};
    int count[3][N_DIGIT] = {{0}};
    for (int i = 0; i < n; i++) {
        uint32_t k = key[i];
        count[0][k & (N_DIGIT - 1)]++;
        count[1][(k >> DIGIT_BITS) & (N_DIGIT - 1)]++;
        count[2][k >> (2 * DIGIT_BITS)]++;
    }
    uint32_t *src_k = key, *dst_k = tmp_key;
    int32_t *src_i = id, *dst_i = tmp_id;
    for (int d = 0; d < 3; d++) {
        int *c = count[d];
        if (c[(key[0] >> shift[d]) & (N_DIGIT - 1)] == n) continue; /* digit shared by all */
        int pos = 0;
        for (int b = 0; b < N_DIGIT; b++) {
            int x = c[b];
            c[b] = pos;
            pos += x;
        }
        for (int i = 0; i < n; i++) {
            int p = c[(src_k[i] >> shift[d]) & (N_DIGIT - 1)]++;
            dst_k[p] = src_k[i];
            dst_i[p] = src_i[i];
        }
        uint32_t *tk = src_k;
        src_k = dst_k;
        dst_k = tk;
        int32_t *ti = src_i;
        src_i = dst_i;
        dst_i = ti;
    }
    if (src_k != key) {
        memcpy(key, src_k, (size_t)n * sizeof *key);
        memcpy(id, src_i, (size_t)n * sizeof *id);
    }
}
