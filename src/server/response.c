/* server/response.c: runs a job on the engine thread and writes the OpenAI response: one JSON
 * body, or SSE events (a role delta, content deltas as tokens commit, a final chunk with
 * finish_reason, usage when asked, then [DONE]). Every response carries usage and x_dspark. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/json.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct choice_run {
    struct server *s;
    struct job *j;
    int index;
    cJSON *lp_content; /* chat logprobs entries, or completions' arrays */
    cJSON *lp_tokens, *lp_token_logprobs, *lp_top;
};

/* A token's text for logprobs: its bytes, with invalid UTF-8 replaced. */
static char *token_text(struct server *s, int32_t id, cJSON **bytes) {
    char *t = NULL;
    size_t n = 0;
    if (tokenizer_decode(s->eng.tok, &id, 1, &t, &n)) return strdup("");
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
            cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((unsigned char)t[i]));
    }
    if (!utf8_valid(t, n))
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)t[i] >= 0x80) t[i] = '?';
    return t;
}

static cJSON *chat_lp_entry(struct server *s, int32_t id, float lp) {
    cJSON *e = cJSON_CreateObject(), *bytes;
    char *t = token_text(s, id, &bytes);
    cJSON_AddStringToObject(e, "token", t);
    cJSON_AddNumberToObject(e, "logprob", lp);
    cJSON_AddItemToObject(e, "bytes", bytes);
    free(t);
    return e;
}

static void add_logprobs(struct choice_run *c, int32_t id, const struct logprobs *lp) {
    struct server *s = c->s;
    if (c->j->chat) {
        cJSON *e = chat_lp_entry(s, id, lp->chosen);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int i = 0; i < lp->n_top; i++)
            cJSON_AddItemToArray(top, chat_lp_entry(s, lp->top_ids[i], lp->top[i]));
        cJSON_AddItemToArray(c->lp_content, e);
        return;
    }
    char *t = token_text(s, id, NULL);
    cJSON_AddItemToArray(c->lp_tokens, cJSON_CreateString(t));
    free(t);
    cJSON_AddItemToArray(c->lp_token_logprobs, cJSON_CreateNumber(lp->chosen));
    cJSON *top = cJSON_CreateObject();
    for (int i = 0; i < lp->n_top; i++) {
        char *tt = token_text(s, lp->top_ids[i], NULL);
        if (!cJSON_GetObjectItemCaseSensitive(top, tt))
            cJSON_AddNumberToObject(top, tt, lp->top[i]);
        free(tt);
    }
    cJSON_AddItemToArray(c->lp_top, top);
}

static cJSON *logprobs_json(struct choice_run *c) {
    if (!c->j->logprobs) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    if (c->j->chat) {
        cJSON_AddItemToObject(o, "content", c->lp_content);
    } else {
        cJSON_AddItemToObject(o, "tokens", c->lp_tokens);
        cJSON_AddItemToObject(o, "token_logprobs", c->lp_token_logprobs);
        cJSON_AddItemToObject(o, "top_logprobs", c->lp_top);
    }
    c->lp_content = c->lp_tokens = c->lp_token_logprobs = c->lp_top = NULL;
    return o;
}

static void reset_logprobs(struct choice_run *c) {
    cJSON_Delete(c->lp_content);
    cJSON_Delete(c->lp_tokens);
    cJSON_Delete(c->lp_token_logprobs);
    cJSON_Delete(c->lp_top);
    c->lp_content = c->lp_tokens = c->lp_token_logprobs = c->lp_top = NULL;
    if (!c->j->logprobs) return;
    if (c->j->chat) {
        c->lp_content = cJSON_CreateArray();
    } else {
        c->lp_tokens = cJSON_CreateArray();
        c->lp_token_logprobs = cJSON_CreateArray();
        c->lp_top = cJSON_CreateArray();
    }
}

static cJSON *envelope(const struct job *j, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object",
                            j->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                    : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model);
    return o;
}

