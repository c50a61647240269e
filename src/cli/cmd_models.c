/* cli/cmd_models.c: `dspark models`: the model folders on the search path (registry.h), what
 * each one is (architecture, parameters, size on disk, dtype, whether dspark can load it), the
 * drafters that fit each target and the mode `--mode auto` would pick; or the same as JSON. */
#include "cli/args.h"
#include "cli/commands.h"

#include "registry/registry.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LISTED 64 /* drafters listed per target and mode */

static void usage(FILE *f) {
    fprintf(f, "usage: dspark models [--models-dir DIR] [--json]\n\n"
               "Lists the model folders dspark finds and the drafters that fit each target.\n"
               "Search path: --models-dir DIR, then each folder of $DSPARK_MODELS (colon-\n"
               "separated), ./models, $XDG_CACHE_HOME/dspark/models (~/.cache/dspark/models).\n"
               "A model folder holds config.json; folders one level down (ORG/NAME) and Hugging\n"
               "Face hub caches (models--ORG--NAME/snapshots/REV) are found too.\n\n"
               "  --models-dir DIR   look here first\n"
               "  --json             print one JSON object\n");
}

static const char *fmt_count(int64_t n, char *buf, size_t cap) {
    if (n <= 0)
        snprintf(buf, cap, "?");
    else if (n >= 1000000000)
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    return buf;
}

static const char *fmt_bytes(int64_t n, char *buf, size_t cap) {
    if (n >= (int64_t)1 << 30)
        snprintf(buf, cap, "%.1f GiB", (double)n / (double)(1 << 30));
    else
        snprintf(buf, cap, "%.1f MiB", (double)n / (double)(1 << 20));
    return buf;
}

static const enum reg_mode modes[] = {REG_MODE_DSPARK, REG_MODE_DFLASH, REG_MODE_DRAFT};

/* ---- text ---- */

static void print_model(const struct registry *r, int i, int w) {
    const struct reg_model *m = &r->m[i];
    char p[32], b[32];
    printf("%-*s  %-14s  %-22s  %7s  %9s  %s\n", w, m->dir, registry_kind_name(m->kind), m->arch,
           fmt_count(m->n_params, p, sizeof p), fmt_bytes(m->n_bytes, b, sizeof b),
           *m->dtype ? m->dtype : "?");
    if (!m->servable) printf("    cannot load: %s\n", m->note);
    int idx[MAX_LISTED], any = 0;
    if (m->kind == REG_CAUSAL_LM) {
        for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
            int n = registry_drafters(r, i, modes[k], idx, MAX_LISTED);
            for (int j = 0; j < n; j++)
                printf("%s%s %s", any++ ? ", " : "    drafters: ", registry_mode_name(modes[k]),
                       r->m[idx[j]].dir);
        }
        struct reg_choice c;
        if (any) printf("\n");
        if (!registry_choose(r, i, -1, 1, &c))
            printf("    --mode auto: %s%s%s\n", registry_mode_name(c.mode),
                   c.drafter >= 0 ? " " : "", c.drafter >= 0 ? r->m[c.drafter].dir : "");
    }
    /* what this folder drafts for */
    int n_for = 0;
    for (int t = 0; t < r->n; t++) {
        if (registry_match(&r->m[t], m) == REG_MODE_LOOKUP) continue;
        printf("%s%s", n_for++ ? ", " : "    drafter for: ", r->m[t].dir);
        if (m->kind == REG_CAUSAL_LM) printf(" (draft model)");
    }
    if (m->kind != REG_CAUSAL_LM && !n_for) printf("    drafter for: no target found");
    if (m->kind != REG_CAUSAL_LM || n_for) printf("\n");
}

