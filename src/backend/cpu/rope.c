/* backend/cpu/rope.c: rotary position embedding, "rotate half" (GPT-NeoX) layout as in
 * transformers' Llama/Qwen: x' = x * cos + rotate_half(x) * sin, where the angle of pair i is
 * pos * inv_freq[i] rounded to float, as transformers computes it.
 *
 * A forward pass rotates q and k of every layer at the same positions, so the cos/sin table of
 * the last call is kept per thread and reused while the positions and the frequencies (compared
 * by value) are the same. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

struct rope_table {
    struct thread_buf cs;   /* [n][half] cos, then [n][half] sin */
    struct thread_buf freq; /* the inv_freq the table was made for */
    int n, half, pos0, bf16, valid;
};

static _Thread_local struct rope_table tab;

/* The table for these positions and frequencies, or NULL when out of memory. */
static const float *table(int n, int half, int pos0, const float *inv_freq, int bf16) {
    struct rope_table *t = &tab;
    if (t->valid && t->n == n && t->half == half && t->pos0 == pos0 && t->bf16 == bf16 &&
        !memcmp(t->freq.p, inv_freq, sizeof(float) * (size_t)half))
        return t->cs.p;
    t->valid = 0;
    float *cs = thread_buf_get(&t->cs, sizeof(float) * 2 * (size_t)n * (size_t)half);
    float *fr = thread_buf_get(&t->freq, sizeof(float) * (size_t)half);
    if (!cs || !fr) return NULL;
    for (int r = 0; r < n; r++) {
        float pos = (float)(pos0 + r);
        for (int i = 0; i < half; i++) {
            float ang = pos * inv_freq[i];
            float c = (float)cos((double)ang), s = (float)sin((double)ang);
            if (bf16) c = bf16_round(c), s = bf16_round(s);
            cs[(size_t)r * half + i] = c;
            cs[(size_t)(n + r) * half + i] = s;
        }
    }
    memcpy(fr, inv_freq, sizeof(float) * (size_t)half);
    t->n = n, t->half = half, t->pos0 = pos0, t->bf16 = bf16, t->valid = 1;
    return cs;
}

void cpu_rope(float *x, int n, int n_heads, int head_dim, int pos0, const float *inv_freq,
              int bf16) {
    int half = head_dim / 2;
    const float *cs = table(n, half, pos0, inv_freq, bf16);
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            float c, s;
            if (cs) {
                c = cs[(size_t)t * half + i], s = cs[(size_t)(n + t) * half + i];
            } else { /* no memory for the table: compute in place */
                float ang = (float)(pos0 + t) * inv_freq[i];
                c = (float)cos((double)ang), s = (float)sin((double)ang);
                if (bf16) c = bf16_round(c), s = bf16_round(s);
            }
            for (int h = 0; h < n_heads; h++) {
                float *xh = x + ((size_t)t * n_heads + h) * head_dim;
                float a = xh[i], b = xh[i + half];
                if (bf16) {
                    xh[i] = bf16_round(bf16_round(a * c) - bf16_round(b * s));
                    xh[i + half] = bf16_round(bf16_round(b * c) + bf16_round(a * s));
                } else {
                    xh[i] = a * c - b * s;
                    xh[i + half] = b * c + a * s;
                }
            }
        }
    }
}
