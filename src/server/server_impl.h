/* server/server_impl.h: struct server and the functions its files share. Not public.
 * Threads: the HTTP library's connection threads parse requests and render prompts (the
 * tokenizer and templates are read-only), then hand jobs to the single engine thread through
 * the queue; only the engine thread runs the models. `mu` guards the queue and the metrics. */
#ifndef DSPARK_SERVER_IMPL_H
#define DSPARK_SERVER_IMPL_H

#include "server/job.h"
#include "server/server.h"
#include "tune/controller.h"

#include <pthread.h>

struct MHD_Daemon;
struct chat;
struct cJSON;

#define METRICS_ACCEPT_BUCKETS 10
#define METRICS_BATCH_BUCKETS  7

struct metrics {
    long requests_ok, requests_err;
    long prompt_tokens, completion_tokens;
    long target_forwards, rounds, lookup_rounds, accepted, drafted, load_aware_cut;
    long accept_hist[METRICS_ACCEPT_BUCKETS]; /* rounds by drafts accepted: 0..8, 9+ */
    double decode_seconds;
    long cache_hits, cache_misses, cache_reused_tokens, cache_shared_tokens, cache_bytes;
    long cache_deduped_tokens;
    long cache_trimmed_tokens;
    long spill_writes, spill_reads, spill_rejects, spill_dropped; /* its folder */
    long spill_bytes, spill_pending;
    long prefill_chunks;                    /* prefill passes of the engine */
    long batch_hist[METRICS_BATCH_BUCKETS]; /* rounds by sequences stepped: 1,2,4,..,64 */
    double queue_seconds;                   /* total time jobs waited for the engine */
    long queued_jobs;
    long kv_pool_bytes; /* estimated K/V of the running requests (--kv-pool-mb) */
    long kv_pool_waits; /* requests that waited for room in it */
    double last_tokens_per_sec;
    long cap_rounds[GEN_MAX_CAP + 1]; /* --max-draft auto: rounds by cap */
    int auto_cap;                     /* ... the last finished sequence's cap, acceptance */
    double auto_accept;               /* estimate and predicted tokens/s per cap */
    double auto_rates[GEN_MAX_CAP + 1];
};

struct server {
    struct server_opts opts;
    struct gen_engine eng;
    const struct hf_config *cfg;
    char model_name[128];
    struct chat *chat; /* the model's chat template, or NULL (ChatML layout) */
    struct MHD_Daemon *http;
    int port;
    pthread_t engine_thread;
    int engine_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job **queue; /* FIFO ring of max_queue slots */
    int q_head, q_len;
    int running; /* jobs the engine is generating */
    int stopping;
    struct metrics m;
    struct tune_auto *tune; /* --max-draft auto or --load-aware: the costs, or NULL */
};

/* http.c */
int http_start(struct server *s);
void http_stop(struct server *s);

/* queue.c */
int queue_push(struct server *s, struct job *j); /* ERR_FULL when the queue is full */
void *engine_main(void *arg);

/* openai.c: request → job, and the response shapes */
int oa_parse_request(struct server *s, const char *body, size_t len, int chat, struct job *j,
                     int *status, char *err, size_t err_cap);
/* On the engine thread: start a job's generations (prefill; on failure the job is answered
 * and finished), list its unfinished sequences, answer it once they are all done, or abort
 * it (client gone, engine error). */
int oa_job_start(struct server *s, struct job *j);
int oa_job_seqs(struct job *j, struct gen_seq **out);
void oa_job_complete(struct server *s, struct job *j);
void oa_job_abort(struct job *j, int status);
char *oa_error_body(const char *message, const char *type, const char *code);

/* prompt.c: the model's chat template and tool-call formats */
int server_load_chat(struct server *s);
void server_free_chat(struct server *s);
int server_render_chat(struct server *s, const struct cJSON *messages, const struct cJSON *tools,
                       const struct cJSON *kwargs, int thinking, char **out, char *err,
                       size_t err_cap);
/* Splits generated text into content (NULL when empty) and an OpenAI tool_calls array (NULL
 * when there is none). Both are new allocations owned by the caller. */
int server_parse_tools(struct server *s, const char *text, char **content,
                       struct cJSON **tool_calls);

/* metrics.c */
char *metrics_render(struct server *s);
void metrics_record(struct server *s, const struct gen_stats *st);
void metrics_round(struct server *s, int n_seqs); /* under s->mu */
/* The prefix cache's counters into s->m, under s->mu (engine thread: it owns the cache) */
void metrics_cache(struct server *s);

#endif
