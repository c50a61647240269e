/* base/cpuload.c: see cpuload.h. */
#include "base/cpuload.h"

#include "base/thread.h"
#include "base/timer.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

struct cpu_mark cpu_mark_now(void) {
    struct cpu_mark m = {timer_now(), 0, 0};
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7]) == 8)
        m.machine =
            (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
    if (f) fclose(f);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    m.self = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
             (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    return m;
}

double cpu_others_share(const struct cpu_mark *since) {
    struct cpu_mark now = cpu_mark_now();
    double wall = now.wall - since->wall;
    double others = (now.machine - since->machine) - (now.self - since->self);
    return wall > 0 && since->machine > 0 && others > 0 ? others / (wall * cpu_count()) : 0;
}
