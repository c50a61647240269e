/* server/server.h: the OpenAI-compatible HTTP server. server_new() loads the model folder(s),
 * starts the engine thread (the only thread that touches the models) and the HTTP listener;
 * server_run() blocks until SIGINT/SIGTERM; server_free() stops both and frees everything. */
#ifndef DSPARK_SERVER_SERVER_H
#define DSPARK_SERVER_SERVER_H

#include "engine/generate.h"

#include <stddef.h>

struct server_opts {
    const char *model_dir;
    const char *drafter_dir; /* draft model for GEN_DRAFT, or NULL */
    const char *host;        /* default 127.0.0.1 */
    int port;                /* default 8080; 0 picks a free port (printed) */
    const char *api_key;     /* NULL: no authentication */
    enum gen_mode mode;
    int max_draft;
    int lookup_drafts;
    int thinking;                             /* default for enable_thinking in the chat template */
    int default_max_tokens;                   /* when a request gives none (2048) */
    int max_tokens_cap;                       /* requests are clamped to this (32768) */
    float default_temperature, default_top_p; /* < 0: unset */
    int default_top_k;                        /* < 0: unset */
    size_t max_body_bytes;                    /* larger bodies get 413 (default 8 MiB) */
    int max_queue;                            /* queued requests beyond this get 503 (default 64) */
    int max_batch;            /* sequences generated together (default 1: one at a time) */
    int prefix_cache_entries; /* finished sequences kept for prefix reuse (0: off) */
    int kv_cache_mb;          /* memory the prefix cache may hold (0: no limit) */
    int kv_pool_mb;           /* K/V the running requests may hold (estimated from their prompt and
                               * max_tokens); later ones wait in the queue (0: no limit) */
    const char *prefix_cache_dir; /* entries leaving RAM are saved here (NULL: dropped) */
    int prefix_cache_dir_mb;      /* disk the folder may hold for this model (0: no limit) */
    int prefill_chunk; /* prompt tokens per engine step while others decode (default 2048) */
    int n_threads;
    int gpu;        /* run the target on the GPU */
    int gpu_inputs; /* model_opts.gpu_inputs */
    int gpu_kv;     /* model_opts.gpu_kv */
    int show_progress;
    int auto_draft;         /* --max-draft auto: each round's cap is chosen up to the mode's
                             * widest (calibrated by server_new; max_draft is then ignored) */
    const char *calib_file; /* its cost cache (NULL: ~/.cache/dspark/calibration.json) */
    int recalibrate;        /* measure even when cached */
    int load_aware;         /* --load-aware: batched DSpark passes keep the drafts worth their cost
                             * (paper Alg. 1; pass costs calibrated as for --max-draft auto) */
};

struct server;

int server_new(const struct server_opts *opts, struct server **out);
int server_port(const struct server *s); /* the port actually bound */
void server_run(struct server *s);       /* until SIGINT or SIGTERM */
void server_free(struct server *s);      /* NULL is a no-op */

#endif
