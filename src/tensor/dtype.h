/* tensor/dtype.h: element types of weights and their conversions to float.
 * Dimension convention used everywhere: row-major, the last index is contiguous. A weight
 * W of shape [m, k] (out features, in features) is m rows of k elements, as in safetensors. */
#ifndef DSPARK_TENSOR_DTYPE_H
#define DSPARK_TENSOR_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum dtype { DTYPE_F32, DTYPE_F16, DTYPE_BF16 };

size_t dtype_size(enum dtype t);
const char *dtype_name(enum dtype t);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
/* f rounded to the nearest bfloat16 value, as a float */
static inline float bf16_round(float f) {
    return bf16_to_f32(f32_to_bf16(f));
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

/* Converts n elements of type t at src to float. */
void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n);

#endif
