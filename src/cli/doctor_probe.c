/* cli/doctor_probe.c: the machine as `dspark doctor` sees it (see doctor.h): /proc/cpuinfo,
 * /proc/meminfo, sysfs, and a short streaming-read bandwidth estimate. */
#include "cli/doctor.h"

#include "backend/cpu/cpu.h"
#include "base/thread.h"
#include "base/timer.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char *const cpu_feature_names[FEAT_COUNT] = {
    "avx2",     "fma",      "f16c",        "avx512f",  "avx512bw",
    "avx512vl", "avx512dq", "avx512_bf16", "amx_tile", "amx_bf16"};

/* ---- /proc and /sys ---- */

static int has_word(const char *list, const char *w) {
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n])) return 1;
    return 0;
}

static void probe_cpu(struct doctor_sys *s) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int have_flags = 0, phys = -1;
    /* physical cores: distinct (physical id, core id) pairs */
    static int seen[4096];
    int n_seen = 0;
    snprintf(s->cpu_model, sizeof s->cpu_model, "unknown CPU");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + (colon[1] == ' ');
        if (!strncmp(line, "model name", 10) && !strcmp(s->cpu_model, "unknown CPU")) {
            v[strcspn(v, "\n")] = 0;
            snprintf(s->cpu_model, sizeof s->cpu_model, "%s", v);
        } else if (!have_flags && !strncmp(line, "flags", 5)) {
            for (int i = 0; i < FEAT_COUNT; i++) s->has[i] = has_word(v, cpu_feature_names[i]);
            have_flags = 1;
        } else if (!strncmp(line, "physical id", 11)) {
            phys = atoi(v);
        } else if (!strncmp(line, "core id", 7)) {
            int id = phys * 65536 + atoi(v), dup = 0;
            for (int i = 0; i < n_seen; i++) dup |= seen[i] == id;
            if (!dup && n_seen < (int)(sizeof seen / sizeof seen[0])) seen[n_seen++] = id;
        }
    }
    if (f) fclose(f);
    s->n_cores = n_seen;
    s->n_online = cpu_count();
    cpu_set_t set;
    s->n_affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : s->n_online;
}

static void probe_memory(struct doctor_sys *s) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) s->mem_total = kb * 1024;
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) s->mem_avail = kb * 1024;
    }
    if (f) fclose(f);
    /* "always [madvise] never": the bracketed word is the setting */
    f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f && fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (b) snprintf(s->thp, sizeof s->thp, "%.*s", (int)(b - a - 1), a + 1);
    }
    if (f) fclose(f);
}

/* ---- bandwidth ---- */

typedef uint64_t v8u64 __attribute__((vector_size(64)));

struct bw_job {
    const char *buf;
    size_t n_bytes;
    uint64_t sums[256]; /* per thread, so the reads cannot be optimised away */
};

/* Sums thread ith's share of the buffer, 256 bytes per step in four independent chains. */
static void bw_worker(void *arg, int ith, int nth) {
    struct bw_job *j = arg;
    size_t per = j->n_bytes / (size_t)nth / 256 * 256;
    const char *p = j->buf + per * (size_t)ith;
    v8u64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, x;
    for (size_t i = 0; i < per; i += 256) {
        memcpy(&x, p + i, 64), a0 += x;
        memcpy(&x, p + i + 64, 64), a1 += x;
        memcpy(&x, p + i + 128, 64), a2 += x;
        memcpy(&x, p + i + 192, 64), a3 += x;
    }
    a0 += a1 + a2 + a3;
    uint64_t sum = 0;
    for (int k = 0; k < 8; k++) sum += a0[k];
    if (ith < 256) j->sums[ith] = sum;
}

/* Best read rate (bytes/s) of nth threads streaming over the buffer for about `secs`. */
static double bw_run(struct pool *p, struct bw_job *j, double secs) {
    double best = 0, t_end = timer_now() + secs;
    int nth = p ? pool_size(p) : 1;
    do {
        double t0 = timer_now();
        if (p)
            pool_run(p, bw_worker, j);
        else
            bw_worker(j, 0, 1);
        double dt = timer_now() - t0;
        double bytes = (double)(j->n_bytes / (size_t)nth / 256 * 256) * nth;
        if (dt > 0 && bytes / dt > best) best = bytes / dt;
    } while (timer_now() < t_end);
    return best;
}

static void probe_bandwidth(struct doctor_sys *s) {
    size_t n = (size_t)256 << 20;
    if (s->mem_avail && (int64_t)n * 4 > s->mem_avail) n = (size_t)32 << 20;
    void *buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return;
    madvise(buf, n, MADV_HUGEPAGE); /* as the model's weights are held */
    memset(buf, 1, n);
    struct bw_job j = {.buf = buf, .n_bytes = n};
    s->bw_1 = bw_run(NULL, &j, 0.4);
    struct pool *p = s->n_online > 1 ? pool_new(s->n_online) : NULL;
    s->bw_n = p ? bw_run(p, &j, 0.6) : s->bw_1;
    pool_free(p);
    munmap(buf, n);
    s->bw_bytes = n;
}

void doctor_probe(struct doctor_sys *s, int measure_bw) {
    memset(s, 0, sizeof *s);
    probe_cpu(s);
    probe_memory(s);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
    snprintf(s->kernels, sizeof s->kernels, "avx512");
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    snprintf(s->kernels, sizeof s->kernels, "avx2");
#else
    snprintf(s->kernels, sizeof s->kernels, "scalar");
#endif
#ifdef __clang__
    snprintf(s->compiler, sizeof s->compiler, "clang %s", __clang_version__);
#else
    snprintf(s->compiler, sizeof s->compiler, "gcc %s", __VERSION__);
#endif
    s->amx = cpu_amx_available();
    if (measure_bw) probe_bandwidth(s);
}
