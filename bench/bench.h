/* bench/bench.h: helpers shared by the benchmarks (header-only, bench builds only): a
 * multi-threaded streaming read to measure memory bandwidth, and min-of-runs timing. */
#ifndef DSPARK_BENCH_H
#define DSPARK_BENCH_H

#include "base/thread.h"
#include "base/timer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

struct bw_job {
    const char *buf;
    size_t n_bytes;
    int prefetch;    /* read like the matmul does, with its software prefetch */
    double sums[64]; /* per thread, so the reads cannot be optimised away */
};

static inline void bw_worker(void *arg, int ith, int nth) {
    struct bw_job *j = arg;
    size_t per = j->n_bytes / (size_t)nth / 16384 * 16384;
    const char *p = j->buf + per * (size_t)ith;
#ifdef __AVX512F__
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    if (j->prefetch) {
        /* the matmul's pattern: 16 KiB tiles read as 8 rows of 2 KiB side by side, each line
         * prefetched into L2 one tile ahead */
        for (size_t t = 0; t < per; t += 16384)
            for (size_t b = 0; b < 2048; b += 64)
                for (size_t c = 0; c < 16384; c += 8192) {
                    const char *q = p + t + b + c;
                    for (size_t l = 0; l < 8192; l += 2048) __builtin_prefetch(q + 16384 + l, 0, 2);
                    a0 = _mm512_add_ps(a0, _mm512_load_ps((const float *)(const void *)q));
                    a1 = _mm512_add_ps(a1, _mm512_load_ps((const float *)(const void *)(q + 2048)));
                    a2 = _mm512_add_ps(a2, _mm512_load_ps((const float *)(const void *)(q + 4096)));
                    a3 = _mm512_add_ps(a3, _mm512_load_ps((const float *)(const void *)(q + 6144)));
                }
    } else {
        for (size_t i = 0; i < per; i += 256) {
            a0 = _mm512_add_ps(a0, _mm512_load_ps((const float *)(const void *)(p + i)));
            a1 = _mm512_add_ps(a1, _mm512_load_ps((const float *)(const void *)(p + i + 64)));
            a2 = _mm512_add_ps(a2, _mm512_load_ps((const float *)(const void *)(p + i + 128)));
            a3 = _mm512_add_ps(a3, _mm512_load_ps((const float *)(const void *)(p + i + 192)));
        }
    }
    j->sums[ith] =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
    uint64_t s = 0;
    for (size_t i = 0; i < per; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    j->sums[ith] = (double)s;
#endif
}

/* Best-of-`reps` read bandwidth in bytes/s of `pool`'s threads streaming over buf (64-byte
 * aligned), with or without software prefetch. */
static inline double bw_measure_buf(struct pool *pool, const void *buf, size_t n_bytes,
                                    int prefetch, int reps) {
    struct bw_job j = {.buf = buf, .n_bytes = n_bytes, .prefetch = prefetch};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = timer_now();
        pool_run(pool, bw_worker, &j);
        double dt = timer_now() - t0;
        double rate =
            (double)(n_bytes / (size_t)pool_size(pool) / 16384 * 16384) * pool_size(pool) / dt;
        if (rate > best) best = rate;
    }
    return best;
}

/* Read bandwidth over a fresh anonymous buffer of n_bytes, with or without transparent huge
 * pages and software prefetch; returns 0 when the buffer cannot be had. */
static inline double bw_measure(struct pool *pool, size_t n_bytes, int huge, int prefetch,
                                int reps) {
    void *buf = mmap(NULL, n_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 0;
    if (huge) madvise(buf, n_bytes, MADV_HUGEPAGE);
    memset(buf, 1, n_bytes);
    double r = bw_measure_buf(pool, buf, n_bytes, prefetch, reps);
    munmap(buf, n_bytes);
    return r;
}

/* ---- other processes' CPU use, to discard timings they disturbed ---- */

/* Busy jiffies of the whole machine and of this process (all threads). */
static inline void cpu_jiffies(long long *all_busy, long long *self) {
    *all_busy = *self = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        long long v[8] = {0};
        if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8)
            *all_busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* not idle, not iowait */
        fclose(f);
    }
    f = fopen("/proc/self/stat", "r");
    if (f) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        char *p = strrchr(buf, ')'); /* fields after the command name */
        long long ut = 0, st = 0;
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &st) == 2)
            *self = ut + st;
        fclose(f);
    }
}

struct quiet {
    long long busy0, self0;
};

static inline void quiet_begin(struct quiet *q) {
    cpu_jiffies(&q->busy0, &q->self0);
}

/* 1 when other processes used (almost) no CPU since quiet_begin. */
static inline int quiet_end(const struct quiet *q) {
    long long busy, self;
    cpu_jiffies(&busy, &self);
    return (busy - q->busy0) - (self - q->self0) <= 2;
}

/* Min seconds of run(ctx) over `reps` runs that no other process disturbed, trying up to
 * 10 * reps times (pausing after a disturbed run); prep(ctx), untimed, precedes each run.
 * *n_clean gets the number of clean runs; with none, the min over all runs is returned.
 * Returns -1 when prep or run fails. */
typedef int bench_fn(void *ctx);
static inline double bench_min(bench_fn *prep, bench_fn *run, void *ctx, int reps, int *n_clean) {
    double best_clean = 1e30, best_any = 1e30;
    int clean = 0;
    for (int a = 0; a < 10 * reps && clean < reps; a++) {
        if (prep && prep(ctx)) return -1;
        struct quiet q;
        quiet_begin(&q);
        double t0 = timer_now();
        if (run(ctx)) return -1;
        double dt = timer_now() - t0;
        if (dt < best_any) best_any = dt;
        if (quiet_end(&q)) {
            clean++;
            if (dt < best_clean) best_clean = dt;
        } else {
            usleep(100 * 1000);
        }
    }
    if (n_clean) *n_clean = clean;
    return clean ? best_clean : best_any;
}

/* Lets a previous pool's spinning workers fall asleep before timing with another pool. */
static inline void bench_quiesce(void) {
    usleep(200 * 1000);
}

#endif
