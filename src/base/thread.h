/* base/thread.h: a fixed pool of worker threads for data-parallel kernels.
 * pool_run(p, fn, ctx) calls fn(ctx, ith, nth) once for every ith in [0, nth) and returns
 * when all calls have finished; the calling thread runs ith = 0. Workers spin briefly
 * between jobs (decode steps are short), then sleep. One caller at a time per pool. */
#ifndef DSPARK_BASE_THREAD_H
#define DSPARK_BASE_THREAD_H

#include <stddef.h>

struct pool;
typedef void pool_fn(void *ctx, int ith, int nth);

struct pool *pool_new(int n_threads); /* n_threads <= 0: one per online CPU */
void pool_free(struct pool *p);       /* NULL is a no-op */
int pool_size(const struct pool *p);
void pool_run(struct pool *p, pool_fn *fn, void *ctx);
int cpu_count(void);

/* A scratch buffer owned by the calling thread: each user declares its own
 *     static _Thread_local struct thread_buf b;
 * and asks for it before use. It grows on demand (64-byte aligned, contents not kept) and is
 * freed when its thread ends, so kernels allocate nothing once warm. */
struct thread_buf {
    void *p;
    size_t len;
    struct thread_buf *next; /* the thread's other buffers, freed with it */
    int listed;
};
/* At least bytes of b, or NULL when out of memory. */
void *thread_buf_get(struct thread_buf *b, size_t bytes);

#endif