static void send_event(struct job *j, cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return;
    job_write(j, "data: ", 6);
    job_write(j, t, strlen(t));
    job_write(j, "\n\n", 2);
    free(t);
}

/* A streamed chunk with one choice: delta text (chat) or text (completions). */
static void send_delta(struct choice_run *c, const char *text, size_t len, const char *role,
                       const char *finish, cJSON *extra_delta) {
    struct job *j = c->j;
    cJSON *o = envelope(j, 1);
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", c->index);
    char *t = strndup(text ? text : "", len);
    if (j->chat) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (role) cJSON_AddStringToObject(d, "role", role);
        if (len) cJSON_AddStringToObject(d, "content", t);
        if (extra_delta) cJSON_AddItemToObject(d, "tool_calls", extra_delta);
    } else {
        cJSON_AddStringToObject(ch, "text", t);
    }
    free(t);
    cJSON_AddItemToObject(ch, "logprobs", logprobs_json(c));
    reset_logprobs(c);
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    send_event(j, o);
}

static int on_token(void *ctx, int32_t id, const char *text, size_t len,
                    const struct logprobs *lp) {
    struct choice_run *c = ctx;
    if (lp && c->j->logprobs) add_logprobs(c, id, lp);
    if (c->j->stream && !c->j->tools && (len || (lp && c->j->logprobs)))
        send_delta(c, text, len, NULL, NULL, NULL);
    return atomic_load(&c->j->cancelled);
}

static cJSON *x_dspark(const struct server *s, const struct gen_stats *st) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "mode", gen_mode_name(s->opts.mode));
    cJSON_AddNumberToObject(x, "accept_len", st->rounds ? (double)st->n_generated / st->rounds : 0);
    cJSON_AddNumberToObject(x, "tokens_per_sec",
                            st->decode_s > 0 ? st->n_generated / st->decode_s : 0);
    cJSON_AddNumberToObject(x, "target_forwards", st->target_forwards);
    cJSON_AddNumberToObject(x, "drafted", st->drafted);
    cJSON_AddNumberToObject(x, "accepted", st->accepted);
    cJSON_AddNumberToObject(x, "lookup_rounds", st->lookup_rounds);
    if (s->opts.load_aware) cJSON_AddNumberToObject(x, "load_aware_cut", st->load_aware_cut);
    cJSON_AddNumberToObject(x, "prefill_s", st->prefill_s);
    cJSON_AddNumberToObject(x, "cached_tokens", st->cached_tokens);
    cJSON_AddNumberToObject(x, "decode_s", st->decode_s);
    if (s->tune) { /* --max-draft auto: the cap chosen, the rounds at each cap, predictions */
        cJSON *a = cJSON_AddObjectToObject(x, "auto_draft");
        cJSON_AddNumberToObject(a, "cap", st->auto_cap);
        cJSON_AddNumberToObject(a, "acceptance", st->auto_accept);
        cJSON *rounds = cJSON_AddObjectToObject(a, "cap_rounds");
        cJSON *rates = cJSON_AddObjectToObject(a, "predicted_tok_s");
        char k[16];
        for (int i = 0; i <= s->tune->costs.max_cap; i++) {
            snprintf(k, sizeof k, "%d", i);
            if (st->cap_rounds[i]) cJSON_AddNumberToObject(rounds, k, st->cap_rounds[i]);
            cJSON_AddNumberToObject(rates, k, st->auto_rates[i]);
        }
    }
    return x;
}

static cJSON *usage(int prompt, int completion, int cached) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
                            cached);
    return u;
}

