/* server/request.c: an OpenAI request body → a job. Checks every field's type and range,
 * rejects unknown fields (naming them), applies the defaults (request > server flags >
 * generation_config.json > greedy), renders chat messages with the model's template and
 * tokenizes the prompt, and refuses prompts that do not fit the context. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/json.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct req_err {
    int *status;
    char *msg;
    size_t cap;
};

static int fail(struct req_err *e, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct req_err *e, int status, const char *fmt, ...) {
    *e->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->cap, fmt, ap);
    va_end(ap);
    return ERR_ARG;
}

static const char *const chat_fields[] = {"model",
                                          "messages",
                                          "max_tokens",
                                          "max_completion_tokens",
                                          "temperature",
                                          "top_p",
                                          "top_k",
                                          "seed",
                                          "stop",
                                          "n",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "logprobs",
                                          "top_logprobs",
                                          "stream",
                                          "stream_options",
                                          "tools",
                                          "tool_choice",
                                          "chat_template_kwargs",
                                          "enable_thinking",
                                          "user",
                                          "metadata",
                                          "store",
                                          "parallel_tool_calls",
                                          "service_tier",
                                          "response_format",
                                          "logit_bias",
                                          "reasoning_effort",
                                          NULL};
static const char *const completion_fields[] = {"model",
                                                "prompt",
                                                "max_tokens",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "seed",
                                                "stop",
                                                "n",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "logprobs",
                                                "stream",
                                                "stream_options",
                                                "user",
                                                "echo",
                                                "suffix",
                                                "best_of",
                                                "logit_bias",
                                                NULL};

static int known(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

/* Number field in [lo, hi]; absent or null leaves *out alone. */
static int num(const cJSON *root, const char *k, double lo, double hi, double *out,
               struct req_err *e) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, k);
    if (!j || cJSON_IsNull(j)) return OK;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble < lo ||
        j->valuedouble > hi) {
        return fail(e, 400, "'%s' must be a number in [%g, %g]", k, lo, hi);
    }
    *out = j->valuedouble;
    return OK;
}

static int boolean(const cJSON *root, const char *k, int *out, struct req_err *e) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, k);
    if (!j || cJSON_IsNull(j)) return OK;
    if (!cJSON_IsBool(j)) return fail(e, 400, "'%s' must be true or false", k);
    *out = cJSON_IsTrue(j);
    return OK;
}

static int parse_stop(const cJSON *root, struct job *j, struct req_err *e) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!st || cJSON_IsNull(st)) return OK;
    if (cJSON_IsString(st)) {
        if (*st->valuestring && !(j->stop[j->gp.n_stop++] = strdup(st->valuestring)))
            return ERR_NOMEM;
        return OK;
    }
    if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) > JOB_MAX_STOP)
        return fail(e, 400, "'stop' must be a string or a list of at most %d strings",
                    JOB_MAX_STOP);
    for (const cJSON *it = st->child; it; it = it->next) {
        if (!cJSON_IsString(it)) return fail(e, 400, "'stop' entries must be strings");
        if (*it->valuestring && !(j->stop[j->gp.n_stop++] = strdup(it->valuestring)))
            return ERR_NOMEM;
    }
    return OK;
}

/* Completions: a string, a list whose first entry is used, or token ids. */
static int completion_prompt(struct server *s, const cJSON *p, struct job *j, struct req_err *e) {
    if (cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;
    if (cJSON_IsString(p)) {
        if (tokenizer_encode(s->eng.tok, p->valuestring, strlen(p->valuestring), &j->prompt,
                             &j->n_prompt))
            return fail(e, 400, "the prompt could not be tokenized");
        return OK;
    }
    if (!cJSON_IsArray(p) || !p->child)
        return fail(e, 400, "'prompt' must be a string, a list of strings or token ids");
    int n = cJSON_GetArraySize(p);
    if (!(j->prompt = malloc(sizeof(int32_t) * (size_t)n))) return ERR_NOMEM;
    for (const cJSON *it = p->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= s->cfg->vocab_size ||
            it->valuedouble != floor(it->valuedouble))
            return fail(e, 400, "'prompt' token ids must be integers in the vocabulary");
        j->prompt[j->n_prompt++] = (int32_t)it->valuedouble;
    }
    return OK;
}

static int chat_prompt(struct server *s, const cJSON *root, struct job *j, struct req_err *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return fail(e, 400, "'messages' must be a non-empty list");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return fail(e, 400, "'tools' must be a list");
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) tools = NULL;
    if (cJSON_IsArray(tools) && !tools->child) tools = NULL;
    j->tools = tools != NULL;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return fail(e, 400, "'chat_template_kwargs' must be an object");
    int thinking = s->opts.thinking;
    if (boolean(root, "enable_thinking", &thinking, e)) return ERR_ARG;
    char *text = NULL, msg[512] = "";
    int rc = server_render_chat(s, msgs, tools, kw, thinking, &text, msg, sizeof msg);
    if (rc) {
        free(text);
        return fail(e, 400, "chat template: %s", msg);
    }
    rc = tokenizer_encode(s->eng.tok, text, strlen(text), &j->prompt, &j->n_prompt);
    free(text);
    return rc ? fail(e, 400, "the rendered prompt could not be tokenized") : OK;
}

