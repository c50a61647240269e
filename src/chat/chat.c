/* chat/chat.c: loading a model's chat template and special tokens, normalizing OpenAI
 * messages and building the variables apply_chat_template passes: messages, tools (None when
 * absent), documents (None), add_generation_prompt, the special tokens, then the caller's
 * kwargs. Messages are converted to template values directly, so tool-call arguments parsed
 * from their JSON string keep Python's int/float distinction. */
#include "chat/chat.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/log.h"
#include "chat/tpl_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chat {
    struct chat_template *def;      /* the default template (NULL if only named ones) */
    struct chat_template *tool_use; /* "tool_use" of a named list, or NULL */
    cJSON *special;                 /* object: special token name -> text (or list) */
    enum chat_tool_format format;
};

static const char *const SPECIAL[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

/* A token in tokenizer_config.json: "text" or {"content": "text", ...}. */
static const char *token_text(const cJSON *j) {
    if (cJSON_IsString(j)) return j->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int read_special(struct chat *c, const cJSON *cfg) {
    c->special = cJSON_CreateObject();
    if (!c->special) return ERR_NOMEM;
    for (size_t i = 0; cfg && i < sizeof SPECIAL / sizeof *SPECIAL; i++) {
        const char *t = token_text(cJSON_GetObjectItemCaseSensitive(cfg, SPECIAL[i]));
        if (t && !cJSON_AddStringToObject(c->special, SPECIAL[i], t)) return ERR_NOMEM;
    }
    const cJSON *extra =
        cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "additional_special_tokens") : NULL;
    if (cJSON_IsArray(extra)) {
        cJSON *list = cJSON_AddArrayToObject(c->special, "additional_special_tokens");
        if (!list) return ERR_NOMEM;
        for (const cJSON *e = extra->child; e; e = e->next) {
            const char *t = token_text(e);
            if (t) cJSON_AddItemToArray(list, cJSON_CreateString(t));
        }
    }
    return OK;
}

static int parse_one(const char *text, size_t len, struct chat_template **out, char *err,
                     size_t cap) {
    return chat_template_parse(text, len, out, err, cap);
}

/* Sets the templates from tokenizer_config's chat_template (string or named list). */
static int from_config_value(struct chat *c, const cJSON *v, char *err, size_t cap) {
    if (cJSON_IsString(v)) {
        const char *t = v->valuestring;
        c->format = chat_tool_format_of_template(t, strlen(t));
        return parse_one(t, strlen(t), &c->def, err, cap);
    }
    if (!cJSON_IsArray(v)) {
        snprintf(err, cap, "chat_template must be a string or a list of {name, template}");
        return ERR_FORMAT;
    }
    for (const cJSON *e = v->child; e; e = e->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"),
                    *tpl = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(name) || !cJSON_IsString(tpl)) continue;
        struct chat_template **slot = !strcmp(name->valuestring, "default")    ? &c->def
                                      : !strcmp(name->valuestring, "tool_use") ? &c->tool_use
                                                                               : NULL;
        if (!slot || *slot) continue;
        int rc = parse_one(tpl->valuestring, strlen(tpl->valuestring), slot, err, cap);
        if (rc) return rc;
        enum chat_tool_format f =
            chat_tool_format_of_template(tpl->valuestring, strlen(tpl->valuestring));
        if (f != CHAT_TOOLS_NONE && (slot == &c->tool_use || c->format == CHAT_TOOLS_NONE))
            c->format = f;
    }
    if (!c->def && !c->tool_use) {
        snprintf(err, cap, "chat_template lists no \"default\" or \"tool_use\" template");
        return ERR_UNSUPPORTED;
    }
    return OK;
}

int chat_from_text(const char *tpl, size_t len, const char *config, size_t config_len,
                   struct chat **out, char *err, size_t err_cap) {
    *out = NULL;
    struct chat *c = calloc(1, sizeof *c);
    if (!c) return ERR_NOMEM;
    cJSON *cfg = NULL;
    int rc = OK;
    if (config) {
        const char *why = NULL;
        cfg = json_parse(config, config_len, &why);
        if (!cfg) {
            snprintf(err, err_cap, "tokenizer_config.json: %s", why ? why : "invalid JSON");
            rc = ERR_FORMAT;
        }
    }
    if (!rc) rc = read_special(c, cfg);
    if (!rc && tpl) {
        c->format = chat_tool_format_of_template(tpl, len);
        rc = parse_one(tpl, len, &c->def, err, err_cap);
    } else if (!rc) {
        rc = from_config_value(c, cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), err,
                               err_cap);
    }
    cJSON_Delete(cfg);
    if (rc) {
        chat_free(c);
        return rc;
    }
    *out = c;
    return OK;
}

