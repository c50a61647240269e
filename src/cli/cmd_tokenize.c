/* cli/cmd_tokenize.c: `dspark tokenize`: load the tokenizer of a model folder (the folder may
 * hold only tokenizer.json and tokenizer_config.json) and print the token ids of each input as
 * a JSON array, one line per input. No BOS/EOS is added; special tokens in the text are matched. */
#include "cli/args.h"
#include "cli/commands.h"

#include "base/err.h"
#include "base/log.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: dspark tokenize --model DIR (--text TEXT | --jsonl FILE)\n\n"
               "  --model DIR   folder with tokenizer.json (and tokenizer_config.json)\n"
               "  --text TEXT   encode TEXT and print its ids as a JSON array\n"
               "  --jsonl FILE  encode each line of FILE, a JSON string, and print one JSON array\n"
               "                of ids per line (FILE - reads standard input)\n"
               "  --help        show this help\n");
}

static int print_ids(const struct tokenizer *t, const char *text, size_t len) {
    int32_t *ids = NULL;
    int n = 0, rc = tokenizer_encode(t, text, len, &ids, &n);
    if (rc) {
        fprintf(stderr, "error: encoding failed: %s\n", err_str(rc));
        return rc;
    }
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    fputs("]\n", stdout);
    free(ids);
    return OK;
}

static int run_jsonl(const struct tokenizer *t, const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "error: cannot open %s: %s\n", path, strerror(errno));
        return ERR_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    int rc = OK;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (!n) continue;
        cJSON *j = cJSON_ParseWithLength(line, n);
        if (!cJSON_IsString(j) || !j->valuestring) {
            fprintf(stderr, "error: %s:%ld: the line is not a JSON string\n", path, lineno);
            fprintf(stderr, "hint: write each input as a JSON string, e.g. \"Hello\\nworld\"\n");
            rc = ERR_FORMAT;
        } else {
            rc = print_ids(t, j->valuestring, strlen(j->valuestring));
        }
        cJSON_Delete(j);
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "error: reading %s failed\n", path);
        rc = ERR_IO;
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_dir = NULL, *text = NULL, *jsonl = NULL;
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        int bad = 0;
        if (!strcmp(argv[a.i], "--help") || !strcmp(argv[a.i], "-h")) {
            usage(stdout);
            return 0;
        } else if (args_flag(&a, "--model")) {
            bad = !(model_dir = a.value);
        } else if (args_flag(&a, "--text")) {
            bad = !(text = a.value);
        } else if (args_flag(&a, "--jsonl")) {
            bad = !(jsonl = a.value);
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark tokenize --help)\n", argv[a.i]);
            return 2;
        }
        if (bad) return 2;
    }
    if (!model_dir || (!text == !jsonl)) {
        fprintf(stderr, "error: tokenize needs --model and exactly one of --text or --jsonl\n");
        usage(stderr);
        return 2;
    }
    log_set_quiet(1);
    struct tokenizer *t = NULL;
    if (tokenizer_load(model_dir, &t)) return 1;
    int rc = text ? print_ids(t, text, strlen(text)) : run_jsonl(t, jsonl);
    if (fflush(stdout) != 0) rc = ERR_IO;
    tokenizer_free(t);
    return rc ? 1 : 0;
}
