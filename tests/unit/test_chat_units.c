/* tests/unit/test_chat_units.c: the template engine on small cases. snippets.json holds
 * expressions, filters, tests, methods, scoping, whitespace control and runtime errors with
 * the output (or exception) Python jinja2 gave (tools/chat_golden.py); the rest checks what
 * only the C side has: syntax errors with positions, the step/output/memory/recursion
 * limits, cycles between namespaces, the cJSON entry point, and concurrent renders. */
#include "test.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/log.h"
#include "chat/template.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA "tests/data/chat"

/* Renders src with the JSON context ctx; returns the rc and the output or error text. */
static int render(const char *src, const char *ctx, const struct chat_render_opts *o, char **out,
                  char *err, size_t cap) {
    struct chat_template *t = NULL;
    *out = NULL;
    int rc = chat_template_parse(src, strlen(src), &t, err, cap);
    if (rc) return rc;
    size_t n;
    rc = chat_template_render_json(t, ctx, strlen(ctx), o, out, &n, err, cap);
    chat_template_free(t);
    return rc;
}

TEST(snippets) {
    char *text = NULL, *vars = NULL;
    size_t len = 0, vlen = 0;
    REQUIRE(fs_read_file(DATA "/snippets.json", &text, &len, 1 << 24) == 0);
    REQUIRE(fs_read_file(DATA "/snippet_vars.json", &vars, &vlen, 1 << 24) == 0);
    cJSON *doc = json_parse(text, len, NULL);
    free(text);
    REQUIRE(doc != NULL);
    struct chat_render_opts o = {.now = (int64_t)cJSON_GetObjectItem(doc, "now")->valuedouble};
    int n = 0, good = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const char *src = cJSON_GetObjectItem(c, "template")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "output");
        char *out = NULL, err[1024];
        int rc = render(src, vars, &o, &out, err, sizeof err), ok;
        if (want) {
            ok = rc == OK && !strcmp(out, want->valuestring);
            if (!ok)
                printf("  %s\n    want: %s\n    got:  %s\n", src, want->valuestring,
                       rc ? err : out);
        } else {
            const char *kind = cJSON_GetObjectItem(c, "error")->valuestring;
            const char *msg = cJSON_GetObjectItem(c, "message")->valuestring;
            ok = rc != OK;
            if (ok && !strcmp(kind, "TemplateError"))
                ok = chat_template_last_raised() && !strcmp(err, msg);
            if (!ok)
                printf("  %s\n    jinja2 raised %s: %s; we got: %s\n", src, kind, msg,
                       rc ? err : out);
        }
        CHECK(ok);
        good += ok;
        n++;
        free(out);
    }
    printf("  %d/%d snippets as in jinja2\n", good, n);
    cJSON_Delete(doc);
    free(vars);
}

static int expect_syntax_error(const char *src, const char *where) {
    struct chat_template *t = NULL;
    char err[512] = "";
    int rc = chat_template_parse(src, strlen(src), &t, err, sizeof err);
    chat_template_free(t);
    int ok = rc == ERR_FORMAT && strstr(err, where) != NULL;
    if (!ok) printf("  %s -> rc %d: %s\n", src, rc, err);
    return ok;
}

