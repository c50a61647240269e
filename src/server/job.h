/* server/job.h: one API request on its way from an HTTP thread to the engine thread and back.
 * The HTTP thread fills the request half and queues the job; the engine thread runs it and
 * appends the response bytes (a JSON body, or SSE events) to `out`, which the HTTP thread
 * drains. Both sides hold a reference; the last job_release() frees it. Every field below
 * `mu` is guarded by it. */
#ifndef DSPARK_SERVER_JOB_H
#define DSPARK_SERVER_JOB_H

#include "engine/generate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define JOB_MAX_STOP    8
#define JOB_MAX_CHOICES 8

struct job {
    /* request: written before queueing, read-only afterwards */
    int32_t *prompt;
    int n_prompt;
    struct gen_params gp;
    char *stop[JOB_MAX_STOP];
    int n_choices; /* n */
    int stream;
    int include_usage; /* stream_options.include_usage */
    int chat;          /* chat.completion (1) or text_completion (0) */
    int logprobs;      /* report logprobs (gp.top_logprobs alternatives) */
    int tools;         /* tools were given: parse tool calls from the output */
    char id[48];
    long created;
    double t_queued; /* when the job entered the queue (monotonic seconds) */
    int pool_waited; /* it waited for room in the K/V pool (counted once) */
    int kv_shared;   /* prompt positions it reads from the prefix cache's pages, from admission */
    char model[128];
    atomic_int cancelled; /* set by the HTTP side when the client went away */
    void *run;            /* the engine thread's generations (response.c) */
    /* response */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *out;
    size_t out_len, out_cap, out_pos; /* out[out_pos..out_len) not yet sent */
    int status;                       /* HTTP status of a non-streamed response */
    int done;                         /* the engine is finished with this job */
    int refs;
};

struct job *job_new(void);
void job_release(struct job *j); /* drops one reference */
/* Appends bytes to the response and wakes the HTTP side. Caller must not hold j->mu. */
int job_write(struct job *j, const char *s, size_t n);
void job_finish(struct job *j, int status); /* marks done and wakes the HTTP side */

#endif
