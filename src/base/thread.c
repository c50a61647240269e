/* base/thread.c: see thread.h. A job is published by bumping `gen`; each worker runs its
 * share and bumps `done`. Workers spin on `gen` for a while before sleeping on a condvar, so
 * back-to-back kernels in one forward pass pay no wake-up latency. */
#include "base/thread.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERS 200000

struct pool {
    int n;                 /* threads including the caller */
    pthread_t *threads;    /* [n-1] workers */
    pool_fn *fn;           /* current job */
    void *ctx;             /* current job's argument */
    atomic_uint gen;       /* job generation; bumped to publish a job */
    atomic_int done;       /* workers finished with the current job */
    atomic_int quit;       /* set once at pool_free */
    atomic_int n_sleeping; /* workers waiting on cond */
    pthread_mutex_t mu;
    pthread_cond_t cond;
};

struct worker_arg {
    struct pool *p;
    int ith;
};

int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *worker_main(void *arg) {
    struct worker_arg *wa = arg;
    struct pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) {
                /* on an oversubscribed machine, let the thread we wait for run */
                if (spins % 64 == 0)
                    sched_yield();
                else
                    _mm_pause();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen) pthread_cond_wait(&p->cond, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->quit)) return NULL;
        p->fn(p->ctx, ith, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
    }
}

struct pool *pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = cpu_count();
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->n = i;
            break;
        }
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            break;
        }
    }
    return p;
}

static void publish(struct pool *p) {
    atomic_store(&p->done, 0);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (atomic_load(&p->n_sleeping)) pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
}

void pool_run(struct pool *p, pool_fn *fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    publish(p);
    fn(ctx, 0, p->n);
    for (unsigned spins = 1; atomic_load_explicit(&p->done, memory_order_acquire) != p->n - 1;
         spins++) {
        if (spins % 64 == 0)
            sched_yield();
        else
            _mm_pause();
    }
}

void pool_free(struct pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    if (p->n > 1) publish(p);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cond);
    free(p->threads);
    free(p);
}

int pool_size(const struct pool *p) {
    return p->n;
}

/* The calling thread's buffers, in a list whose head is the key's value; freed at its end. */
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

static void free_bufs(void *head) {
    for (struct thread_buf *b = head, *next; b; b = next) {
        next = b->next;
        free(b->p);
        *b = (struct thread_buf){0};
    }
}

static void buf_key_init(void) {
    pthread_key_create(&buf_key, free_bufs);
}

void *thread_buf_get(struct thread_buf *b, size_t bytes) {
    if (bytes <= b->len && b->p) return b->p;
    free(b->p);
    b->p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    b->len = b->p ? bytes : 0;
    if (!b->listed) {
        pthread_once(&buf_once, buf_key_init);
        b->next = pthread_getspecific(buf_key);
        pthread_setspecific(buf_key, b);
        b->listed = 1;
    }
    return b->p;
}
