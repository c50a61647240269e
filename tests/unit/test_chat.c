/* tests/unit/test_chat.c: chat templates against Python jinja2. Every template of
 * ../shared/templates (skipped when ../shared is absent) and models/pycoder's template render
 * every conversation of tests/data/chat/conversations.jsonl; the output must equal, byte for
 * byte, what tools/chat_golden.py got from jinja2 with transformers' settings, and where
 * jinja2 raised the render must fail too (with the same message for raise_exception). Also
 * the model-level API (chat_load, chat_render and its message normalization). */
#include "test.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/log.h"
#include "chat/chat.h"
#include "chat/template.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA "tests/data/chat"

static char *conv[64];
static size_t conv_len[64];
static int n_conv;

static int load_conversations(void) {
    char *text = NULL;
    size_t len = 0;
    if (fs_read_file(DATA "/conversations.jsonl", &text, &len, 1 << 24)) return -1;
    char *p = text;
    while (*p && n_conv < 64) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        conv[n_conv] = malloc(n + 1);
        memcpy(conv[n_conv], p, n);
        conv[n_conv][n] = 0;
        conv_len[n_conv++] = n;
        p += n + (nl != NULL);
    }
    free(text);
    return 0;
}

/* {"tools": null, "documents": null, <special>, <conversation>} as text, so the numbers of
 * the conversation reach the renderer exactly as written. */
static char *make_context(const cJSON *special, int i, size_t *len) {
    char *sp = cJSON_PrintUnformatted(special);
    size_t sl = strlen(sp);
    size_t cap = 64 + sl + conv_len[i];
    char *out = malloc(cap);
    int n = snprintf(out, cap, "{\"tools\": null, \"documents\": null, ");
    if (sl > 2) n += snprintf(out + n, cap - (size_t)n, "%.*s, ", (int)(sl - 2), sp + 1);
    n += snprintf(out + n, cap - (size_t)n, "%s", conv[i] + 1);
    free(sp);
    *len = (size_t)n;
    return out;
}

static char *template_source(const cJSON *doc, size_t *len, int *skipped) {
    const char *file = cJSON_GetObjectItem(doc, "template")->valuestring;
    const char *source = cJSON_GetObjectItem(doc, "source")->valuestring;
    char path[1024], *text = NULL;
    *skipped = 0;
    if (!strcmp(source, "shared")) {
        snprintf(path, sizeof path, "../shared/templates/%s", file);
        if (!fs_exists(path)) {
            *skipped = 1;
            return NULL;
        }
        if (fs_read_file(path, &text, len, 1 << 24)) return NULL;
        return text;
    }
    if (fs_read_file(file, &text, len, 1 << 24)) return NULL;
    cJSON *cfg = json_parse(text, *len, NULL);
    free(text);
    const cJSON *t = cJSON_GetObjectItem(cfg, "chat_template");
    char *src = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    if (src) *len = strlen(src);
    cJSON_Delete(cfg);
    return src;
}

static void show_diff(const char *name, const char *conv_name, const char *want, size_t wl,
                      const char *got, size_t gl) {
    size_t k = 0;
    while (k < wl && k < gl && want[k] == got[k]) k++;
    size_t from = k > 40 ? k - 40 : 0;
    printf("  %s / %s: differs at byte %zu (want %zu bytes, got %zu)\n", name, conv_name, k, wl,
           gl);
    printf("    want: ...%.*s...\n", (int)((wl - from) < 120 ? (wl - from) : 120), want + from);
    printf("    got:  ...%.*s...\n", (int)((gl - from) < 120 ? (gl - from) : 120), got + from);
}

