/* cli/cmd_doctor.c: `dspark doctor`: the CPU and its features, threads, memory and a quick
 * read-bandwidth estimate, transparent hugepages, the GPU with driver and CUDA versions (CUDA
 * builds), library versions, the calibration cache, the models found; then a verdict with one
 * line and a fix per problem. Text, or one JSON object with --json. */
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/doctor.h"

#include "backend/gpu.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "registry/registry.h"
#include "tune/calib.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_FINDINGS 32
#define GIB          (1024.0 * 1024.0 * 1024.0)

static void usage(FILE *f) {
    fprintf(f, "usage: dspark doctor [--models-dir DIR] [--no-bandwidth] [--json]\n\n"
               "Checks this machine and build: CPU features, threads, memory and its read\n"
               "bandwidth, transparent hugepages, the GPU (CUDA builds), libraries, the\n"
               "calibration cache and the models found; ends with a verdict and fixes.\n\n"
               "  --models-dir DIR   also look for models here (see dspark models --help)\n"
               "  --no-bandwidth     skip the ~1 s memory bandwidth estimate\n"
               "  --json             print one JSON object\n");
}

struct finding {
    int problem; /* 1: something to fix; 0: a note */
    char what[256], fix[256];
};

struct doctor {
    struct doctor_sys sys;
    int gpu_rc, driver, runtime; /* gpu_runtime_info(); driver also from /proc (no CUDA) */
    size_t gpu_mem;
    char nvidia_proc[128]; /* first line of /proc/driver/nvidia/version, or "" */
    char pcre2[32];
    char calib_path[4096];
    int calib_state; /* 0 absent, 1 valid, -1 damaged, -2 no path */
    int calib_entries;
    struct registry reg;
    int n_servable;
    struct finding f[MAX_FINDINGS];
    int n_f, n_problems;
};

static void add(struct doctor *d, int problem, const char *what, const char *fix) {
    if (d->n_f == MAX_FINDINGS) return;
    struct finding *f = &d->f[d->n_f++];
    f->problem = problem;
    snprintf(f->what, sizeof f->what, "%s", what);
    snprintf(f->fix, sizeof f->fix, "%s", fix);
    d->n_problems += problem;
}

/* ---- probes beyond the machine ---- */

static void probe_calibration(struct doctor *d) {
    if (tune_cache_default_path(d->calib_path, sizeof d->calib_path)) {
        d->calib_state = -2;
        return;
    }
    if (!fs_exists(d->calib_path)) return;
    char *text = NULL;
    size_t len;
    cJSON *j = NULL;
    d->calib_state = -1;
    if (!fs_read_file(d->calib_path, &text, &len, (size_t)16 << 20))
        j = json_parse(text, len, NULL);
    const cJSON *schema = cJSON_GetObjectItem(j, "schema"), *e = cJSON_GetObjectItem(j, "entries");
    if (cJSON_IsNumber(schema) && schema->valuedouble == TUNE_CACHE_SCHEMA && cJSON_IsObject(e)) {
        d->calib_state = 1;
        d->calib_entries = cJSON_GetArraySize(e);
    }
    cJSON_Delete(j);
    free(text);
}

static int probe_rest(struct doctor *d, const char *models_dir) {
    d->gpu_rc = gpu_runtime_info(&d->driver, &d->runtime, &d->gpu_mem);
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f && fgets(d->nvidia_proc, sizeof d->nvidia_proc, f))
        d->nvidia_proc[strcspn(d->nvidia_proc, "\n")] = 0;
    if (f) fclose(f);
    pcre2_config(PCRE2_CONFIG_VERSION, d->pcre2);
    probe_calibration(d);
    int rc = registry_scan_default(&d->reg, models_dir);
    for (int i = 0; i < d->reg.n; i++) d->n_servable += d->reg.m[i].servable;
    return rc;
}

/* ---- verdict ---- */

