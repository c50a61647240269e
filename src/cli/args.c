/* cli/args.c: see args.h. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int args_flag(struct args *a, const char *name) {
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == '=') {
        a->value = arg + n + 1;
        return 1;
    }
    if (arg[n] != 0) return 0;
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "error: %s needs a value\n", name);
        a->value = NULL;
        return 1;
    }
    a->value = a->argv[++a->i];
    return 1;
}

int args_int(const char *flag, const char *v, long lo, long hi, int *out) {
    if (!v) return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "error: %s must be an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int args_u64(const char *flag, const char *v, uint64_t *out) {
    if (!v) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-') {
        fprintf(stderr, "error: %s must be a non-negative integer, got '%s'\n", flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

int args_float(const char *flag, const char *v, double lo, double hi, float *out) {
    if (!v) return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
        fprintf(stderr, "error: %s must be a number in [%g, %g], got '%s'\n", flag, lo, hi, v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

/* flag's value v, one of two words: *out = va for a, vb for b */
static int args_pick(const char *flag, const char *v, const char *a, int va, const char *b, int vb,
                     int *out) {
    if (!v) return -1;
    if (strcmp(v, a) && strcmp(v, b)) {
        fprintf(stderr, "error: %s takes %s or %s, got '%s'\n", flag, a, b, v);
        return -1;
    }
    *out = strcmp(v, a) ? vb : va;
    return 0;
}

int args_gpu_inputs(const char *v, int *terms) {
    return args_pick("--gpu-inputs", v, "exact", 3, "bf16", 1, terms);
}

int args_gpu_kv(const char *v, int *bytes) {
    return args_pick("--gpu-kv", v, "f32", 4, "bf16", 2, bytes);
}