int chat_load(const char *dir, struct chat **out) {
    char path[4096], err[512] = "";
    char *cfg = NULL, *tpl = NULL;
    size_t cfg_len = 0, tpl_len = 0;
    int rc = OK;
    *out = NULL;
    if (fs_join(path, sizeof path, dir, "tokenizer_config.json")) return ERR_ARG;
    if (fs_exists(path) && (rc = fs_read_file(path, &cfg, &cfg_len, (size_t)64 << 20))) {
        log_error("cannot read %s", path);
        return rc;
    }
    if (!fs_join(path, sizeof path, dir, "chat_template.jinja") && fs_exists(path)) {
        if ((rc = fs_read_file(path, &tpl, &tpl_len, (size_t)16 << 20))) {
            log_error("cannot read %s", path);
            free(cfg);
            return rc;
        }
    } else if (!fs_join(path, sizeof path, dir, "chat_template.json") && fs_exists(path)) {
        char *js = NULL;
        size_t js_len = 0;
        cJSON *j = NULL;
        if (!fs_read_file(path, &js, &js_len, (size_t)16 << 20)) j = json_parse(js, js_len, NULL);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
        if (cJSON_IsString(t)) {
            tpl_len = strlen(t->valuestring);
            tpl = malloc(tpl_len + 1);
            if (tpl) memcpy(tpl, t->valuestring, tpl_len + 1);
        }
        cJSON_Delete(j);
        free(js);
    }
    if (!tpl && !(cfg && strstr(cfg, "\"chat_template\""))) {
        log_error("%s has no chat template (chat_template.jinja or tokenizer_config.json "
                  "\"chat_template\")",
                  dir);
        log_hint("use a model folder that ships a chat template, or the raw completions API");
        free(cfg);
        return ERR_UNSUPPORTED;
    }
    rc = chat_from_text(tpl, tpl_len, cfg, cfg_len, out, err, sizeof err);
    if (rc) log_error("%s: chat template: %s", dir, err);
    free(cfg);
    free(tpl);
    return rc;
}

void chat_free(struct chat *c) {
    if (!c) return;
    chat_template_free(c->def);
    chat_template_free(c->tool_use);
    cJSON_Delete(c->special);
    free(c);
}

enum chat_tool_format chat_tool_format(const struct chat *c) {
    return c->format;
}

const char *chat_special_token(const struct chat *c, const char *name) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c->special, name);
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- building the context ---- */

struct build {
    const struct chat *c;
    const struct chat_request *req;
};

static int set_str_key(struct tv *d, const char *key, struct tv v) {
    struct tv k;
    if (tv_str_c(key, &k)) return tv_drop(&v), -1;
    return tv_dict_set(d, k, v, NULL);
}

/* content parts -> joined text (non-text parts dropped); null or missing -> "". */
static int norm_content(const struct tv *content, struct tv *out) {
    if (!content || content->t == TV_NONE) return tv_str_new("", 0, out);
    if (content->t != TV_LIST) {
        *out = tv_ref(*content);
        return 0;
    }
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *buf = NULL;
        if (pass && !(buf = malloc(total + 1))) return -1;
        size_t n = 0;
        for (size_t i = 0; i < content->u.l->n; i++) {
            const struct tv *p = &content->u.l->v[i], *text = NULL;
            if (p->t == TV_STR)
                text = p;
            else if (p->t == TV_DICT) {
                const struct tv *type = tv_dict_get_str(p->u.d, "type", 4);
                const struct tv *tx = tv_dict_get_str(p->u.d, "text", 4);
                if ((!type || (type->t == TV_STR && !strcmp(type->u.s->s, "text"))) && tx &&
                    tx->t == TV_STR)
                    text = tx;
            }
            if (!text) continue;
            if (pass) memcpy(buf + n, text->u.s->s, text->u.s->len);
            n += text->u.s->len;
        }
        total = n;
        if (pass) {
            int rc = tv_str_new(buf, n, out);
            free(buf);
            return rc;
        }
    }
    return -1;
}

/* A copy of dict d with key replaced by v (consumed). */
static int with_key(const struct tv *d, const char *key, struct tv v, struct tv *out) {
    if (tv_dict_new(TD_DICT, d->u.d->n + 1, out)) return tv_drop(&v), -1;
    for (size_t i = 0; i < d->u.d->n; i++)
        if (tv_dict_set(out, tv_ref(d->u.d->k[i]), tv_ref(d->u.d->v[i]), NULL))
            return tv_drop(&v), tv_drop(out), -1;
    return set_str_key(out, key, v) ? (tv_drop(out), -1) : 0;
}

static int norm_tool_calls(const struct tv *calls, struct tv *out) {
    if (tv_list_new(TL_LIST, calls->u.l->n, out)) return -1;
    for (size_t i = 0; i < calls->u.l->n; i++) {
        const struct tv *call = &calls->u.l->v[i];
        struct tv nc = tv_ref(*call);
        const struct tv *fn = call->t == TV_DICT ? tv_dict_get_str(call->u.d, "function", 8) : NULL;
        const struct tv *args =
            fn && fn->t == TV_DICT ? tv_dict_get_str(fn->u.d, "arguments", 9) : NULL;
        struct tv parsed;
        if (args && args->t == TV_STR &&
            !tpl_from_json(args->u.s->s, args->u.s->len, &parsed, NULL)) {
            if (parsed.t == TV_DICT) {
                struct tv nfn;
                tv_drop(&nc);
                if (with_key(fn, "arguments", parsed, &nfn) || with_key(call, "function", nfn, &nc))
                    return tv_drop(out), -1;
            } else {
                tv_drop(&parsed);
            }
        }
        if (tv_list_push(out, nc)) return tv_drop(out), -1;
    }
    return 0;
}