TEST(syntax_errors) {
    CHECK(expect_syntax_error("{% if x %}\n{{ 1 + }}{% endif %}", "line 2, column 8"));
    CHECK(expect_syntax_error("ab\n  {% if x %}", "expected 'endif'"));
    CHECK(expect_syntax_error("{{ x | nosuchfilter }}", "no filter named 'nosuchfilter'"));
    CHECK(expect_syntax_error("{% frobnicate %}", "unknown tag 'frobnicate'"));
    CHECK(expect_syntax_error("{% endif %}", "unknown tag 'endif'"));
    CHECK(expect_syntax_error("{% if 1 %}{% else %}{% else %}{% endif %}", "line 1"));
    CHECK(expect_syntax_error("{{ 'unterminated }}", "unterminated string"));
    CHECK(expect_syntax_error("{{ }}", "line 1, column 4"));
    CHECK(expect_syntax_error("{{ 1 2 }}", "line 1"));
    CHECK(expect_syntax_error("{{ (1 }}", "line 1"));
    CHECK(expect_syntax_error("{# never closed", "missing end of comment tag"));
    CHECK(expect_syntax_error("{% raw %} no end", "missing end of raw directive"));
    CHECK(expect_syntax_error("{% break %}", "'break' outside loop"));
    CHECK(expect_syntax_error("{% set true = 1 %}", "can't assign"));
    CHECK(expect_syntax_error("{% macro m(a=1, b) %}{% endmacro %}", "non-default argument"));
    CHECK(expect_syntax_error("{% include 'x' %}", "not supported"));
    CHECK(expect_syntax_error("{{ x ! y }}", "unexpected char '!'"));
    CHECK(expect_syntax_error("{{ '\xff' }}", "not valid UTF-8"));
    CHECK(expect_syntax_error("{{ '\\ud800' }}", "surrogate"));
    /* nesting deep enough to overflow a recursive parser is refused, not crashed on */
    size_t n = 20000;
    char *deep = malloc(2 * n + 8);
    memcpy(deep, "{{ ", 3);
    memset(deep + 3, '(', n);
    memset(deep + 3 + n, ')', n);
    memcpy(deep + 3 + 2 * n, " }}", 4);
    CHECK(expect_syntax_error(deep, "nested too deeply"));
    memset(deep + 3, '-', n); /* - - - - ... x */
    memcpy(deep + 3 + n, "x", 1);
    memcpy(deep + 4 + n, " }}", 4);
    CHECK(expect_syntax_error(deep, "nested too deeply"));
    char *ifs = malloc(12 * 300 + 1);
    ifs[0] = 0;
    for (int i = 0; i < 300; i++) strcat(ifs, "{% if 1 %}");
    CHECK(expect_syntax_error(ifs, "nested too deeply"));
    free(ifs);
    free(deep);
}

static int expect_limit(const char *src, struct chat_render_opts o, const char *why) {
    char *out = NULL, err[512];
    int rc = render(src, "{}", &o, &out, err, sizeof err);
    free(out);
    int ok = rc == ERR_FULL && strstr(err, why);
    if (!ok) printf("  %s -> rc %d: %s\n", src, rc, rc ? err : "(rendered)");
    return ok;
}

TEST(limits) {
    struct chat_render_opts o = {.max_steps = 200000};
    clock_t t0 = clock();
    CHECK(expect_limit("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", o, "recursion"));
    CHECK(expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                       (struct chat_render_opts){.max_depth = 20}, "recursion"));
    CHECK(expect_limit(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", o,
        "step limit"));
    CHECK(expect_limit("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
                       (struct chat_render_opts){.max_output = 1 << 20}, "too large"));
    CHECK(expect_limit("{{ 'x' * 100000000000 }}", (struct chat_render_opts){0}, "too large"));
    CHECK(expect_limit("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = "
                       "ns.l + ['x' * 100000 ~ i] %}{% endfor %}",
                       (struct chat_render_opts){.max_memory = 8 << 20}, "memory"));
    CHECK(expect_limit(
        "{% set x %}{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}{% endset %}",
        (struct chat_render_opts){.max_output = 1 << 20}, "too large"));
    /* long left-nested chains build deep trees without deep parsing: evaluation is bounded */
    size_t n = 5000;
    char *chain = malloc(n * 4 + 16);
    strcpy(chain, "{{ 1");
    for (size_t i = 0; i < n; i++) strcat(chain, " + 1");
    strcat(chain, " }}");
    CHECK(expect_limit(chain, (struct chat_render_opts){0}, "nests too deeply"));
    strcpy(chain, "{{ x");
    for (size_t i = 0; i < n; i++) strcat(chain, "|e");
    strcat(chain, " }}");
    CHECK(expect_limit(chain, (struct chat_render_opts){0}, "nests too deeply"));
    free(chain);
    CHECK(expect_limit("{% set ns = namespace(l=1) %}{% for i in range(1000) %}{% set ns.l = "
                       "[ns.l] %}{% endfor %}",
                       (struct chat_render_opts){0}, "nested too deeply"));
    CHECK(expect_limit("{% set ns = namespace(l=[1]) %}{% for i in range(1000) %}{% set ns.l = "
                       "ns.l | batch(1) | list %}{% endfor %}",
                       (struct chat_render_opts){0}, "nested too deeply"));
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("  limits hit in %.2f s\n", secs);
    CHECK(secs < 5);
}

