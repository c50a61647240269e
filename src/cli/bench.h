/* cli/bench.h: the state `dspark benchmark` shares between its measurement (cmd_benchmark.c)
 * and its report (bench_report.c). Internal to the command: one struct bench per invocation,
 * owned by cmd_benchmark(), single-threaded. */
#ifndef DSPARK_CLI_BENCH_H
#define DSPARK_CLI_BENCH_H

#include "engine/generate.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_RUNS   32
#define MAX_FILES  32
#define MAX_CATS   16
#define MAX_TRIALS 1000

struct tune_auto;

#define RUN_AUTO_DRAFT (-2) /* run_spec.max_draft of NAME:auto: --max-draft auto */

/* One run: a mode with its settings, measured on every prompt. */
struct run_spec {
    enum gen_mode mode;
    int max_draft;     /* < 0: the mode's default */
    int lookup_drafts; /* draft, dspark, dflash: verify n-gram continuations too */
    char name[32];     /* as given to --modes */
};

struct opts {
    const char *model_dir, *drafter_dir, *dspark_dir, *dflash_dir;
    const char *prompts, *categories, *json_path;
    struct run_spec runs[MAX_RUNS]; /* runs[0] is baseline */
    int n_runs;
    int limit, max_new, max_draft, trials, threads, chat, widths;
    float temperature;
    const char *caps;       /* --caps LIST: each run once per cap */
    const char *calib_file; /* --calibration-file */
    const char *svg_path;   /* --svg FILE (default: the JSON's name with .svg) */
    int recalibrate;
    int gpu;                          /* --gpu: the target (and a draft model) on the GPU */
    int gpu_inputs;                   /* --gpu-inputs: 1 bf16, 3 exact, 0 default */
    int gpu_kv;                       /* --gpu-kv: 2 bf16, 4 f32, 0 default */
    struct tune_auto *tune[MAX_RUNS]; /* [run] --max-draft auto's costs and state, or NULL */
};

struct prompt {
    int cat;        /* index into bench.cats */
    int file, line; /* where it came from (line is 1-based) */
    int32_t *ids;   /* [n_ids] the prompt as the model sees it */
    int n_ids;
    int32_t *ref; /* [n_ref] baseline's output ids from the first trial */
    int n_ref;
    int fired; /* a lookup run drafted from the n-gram index on it */
};

struct bench {
    struct opts o;
    const char *files[MAX_FILES];
    char *file_mem[MAX_FILES];
    int n_files;
    char cats[MAX_CATS][32];
    int n_cats;
    struct prompt *prompts;
    int n_prompts;
    struct gen_engine e; /* e.block is set per run from dspark / dflash */
    struct block_model *dspark, *dflash;
    int done, total;          /* progress */
    struct gen_stats *stats;  /* see bench_stats() */
    int have_lookup;          /* a lookup run is among the runs */
    cJSON *cost;              /* --widths results, or NULL */
    double busy[MAX_TRIALS];  /* per trial: share of the CPUs other processes used */
    double busy_all;          /* the same over the whole measurement */
    int compared, mismatches; /* greedy outputs checked against baseline's */
};

/* The statistics of one generation: b->stats[(run * trials + trial) * n_prompts + prompt]. */
struct gen_stats *bench_stats(const struct bench *b, int run, int trial, int prompt);
/* The generation parameters of run r on prompt prompt_index. */
void bench_params(const struct bench *b, const struct run_spec *r, int prompt_index,
                  struct gen_params *gp);

void bench_cpu_name(char *out, size_t cap); /* "model name" of /proc/cpuinfo */
void bench_print_table(const struct bench *b);
int bench_write_json(const struct bench *b, const char *path, int threads);

/* Prompt groups: the categories, all prompts, then (with a lookup run) the prompts where lookup
 * never fired. */
int bench_n_groups(const struct bench *b);
const char *bench_group_name(const struct bench *b, int g);
/* Median decode tok/s of run ri over group g; 0 when the group has no prompts. */
double bench_group_decode(const struct bench *b, int ri, int g);
/* bench_svg.c: a grouped bar chart of decode tok/s per run and category, as plain SVG. */
int bench_write_svg(const struct bench *b, const char *path, int threads);

#endif