static int norm_messages(const cJSON *messages, struct tv *out, char *err, size_t cap) {
    if (!cJSON_IsArray(messages)) {
        snprintf(err, cap, "messages must be an array");
        return ERR_FORMAT;
    }
    if (tv_list_new(TL_LIST, (size_t)cJSON_GetArraySize(messages), out)) return ERR_NOMEM;
    for (const cJSON *m = messages->child; m; m = m->next) {
        struct tv raw, content, msg;
        if (!cJSON_IsObject(m)) {
            tv_drop(out);
            snprintf(err, cap, "each message must be an object");
            return ERR_FORMAT;
        }
        if (tpl_from_cjson(m, &raw, 1)) {
            tv_drop(out);
            snprintf(err, cap, "a message has invalid UTF-8 or is nested too deeply");
            return ERR_FORMAT;
        }
        int rc = norm_content(tv_dict_get_str(raw.u.d, "content", 7), &content) ||
                 with_key(&raw, "content", content, &msg);
        const struct tv *calls = rc ? NULL : tv_dict_get_str(msg.u.d, "tool_calls", 10);
        if (!rc && calls && calls->t == TV_LIST) {
            struct tv nc, m2;
            rc = norm_tool_calls(calls, &nc) || with_key(&msg, "tool_calls", nc, &m2);
            tv_drop(&msg);
            if (!rc) msg = m2;
        }
        tv_drop(&raw);
        if (rc || tv_list_push(out, msg)) {
            tv_drop(out);
            return ERR_NOMEM;
        }
    }
    return OK;
}

static int build_ctx(void *arg, struct tv *ctx, char *err, size_t cap) {
    const struct build *b = arg;
    const struct chat_request *q = b->req;
    struct tv messages, tools = tv_none(), special = tv_none();
    *ctx = tv_none();
    int rc = norm_messages(q->messages, &messages, err, cap);
    if (rc) return rc;
    if (q->tools && !cJSON_IsNull(q->tools) && tpl_from_cjson(q->tools, &tools, 0)) {
        tv_drop(&messages);
        snprintf(err, cap, "tools has invalid UTF-8 or is nested too deeply");
        return ERR_FORMAT;
    }
    if (tv_dict_new(TD_DICT, 16, ctx) || tpl_from_cjson(b->c->special, &special, 0)) goto oom;
    for (size_t i = 0; i < special.u.d->n; i++)
        if (tv_dict_set(ctx, tv_ref(special.u.d->k[i]), tv_ref(special.u.d->v[i]), NULL)) goto oom;
    tv_drop(&special);
    if (q->thinking != CHAT_THINKING_DEFAULT &&
        set_str_key(ctx, "enable_thinking", tv_bool(q->thinking == CHAT_THINKING_ON)))
        goto oom;
    if (cJSON_IsObject(q->kwargs))
        for (const cJSON *k = q->kwargs->child; k; k = k->next) {
            static const char *const fixed[] = {"messages", "tools", "documents",
                                                "add_generation_prompt"};
            int skip = 0;
            for (size_t i = 0; i < 4; i++) skip |= !strcmp(k->string, fixed[i]);
            struct tv v;
            if (skip) continue;
            if (tpl_from_cjson(k, &v, 1)) {
                snprintf(err, cap, "chat template argument '%s' has invalid UTF-8", k->string);
                tv_drop(&messages);
                tv_drop(&tools);
                tv_drop(ctx);
                return ERR_FORMAT;
            }
            if (set_str_key(ctx, k->string, v)) goto oom;
        }
    if (set_str_key(ctx, "messages", messages)) {
        tv_drop(&tools);
        goto oom_ctx;
    }
    if (set_str_key(ctx, "tools", tools) || set_str_key(ctx, "documents", tv_none()) ||
        set_str_key(ctx, "add_generation_prompt", tv_bool(q->add_generation_prompt)))
        goto oom_ctx;
    return OK;
oom:
    tv_drop(&special);
    tv_drop(&messages);
    tv_drop(&tools);
oom_ctx:
    tv_drop(ctx);
    snprintf(err, cap, "out of memory");
    return ERR_NOMEM;
}

int chat_render(const struct chat *c, const struct chat_request *req, char **out, size_t *out_len,
                char *err, size_t err_cap) {
    int has_tools = cJSON_IsArray(req->tools) && cJSON_GetArraySize(req->tools) > 0;
    const struct chat_template *t = has_tools && c->tool_use ? c->tool_use : c->def;
    *out = NULL;
    if (!t) {
        snprintf(err, err_cap, "the model's chat templates have no \"default\" template");
        return ERR_UNSUPPORTED;
    }
    struct build b = {c, req};
    return tpl_render_built(t, build_ctx, &b, req->opts, out, out_len, err, err_cap);
}