static void print_text(const struct registry *r) {
    int w = 6;
    printf("search path:");
    for (int i = 0; i < r->n_roots; i++) {
        int n = 0;
        size_t len = strlen(r->roots[i]);
        for (int j = 0; j < r->n; j++)
            n += !strncmp(r->m[j].dir, r->roots[i], len) &&
                 (r->m[j].dir[len] == '/' || !r->m[j].dir[len]);
        printf("%s %s (%d)", i ? "," : "", r->roots[i], n);
    }
    printf("\n");
    if (!r->n) {
        printf("no model folders found\n");
        printf("hint: put Hugging Face model folders (config.json, *.safetensors, tokenizer.json) "
               "in ./models or ~/.cache/dspark/models, or pass --models-dir DIR or set "
               "DSPARK_MODELS\n");
        return;
    }
    for (int i = 0; i < r->n; i++)
        if ((int)strlen(r->m[i].dir) > w) w = (int)strlen(r->m[i].dir);
    printf("\n%-*s  %-14s  %-22s  %7s  %9s  %s\n", w, "FOLDER", "KIND", "ARCHITECTURE", "PARAMS",
           "SIZE", "DTYPE");
    for (int i = 0; i < r->n; i++) print_model(r, i, w);
}

/* ---- JSON ---- */

static cJSON *model_json(const struct registry *r, int i) {
    const struct reg_model *m = &r->m[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dir", m->dir);
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddStringToObject(o, "kind", registry_kind_name(m->kind));
    cJSON_AddStringToObject(o, "architecture", m->arch);
    cJSON_AddBoolToObject(o, "servable", m->servable);
    if (!m->servable) cJSON_AddStringToObject(o, "note", m->note);
    cJSON_AddNumberToObject(o, "params", (double)m->n_params);
    cJSON_AddNumberToObject(o, "bytes", (double)m->n_bytes);
    cJSON_AddStringToObject(o, "dtype", m->dtype);
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(o, "layers", m->n_layers);
    if (m->kind == REG_CAUSAL_LM) {
        cJSON *d = cJSON_AddObjectToObject(o, "drafters");
        int idx[MAX_LISTED];
        for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
            cJSON *a = cJSON_AddArrayToObject(d, registry_mode_name(modes[k]));
            int n = registry_drafters(r, i, modes[k], idx, MAX_LISTED);
            for (int j = 0; j < n; j++)
                cJSON_AddItemToArray(a, cJSON_CreateString(r->m[idx[j]].dir));
        }
        struct reg_choice c;
        if (!registry_choose(r, i, -1, 1, &c)) {
            cJSON *a = cJSON_AddObjectToObject(o, "auto");
            cJSON_AddStringToObject(a, "mode", registry_mode_name(c.mode));
            if (c.drafter >= 0) cJSON_AddStringToObject(a, "drafter", r->m[c.drafter].dir);
        }
    }
    cJSON *f = cJSON_AddArrayToObject(o, "drafter_for");
    for (int t = 0; t < r->n; t++)
        if (registry_match(&r->m[t], m) != REG_MODE_LOOKUP)
            cJSON_AddItemToArray(f, cJSON_CreateString(r->m[t].dir));
    return o;
}

static int print_json(const struct registry *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON *roots = cJSON_AddArrayToObject(o, "search_path");
    for (int i = 0; i < r->n_roots; i++)
        cJSON_AddItemToArray(roots, cJSON_CreateString(r->roots[i]));
    cJSON *ms = cJSON_AddArrayToObject(o, "models");
    for (int i = 0; i < r->n; i++) cJSON_AddItemToArray(ms, model_json(r, i));
    char *text = cJSON_PrintUnformatted(o);
    if (text) printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
    return text ? 0 : 1;
}

int cmd_models(int argc, char **argv) {
    const char *models_dir = NULL;
    int json = 0;
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        const char *arg = argv[a.i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 0;
        } else if (args_flag(&a, "--models-dir")) {
            if (!(models_dir = a.value)) return 2;
        } else if (!strcmp(arg, "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark models --help)\n", arg);
            return 2;
        }
    }
    struct registry r = {0};
    int rc = registry_scan_default(&r, models_dir);
    if (!rc)
        rc = json ? print_json(&r) : (print_text(&r), 0);
    else
        rc = 2;
    registry_free(&r);
    return rc;
}