static void judge(struct doctor *d) {
    const struct doctor_sys *s = &d->sys;
    char what[256], fix[256];
    int avx512 = s->has[FEAT_AVX512F] && s->has[FEAT_AVX512BW] && s->has[FEAT_AVX512DQ] &&
                 s->has[FEAT_AVX512VL];
    if (!s->has[FEAT_AVX2] || !s->has[FEAT_FMA] || !s->has[FEAT_F16C])
        add(d, 1, "no AVX2/FMA/F16C: the scalar kernels run, several times slower",
            "run on an x86-64 CPU with AVX2, FMA and F16C (Intel Haswell, AMD Zen or newer)");
    else if (!avx512)
        add(d, 0, "no AVX-512: this build runs the AVX2 kernels, expect up to about half the speed",
            "nothing to change here; a CPU with AVX-512 (F, BW, DQ, VL) runs the faster kernels");
    if (avx512 && strcmp(s->kernels, "avx512"))
        add(d, 1, "the CPU has AVX-512 but this build was compiled without it",
            "rebuild on this machine: make clean && make (OPT defaults to -O3 -march=native)");
    if (s->has[FEAT_AMX_TILE] && s->has[FEAT_AMX_BF16] && !s->amx)
        add(d, 0, "the CPU has AMX-BF16 but the BF16 matmul does not use it",
            "unset DSPARK_NO_AMX; AMX needs Linux 5.16 or newer (it grants the tile state)");
    if (!strcmp(s->thp, "never"))
        add(d, 1, "transparent hugepages are disabled: weights are read through 4 KiB pages",
            "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled");
    if (s->n_affinity > 0 && s->n_affinity < s->n_online) {
        snprintf(what, sizeof what,
                 "this process may run on %d of the %d online CPUs, but threads default to %d",
                 s->n_affinity, s->n_online, s->n_online);
        snprintf(fix, sizeof fix, "pass --threads %d (or lift the taskset/container CPU limit)",
                 s->n_affinity);
        add(d, 1, what, fix);
    }
    if (s->mem_avail && s->mem_avail < (int64_t)2 << 30) {
        snprintf(what, sizeof what, "only %.1f GiB of memory is available", s->mem_avail / GIB);
        add(d, 1, what, "close other programs, or serve a smaller model");
    }
    for (int i = 0; i < d->reg.n; i++) {
        const struct reg_model *m = &d->reg.m[i];
        if (m->servable && s->mem_avail && m->n_bytes > s->mem_avail) {
            snprintf(what, sizeof what, "%.120s (%.1f GiB) does not fit in the %.1f GiB available",
                     m->dir, m->n_bytes / GIB, s->mem_avail / GIB);
            add(d, 1, what, "free memory, or use a smaller model");
        } else if (!m->servable) {
            snprintf(what, sizeof what, "%.100s cannot be loaded: %.120s", m->dir, m->note);
            add(d, 0, what,
                "dspark loads Qwen3, Qwen2, Llama and Mistral safetensors in F32/F16/BF16");
        }
    }
    if (!d->reg.n)
        add(d, 1, "no model folders found on the search path",
            "put a Hugging Face model folder (config.json, *.safetensors, tokenizer.json) in "
            "./models or ~/.cache/dspark/models, or set DSPARK_MODELS");
    if (d->gpu_rc == ERR_IO)
        add(d, 1, "this build has CUDA but finds no usable GPU",
            "check nvidia-smi and that the driver supports this CUDA runtime");
    else if (d->gpu_rc == ERR_UNSUPPORTED && *d->nvidia_proc)
        add(d, 0, "an NVIDIA driver is loaded but this build has no CUDA",
            "rebuild with make CUDA=1 (needs nvcc) and pass --gpu");
    if (d->calib_state == -1) {
        snprintf(what, sizeof what, "the calibration cache %.200s is damaged", d->calib_path);
        snprintf(fix, sizeof fix, "rm %.200s (--max-draft auto measures again)", d->calib_path);
        add(d, 1, what, fix);
    }
}

/* ---- text ---- */

static void cuda_version(int v, char *buf, size_t cap) {
    snprintf(buf, cap, "%d.%d", v / 1000, v % 1000 / 10);
}

