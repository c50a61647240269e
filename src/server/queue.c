/* server/queue.c: the job queue and the engine thread. The engine admits queued jobs while
 * the running batch has room (--max-batch sequences; a job with n choices takes n), then loops:
 * prefill, then one round for every sequence past its prefill, all of them in one batched
 * target pass, so concurrent requests share each weight read. Prefill is chunked: while other
 * sequences are decoding, a step runs at most --prefill-chunk prompt tokens (first come, first
 * served), so a long prompt delays running streams by one chunk at a time; with nothing
 * decoding, the oldest prompt is prefilled whole, as a lone request always is. A job leaves as
 * soon as its sequences are done or its client has gone. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/log.h"
#include "base/timer.h"
#include "cache/prefix.h"
#include "model/model.h"
#include "spec/verify.h"

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

/* The prefill part of an engine step; returns the chunks run. A failure is the job's own: it
 * goes to job_rc[i] for active[i]. */
static long prefill_step(struct server *s, struct job **active, int n_active, int *job_rc) {
    struct gen_seq *seqs[JOB_MAX_CHOICES];
    int decoding = 0;
    for (int i = 0; i < n_active; i++) {
        int n = oa_job_seqs(active[i], seqs);
        for (int k = 0; k < n; k++) decoding += !gen_seq_prefill_left(seqs[k]);
    }
    /* nothing to interleave with: the oldest prompt runs whole (the single-stream path) */
    int budget = decoding ? (s->opts.prefill_chunk > 0 ? s->opts.prefill_chunk : 2048) : 0;
    long chunks = 0;
    for (int i = 0; i < n_active; i++) {
        int n = oa_job_seqs(active[i], seqs);
        for (int k = 0; k < n && !job_rc[i]; k++) {
            int left = gen_seq_prefill_left(seqs[k]);
            if (!left) continue;
            int rows = decoding ? (left < budget ? left : budget) : 0;
            if ((job_rc[i] = gen_seq_prefill(seqs[k], rows)))
                log_error("prefill failed: %s", err_str(job_rc[i]));
            chunks++;
            if (!decoding) return chunks;
            if ((budget -= rows) <= 0) return chunks;
        }
    }
    return chunks;
}

/* A job's K/V at most: each choice holds its prompt, max_tokens and a round's drafts, less the
 * prompt positions it reads from the prefix cache's pages (which the cache's memory counts),
 * plus, then, the shared page it copies and its last page's rounding. */
static long job_kv_bytes(const struct server *s, const struct job *j) {
    const struct hf_config *c = model_config(s->eng.target);
    long row = 2L * model_kv_elem_bytes(s->eng.target) * c->n_layers * c->n_kv_heads * c->head_dim;
    long rows = (long)j->n_prompt + j->gp.max_tokens + VERIFY_MAX_DRAFT + 1;
    if (j->kv_shared) rows += 2 * (1 << KV_PAGE_SHIFT) - j->kv_shared;
    return (long)j->n_choices * rows * row;
}

/* The prompt positions every running choice of a job still shares with the prefix cache's
 * entries (the fewest of its sequences'). The shared prefix's last, partly filled page is
 * copied when a sequence writes it, which job_kv_bytes() allows for: the share changes only
 * when whole pages are no longer an entry's. */
static int job_cache_shared(struct job *j) {
    struct gen_seq *seqs[JOB_MAX_CHOICES];
    int n = oa_job_seqs(j, seqs), shared = j->kv_shared;
    const int whole = shared & ~((1 << KV_PAGE_SHIFT) - 1);
    for (int k = 0; k < n; k++) {
        int m = gen_seq_cache_shared(seqs[k]);
        if (m < whole && m < shared) shared = m;
    }
    return shared;
}

void *engine_main(void *arg) {
    struct server *s = arg;
    struct job *active[MAX_ACTIVE];
    struct gen_seq *seqs[MAX_ACTIVE];
    int n_active = 0, n_seqs = 0;
    long held = 0; /* the running jobs' K/V estimate (--kv-pool-mb) */
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
        /* admit while the batch has room and, with --kv-pool-mb, the pool too (a job bigger
         * than either runs alone); the first job that does not fit waits, and all behind it */
        struct job *joining[MAX_ACTIVE];
        int n_join = 0, room = max_batch - n_seqs;
        long pool = (long)s->opts.kv_pool_mb << 20, used = held;
        while (s->q_len && n_active + n_join < MAX_ACTIVE) {
            struct job *j = s->queue[s->q_head];
            if (j->n_choices > room && (n_active || n_join)) break;
            if (pool) j->kv_shared = gen_shared_prefix(&s->eng, &j->gp, j->prompt, j->n_prompt);
            long need = job_kv_bytes(s, j);
            if (pool && used + need > pool && (n_active || n_join)) {
                if (!j->pool_waited) j->pool_waited = 1, s->m.kv_pool_waits++;
                break;
            }
            joining[n_join++] = pop(s);
            room -= j->n_choices;
            used += need;
        }
        s->m.kv_pool_bytes = used;
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
        int job_rc[MAX_ACTIVE] = {0};
        long chunks = prefill_step(s, active, n_active, job_rc);
        /* one round for every sequence past its prefill */
        struct gen_seq *ready[MAX_ACTIVE];
        int n_ready = 0;
        n_seqs = 0;
        for (int i = 0; i < n_active; i++) n_seqs += oa_job_seqs(active[i], seqs + n_seqs);
        for (int i = 0; i < n_seqs; i++)
            if (!gen_seq_prefill_left(seqs[i])) ready[n_ready++] = seqs[i];
        int stepped = n_ready;
        int rc = n_ready == 1 ? gen_seq_step(ready[0])
                 : n_ready    ? gen_step_batch(ready, n_ready)
                              : OK;
        if (rc) log_error("generation failed: %s", err_str(rc));
        /* retire finished, cancelled or failed jobs */
        int kept = 0;
        for (int i = 0; i < n_active; i++) {
            struct job *j = active[i];
            struct gen_seq *tmp[JOB_MAX_CHOICES];
            if (rc || job_rc[i]) {
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
        held = 0; /* what the jobs still running hold, for the next admission */
        for (int i = 0; i < n_active; i++) {
            /* pages of an entry that left RAM are the job's own now */
            if (s->opts.kv_pool_mb && active[i]->kv_shared)
                active[i]->kv_shared = job_cache_shared(active[i]);
            held += job_kv_bytes(s, active[i]);
        }
        n_seqs = 0;
        for (int i = 0; i < n_active; i++) n_seqs += oa_job_seqs(active[i], seqs + n_seqs);
        pthread_mutex_lock(&s->mu);
        if (stepped) metrics_round(s, stepped);
        s->m.prefill_chunks += chunks;
        s->running = n_active;
        s->m.kv_pool_bytes = held;
        metrics_cache(s);
        pthread_mutex_unlock(&s->mu);
    }
}
