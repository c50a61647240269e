/* tensor/dtype.c: see dtype.h. */
#include "tensor/dtype.h"

#include <math.h>

size_t dtype_size(enum dtype t) {
    return t == DTYPE_F32 ? 4 : 2;
}

const char *dtype_name(enum dtype t) {
    switch (t) {
    case DTYPE_F32:
        return "F32";
    case DTYPE_F16:
        return "F16";
    case DTYPE_BF16:
        return "BF16";
    }
    return "?";
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        float af;
        memcpy(&af, &a, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(af * 16777216.0f)); /* 2^24 */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n) {
    /* 16-bit values are read with memcpy: tensors in a file need not be 2-byte aligned */
    const unsigned char *b = src;
    if (t == DTYPE_F32) {
        memcpy(dst, src, n * 4);
    } else if (t == DTYPE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
    }
}