static void print_text(const struct doctor *d, int measured) {
    const struct doctor_sys *s = &d->sys;
    printf("cpu          %s: ", s->cpu_model);
    if (s->n_cores) printf("%d cores, ", s->n_cores);
    printf("%d threads online, %d usable by dspark\n", s->n_online, s->n_affinity);
    printf("features    ");
    for (int i = 0; i < FEAT_COUNT; i++)
        printf(" %s%s", s->has[i] ? "" : "-", cpu_feature_names[i]);
    printf("   (-: missing)\n");
    const int terms = gpu_input_terms(), kvb = gpu_kv_default_bytes();
    printf("build        %s CPU kernels%s, %s, %s%s%s\n", s->kernels,
           s->amx ? " + AMX-BF16 matmul" : "", s->compiler,
           d->gpu_rc == ERR_UNSUPPORTED ? "no CUDA" : "CUDA",
           terms == 1   ? " (GPU matmul inputs rounded to bf16; --gpu-inputs exact: three "
                          "bf16 terms, exact products"
           : terms == 3 ? " (GPU matmul inputs as three bf16 terms: DSPARK_GPU_INPUTS=exact"
                        : "",
           kvb == 4   ? "; K/V caches float32, --gpu-kv bf16: half the bytes)"
           : kvb == 2 ? "; K/V caches bf16: DSPARK_GPU_KV=bf16)"
                      : "");
    printf("memory       %.1f GiB total, %.1f GiB available; transparent hugepages: %s\n",
           s->mem_total / GIB, s->mem_avail / GIB, *s->thp ? s->thp : "not available");
    if (measured)
        printf("bandwidth    %.1f GB/s on 1 thread, %.1f GB/s on %d threads (reading %zu MiB)\n",
               s->bw_1 / 1e9, s->bw_n / 1e9, s->n_online, s->bw_bytes >> 20);
    char dv[16], rv[16];
    cuda_version(d->driver, dv, sizeof dv);
    cuda_version(d->runtime, rv, sizeof rv);
    if (d->gpu_rc == OK)
        printf("gpu          %s, %.1f GiB; driver supports CUDA %s, runtime CUDA %s\n",
               gpu_device_name(), d->gpu_mem / GIB, dv, rv);
    else if (d->gpu_rc == ERR_IO)
        printf("gpu          none usable (runtime CUDA %s)\n", rv);
    else
        printf("gpu          not in this build (make CUDA=1)%s%s\n",
               *d->nvidia_proc ? "; driver: " : "", d->nvidia_proc);
    printf("libraries    cJSON %s, PCRE2 %s, utf8proc %s, libmicrohttpd %s\n", cJSON_Version(),
           d->pcre2, utf8proc_version(), MHD_get_version());
    if (d->calib_state == -2)
        printf("calibration  no cache path (neither XDG_CACHE_HOME nor HOME is set)\n");
    else
        printf("calibration  %s: %s", d->calib_path,
               d->calib_state == 1    ? "valid, "
               : d->calib_state == -1 ? "damaged\n"
                                      : "none yet (--max-draft auto writes it)\n");
    if (d->calib_state == 1) printf("%d entries\n", d->calib_entries);
    printf("models       %d found, %d loadable, in", d->reg.n, d->n_servable);
    for (int i = 0; i < d->reg.n_roots; i++) printf("%s %s", i ? "," : "", d->reg.roots[i]);
    printf(" (dspark models lists them)\n");
    printf("\nverdict: ");
    if (d->n_problems)
        printf("%d problem%s to fix\n", d->n_problems, d->n_problems > 1 ? "s" : "");
    else
        printf("ready%s\n", d->n_f ? ", with notes" : "");
    for (int i = 0; i < d->n_f; i++)
        printf("  %s %s\n      fix: %s\n", d->f[i].problem ? "problem:" : "note:   ", d->f[i].what,
               d->f[i].fix);
}

/* ---- JSON ---- */

