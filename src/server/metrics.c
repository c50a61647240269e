/* server/metrics.c: counters for GET /metrics in the Prometheus text format. */
#include "server/server_impl.h"

#include "cache/prefix.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void metrics_cache(struct server *s) {
    if (!s->eng.cache) return;
    struct prefix_stats ps = prefix_cache_stats(s->eng.cache);
    struct metrics *m = &s->m;
    m->cache_hits = ps.hits, m->cache_misses = ps.misses;
    m->cache_reused_tokens = ps.reused_tokens, m->cache_shared_tokens = ps.shared_tokens;
    m->cache_bytes = (long)ps.bytes, m->cache_deduped_tokens = ps.deduped_tokens;
    m->cache_trimmed_tokens = ps.trimmed_tokens;
    m->spill_writes = ps.spill_writes, m->spill_reads = ps.spill_reads;
    m->spill_rejects = ps.spill_rejects, m->spill_bytes = (long)ps.spill_bytes;
    m->spill_dropped = ps.spill_dropped, m->spill_pending = (long)ps.spill_pending;
}

void metrics_record(struct server *s, const struct gen_stats *st) {
    pthread_mutex_lock(&s->mu);
    struct metrics *m = &s->m;
    m->prompt_tokens += st->n_prompt;
    m->completion_tokens += st->n_generated;
    m->target_forwards += st->target_forwards;
    m->rounds += st->rounds;
    m->lookup_rounds += st->lookup_rounds;
    m->accepted += st->accepted;
    m->drafted += st->drafted;
    m->load_aware_cut += st->load_aware_cut;
    m->decode_seconds += st->decode_s;
    if (st->decode_s > 0) m->last_tokens_per_sec = st->n_generated / st->decode_s;
    for (int i = 0; i < METRICS_ACCEPT_BUCKETS && i < GEN_ACCEPT_BUCKETS; i++)
        m->accept_hist[i] += st->accept_hist[i];
    if (s->tune) {
        for (int k = 0; k <= GEN_MAX_CAP; k++) {
            m->cap_rounds[k] += st->cap_rounds[k];
            m->auto_rates[k] = st->auto_rates[k];
        }
        m->auto_cap = st->auto_cap;
        m->auto_accept = st->auto_accept;
    }
    pthread_mutex_unlock(&s->mu);
}

void metrics_round(struct server *s, int n_seqs) {
    int b = 0;
    while (b < METRICS_BATCH_BUCKETS - 1 && (1 << b) < n_seqs) b++;
    s->m.batch_hist[b]++;
}

struct out {
    char *buf;
    size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (o->len + (size_t)n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->len + (size_t)n + 1) cap *= 2;
        char *b = realloc(o->buf, cap);
        if (!b) return;
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, line, (size_t)n + 1);
    o->len += (size_t)n;
}

static void counter(struct out *o, const char *name, const char *help, long v) {
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %ld\n", name, help, name, name, v);
}

static void gauge(struct out *o, const char *name, const char *help, double v) {
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v);
}

