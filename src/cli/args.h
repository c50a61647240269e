/* cli/args.h: flag parsing shared by the subcommands. Flags take the form --name VALUE or
 * --name=VALUE. Each parser validates the value and prints what was wrong on failure. */
#ifndef DSPARK_CLI_ARGS_H
#define DSPARK_CLI_ARGS_H

#include <stdint.h>

struct args {
    int argc;
    char **argv;
    int i;             /* index of the flag being parsed */
    const char *value; /* its value after a successful args_flag() */
};

/* 1 when argv[a->i] is the flag `name`; then a->value holds its value (consuming the next
 * argument unless it was given as --name=VALUE). A flag missing its value prints an error and
 * sets a->value to NULL while returning 1: callers then fail. */
int args_flag(struct args *a, const char *name);
int args_int(const char *flag, const char *v, long lo, long hi, int *out);
int args_u64(const char *flag, const char *v, uint64_t *out);
int args_float(const char *flag, const char *v, double lo, double hi, float *out);
/* --gpu-inputs exact|bf16: *terms = 3 for exact, 1 for bf16 (model_opts.gpu_inputs) */
int args_gpu_inputs(const char *v, int *terms);
/* --gpu-kv f32|bf16: *bytes = 4 or 2 (model_opts.gpu_kv) */
int args_gpu_kv(const char *v, int *bytes);

#endif
