/* cli/doctor.h: what `dspark doctor` measures about the machine and the build (probe.c), for
 * the report and verdict in cmd_doctor.c. Plain data filled once; single-threaded. */
#ifndef DSPARK_CLI_DOCTOR_H
#define DSPARK_CLI_DOCTOR_H

#include <stddef.h>
#include <stdint.h>

/* CPU features the kernels care about, as /proc/cpuinfo names them. */
enum cpu_feature {
    FEAT_AVX2,
    FEAT_FMA,
    FEAT_F16C,
    FEAT_AVX512F,
    FEAT_AVX512BW,
    FEAT_AVX512VL,
    FEAT_AVX512DQ,
    FEAT_AVX512_BF16,
    FEAT_AMX_TILE,
    FEAT_AMX_BF16,
    FEAT_COUNT
};
extern const char *const cpu_feature_names[FEAT_COUNT];

struct doctor_sys {
    char cpu_model[128];
    int has[FEAT_COUNT];
    int n_online;                 /* online CPUs: the default thread count */
    int n_cores;                  /* physical cores (0: unknown) */
    int n_affinity;               /* CPUs this process may run on */
    int64_t mem_total, mem_avail; /* bytes (0: unknown) */
    char thp[16];                 /* transparent hugepages: always, madvise, never ("": none) */
    double bw_1, bw_n;            /* read bandwidth in bytes/s: 1 thread, n_online threads */
    size_t bw_bytes;              /* buffer size used (0: not measured) */
    char kernels[16];             /* CPU kernels this build compiled: "avx512", "avx2", "scalar" */
    int amx;                      /* the BF16 matmul runs on AMX tiles (cpu_amx_available()) */
    char compiler[64];
};

/* Fills s; measure_bw: also run the ~1 s bandwidth estimate. */
void doctor_probe(struct doctor_sys *s, int measure_bw);

#endif
