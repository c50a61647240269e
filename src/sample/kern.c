/* sample/kern.c: reductions and the stable key sort behind sample/dist.c. The sort is an
 * LSD radix sort on 8-bit digits that skips digits all keys share, with insertion sort for
 * short inputs; cost is linear in n, which matters when a nucleus holds many tokens. */
#include "sample/kern.h"

#include <math.h>

float kern_max(const float *x, int n) {
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float best = m[0];
    for (int j = 1; j < 8; j++) best = m[j] > best ? m[j] : best;
    return best;
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

void kern_sort(uint32_t *key, int32_t *id, uint32_t *tmp_key, int32_t *tmp_id, int n) {
    if (n <= 64) {
        insertion_sort(key, id, n);
        return;
    }
    uint32_t *src_k = key, *dst_k = tmp_key;
    int32_t *src_i = id, *dst_i = tmp_id;
    for (int shift = 0; shift < 32; shift += 8) {
        int count[256] = {0};
        for (int i = 0; i < n; i++) count[(src_k[i] >> shift) & 0xff]++;
        if (count[(src_k[0] >> shift) & 0xff] == n) continue; /* digit shared by all keys */
        int pos = 0;
        for (int b = 0; b < 256; b++) {
            int c = count[b];
            count[b] = pos;
            pos += c;
        }
        for (int i = 0; i < n; i++) {
            int p = count[(src_k[i] >> shift) & 0xff]++;
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
