/* base/cpuload.h: how much of the machine's CPU time other processes took during a
 * measurement, from /proc/stat and this process's own usage, so that benchmarks and the
 * calibration can tell a quiet run from a disturbed one. */
#ifndef DSPARK_BASE_CPULOAD_H
#define DSPARK_BASE_CPULOAD_H

struct cpu_mark {
    double wall;    /* timer_now() */
    double machine; /* CPU seconds used by the whole machine (0: /proc/stat unreadable) */
    double self;    /* CPU seconds used by this process */
};

struct cpu_mark cpu_mark_now(void);
/* Share of all the machine's CPUs that other processes used since `since` (0 when unknown). */
double cpu_others_share(const struct cpu_mark *since);

#endif
