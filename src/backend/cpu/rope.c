/* backend/cpu/rope.c: rotary position embedding, "rotate half" (GPT-NeoX) layout as in
 * transformers' Llama/Qwen: x' = x * cos + rotate_half(x) * sin, where the angle of pair i is
 * pos * inv_freq[i] rounded to float, as transformers computes it.
 *
 * A forward pass rotates q and k of every layer at the same positions, so the cos/sin table of
 * the last call is kept per thread and reused while the positions and the frequencies (compared
 * by value) are the same. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rope_table {
    float *cs; /* [n][half] cos, then [n][half] sin */
    size_t cap;
    float *freq; /* the inv_freq the table was made for */
    int half_cap;
    int n, half, pos0, bf16, valid;
};

static _Thread_local struct rope_table tab;
static pthread_key_t tab_key; /* frees a thread's table when the thread ends */
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_free(void *p) {
    (void)p;
    free(tab.cs);
    free(tab.freq);
    memset(&tab, 0, sizeof tab);
}

static void tab_key_init(void) {
    pthread_key_create(&tab_key, tab_free);
}

/* The table for these positions and frequencies, or NULL when out of memory. */
static const float *table(int n, int half, int pos0, const float *inv_freq, int bf16) {
    struct rope_table *t = &tab;
    if (t->valid && t->n == n && t->half == half && t->pos0 == pos0 && t->bf16 == bf16 &&
        !memcmp(t->freq, inv_freq, sizeof(float) * (size_t)half))
        return t->cs;
    size_t need = (size_t)2 * n * half;
    if (need > t->cap || half > t->half_cap) {
        pthread_once(&tab_once, tab_key_init);
        pthread_setspecific(tab_key, t);
        float *cs = need > t->cap ? realloc(t->cs, sizeof(float) * need) : t->cs;
        if (cs) t->cs = cs, t->cap = need > t->cap ? need : t->cap;
        float *fr = half > t->half_cap ? realloc(t->freq, sizeof(float) * (size_t)half) : t->freq;
        if (fr) t->freq = fr, t->half_cap = half > t->half_cap ? half : t->half_cap;
        if (!cs || !fr) {
            t->valid = 0;
            return NULL;
        }
    }
    for (int r = 0; r < n; r++) {
        float pos = (float)(pos0 + r);
        for (int i = 0; i < half; i++) {
            float ang = pos * inv_freq[i];
            float c = (float)cos((double)ang), s = (float)sin((double)ang);
            if (bf16) c = bf16_round(c), s = bf16_round(s);
            t->cs[(size_t)r * half + i] = c;
            t->cs[(size_t)(n + r) * half + i] = s;
        }
    }
    memcpy(t->freq, inv_freq, sizeof(float) * (size_t)half);
    t->n = n, t->half = half, t->pos0 = pos0, t->bf16 = bf16, t->valid = 1;
    return t->cs;
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