static int print_json(const struct doctor *d, int measured) {
    const struct doctor_sys *s = &d->sys;
    cJSON *o = cJSON_CreateObject(), *x;
    x = cJSON_AddObjectToObject(o, "cpu");
    cJSON_AddStringToObject(x, "model", s->cpu_model);
    cJSON_AddNumberToObject(x, "cores", s->n_cores);
    cJSON_AddNumberToObject(x, "threads", s->n_online);
    cJSON_AddNumberToObject(x, "usable_threads", s->n_affinity);
    cJSON *fe = cJSON_AddObjectToObject(x, "features");
    for (int i = 0; i < FEAT_COUNT; i++) cJSON_AddBoolToObject(fe, cpu_feature_names[i], s->has[i]);
    x = cJSON_AddObjectToObject(o, "build");
    cJSON_AddStringToObject(x, "kernels", s->kernels);
    cJSON_AddBoolToObject(x, "amx", s->amx);
    cJSON_AddStringToObject(x, "compiler", s->compiler);
    cJSON_AddBoolToObject(x, "cuda", d->gpu_rc != ERR_UNSUPPORTED);
    if (gpu_input_terms()) cJSON_AddNumberToObject(x, "cuda_input_terms", gpu_input_terms());
    if (gpu_kv_default_bytes())
        cJSON_AddNumberToObject(x, "cuda_kv_bytes", gpu_kv_default_bytes());
    x = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(x, "total_bytes", (double)s->mem_total);
    cJSON_AddNumberToObject(x, "available_bytes", (double)s->mem_avail);
    cJSON_AddStringToObject(x, "transparent_hugepages", s->thp);
    if (measured) {
        cJSON_AddNumberToObject(x, "read_gb_s_1_thread", s->bw_1 / 1e9);
        cJSON_AddNumberToObject(x, "read_gb_s_all_threads", s->bw_n / 1e9);
    }
    x = cJSON_AddObjectToObject(o, "gpu");
    cJSON_AddBoolToObject(x, "available", d->gpu_rc == OK);
    if (d->gpu_rc == OK) {
        cJSON_AddStringToObject(x, "name", gpu_device_name());
        cJSON_AddNumberToObject(x, "memory_bytes", (double)d->gpu_mem);
    }
    if (d->gpu_rc != ERR_UNSUPPORTED) {
        cJSON_AddNumberToObject(x, "driver_cuda_version", d->driver);
        cJSON_AddNumberToObject(x, "runtime_cuda_version", d->runtime);
    }
    if (*d->nvidia_proc) cJSON_AddStringToObject(x, "nvidia_driver", d->nvidia_proc);
    x = cJSON_AddObjectToObject(o, "libraries");
    cJSON_AddStringToObject(x, "cjson", cJSON_Version());
    cJSON_AddStringToObject(x, "pcre2", d->pcre2);
    cJSON_AddStringToObject(x, "utf8proc", utf8proc_version());
    cJSON_AddStringToObject(x, "libmicrohttpd", MHD_get_version());
    x = cJSON_AddObjectToObject(o, "calibration");
    cJSON_AddStringToObject(x, "path", d->calib_path);
    cJSON_AddStringToObject(x, "state",
                            d->calib_state == 1    ? "valid"
                            : d->calib_state == -1 ? "damaged"
                            : d->calib_state == 0  ? "absent"
                                                   : "no path");
    if (d->calib_state == 1) cJSON_AddNumberToObject(x, "entries", d->calib_entries);
    x = cJSON_AddObjectToObject(o, "models");
    cJSON_AddNumberToObject(x, "found", d->reg.n);
    cJSON_AddNumberToObject(x, "loadable", d->n_servable);
    cJSON *sp = cJSON_AddArrayToObject(x, "search_path");
    for (int i = 0; i < d->reg.n_roots; i++)
        cJSON_AddItemToArray(sp, cJSON_CreateString(d->reg.roots[i]));
    x = cJSON_AddObjectToObject(o, "verdict");
    cJSON_AddBoolToObject(x, "ready", !d->n_problems);
    cJSON *fs = cJSON_AddArrayToObject(x, "findings");
    for (int i = 0; i < d->n_f; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "level", d->f[i].problem ? "problem" : "note");
        cJSON_AddStringToObject(f, "what", d->f[i].what);
        cJSON_AddStringToObject(f, "fix", d->f[i].fix);
        cJSON_AddItemToArray(fs, f);
    }
    char *text = cJSON_PrintUnformatted(o);
    if (text) printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
    return text ? 0 : 1;
}

int cmd_doctor(int argc, char **argv) {
    const char *models_dir = NULL;
    int json = 0, bw = 1;
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        const char *arg = argv[a.i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 0;
        } else if (args_flag(&a, "--models-dir")) {
            if (!(models_dir = a.value)) return 2;
        } else if (!strcmp(arg, "--json")) {
            json = 1;
        } else if (!strcmp(arg, "--no-bandwidth")) {
            bw = 0;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark doctor --help)\n", arg);
            return 2;
        }
    }
    struct doctor *d = calloc(1, sizeof *d);
    if (!d) return 1;
    int rc = 2;
    if (probe_rest(d, models_dir)) goto done; /* a bad --models-dir, before the slow part */
    doctor_probe(&d->sys, bw);
    judge(d);
    rc = json ? print_json(d, bw) : (print_text(d, bw), 0);
done:
    registry_free(&d->reg);
    free(d);
    return rc;
}