TEST(goldens) {
    REQUIRE(load_conversations() == 0);
    DIR *d = opendir(DATA "/expected");
    REQUIRE(d != NULL);
    int n_templates = 0, n_cases = 0, n_equal = 0, n_errors = 0, n_skipped = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (nl < 6 || strcmp(e->d_name + nl - 5, ".json")) continue;
        char path[1024], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, DATA "/expected/%s", e->d_name);
        REQUIRE(fs_read_file(path, &text, &len, 1 << 26) == 0);
        cJSON *doc = json_parse(text, len, NULL);
        free(text);
        REQUIRE(doc != NULL);
        int skipped = 0;
        size_t src_len = 0;
        char *src = template_source(doc, &src_len, &skipped);
        if (skipped) {
            n_skipped++;
            cJSON_Delete(doc);
            continue;
        }
        CHECK(src != NULL);
        struct chat_template *t = NULL;
        char err[2048];
        int rc = src ? chat_template_parse(src, src_len, &t, err, sizeof err) : ERR_IO;
        if (rc) printf("  %s: %s\n", e->d_name, err);
        CHECK(rc == OK);
        free(src);
        if (rc) {
            cJSON_Delete(doc);
            continue;
        }
        n_templates++;
        struct chat_render_opts opts = {.now =
                                            (int64_t)cJSON_GetObjectItem(doc, "now")->valuedouble};
        const cJSON *special = cJSON_GetObjectItem(doc, "special");
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
            int i = cJSON_GetObjectItem(c, "conversation")->valueint;
            const char *cname = cJSON_GetObjectItem(c, "name")->valuestring;
            const cJSON *want = cJSON_GetObjectItem(c, "output");
            size_t clen;
            char *ctx = make_context(special, i, &clen);
            char *out = NULL;
            size_t out_len = 0;
            rc = chat_template_render_json(t, ctx, clen, &opts, &out, &out_len, err, sizeof err);
            n_cases++;
            if (want) {
                size_t wl = strlen(want->valuestring);
                int eq = rc == OK && out_len == wl && !memcmp(out, want->valuestring, wl);
                if (!eq && rc)
                    printf("  %s / %s: render failed: %s\n", e->d_name, cname, err);
                else if (!eq)
                    show_diff(e->d_name, cname, want->valuestring, wl, out, out_len);
                CHECK(eq);
                n_equal += eq;
            } else {
                const char *kind = cJSON_GetObjectItem(c, "error")->valuestring;
                const char *msg = cJSON_GetObjectItem(c, "message")->valuestring;
                int ok = rc != OK;
                if (ok && !strcmp(kind, "TemplateError"))
                    ok = chat_template_last_raised() && !strcmp(err, msg);
                if (!ok)
                    printf("  %s / %s: jinja2 raised %s(%s), we %s: %s\n", e->d_name, cname, kind,
                           msg, rc ? "failed" : "rendered", rc ? err : "");
                CHECK(ok);
                n_errors += ok;
            }
            free(out);
            free(ctx);
        }
        chat_template_free(t);
        cJSON_Delete(doc);
    }
    closedir(d);
    printf("  %d templates, %d cases: %d renders equal to jinja2, %d errors as in jinja2\n",
           n_templates, n_cases, n_equal, n_errors);
    if (n_skipped)
        printf("  skipped: %d templates of ../shared/templates (../shared is absent)\n", n_skipped);
    CHECK(n_templates >= 1);
    for (int i = 0; i < n_conv; i++) free(conv[i]);
}

/* ---- model-level API ---- */

static char *render_pycoder(const char *request_json, int *rc_out, char *err, size_t cap) {
    struct chat *c = NULL;
    if (chat_load("models/pycoder", &c)) return NULL;
    cJSON *req = cJSON_Parse(request_json);
    struct chat_request q = {
        .messages = cJSON_GetObjectItem(req, "messages"),
        .tools = cJSON_GetObjectItem(req, "tools"),
        .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(req, "add_generation_prompt")),
        .kwargs = cJSON_GetObjectItem(req, "kwargs"),
    };
    const cJSON *th = cJSON_GetObjectItem(req, "thinking");
    if (th) q.thinking = cJSON_IsTrue(th) ? CHAT_THINKING_ON : CHAT_THINKING_OFF;
    char *out = NULL;
    *rc_out = chat_render(c, &q, &out, NULL, err, cap);
    cJSON_Delete(req);
    chat_free(c);
    return out;
}

