/* server/queue.c: the job queue and the engine thread. The engine admits queued jobs while
 * the running batch has room (--max-batch sequences; a job with n choices takes n), prefills
 * each as it joins, then steps every running sequence together: one batched target pass per
 * round, so concurrent requests share each weight read. A job leaves as soon as its sequences
 * are done or its client has gone. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/log.h"
#include "base/timer.h"
#include "cache/prefix.h"

#define MAX_ACTIVE GEN_MAX_BATCH

int queue_push(struct server *s, struct job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->q_len >= s->opts.max_queue || s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return ERR_FULL;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the engine's reference */
    j->t_queued = timer_now();
    pthread_mutex_unlock(&j->mu);
    s->queue[(s->q_head + s->q_len) % s->opts.max_queue] = j;
    s->q_len++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return OK;
}

static struct job *pop(struct server *s) {
    struct job *j = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % s->opts.max_queue;
    s->q_len--;
    return j;
}

/* Fails whatever is queued or running so no HTTP thread waits forever. */
static void drain(struct server *s, struct job **active, int n_active) {
    for (int i = 0; i < n_active; i++) {
        oa_job_abort(active[i], 503);
        job_release(active[i]);
    }
    while (s->q_len) {
        struct job *j = pop(s);
        job_finish(j, 503);
        job_release(j);
    }
}

void *engine_main(void *arg) {
    struct server *s = arg;
    struct job *active[MAX_ACTIVE];
    struct gen_seq *seqs[MAX_ACTIVE];
    int n_active = 0, n_seqs = 0;
    int max_batch = s->opts.max_batch > 0 ? s->opts.max_batch : 1;
    if (max_batch > MAX_ACTIVE) max_batch = MAX_ACTIVE;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->q_len && !n_active && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) {
            drain(s, active, n_active);
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        /* admit while the batch has room (a job bigger than the batch runs alone) */
        struct job *joining[MAX_ACTIVE];
        int n_join = 0, room = max_batch - n_seqs;
        while (s->q_len && n_active + n_join < MAX_ACTIVE) {
            struct job *j = s->queue[s->q_head];
            if (j->n_choices > room && (n_active || n_join)) break;
            joining[n_join++] = pop(s);
            room -= j->n_choices;
        }
        s->running = n_active + n_join;
        double now = timer_now();
        for (int i = 0; i < n_join; i++) {
            s->m.queue_seconds += now - joining[i]->t_queued;
            s->m.queued_jobs++;
        }
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n_join; i++) {
            struct job *j = joining[i];
            if (atomic_load(&j->cancelled)) {
                job_finish(j, 499);
                job_release(j);
            } else if (oa_job_start(s, j)) {
                job_release(j); /* answered with an error by oa_job_start */
            } else {
                active[n_active++] = j;
            }
        }
        /* one round for every running sequence */
        n_seqs = 0;
        for (int i = 0; i < n_active; i++) n_seqs += oa_job_seqs(active[i], seqs + n_seqs);
        int stepped = n_seqs;
        int rc = n_seqs == 1 ? gen_seq_step(seqs[0]) : n_seqs ? gen_step_batch(seqs, n_seqs) : OK;
        if (rc) log_error("generation failed: %s", err_str(rc));
        /* retire finished, cancelled or failed jobs */
        int kept = 0;
        for (int i = 0; i < n_active; i++) {
            struct job *j = active[i];
            struct gen_seq *tmp[JOB_MAX_CHOICES];
            if (rc) {
                oa_job_abort(j, 500);
            } else if (atomic_load(&j->cancelled)) {
                oa_job_abort(j, 499);
            } else if (!oa_job_seqs(j, tmp)) {
                oa_job_complete(s, j);
            } else {
                active[kept++] = j;
                continue;
            }
            job_release(j);
        }
        n_active = kept;
        n_seqs = 0;
        for (int i = 0; i < n_active; i++) n_seqs += oa_job_seqs(active[i], seqs + n_seqs);
        pthread_mutex_lock(&s->mu);
        if (stepped) metrics_round(s, stepped);
        s->running = n_active;
        if (s->eng.cache) {
            struct prefix_stats ps = prefix_cache_stats(s->eng.cache);
            s->m.cache_hits = ps.hits, s->m.cache_misses = ps.misses;
            s->m.cache_reused_tokens = ps.reused_tokens, s->m.cache_bytes = (long)ps.bytes;
        }
        pthread_mutex_unlock(&s->mu);
    }
}