static void add_stats(struct gen_stats *sum, const struct gen_stats *st) {
    if (st->cached_tokens > sum->cached_tokens) sum->cached_tokens = st->cached_tokens;
    sum->n_generated += st->n_generated;
    sum->rounds += st->rounds;
    sum->target_forwards += st->target_forwards;
    sum->drafted += st->drafted;
    sum->accepted += st->accepted;
    sum->lookup_rounds += st->lookup_rounds;
    sum->load_aware_cut += st->load_aware_cut;
    sum->prefill_s += st->prefill_s;
    sum->decode_s += st->decode_s;
    for (int k = 0; k <= GEN_MAX_CAP; k++) { /* the caps used by all; the last one's state */
        sum->cap_rounds[k] += st->cap_rounds[k];
        sum->auto_rates[k] = st->auto_rates[k];
    }
    sum->auto_cap = st->auto_cap;
    sum->auto_accept = st->auto_accept;
}

/* Builds the finished choice: message (content / tool_calls) or text. */
static cJSON *final_choice(struct choice_run *c, const struct gen_result *r, const char **fin) {
    struct job *j = c->j;
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", c->index);
    *fin = r->finish == GEN_FINISH_STOP ? "stop" : "length";
    if (!j->chat) {
        cJSON_AddStringToObject(ch, "text", r->text ? r->text : "");
        cJSON_AddItemToObject(ch, "logprobs", logprobs_json(c));
        cJSON_AddStringToObject(ch, "finish_reason", *fin);
        return ch;
    }
    cJSON *msg = cJSON_AddObjectToObject(ch, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    char *content = NULL;
    cJSON *calls = NULL;
    if (j->tools)
        server_parse_tools(c->s, r->text ? r->text : "", &content, &calls);
    else
        content = strdup(r->text ? r->text : "");
    if (content)
        cJSON_AddStringToObject(msg, "content", content);
    else
        cJSON_AddNullToObject(msg, "content");
    if (calls) {
        cJSON_AddItemToObject(msg, "tool_calls", calls);
        *fin = "tool_calls";
    }
    free(content);
    cJSON_AddItemToObject(ch, "logprobs", logprobs_json(c));
    cJSON_AddStringToObject(ch, "finish_reason", *fin);
    return ch;
}

/* Streams the end of choice i: buffered tool calls, then the finish_reason chunk. */
static void stream_choice_end(struct choice_run *c, const struct gen_result *r) {
    struct job *j = c->j;
    const char *fin;
    cJSON *ch = final_choice(c, r, &fin);
    cJSON *msg = cJSON_GetObjectItem(ch, "message");
    cJSON *calls = msg ? cJSON_DetachItemFromObject(msg, "tool_calls") : NULL;
    if (j->tools) { /* tool requests are buffered: send the parsed content and calls at once */
        const cJSON *content = cJSON_GetObjectItem(msg, "content");
        const char *txt = cJSON_IsString(content) ? content->valuestring : "";
        if (*txt || calls) send_delta(c, txt, strlen(txt), NULL, NULL, calls);
    }
    cJSON_Delete(ch);
    cJSON *o = envelope(j, 1);
    cJSON *fc = cJSON_CreateObject();
    cJSON_AddNumberToObject(fc, "index", c->index);
    if (j->chat)
        cJSON_AddObjectToObject(fc, "delta");
    else
        cJSON_AddStringToObject(fc, "text", "");
    cJSON_AddNullToObject(fc, "logprobs");
    cJSON_AddStringToObject(fc, "finish_reason", fin);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), fc);
    cJSON_AddItemToObject(o, "x_dspark", x_dspark(c->s, &r->stats));
    send_event(j, o);
}

/* A job's generations: n choices, each a sequence the engine steps (possibly batched with
 * other jobs' sequences), with seeds seed, seed+1, ... */
struct job_run {
    struct choice_run c[JOB_MAX_CHOICES];
    struct gen_params gp[JOB_MAX_CHOICES];
    struct gen_seq *seq[JOB_MAX_CHOICES];
};