TEST(model_render_normalizes) {
    char err[512];
    int rc;
    /* content parts are joined, null content becomes "", string arguments become objects */
    char *out = render_pycoder(
        "{\"messages\": ["
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi \"},"
        " {\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}, {\"type\": \"text\", "
        "\"text\": \"there\"}]},"
        "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": "
        "\"function\","
        " \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1.0, \\\"y\\\": [1, "
        "2]}\"}}]},"
        "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"ok\"}],"
        " \"add_generation_prompt\": true, \"kwargs\": {\"enable_thinking\": false}}",
        &rc, err, sizeof err);
    REQUIRE(out != NULL);
    CHECK(rc == OK);
    const char *want = "<|im_start|>user\nHi there<|im_end|>\n"
                       "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.0, \"y\": [1, "
                       "2]}}\n</tool_call><|im_end|>\n"
                       "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                       "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    if (strcmp(out, want)) printf("  got: %s\n", out);
    CHECK(!strcmp(out, want));
    free(out);
}

TEST(model_render_thinking) {
    char err[512];
    int rc;
    const char *tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    char *out = render_pycoder("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                               "\"add_generation_prompt\": true,"
                               " \"thinking\": false}",
                               &rc, err, sizeof err);
    REQUIRE(out != NULL);
    CHECK(rc == OK && strstr(out, tail));
    free(out);
    /* chat_template_kwargs win over the server's choice */
    out = render_pycoder("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                         "\"add_generation_prompt\": true,"
                         " \"thinking\": false, \"kwargs\": {\"enable_thinking\": true}}",
                         &rc, err, sizeof err);
    REQUIRE(out != NULL);
    CHECK(rc == OK && !strstr(out, tail));
    free(out);
}

TEST(model_render_errors) {
    char err[512];
    int rc;
    char *out = render_pycoder("{\"messages\": {\"role\": \"user\"}}", &rc, err, sizeof err);
    CHECK(rc == ERR_FORMAT && !out);
    out = render_pycoder("{\"messages\": [1, 2]}", &rc, err, sizeof err);
    CHECK(rc == ERR_FORMAT && !out);
    struct chat *c = NULL;
    log_set_errors_quiet(1);
    CHECK(chat_load("tests/data/chat", &c) == ERR_UNSUPPORTED); /* no template there */
    CHECK(chat_load("/nonexistent-dir", &c) != OK);
    log_set_errors_quiet(0);
}

TEST(named_templates) {
    const char *cfg =
        "{\"bos_token\": {\"content\": \"<B>\"}, \"eos_token\": \"<E>\", \"chat_template\": ["
        "{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ messages|length }}{{ eos_token "
        "}}\"},"
        "{\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}<tool_call>\"}]}";
    struct chat *c = NULL;
    char err[256];
    REQUIRE(chat_from_text(NULL, 0, cfg, strlen(cfg), &c, err, sizeof err) == OK);
    CHECK(chat_tool_format(c) == CHAT_TOOLS_HERMES);
    CHECK(!strcmp(chat_special_token(c, "bos_token"), "<B>"));
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"x\"}]");
    cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
    struct chat_request q = {.messages = msgs};
    char *out = NULL;
    REQUIRE(chat_render(c, &q, &out, NULL, err, sizeof err) == OK);
    CHECK(!strcmp(out, "D<B>1<E>"));
    free(out);
    q.tools = tools;
    REQUIRE(chat_render(c, &q, &out, NULL, err, sizeof err) == OK);
    CHECK(!strcmp(out, "T1<tool_call>"));
    free(out);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    chat_free(c);
    CHECK(chat_from_text("{% if %}", 8, NULL, 0, &c, err, sizeof err) == ERR_FORMAT);
    CHECK(strstr(err, "line 1") != NULL);
}

int main(void) {
    setenv("TZ", "UTC", 1);
    tzset();
    log_set_quiet(1);
    RUN(goldens);
    RUN(model_render_normalizes);
    RUN(model_render_thinking);
    RUN(model_render_errors);
    RUN(named_templates);
    return test_report();
}
