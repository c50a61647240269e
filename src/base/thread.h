/* base/thread.h: a fixed pool of worker threads for data-parallel kernels.
 * pool_run(p, fn, ctx) calls fn(ctx, ith, nth) once for every ith in [0, nth) and returns
 * when all calls have finished; the calling thread runs ith = 0. Workers spin briefly
 * between jobs (decode steps are short), then sleep. One caller at a time per pool. */
#ifndef DSPARK_BASE_THREAD_H
#define DSPARK_BASE_THREAD_H

struct pool;
typedef void pool_fn(void *ctx, int ith, int nth);

struct pool *pool_new(int n_threads); /* n_threads <= 0: one per online CPU */
void pool_free(struct pool *p);       /* NULL is a no-op */
int pool_size(const struct pool *p);
void pool_run(struct pool *p, pool_fn *fn, void *ctx);
int cpu_count(void);

#endif
