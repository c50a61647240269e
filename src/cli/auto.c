/* cli/auto.c: see auto.h. */
#include "cli/auto.h"

#include "base/err.h"
#include "registry/registry.h"

#include <stdio.h>
#include <string.h>

/* The folder that holds dir ("." for a bare name). */
static void parent_of(const char *dir, char *out, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    while (n > 0 && dir[n - 1] != '/') n--;
    while (n > 1 && dir[n - 1] == '/') n--;
    snprintf(out, cap, "%.*s", n ? (int)n : 1, n ? dir : ".");
}

int cli_mode_auto(const char *model_dir, const char *drafter, enum gen_mode *mode, char *buf,
                  size_t cap, const char **drafter_out) {
    struct registry r = {0};
    char parent[4096];
    int t = -1, given = -1, rc = 2;
    parent_of(model_dir, parent, sizeof parent);
    if (registry_scan_default(&r, NULL) || registry_scan(&r, parent)) goto done;
    if (registry_add(&r, model_dir, NULL, &t)) {
        fprintf(stderr, "error: --mode auto: %s is not a model folder (no config.json)\n",
                model_dir);
        fprintf(stderr, "hint: pass --model DIR with a Hugging Face model folder; `dspark "
                        "models` lists the folders found\n");
        goto done;
    }
    if (drafter && registry_add(&r, drafter, NULL, &given)) {
        fprintf(stderr, "error: --drafter %s is not a model folder (no config.json)\n", drafter);
        goto done;
    }
    struct reg_choice c;
    if (registry_choose(&r, t, given, 1, &c)) goto done;
    static const enum gen_mode modes[] = {GEN_LOOKUP, GEN_DRAFT, GEN_DFLASH, GEN_DSPARK};
    *mode = modes[c.mode];
    *drafter_out = NULL;
    if (c.drafter >= 0) {
        snprintf(buf, cap, "%s", r.m[c.drafter].dir);
        *drafter_out = buf;
        fprintf(stderr, "mode auto: %s (%s %s)\n", registry_mode_name(c.mode),
                given >= 0 ? "given drafter" : "drafter", buf);
    } else {
        fprintf(stderr,
                "mode auto: lookup (no DSpark, DFlash or draft model found for %s; `dspark "
                "models` shows the search path)\n",
                model_dir);
    }
    rc = 0;
done:
    registry_free(&r);
    return rc;
}