TEST(cycles_and_sharing) {
    char *out = NULL, err[512];
    /* a namespace holding itself and a macro held by a namespace are freed (ASan checks) */
    REQUIRE(render("{% set ns = namespace() %}{% set ns.me = ns %}{% macro m() %}{{ ns.me.me is "
                   "defined }}{% endmacro %}"
                   "{% set ns.m = m %}{{ ns.m() }}{% set ns.l = [ns, [ns]] %}{{ ns.l | length }}",
                   "{}", NULL, &out, err, sizeof err) == OK);
    CHECK(!strcmp(out, "True2"));
    free(out);
    /* printing a cycle fails cleanly */
    CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "{}", NULL, &out, err,
                 sizeof err) != OK);
    free(out);
    /* loop objects outlive their loop */
    REQUIRE(render("{% set ns = namespace() %}{% for x in [1, 2] %}{% set ns.loop = loop %}{% "
                   "endfor %}{{ ns.loop.index }}{{ ns.loop.last }}",
                   "{}", NULL, &out, err, sizeof err) == OK);
    CHECK(!strcmp(out, "2True"));
    free(out);
}

TEST(cjson_context) {
    struct chat_template *t = NULL;
    char err[256], *out = NULL;
    const char *src =
        "{{ messages[0].content }}|{{ n }}|{{ f }}|{{ flag }}|{{ none_v }}|{{ messages | tojson }}";
    REQUIRE(chat_template_parse(src, strlen(src), &t, err, sizeof err) == OK);
    cJSON *ctx = cJSON_Parse(
        "{\"messages\": [{\"role\": \"user\", \"content\": \"h\\u00e9\"}], \"n\": 3, \"f\": 2.5,"
        " \"flag\": true, \"none_v\": null}");
    REQUIRE(chat_template_render(t, ctx, NULL, &out, NULL, err, sizeof err) == OK);
    CHECK(!strcmp(out, "hé|3|2.5|True|None|[{\"role\": \"user\", \"content\": \"hé\"}]"));
    free(out);
    cJSON *arr = cJSON_CreateArray();
    CHECK(chat_template_render(t, arr, NULL, &out, NULL, err, sizeof err) == ERR_FORMAT);
    CHECK(chat_template_render_json(t, "[1]", 3, NULL, &out, NULL, err, sizeof err) == ERR_FORMAT);
    CHECK(chat_template_render_json(t, "{\"a\": ", 6, NULL, &out, NULL, err, sizeof err) ==
          ERR_FORMAT);
    cJSON_Delete(arr);
    cJSON_Delete(ctx);
    chat_template_free(t);
    /* the clock: strftime_now sees opts.now */
    struct chat_render_opts o = {.now = 86400 * 365};
    REQUIRE(render("{{ strftime_now('%Y-%m-%d') }}", "{}", &o, &out, err, sizeof err) == OK);
    CHECK(!strcmp(out, "1971-01-01"));
    free(out);
    /* raise_exception's message comes back verbatim */
    CHECK(render("{{ raise_exception('no ' ~ 42) }}", "{}", NULL, &out, err, sizeof err) ==
          ERR_ARG);
    CHECK(!strcmp(err, "no 42") && chat_template_last_raised());
    CHECK(render("{{ x.y.z }}", "{}", NULL, &out, err, sizeof err) == ERR_ARG);
    CHECK(strstr(err, "line 1") && !chat_template_last_raised());
}

struct job {
    const struct chat_template *t;
    const char *want;
    int ok;
};

static void *worker(void *arg) {
    struct job *j = arg;
    j->ok = 1;
    for (int i = 0; i < 200; i++) {
        char *out = NULL, err[128];
        const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": "
                          "\"assistant\", \"content\": \"yo\"}]}";
        if (chat_template_render_json(j->t, ctx, strlen(ctx), NULL, &out, NULL, err, sizeof err) ||
            strcmp(out, j->want))
            j->ok = 0;
        free(out);
    }
    return NULL;
}

TEST(threads) {
    const char *src =
        "{% macro turn(m) %}<{{ m.role }}>{{ m.content | upper }}{% endmacro %}"
        "{% for m in messages %}{{ turn(m) }}{{ ' ' if not loop.last }}{% endfor %}{{ 'const' }}";
    struct chat_template *t = NULL;
    char err[128];
    REQUIRE(chat_template_parse(src, strlen(src), &t, err, sizeof err) == OK);
    pthread_t th[4];
    struct job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct job){t, "<user>HI <assistant>YOconst", 0};
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].ok);
    }
    chat_template_free(t);
}

int main(void) {
    setenv("TZ", "UTC", 1);
    tzset();
    log_set_quiet(1);
    RUN(snippets);
    RUN(syntax_errors);
    RUN(limits);
    RUN(cycles_and_sharing);
    RUN(cjson_context);
    RUN(threads);
    return test_report();
}
