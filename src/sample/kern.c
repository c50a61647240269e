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

/* One block of kern_sum (len <= KERN_SUM_BLOCK): lane j adds x[j], x[j + 8], ... A full
 * block runs as plain array loops, which vectorise. */
static double block_sum(const float *x, int len) {
    double s[8] = {0};
    if (len == KERN_SUM_BLOCK) {
        for (int i = 0; i < KERN_SUM_BLOCK; i += 8)
            for (int j = 0; j < 8; j++) s[j] += (double)x[i + j];
    } else {
        for (int i = 0; i < len; i++) s[i % 8] += (double)x[i];
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* The pairwise combination of block sums fed left to right, with no buffer of them. At level
 * l of kern_sum's tree, element i covers blocks [i * 2^l, min((i + 1) * 2^l, count)), and it
 * is the sum of its two halves when the right one exists, else its left half carried up.
 * So a binary counter gives the same additions: part[l] holds a complete run of 2^l blocks
 * waiting for its right neighbour; when all are in, the runs left pending (one per set bit
 * of count, the highest leftmost) are the carried elements, folded from the right. */
struct sum_tree {
    double part[32]; /* 2^31 blocks is more than an int n can hold */
    unsigned count;  /* blocks fed so far */
};

static void tree_add(struct sum_tree *t, double v) {
    int l = 0;
    for (; (t->count >> l) & 1; l++) v = t->part[l] + v;
    t->part[l] = v;
    t->count++;
}

static double tree_total(const struct sum_tree *t) {
    double s = 0;
    int any = 0;
    for (int l = 0; l < 32; l++)
        if ((t->count >> l) & 1) {
            s = any ? t->part[l] + s : t->part[l];
            any = 1;
        }
    return s;
}

double kern_sum(const float *x, int n) {
    struct sum_tree t = {0};
    for (int b = 0; b < n; b += KERN_SUM_BLOCK)
        tree_add(&t, block_sum(x + b, n - b < KERN_SUM_BLOCK ? n - b : KERN_SUM_BLOCK));
    return tree_total(&t);
}

/* The exp loop of kern_exp_shift() and kern_exp_sum(), which vectorises. */
static void exp_many(float *y, const float *x, int len, float max, float inv_t) {
    for (int i = 0; i < len; i++) y[i] = kern_exp((x[i] - max) * inv_t);
}

/* Two passes: measured faster than summing each block while it is in cache. */
double kern_exp_shift(float *y, const float *x, int n, float max, float inv_t) {
    exp_many(y, x, n, max, inv_t);
    return kern_sum(y, n);
}

double kern_exp_sum(const float *x, int n, float max, float inv_t) {
    float y[KERN_SUM_BLOCK];
    struct sum_tree t = {0};
    for (int b = 0; b < n; b += KERN_SUM_BLOCK) {
        int len = n - b < KERN_SUM_BLOCK ? n - b : KERN_SUM_BLOCK;
        exp_many(y, x + b, len, max, inv_t);
        tree_add(&t, block_sum(y, len));
    }
    return tree_total(&t);
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