static void fail_job(struct job *j, int status) {
    char *e = oa_error_body("generation failed", "server_error", "internal_error");
    if (j->stream) job_write(j, "data: ", 6);
    if (e) job_write(j, e, strlen(e));
    if (j->stream) job_write(j, "\n\n", 2);
    free(e);
    job_finish(j, status);
}

static void free_run(struct job *j) {
    struct job_run *run = j->run;
    if (!run) return;
    for (int i = 0; i < j->n_choices; i++) {
        gen_seq_free(run->seq[i]);
        struct choice_run *c = &run->c[i];
        cJSON_Delete(c->lp_content), cJSON_Delete(c->lp_tokens);
        cJSON_Delete(c->lp_token_logprobs), cJSON_Delete(c->lp_top);
    }
    free(run);
    j->run = NULL;
}

int oa_job_start(struct server *s, struct job *j) {
    struct job_run *run = calloc(1, sizeof *run);
    if (!run) {
        fail_job(j, 503);
        return ERR_NOMEM;
    }
    j->run = run;
    for (int i = 0; i < j->n_choices; i++) {
        struct choice_run *c = &run->c[i];
        *c = (struct choice_run){.s = s, .j = j, .index = i};
        reset_logprobs(c);
        run->gp[i] = j->gp;
        run->gp[i].sp.seed += (uint64_t)i;
        if (j->stream && j->chat) send_delta(c, NULL, 0, "assistant", NULL, NULL);
        int rc = gen_seq_start(&s->eng, j->prompt, j->n_prompt, &run->gp[i], on_token, c,
                               &run->seq[i]); /* the engine loop runs the prefill */
        if (rc) {
            free_run(j);
            fail_job(j, rc == ERR_NOMEM ? 503 : 500);
            return rc;
        }
    }
    return OK;
}

int oa_job_seqs(struct job *j, struct gen_seq **out) {
    struct job_run *run = j->run;
    int n = 0;
    for (int i = 0; run && i < j->n_choices; i++)
        if (!gen_seq_done(run->seq[i])) out[n++] = run->seq[i];
    return n;
}

void oa_job_abort(struct job *j, int status) {
    free_run(j);
    fail_job(j, status);
}

void oa_job_complete(struct server *s, struct job *j) {
    struct job_run *run = j->run;
    struct gen_stats sum = {0};
    cJSON *body = j->stream ? NULL : envelope(j, 0);
    cJSON *choices = body ? cJSON_AddArrayToObject(body, "choices") : NULL;
    for (int i = 0; i < j->n_choices; i++) {
        struct choice_run *c = &run->c[i];
        struct gen_result r;
        gen_seq_finish(run->seq[i], &r); /* emits the text it held back */
        run->seq[i] = NULL;
        metrics_record(s, &r.stats);
        add_stats(&sum, &r.stats);
        if (j->stream) {
            stream_choice_end(c, &r);
        } else {
            const char *fin;
            cJSON_AddItemToArray(choices, final_choice(c, &r, &fin));
        }
        gen_result_free(&r);
    }
    free_run(j);
    /* its sequences are in the prefix cache now: a client that reads /metrics after this
     * response sees them */
    pthread_mutex_lock(&s->mu);
    metrics_cache(s);
    pthread_mutex_unlock(&s->mu);
    if (j->stream) {
        if (j->include_usage) {
            cJSON *o = envelope(j, 1);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage",
                                  usage(j->n_prompt, sum.n_generated, sum.cached_tokens));
            send_event(j, o);
        }
        job_write(j, "data: [DONE]\n\n", 14);
    } else {
        cJSON_AddItemToObject(body, "usage",
                              usage(j->n_prompt, sum.n_generated, sum.cached_tokens));
        cJSON_AddItemToObject(body, "x_dspark", x_dspark(s, &sum));
        char *t = cJSON_PrintUnformatted(body);
        cJSON_Delete(body);
        if (t) job_write(j, t, strlen(t));
        free(t);
    }
    job_finish(j, 200);
}

char *oa_error_body(const char *message, const char *type, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}
