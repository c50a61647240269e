/* cli/cmd_render.c: `dspark render`: render a chat template with a JSON context and print
 * the prompt exactly (no newline is added). With --template the context holds every template
 * variable as is; with --model the model's template and special tokens are used and the
 * context's messages/tools/add_generation_prompt go through the server's normalization. */
#include "cli/args.h"
#include "cli/commands.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/log.h"
#include "chat/chat.h"
#include "chat/template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f, "usage: dspark render (--template FILE | --model DIR) --context FILE [--now SECONDS]\n\n"
           "  --template FILE  a Jinja2 chat template; the context holds every variable\n"
           "                   (messages, tools, add_generation_prompt, bos_token, ...)\n"
           "  --model DIR      the chat template and special tokens of a model folder; the\n"
           "                   context's messages, tools and add_generation_prompt are\n"
           "                   normalized as the server does, other keys are passed through\n"
           "  --context FILE   JSON object of template variables (- reads standard input)\n"
           "  --now SECONDS    the time strftime_now() sees (seconds since 1970)\n"
           "  --tool-format    print the tool-call format the template implies, then exit\n"
           "  --help           show this help\n");
}

static int read_all(const char *path, char **out, size_t *len) {
    if (strcmp(path, "-")) return fs_read_file(path, out, len, (size_t)256 << 20);
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    while (p) {
        size_t got = fread(p + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) break;
        if (cap - n < 2) {
            char *q = realloc(p, cap * 2);
            if (!q) break;
            p = q;
            cap *= 2;
        }
    }
    if (!p || ferror(stdin)) {
        free(p);
        return ERR_IO;
    }
    p[n] = 0;
    *out = p;
    *len = n;
    return OK;
}

static int render_model(const char *dir, const char *ctx, size_t ctx_len,
                        const struct chat_render_opts *o, int show_format) {
    struct chat *c = NULL;
    if (chat_load(dir, &c)) return 1;
    if (show_format) {
        printf("%s\n", chat_tool_format_name(chat_tool_format(c)));
        chat_free(c);
        return 0;
    }
    const char *why = NULL;
    cJSON *j = json_parse(ctx, ctx_len, &why);
    if (!cJSON_IsObject(j)) {
        fprintf(stderr, "error: the context is not a JSON object (%s)\n", why ? why : "wrong type");
        cJSON_Delete(j);
        chat_free(c);
        return 1;
    }
    struct chat_request q = {
        .messages = cJSON_GetObjectItemCaseSensitive(j, "messages"),
        .tools = cJSON_GetObjectItemCaseSensitive(j, "tools"),
        .add_generation_prompt =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "add_generation_prompt")),
        .kwargs = j,
        .opts = o,
    };
    char *out = NULL, err[1024];
    size_t n = 0;
    int rc = chat_render(c, &q, &out, &n, err, sizeof err);
    if (rc)
        fprintf(stderr, "error: %s\n", err);
    else
        fwrite(out, 1, n, stdout);
    free(out);
    cJSON_Delete(j);
    chat_free(c);
    return rc ? 1 : 0;
}

static int render_file(const char *path, const char *ctx, size_t ctx_len,
                       const struct chat_render_opts *o, int show_format) {
    char *src = NULL, err[1024];
    size_t len = 0;
    if (fs_read_file(path, &src, &len, (size_t)16 << 20)) {
        fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (show_format) {
        printf("%s\n", chat_tool_format_name(chat_tool_format_of_template(src, len)));
        free(src);
        return 0;
    }
    struct chat_template *t = NULL;
    int rc = chat_template_parse(src, len, &t, err, sizeof err);
    free(src);
    if (rc) {
        fprintf(stderr, "error: %s: %s\n", path, err);
        return 1;
    }
    char *out = NULL;
    size_t n = 0;
    rc = chat_template_render_json(t, ctx, ctx_len, o, &out, &n, err, sizeof err);
    if (rc)
        fprintf(stderr, "error: %s\n", err);
    else
        fwrite(out, 1, n, stdout);
    free(out);
    chat_template_free(t);
    return rc ? 1 : 0;
}

int cmd_render(int argc, char **argv) {
    const char *tpl = NULL, *model = NULL, *ctx_path = NULL;
    int show_format = 0;
    struct chat_render_opts o = {0};
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        int bad = 0;
        if (!strcmp(argv[a.i], "--help") || !strcmp(argv[a.i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[a.i], "--tool-format")) {
            show_format = 1;
        } else if (args_flag(&a, "--template")) {
            bad = !(tpl = a.value);
        } else if (args_flag(&a, "--model")) {
            bad = !(model = a.value);
        } else if (args_flag(&a, "--context")) {
            bad = !(ctx_path = a.value);
        } else if (args_flag(&a, "--now")) {
            uint64_t v = 0;
            bad = !a.value || args_u64("--now", a.value, &v);
            o.now = (int64_t)v;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark render --help)\n", argv[a.i]);
            return 2;
        }
        if (bad) return 2;
    }
    if (!tpl == !model || (!ctx_path && !show_format)) {
        fprintf(stderr, "error: render needs one of --template or --model, and --context\n");
        usage(stderr);
        return 2;
    }
    log_set_quiet(1);
    char *ctx = NULL;
    size_t ctx_len = 0;
    if (!show_format && read_all(ctx_path, &ctx, &ctx_len)) {
        fprintf(stderr, "error: cannot read the context %s\n", ctx_path);
        return 1;
    }
    int rc = model ? render_model(model, ctx, ctx_len, &o, show_format)
                   : render_file(tpl, ctx, ctx_len, &o, show_format);
    free(ctx);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
