/* backend/cpu/rope.c: rotary position embedding, "rotate half" (GPT-NeoX) layout as in
 * transformers' Llama/Qwen: x' = x * cos + rotate_half(x) * sin, where the angle of pair i is
 * pos * inv_freq[i] rounded to float, as transformers computes it. */
#include "backend/cpu/cpu.h"

#include <math.h>

void cpu_rope(float *x, int n, int n_heads, int head_dim, int pos0, const float *inv_freq,
              int bf16) {
    int half = head_dim / 2;
    for (int t = 0; t < n; t++) {
        float pos = (float)(pos0 + t);
        for (int i = 0; i < half; i++) {
            float ang = pos * inv_freq[i];
            float c = (float)cos((double)ang), s = (float)sin((double)ang);
            if (bf16) c = bf16_round(c), s = bf16_round(s);
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