static int sampling(struct server *s, const cJSON *root, struct job *j, struct req_err *e) {
    const struct hf_config *c = s->cfg;
    const struct server_opts *o = &s->opts;
    double t =
        o->default_temperature >= 0 ? o->default_temperature : (c->do_sample ? c->temperature : 0);
    double p = o->default_top_p >= 0 ? o->default_top_p : (c->do_sample ? c->top_p : 1);
    double k = o->default_top_k >= 0 ? o->default_top_k : (c->do_sample ? c->top_k : 0);
    double seed = 0, pp = 0, fp = 0, n = 1, top = 0;
    double max = o->default_max_tokens;
    int rc;
    if ((rc = num(root, "temperature", 0, 2, &t, e)) || (rc = num(root, "top_p", 0, 1, &p, e)) ||
        (rc = num(root, "top_k", -1, 1 << 24, &k, e)) ||
        (rc = num(root, "seed", -9.2e18, 9.2e18, &seed, e)) ||
        (rc = num(root, "presence_penalty", -2, 2, &pp, e)) ||
        (rc = num(root, "frequency_penalty", -2, 2, &fp, e)) ||
        (rc = num(root, "n", 1, 8, &n, e)) || (rc = num(root, "max_tokens", 1, 1e12, &max, e)) ||
        (rc = num(root, "max_completion_tokens", 1, 1e12, &max, e)))
        return rc;
    j->gp.sp = (struct sample_params){.temperature = (float)t,
                                      .top_p = (float)p,
                                      .top_k = (int)k,
                                      .presence_penalty = (float)pp,
                                      .frequency_penalty = (float)fp,
                                      .seed = (uint64_t)(int64_t)seed};
    j->n_choices = (int)n;
    if (max > o->max_tokens_cap) max = o->max_tokens_cap;
    j->gp.max_tokens = (int)max;
    /* logprobs: chat says `logprobs: true, top_logprobs: N`; completions `logprobs: N` */
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (j->chat) {
        if ((rc = boolean(root, "logprobs", &j->logprobs, e)) ||
            (rc = num(root, "top_logprobs", 0, LOGPROBS_MAX_TOP, &top, e)))
            return rc;
    } else if (lp && !cJSON_IsNull(lp)) {
        if ((rc = num(root, "logprobs", 0, LOGPROBS_MAX_TOP, &top, e))) return rc;
        j->logprobs = 1;
    }
    j->gp.top_logprobs = j->logprobs ? (int)top : -1;
    return OK;
}

int oa_parse_request(struct server *s, const char *body, size_t len, int chat, struct job *j,
                     int *status, char *err, size_t err_cap) {
    struct req_err e = {status, err, err_cap};
    const char *why = "";
    cJSON *root = json_parse(body, len, &why);
    int rc = OK;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(&e, 400, "the request body is not a JSON object (%s)", why);
    }
    j->chat = chat;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!known(chat ? chat_fields : completion_fields, it->string)) {
            rc = fail(&e, 400, "unknown field '%.64s'", it->string);
            goto done;
        }
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model) || (strcmp(model->valuestring, s->model_name) &&
                                       strcmp(model->valuestring, s->opts.model_dir))) {
            rc = fail(&e, 404, "model '%.100s' does not exist",
                      cJSON_IsString(model) ? model->valuestring : "?");
            goto done;
        }
    }
    snprintf(j->model, sizeof j->model, "%s", s->model_name);
    if ((rc = boolean(root, "stream", &j->stream, &e))) goto done;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (cJSON_IsObject(so) && (rc = boolean(so, "include_usage", &j->include_usage, &e))) goto done;
    if ((rc = sampling(s, root, j, &e)) || (rc = parse_stop(root, j, &e))) goto done;
    if (j->stream && j->n_choices > 1) {
        rc = fail(&e, 400, "'n' > 1 cannot be combined with 'stream'");
        goto done;
    }
    if (chat) {
        rc = chat_prompt(s, root, j, &e);
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        rc = p ? completion_prompt(s, p, j, &e) : fail(&e, 400, "'prompt' is required");
    }
    if (rc) goto done;
    if (j->n_prompt < 1) {
        rc = fail(&e, 400, "the prompt is empty");
        goto done;
    }
    if (j->n_prompt >= s->cfg->max_pos) {
        rc = fail(&e, 400, "the prompt has %d tokens; the model's context is %d", j->n_prompt,
                  s->cfg->max_pos);
        goto done;
    }
    if (j->gp.max_tokens > s->cfg->max_pos - j->n_prompt)
        j->gp.max_tokens = s->cfg->max_pos - j->n_prompt;
    j->gp.stop = (const char *const *)j->stop;
    j->gp.mode = s->opts.mode;
    j->gp.max_draft = s->opts.max_draft;
    j->gp.lookup_drafts = s->opts.lookup_drafts;
    j->gp.tune = s->opts.auto_draft ? s->tune : NULL;
    j->gp.load_aware = s->opts.load_aware && s->tune ? &s->tune->costs : NULL;
done:
    cJSON_Delete(root);
    if (rc == ERR_NOMEM) fail(&e, 500, "out of memory");
    return rc;
}
