/* server/queue.c: the job queue and the engine thread that drains it, one job at a time. */
#include "server/server_impl.h"

#include "base/err.h"

int queue_push(struct server *s, struct job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->q_len >= s->opts.max_queue || s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return ERR_FULL;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the engine's reference */
    pthread_mutex_unlock(&j->mu);
    s->queue[(s->q_head + s->q_len) % s->opts.max_queue] = j;
    s->q_len++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return OK;
}

void *engine_main(void *arg) {
    struct server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->q_len && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) {
            /* fail what is left so no HTTP thread waits forever */
            while (s->q_len) {
                struct job *j = s->queue[s->q_head];
                s->q_head = (s->q_head + 1) % s->opts.max_queue;
                s->q_len--;
                job_finish(j, 503);
                job_release(j);
            }
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        struct job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->opts.max_queue;
        s->q_len--;
        s->running = 1;
        pthread_mutex_unlock(&s->mu);
        if (!atomic_load(&j->cancelled))
            oa_run_job(s, j);
        else
            job_finish(j, 499);
        pthread_mutex_lock(&s->mu);
        s->running = 0;
        pthread_mutex_unlock(&s->mu);
        job_release(j);
    }
}
