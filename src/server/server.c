/* server/server.c: server lifetime: load the models, start the engine thread and the HTTP
 * listener, wait for a signal, stop both. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/log.h"
#include "base/thread.h"
#include "cache/prefix.h"
#include "spec/block_model.h"
#include "tokenizer/tokenizer.h"
#include "tune/calib.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --max-draft auto and --load-aware: the round costs of this machine, from the cache or
 * measured now. */
static int calibrate(struct server *s) {
    const struct server_opts *o = &s->opts;
    if (o->load_aware &&
        (o->mode != GEN_DSPARK || !s->eng.block || !block_has_confidence(s->eng.block))) {
        log_error("--load-aware needs --mode dspark with a drafter that has a confidence head");
        return ERR_ARG;
    }
    if ((!o->auto_draft && !o->load_aware) || o->mode == GEN_BASELINE) return OK;
    if (!(s->tune = calloc(1, sizeof *s->tune))) return ERR_NOMEM;
    const char *mode = gen_mode_name(o->mode);
    int bs = s->eng.block ? block_model_config(s->eng.block)->block_size : 0;
    struct tune_subject ts = {.target = s->eng.target,
                              .draft = s->eng.draft,
                              .block = s->eng.block,
                              .mode = mode,
                              .target_dir = o->model_dir,
                              .drafter_dir = o->mode >= GEN_DRAFT ? o->drafter_dir : NULL,
                              .max_cap = tune_default_max_cap(mode, bs),
                              .max_batch = o->max_batch,
                              .n_threads = o->n_threads > 0 ? o->n_threads : cpu_count(),
                              .gpu = o->gpu};
    struct tune_calib_opts co = {
        .cache_path = o->calib_file, .show_progress = o->show_progress, .force = o->recalibrate};
    int rc = tune_calibrate(&ts, &co, &s->tune->costs, NULL);
    if (o->auto_draft) s->opts.max_draft = ts.max_cap;
    return rc;
}

int server_new(const struct server_opts *opts, struct server **out) {
    *out = NULL;
    struct server *s = calloc(1, sizeof *s);
    if (!s) return ERR_NOMEM;
    s->opts = *opts;
    if (!s->opts.host) s->opts.host = "127.0.0.1";
    if (s->opts.max_queue <= 0) s->opts.max_queue = 64;
    if (!s->opts.max_body_bytes) s->opts.max_body_bytes = 8u << 20;
    if (s->opts.default_max_tokens <= 0) s->opts.default_max_tokens = 2048;
    if (s->opts.max_tokens_cap <= 0) s->opts.max_tokens_cap = 32768;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* the model's name in the API: its folder's last component */
    const char *base = strrchr(opts->model_dir, '/');
    base = base && base[1] ? base + 1 : opts->model_dir;
    snprintf(s->model_name, sizeof s->model_name, "%s", base);
    int rc;
    struct model_opts mo = {
        .n_threads = opts->n_threads,
        .show_progress = opts->show_progress,
        .gpu = opts->gpu,
        .gpu_inputs = opts->gpu_inputs,
        .gpu_kv = opts->gpu_kv,
    };
    if ((rc = tokenizer_load(opts->model_dir, &s->eng.tok)) ||
        (rc = model_load(opts->model_dir, &mo, &s->eng.target)))
        goto fail;
    s->cfg = model_config(s->eng.target);
    if (opts->mode == GEN_DRAFT) {
        mo.pool = model_pool(s->eng.target);
        if ((rc = model_load(opts->drafter_dir, &mo, &s->eng.draft))) goto fail;
    } else if (opts->mode == GEN_DSPARK || opts->mode == GEN_DFLASH) {
        if ((rc = block_model_load(opts->drafter_dir, s->eng.target, &s->eng.block))) goto fail;
    }
    if ((rc = server_load_chat(s))) goto fail;
    if ((rc = calibrate(s))) goto fail;
    if (opts->prefix_cache_entries > 0) {
        struct prefix_cache_opts po = {.max_entries = opts->prefix_cache_entries,
                                       .max_bytes = (size_t)opts->kv_cache_mb << 20,
                                       .spill_dir = opts->prefix_cache_dir,
                                       .spill_max_bytes = (size_t)opts->prefix_cache_dir_mb << 20};
        if ((rc = prefix_cache_new(s->eng.target, &po, &s->eng.cache))) goto fail;
    }
    if (!(s->queue = calloc((size_t)s->opts.max_queue, sizeof *s->queue))) {
        rc = ERR_NOMEM;
        goto fail;
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
        rc = ERR_NOMEM;
        goto fail;
    }
    s->engine_started = 1;
    if ((rc = http_start(s))) goto fail;
    *out = s;
    return OK;
fail:
    server_free(s);
    return rc;
}

int server_port(const struct server *s) {
    return s->port;
}

void server_run(struct server *s) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig;
    sigwait(&set, &sig);
    log_info("signal %d: shutting down", sig);
    (void)s;
}

void server_free(struct server *s) {
    if (!s) return;
    http_stop(s);
    if (s->engine_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->engine_thread, NULL);
    }
    server_free_chat(s);
    prefix_cache_free(s->eng.cache);
    free(s->queue);
    free(s->tune);
    model_free(s->eng.draft);
    block_model_free(s->eng.block);
    model_free(s->eng.target);
    tokenizer_free(s->eng.tok);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