char *metrics_render(struct server *s) {
    struct out o = {0};
    pthread_mutex_lock(&s->mu);
    struct metrics m = s->m;
    int queued = s->q_len, running = s->running;
    pthread_mutex_unlock(&s->mu);
    put(&o,
        "# HELP dspark_requests_total Completion requests by outcome.\n"
        "# TYPE dspark_requests_total counter\n"
        "dspark_requests_total{outcome=\"ok\"} %ld\n"
        "dspark_requests_total{outcome=\"error\"} %ld\n",
        m.requests_ok, m.requests_err);
    counter(&o, "dspark_prompt_tokens_total", "Prompt tokens processed.", m.prompt_tokens);
    counter(&o, "dspark_completion_tokens_total", "Tokens generated.", m.completion_tokens);
    counter(&o, "dspark_target_forwards_total", "Forward passes of the target model.",
            m.target_forwards);
    counter(&o, "dspark_lookup_rounds_total", "Rounds drafted by n-gram lookup.", m.lookup_rounds);
    counter(&o, "dspark_draft_tokens_total", "Draft tokens verified.", m.drafted);
    counter(&o, "dspark_load_aware_cut_total",
            "Draft tokens load-aware verification left out of batched passes.", m.load_aware_cut);
    counter(&o, "dspark_accepted_tokens_total", "Draft tokens accepted.", m.accepted);
    put(&o, "# HELP dspark_accepted_length Drafts accepted per verify round.\n"
            "# TYPE dspark_accepted_length histogram\n");
    long cum = 0, sum = 0;
    for (int i = 0; i < METRICS_ACCEPT_BUCKETS - 1; i++) {
        cum += m.accept_hist[i];
        sum += (long)i * m.accept_hist[i];
        put(&o, "dspark_accepted_length_bucket{le=\"%d\"} %ld\n", i, cum);
    }
    cum += m.accept_hist[METRICS_ACCEPT_BUCKETS - 1];
    put(&o, "dspark_accepted_length_bucket{le=\"+Inf\"} %ld\n", cum);
    put(&o, "dspark_accepted_length_sum %ld\ndspark_accepted_length_count %ld\n",
        sum + (long)(METRICS_ACCEPT_BUCKETS - 1) * m.accept_hist[METRICS_ACCEPT_BUCKETS - 1], cum);
    gauge(&o, "dspark_decode_tokens_per_second", "Decode speed of the last generation.",
          m.last_tokens_per_sec);
    gauge(&o, "dspark_mean_tokens_per_second", "Tokens generated over decode time, all requests.",
          m.decode_seconds > 0 ? m.completion_tokens / m.decode_seconds : 0);
    counter(&o, "dspark_prefix_cache_hits_total", "Requests that reused a cached prefix.",
            m.cache_hits);
    counter(&o, "dspark_prefix_cache_misses_total", "Requests with no cached prefix.",
            m.cache_misses);
    counter(&o, "dspark_prefix_cache_reused_tokens_total", "Prompt tokens not prefilled.",
            m.cache_reused_tokens);
    gauge(&o, "dspark_kv_pool_bytes",
          "K/V memory the running requests may hold (their prompt and max_tokens, less the "
          "cached prefix pages they share).",
          m.kv_pool_bytes);
    counter(&o, "dspark_kv_pool_waits_total", "Requests that waited for room in --kv-pool-mb.",
            m.kv_pool_waits);
    counter(&o, "dspark_prefix_cache_shared_tokens_total",
            "Reused tokens whose rows a sequence reads from a cache entry instead of a copy.",
            m.cache_shared_tokens);
    counter(&o, "dspark_prefix_cache_deduped_tokens_total",
            "Tokens of finished requests stored in pages a cache entry already held (computed "
            "apart, the same bits).",
            m.cache_deduped_tokens);
    counter(&o, "dspark_prefix_cache_trimmed_tokens_total",
            "Tokens the least recently used cache entries gave up, last pages first, to stay "
            "under --kv-cache-mb.",
            m.cache_trimmed_tokens);
    gauge(&o, "dspark_prefix_cache_bytes", "Memory held by the prefix cache.",
          (double)m.cache_bytes);
    counter(&o, "dspark_prefix_cache_spill_writes_total",
            "Prefix cache entries saved to --prefix-cache-dir.", m.spill_writes);
    counter(&o, "dspark_prefix_cache_spill_reads_total",
            "Prefix cache entries loaded from --prefix-cache-dir.", m.spill_reads);
    counter(&o, "dspark_prefix_cache_spill_rejects_total",
            "Files in --prefix-cache-dir deleted because a check failed.", m.spill_rejects);
    counter(&o, "dspark_prefix_cache_spill_dropped_total",
            "Entries not saved: too much was waiting for the disk, or writing failed.",
            m.spill_dropped);
    gauge(&o, "dspark_prefix_cache_spill_bytes", "Disk held by the prefix cache's files.",
          (double)m.spill_bytes);
    gauge(&o, "dspark_prefix_cache_spill_pending_bytes",
          "KV rows of evicted entries waiting to be written.", (double)m.spill_pending);
    counter(&o, "dspark_prefill_chunks_total", "Prefill passes run by the engine.",
            m.prefill_chunks);
    put(&o, "# HELP dspark_batch_size Sequences stepped together per engine round.\n"
            "# TYPE dspark_batch_size histogram\n");
    long bcum = 0, bsum = 0;
    for (int i = 0; i < METRICS_BATCH_BUCKETS; i++) {
        bcum += m.batch_hist[i];
        bsum += (1L << i) * m.batch_hist[i]; /* bucket upper bounds: an upper estimate */
        put(&o, "dspark_batch_size_bucket{le=\"%d\"} %ld\n", 1 << i, bcum);
    }
    put(&o, "dspark_batch_size_bucket{le=\"+Inf\"} %ld\n", bcum);
    put(&o, "dspark_batch_size_sum %ld\ndspark_batch_size_count %ld\n", bsum, bcum);
    put(&o,
        "# HELP dspark_queue_seconds Time requests waited for the engine.\n"
        "# TYPE dspark_queue_seconds summary\n"
        "dspark_queue_seconds_sum %g\ndspark_queue_seconds_count %ld\n",
        m.queue_seconds, m.queued_jobs);
    gauge(&o, "dspark_queue_depth", "Requests waiting for the engine.", queued);
    if (s->tune) { /* --max-draft auto */
        int B = s->tune->costs.max_cap;
        put(&o, "# HELP dspark_auto_draft_rounds_total Verify rounds by the draft cap in force.\n"
                "# TYPE dspark_auto_draft_rounds_total counter\n");
        for (int k = 0; k <= B; k++)
            put(&o, "dspark_auto_draft_rounds_total{cap=\"%d\"} %ld\n", k, m.cap_rounds[k]);
        gauge(&o, "dspark_auto_draft_cap", "Draft cap chosen at the end of the last generation.",
              m.auto_cap);
        gauge(&o, "dspark_auto_draft_acceptance",
              "Share of drafts kept, as the last generation's controller estimated it.",
              m.auto_accept);
        put(&o, "# HELP dspark_auto_draft_predicted_tokens_per_second Predicted decode speed by "
                "draft cap, from the calibration and the last generation's acceptance.\n"
                "# TYPE dspark_auto_draft_predicted_tokens_per_second gauge\n");
        for (int k = 0; k <= B; k++)
            put(&o, "dspark_auto_draft_predicted_tokens_per_second{cap=\"%d\"} %g\n", k,
                m.auto_rates[k]);
    }
    gauge(&o, "dspark_requests_running", "Requests the engine is generating.", running);
    return o.buf;
}
