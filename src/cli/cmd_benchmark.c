/* cli/cmd_benchmark.c: `dspark benchmark`: decoding speed of baseline and speculative modes
 * over prompt sets in the {"turns": [...]} JSONL format. Every run specification ("run":
 * a mode with its max-draft) generates from the same prompts; within a trial each prompt runs
 * under every run back to back, baseline first, so a disturbance on the machine hits all runs
 * alike. Per category, tokens/s are token-weighted (tokens / seconds over the category's
 * prompts) within a trial, then the median over trials is reported. Greedy outputs of every
 * run are checked against baseline's ids on the fly: a mismatch is a bug and is printed. */
#include "cli/args.h"
#include "cli/auto.h"
#include "cli/bench_cost.h"
#include "cli/bench.h"
#include "cli/commands.h"

#include "backend/gpu.h"
#include "base/cpuload.h"
#include "base/fs.h"
#include "base/thread.h"
#include "base/timer.h"
#include "engine/generate.h"
#include "spec/block_model.h"
#include "tokenizer/tokenizer.h"
#include "tune/calib.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MODEL  "models/pycoder"
#define SHARED_PROMPTS "../shared/bench/prompts"
#define REPO_PROMPTS   "bench/prompts"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: dspark benchmark [flags]\n\n"
        "  --model DIR             target model folder (default " DEFAULT_MODEL ")\n"
        "  --drafter DIR           draft model folder (default: the model's folder + -draft)\n"
        "  --dspark-drafter DIR    DSpark drafter folder (default: ... + -dspark)\n"
        "  --dflash-drafter DIR    DFlash drafter folder (default: ... + -dflash)\n"
        "  --modes LIST            comma-separated runs, each baseline | lookup | draft |\n"
        "                          dspark | dflash | auto, draft, dspark and dflash also\n"
        "                          NAME-nolookup (no n-gram drafts), each optionally NAME:N\n"
        "                          for max-draft N; auto runs the mode `generate --mode auto`\n"
        "                          picks\n"
        "                          (default baseline,lookup,draft; baseline always runs first)\n"
        "  --prompts FILE[,FILE]   JSONL files of {\"turns\": [...]} (first turn used); the\n"
        "                          category is named after the file (default: " SHARED_PROMPTS "\n"
        "                          mt-bench=chat, humaneval+mbpp=code, gsm8k+math500=math,\n"
        "                          plus " REPO_PROMPTS "/copy.jsonl=copy)\n"
        "  --categories LIST       only these categories (e.g. chat,copy)\n"
        "  --limit N               prompts per file, evenly spaced through it (default 10)\n"
        "  --max-new-tokens N      new tokens per prompt at most (default 128)\n"
        "  --max-draft N           drafts per round (default: 15 lookup, 3 draft, 4 dspark,\n"
        "                          auto for dflash)\n"
        "  --trials N              timed passes over the prompts; medians reported (default 3)\n"
        "  --threads N             CPU threads (default: all cores)\n"
        "  --temperature T         0 = greedy (default 0); > 0 samples with seed = prompt\n"
        "                          index and skips the exactness check\n"
        "  --gpu                   run the target and every drafter on the GPU (a `make\n"
        "                          CUDA=1` build)\n"
        "  --gpu-inputs exact|bf16 GPU matmul inputs: rounded to bf16 (default) or exact\n"
        "                          float32 products (see dspark generate --help)\n"
        "  --gpu-kv f32|bf16       GPU K/V cache elements: float32 (default) or bfloat16\n"
        "  --no-chat               raw prompt text (default: a ChatML user turn when the\n"
        "                          tokenizer has <|im_start|> and <|im_end|>)\n"
        "  --widths N              first time one forward pass of widths 1..N (a verify round\n"
        "                          of N-1 drafts) of the target and the draft model\n"
        "  --caps LIST             run each mode once per cap, e.g. 1,2,3,4,6,auto (N:\n"
        "                          --max-draft N; auto: chosen per round from this machine's\n"
        "                          measured costs, as NAME:auto in --modes)\n"
        "  --calibration-file F    --max-draft auto's cost cache (default\n"
        "                          ~/.cache/dspark/calibration.json)\n"
        "  --recalibrate           measure the costs again even when they are cached\n"
        "  --json FILE             write the results as JSON\n"
        "  --svg FILE              a bar chart of decode tok/s per run and category (default:\n"
        "                          next to --json, FILE.svg)\n");
}
/* ---- options ---- */

static int parse_run(const char *s, size_t len, struct run_spec *r) {
    static const struct {
        const char *name;
        enum gen_mode mode;
        int lookup_drafts;
    } kinds[] = {{"baseline", GEN_BASELINE, 0}, {"lookup", GEN_LOOKUP, 0},
                 {"draft", GEN_DRAFT, 1},       {"draft-nolookup", GEN_DRAFT, 0},
                 {"dspark", GEN_DSPARK, 1},     {"dspark-nolookup", GEN_DSPARK, 0},
                 {"dflash", GEN_DFLASH, 1},     {"dflash-nolookup", GEN_DFLASH, 0},
                 {"auto", GEN_LOOKUP, 1}}; /* resolved in resolve_auto() */
    const char *colon = memchr(s, ':', len);
    size_t n = colon ? (size_t)(colon - s) : len;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        if (strlen(kinds[k].name) != n || strncmp(s, kinds[k].name, n)) continue;
        *r = (struct run_spec){kinds[k].mode, -1, kinds[k].lookup_drafts, ""};
        if (colon) {
            char num[16];
            size_t m = len - n - 1;
            if (!m || m >= sizeof num || r->mode == GEN_BASELINE) break;
            memcpy(num, colon + 1, m);
            num[m] = 0;
            if (!strcmp(num, "auto"))
                r->max_draft = RUN_AUTO_DRAFT;
            else if (args_int("--modes (max-draft)", num, 1, 64, &r->max_draft))
                return -1;
        }
        snprintf(r->name, sizeof r->name, "%.*s", (int)len, s);
        return 0;
    }
    fprintf(stderr,
            "error: --modes takes baseline, lookup, draft, dspark, dflash or auto (draft, dspark "
            "and dflash also NAME-nolookup), each optionally :N (max-draft), got '%.*s'\n",
            (int)len, s);
    return -1;
}

/* Baseline goes first (added when missing): speedups and the exactness check refer to it. */
static int parse_runs(const char *v, struct opts *o) {
    struct run_spec tmp[MAX_RUNS];
    int n = 0, have_base = 0;
    for (const char *s = v; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (n == MAX_RUNS - 1) {
            fprintf(stderr, "error: --modes takes at most %d runs\n", MAX_RUNS - 1);
            return -1;
        }
        if (parse_run(s, len, &tmp[n])) return -1;
        if (tmp[n].mode != GEN_BASELINE || !have_base++) n++;
        s = comma ? comma + 1 : s + len;
    }
    o->n_runs = 0;
    o->runs[o->n_runs++] = (struct run_spec){GEN_BASELINE, 0, 0, "baseline"};
    for (int i = 0; i < n; i++)
        if (tmp[i].mode != GEN_BASELINE) o->runs[o->n_runs++] = tmp[i];
    return 0;
}

/* --caps: every run without a cap of its own (NAME:N, NAME:auto) becomes one run per cap. */
static int expand_caps(struct opts *o) {
    struct run_spec in[MAX_RUNS];
    int n_in = o->n_runs;
    memcpy(in, o->runs, sizeof in);
    o->n_runs = 0;
    if (!*o->caps) {
        fprintf(stderr, "error: --caps takes a comma-separated list such as 2,4,auto\n");
        return -1;
    }
    for (int i = 0; i < n_in; i++) {
        const struct run_spec *r = &in[i];
        int own = r->mode == GEN_BASELINE || r->max_draft > 0 || r->max_draft == RUN_AUTO_DRAFT;
        for (const char *s = o->caps; *s;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            if (o->n_runs == MAX_RUNS) {
                fprintf(stderr, "error: --modes and --caps make more than %d runs\n", MAX_RUNS);
                return -1;
            }
            struct run_spec *x = &o->runs[o->n_runs++];
            *x = *r;
            if (own) break;
            char cap[16];
            snprintf(cap, sizeof cap, "%.*s", (int)(len < 15 ? len : 15), s);
            if (!strcmp(cap, "auto"))
                x->max_draft = RUN_AUTO_DRAFT;
            else if (args_int("--caps", cap, 1, 64, &x->max_draft))
                return -1;
            if (snprintf(x->name, sizeof x->name, "%s:%s", r->name, cap) >= (int)sizeof x->name) {
                fprintf(stderr, "error: run name %s:%s is too long\n", r->name, cap);
                return -1;
            }
            s = comma ? comma + 1 : s + len;
        }
    }
    return 0;
}

/* Returns 0 to go on, else the exit code (help printed: -1). */
static int parse(int argc, char **argv, struct opts *o) {
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        int bad = 0;
        const char *arg = argv[a.i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return -1;
        } else if (args_flag(&a, "--model")) {
            bad = !(o->model_dir = a.value);
        } else if (args_flag(&a, "--drafter")) {
            bad = !(o->drafter_dir = a.value);
        } else if (args_flag(&a, "--dspark-drafter")) {
            bad = !(o->dspark_dir = a.value);
        } else if (args_flag(&a, "--dflash-drafter")) {
            bad = !(o->dflash_dir = a.value);
        } else if (args_flag(&a, "--modes")) {
            bad = !a.value || parse_runs(a.value, o);
        } else if (args_flag(&a, "--prompts")) {
            bad = !(o->prompts = a.value);
        } else if (args_flag(&a, "--categories")) {
            bad = !(o->categories = a.value);
        } else if (args_flag(&a, "--limit")) {
            bad = args_int(arg, a.value, 1, 1 << 20, &o->limit);
        } else if (args_flag(&a, "--max-new-tokens")) {
            bad = args_int(arg, a.value, 1, 1 << 20, &o->max_new);
        } else if (args_flag(&a, "--max-draft")) {
            bad = args_int(arg, a.value, 1, 64, &o->max_draft);
        } else if (args_flag(&a, "--trials")) {
            bad = args_int(arg, a.value, 1, 1000, &o->trials);
        } else if (args_flag(&a, "--threads")) {
            bad = args_int(arg, a.value, 1, 1024, &o->threads);
        } else if (args_flag(&a, "--temperature")) {
            bad = args_float(arg, a.value, 0, 100, &o->temperature);
        } else if (args_flag(&a, "--widths")) {
            bad = args_int(arg, a.value, 1, 64, &o->widths);
        } else if (args_flag(&a, "--caps")) {
            bad = !(o->caps = a.value);
        } else if (args_flag(&a, "--calibration-file")) {
            bad = !(o->calib_file = a.value);
        } else if (!strcmp(arg, "--recalibrate")) {
            o->recalibrate = 1;
        } else if (args_flag(&a, "--svg")) {
            bad = !(o->svg_path = a.value);
        } else if (args_flag(&a, "--json")) {
            bad = !(o->json_path = a.value);
        } else if (!strcmp(arg, "--gpu")) {
            o->gpu = 1;
        } else if (args_flag(&a, "--gpu-inputs")) {
            bad = args_gpu_inputs(a.value, &o->gpu_inputs);
        } else if (args_flag(&a, "--gpu-kv")) {
            bad = args_gpu_kv(a.value, &o->gpu_kv);
        } else if (!strcmp(arg, "--no-chat")) {
            o->chat = 0;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark benchmark --help)\n", arg);
            return 2;
        }
        if (bad) return 2;
    }
    return 0;
}

/* ---- prompts ---- */

/* The category a prompt file stands for, from its name. */
static void file_category(const char *path, char *out, size_t cap) {
    static const char *map[][2] = {{"mt-bench", "chat"}, {"humaneval", "code"}, {"mbpp", "code"},
                                   {"gsm8k", "math"},    {"math500", "math"},   {"copy", "copy"}};
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 6 && !strcmp(base + n - 6, ".jsonl")) n -= 6;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i][0]) == n && !strncmp(base, map[i][0], n)) {
            snprintf(out, cap, "%s", map[i][1]);
            return;
        }
    snprintf(out, cap, "%.*s", (int)n, base);
}

static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *s = list; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (len == n && !strncmp(s, name, n)) return 1;
        s = comma ? comma + 1 : s + len;
    }
    return 0;
}

static int add_file(struct bench *b, const char *path, int owned) {
    if (b->n_files == MAX_FILES) {
        fprintf(stderr, "error: at most %d prompt files\n", MAX_FILES);
        return -1;
    }
    char *copy = owned ? strdup(path) : NULL;
    if (owned && !copy) return -1;
    b->file_mem[b->n_files] = copy;
    b->files[b->n_files++] = owned ? copy : path;
    return 0;
}

/* --prompts, or the shared sets plus the repository's copy-heavy set; without ../shared, every
 * file of the repository's set. */
static int list_files(struct bench *b) {
    static const char *shared[] = {"mt-bench.jsonl", "humaneval.jsonl", "mbpp.jsonl", "gsm8k.jsonl",
                                   "math500.jsonl"};
    char path[4096];
    if (b->o.prompts) {
        for (const char *s = b->o.prompts; *s;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            snprintf(path, sizeof path, "%.*s", (int)len, s);
            if (len && add_file(b, path, 1)) return -1;
            s = comma ? comma + 1 : s + len;
        }
        return 0;
    }
    if (fs_exists(SHARED_PROMPTS)) {
        for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", SHARED_PROMPTS, shared[i]);
            if (fs_exists(path) && add_file(b, path, 1)) return -1;
        }
        return add_file(b, REPO_PROMPTS "/copy.jsonl", 0);
    }
    fprintf(stderr, "note: %s not found: using the repository's prompt set (%s) only\n",
            SHARED_PROMPTS, REPO_PROMPTS);
    DIR *d = opendir(REPO_PROMPTS);
    if (!d) {
        fprintf(stderr, "error: no prompt files: %s and %s are missing\n", SHARED_PROMPTS,
                REPO_PROMPTS);
        fprintf(stderr, "hint: run from the repository root or pass --prompts FILE\n");
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n <= 6 || strcmp(de->d_name + n - 6, ".jsonl")) continue;
        snprintf(path, sizeof path, "%s/%s", REPO_PROMPTS, de->d_name);
        if (add_file(b, path, 1)) break;
    }
    closedir(d);
    return 0;
}

/* The prompt as the model sees it. A ChatML user turn when the tokenizer knows the markers; the
 * model's own chat template replaces this once the chat module lands. Heap string. */
static char *wrap_prompt(const struct tokenizer *t, const char *turn, int chat) {
    static const char head[] = "<|im_start|>user\n", tail[] = "<|im_end|>\n<|im_start|>assistant\n";
    int ml = chat && tokenizer_find(t, "<|im_start|>") >= 0 && tokenizer_find(t, "<|im_end|>") >= 0;
    size_t n = strlen(turn);
    char *s = malloc(n + sizeof head + sizeof tail);
    if (!s) return NULL;
    if (ml)
        snprintf(s, n + sizeof head + sizeof tail, "%s%s%s", head, turn, tail);
    else
        memcpy(s, turn, n + 1);
    return s;
}

static int cat_index(struct bench *b, const char *name) {
    for (int i = 0; i < b->n_cats; i++)
        if (!strcmp(b->cats[i], name)) return i;
    if (b->n_cats == MAX_CATS) return -1;
    snprintf(b->cats[b->n_cats], sizeof b->cats[0], "%s", name);
    return b->n_cats++;
}

/* Reads up to --limit prompts of one file, evenly spaced through it, and tokenizes them. */
static int load_file(struct bench *b, int f, int max_prompt) {
    char cat[32], *text = NULL;
    size_t len;
    file_category(b->files[f], cat, sizeof cat);
    if (b->o.categories && !in_list(b->o.categories, cat)) return 0;
    int c = cat_index(b, cat);
    if (c < 0) {
        fprintf(stderr, "error: at most %d categories\n", MAX_CATS);
        return -1;
    }
    if (fs_read_file(b->files[f], &text, &len, (size_t)1 << 30)) return -1;
    int n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n' || (i + 1 == len);
    int want = b->o.limit < n_lines ? b->o.limit : n_lines, taken = 0, skipped = 0;
    char *line = text;
    for (int ln = 0, next = 0; line < text + len && taken < want; ln++) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
        /* the k-th pick is line k * n_lines / want (0-based); later lines fill skipped ones */
        if (ln >= next) {
            cJSON *j = cJSON_ParseWithLength(line, n);
            cJSON *turn = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "turns"), 0);
            char *s =
                cJSON_IsString(turn) ? wrap_prompt(b->e.tok, turn->valuestring, b->o.chat) : NULL;
            int32_t *ids = NULL;
            int n_ids = 0;
            if (s && !tokenizer_encode(b->e.tok, s, strlen(s), &ids, &n_ids) && n_ids > 0 &&
                n_ids <= max_prompt) {
                struct prompt *p = realloc(b->prompts, sizeof *p * (size_t)(b->n_prompts + 1));
                if (!p) {
                    free(ids), free(s), cJSON_Delete(j), free(text);
                    return -1;
                }
                b->prompts = p;
                p[b->n_prompts++] = (struct prompt){c, f, ln + 1, ids, n_ids, NULL, 0, 0};
                taken++;
                next = (int)((long)taken * n_lines / want);
            } else {
                skipped++;
                free(ids);
            }
            free(s);
            cJSON_Delete(j);
        }
        line = nl ? nl + 1 : text + len;
    }
    if (skipped)
        fprintf(stderr, "note: %s: skipped %d lines (no first turn, or too long for the context)\n",
                b->files[f], skipped);
    free(text);
    return 0;
}

/* ---- measurement ---- */

struct gen_stats *bench_stats(const struct bench *b, int run, int trial, int prompt) {
    return &b->stats[((size_t)run * (size_t)b->o.trials + (size_t)trial) * (size_t)b->n_prompts +
                     (size_t)prompt];
}

void bench_params(const struct bench *b, const struct run_spec *r, int prompt_index,
                  struct gen_params *gp) {
    const struct hf_config *c = model_config(b->e.target);
    *gp = (struct gen_params){.max_tokens = b->o.max_new, .top_logprobs = -1, .mode = r->mode};
    gp->max_draft = r->max_draft > 0     ? r->max_draft
                    : b->o.max_draft > 0 ? b->o.max_draft
                                         : gen_default_max_draft(r->mode);
    if (r->mode == GEN_BASELINE) gp->max_draft = 0;
    struct tune_auto *ta = b->o.tune[r - b->o.runs];
    if (ta && r->mode != GEN_BASELINE) { /* --max-draft auto, up to the widest cap */
        gp->tune = ta;
        gp->max_draft = ta->costs.max_cap;
    }
    gp->lookup_drafts = r->lookup_drafts;
    gp->sp.temperature = b->o.temperature;
    gp->sp.top_p = b->o.temperature > 0 && c->do_sample ? c->top_p : 1;
    gp->sp.top_k = b->o.temperature > 0 && c->do_sample ? c->top_k : 0;
    gp->sp.seed = (uint64_t)prompt_index;
}

static void progress(struct bench *b, const char *run, const char *cat, int trial) {
    int width = 30, filled = b->total ? b->done * width / b->total : width;
    if (isatty(2)) {
        fprintf(stderr, "\r[%.*s%*s] %3d%% %d/%d trial %d/%d %-16s %-8s", filled,
                "==============================", width - filled, "",
                b->total ? 100 * b->done / b->total : 100, b->done, b->total, trial + 1,
                b->o.trials, run, cat);
        if (b->done == b->total) fprintf(stderr, "\n");
    } else if (b->done == b->total || b->done % (b->total / 10 > 0 ? b->total / 10 : 1) == 0) {
        fprintf(stderr, "progress: %d/%d generations (%d%%)\n", b->done, b->total,
                b->total ? 100 * b->done / b->total : 100);
    }
}

/* Compares a greedy output with baseline's; prints and counts a mismatch. */
static void check_exact(struct bench *b, struct prompt *p, const struct run_spec *r,
                        const struct gen_result *res, int trial) {
    b->compared++;
    int n = res->n_ids < p->n_ref ? res->n_ids : p->n_ref, at = 0;
    while (at < n && res->ids[at] == p->ref[at]) at++;
    if (at == n && res->n_ids == p->n_ref) return;
    b->mismatches++;
    fprintf(stderr,
            "%sMISMATCH: %s, trial %d, %s line %d: first difference at output token %d "
            "(baseline %d, %s %d; lengths %d and %d)\n",
            isatty(2) ? "\n" : "", r->name, trial + 1, b->files[p->file], p->line, at,
            at < p->n_ref ? p->ref[at] : -1, r->name, at < res->n_ids ? res->ids[at] : -1, p->n_ref,
            res->n_ids);
}

static int run_one(struct bench *b, int pi, const struct run_spec *r, struct gen_result *res) {
    struct gen_params gp;
    bench_params(b, r, pi, &gp);
    struct prompt *p = &b->prompts[pi];
    b->e.block = r->mode == GEN_DSPARK ? b->dspark : r->mode == GEN_DFLASH ? b->dflash : NULL;
    int rc = gen_run(&b->e, p->ids, p->n_ids, &gp, NULL, NULL, res);
    if (rc)
        fprintf(stderr, "error: %s failed on %s line %d\n", r->name, b->files[p->file], p->line);
    return rc;
}

static int measure(struct bench *b) {
    const struct opts *o = &b->o;
    struct gen_result res;
    struct cpu_mark all = cpu_mark_now();
    for (int ri = 0; ri < o->n_runs; ri++) { /* warm-up: caches, page faults, thread pool */
        if (run_one(b, 0, &o->runs[ri], &res)) return -1;
        gen_result_free(&res);
    }
    b->total = o->trials * b->n_prompts * o->n_runs;
    for (int t = 0; t < o->trials; t++) {
        struct cpu_mark trial = cpu_mark_now();
        for (int pi = 0; pi < b->n_prompts; pi++) {
            struct prompt *p = &b->prompts[pi];
            for (int ri = 0; ri < o->n_runs; ri++) {
                const struct run_spec *r = &o->runs[ri];
                if (run_one(b, pi, r, &res)) return -1;
                *bench_stats(b, ri, t, pi) = res.stats;
                if (o->temperature <= 0) {
                    if (!p->ref) { /* baseline runs first: its first output is the reference */
                        p->ref = res.ids;
                        p->n_ref = res.n_ids;
                        res.ids = NULL;
                    } else {
                        check_exact(b, p, r, &res, t);
                    }
                }
                gen_result_free(&res);
                b->done++;
                progress(b, r->name, b->cats[p->cat], t);
            }
        }
        b->busy[t] = cpu_others_share(&trial);
    }
    b->busy_all = cpu_others_share(&all);
    /* prompts on which no lookup run's index ever proposed a draft */
    for (int ri = 0; ri < o->n_runs; ri++) {
        if (o->runs[ri].mode != GEN_LOOKUP) continue;
        b->have_lookup = 1;
        for (int t = 0; t < o->trials; t++)
            for (int pi = 0; pi < b->n_prompts; pi++)
                b->prompts[pi].fired |= bench_stats(b, ri, t, pi)->lookup_rounds > 0;
    }
    return 0;
}

/* ---- command ---- */

/* The target, its tokenizer, and the drafters the runs need. */
static int load_models(struct bench *b, int threads) {
    const struct opts *o = &b->o;
    int need[GEN_DFLASH + 1] = {0};
    for (int i = 0; i < o->n_runs; i++) need[o->runs[i].mode] = 1;
    if (tokenizer_load(o->model_dir, &b->e.tok)) return -1;
    struct model_opts mo = {
        .n_threads = threads, .gpu = o->gpu, .gpu_inputs = o->gpu_inputs, .gpu_kv = o->gpu_kv};
    if (model_load(o->model_dir, &mo, &b->e.target)) return -1;
    mo.pool = model_pool(b->e.target); /* one set of threads for every model */
    if (need[GEN_DRAFT] && model_load(o->drafter_dir, &mo, &b->e.draft)) return -1;
    if (need[GEN_DSPARK] && block_model_load(o->dspark_dir, b->e.target, &b->dspark)) return -1;
    if (need[GEN_DFLASH] && block_model_load(o->dflash_dir, b->e.target, &b->dflash)) return -1;
    return 0;
}

/* Runs named auto[:N] become the mode --mode auto picks (renamed auto-MODE[:N]); its drafter
 * serves as that mode's folder unless one was given. buf holds the folder. */
static int resolve_auto(struct opts *o, char *buf, size_t cap) {
    for (int i = 0; i < o->n_runs; i++) {
        struct run_spec *r = &o->runs[i];
        const char *dir;
        if (strncmp(r->name, "auto", 4) || (r->name[4] && r->name[4] != ':')) continue;
        if (cli_mode_auto(o->model_dir, NULL, &r->mode, buf, cap, &dir)) return -1;
        const char **slot = r->mode == GEN_DRAFT    ? &o->drafter_dir
                            : r->mode == GEN_DSPARK ? &o->dspark_dir
                            : r->mode == GEN_DFLASH ? &o->dflash_dir
                                                    : NULL;
        if (slot && !*slot) *slot = dir;
        char name[sizeof r->name];
        snprintf(name, sizeof name, "auto-%.8s%.16s", gen_mode_name(r->mode), r->name + 4);
        memcpy(r->name, name, sizeof name);
    }
    return 0;
}

/* --max-draft auto runs: each gets the costs of its mode (cached, else measured now) and its
 * own controller state, which carries over from prompt to prompt as in a server. */
static int calibrate_runs(struct bench *b, int threads) {
    struct opts *o = &b->o;
    for (int i = 0; i < o->n_runs; i++) {
        struct run_spec *r = &o->runs[i];
        if (r->max_draft != RUN_AUTO_DRAFT || r->mode == GEN_BASELINE) continue;
        if (!(o->tune[i] = calloc(1, sizeof *o->tune[i]))) return -1;
        const char *mode = gen_mode_name(r->mode);
        struct block_model *bm = r->mode == GEN_DSPARK   ? b->dspark
                                 : r->mode == GEN_DFLASH ? b->dflash
                                                         : NULL;
        const char *dir = r->mode == GEN_DRAFT    ? o->drafter_dir
                          : r->mode == GEN_DSPARK ? o->dspark_dir
                          : r->mode == GEN_DFLASH ? o->dflash_dir
                                                  : NULL;
        struct tune_subject ts = {
            .target = b->e.target,
            .draft = r->mode == GEN_DRAFT ? b->e.draft : NULL,
            .block = bm,
            .mode = mode,
            .target_dir = o->model_dir,
            .drafter_dir = dir,
            .max_cap = tune_default_max_cap(mode, bm ? block_model_config(bm)->block_size : 0),
            .max_batch = 1,
            .n_threads = threads,
            .gpu = o->gpu};
        struct tune_calib_opts co = {
            .cache_path = o->calib_file, .show_progress = isatty(2), .force = o->recalibrate};
        if (tune_calibrate(&ts, &co, &o->tune[i]->costs, NULL)) return -1;
    }
    return 0;
}

/* The chart's path: --svg, else the JSON's with .svg for .json; NULL for neither. */
static const char *svg_path(const struct opts *o, char *buf, size_t cap) {
    if (o->svg_path || !o->json_path) return o->svg_path;
    size_t n = strlen(o->json_path);
    if (n > 5 && !strcmp(o->json_path + n - 5, ".json")) n -= 5;
    snprintf(buf, cap, "%.*s.svg", (int)n, o->json_path);
    return buf;
}

/* DIR + suffix in buf (for the default drafter folders). */
static const char *beside(char *buf, size_t cap, const char *dir, const char *suffix) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    snprintf(buf, cap, "%.*s%s", (int)n, dir, suffix);
    return buf;
}

int cmd_benchmark(int argc, char **argv) {
    struct bench b = {
        .o = {.model_dir = DEFAULT_MODEL, .limit = 10, .max_new = 128, .trials = 3, .chat = 1}};
    struct opts *o = &b.o;
    int rc = parse_runs("baseline,lookup,draft", o);
    if (!rc) rc = parse(argc, argv, o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o->caps && expand_caps(o)) return 2;
    if (!fs_exists(o->model_dir)) {
        fprintf(stderr, "error: %s does not exist here\n", o->model_dir);
        fprintf(stderr, "hint: run from the repository root or pass --model DIR\n");
        return 2;
    }
    char dm[4096], ds[4096], df[4096], da[4096];
    if (resolve_auto(o, da, sizeof da)) return 2;
    for (int i = 0; i < o->n_runs; i++) /* modes whose default is --max-draft auto */
        if (o->runs[i].max_draft == -1 && o->max_draft <= 0 &&
            gen_default_auto_draft(o->runs[i].mode))
            o->runs[i].max_draft = RUN_AUTO_DRAFT;
    if (!o->drafter_dir) o->drafter_dir = beside(dm, sizeof dm, o->model_dir, "-draft");
    if (!o->dspark_dir) o->dspark_dir = beside(ds, sizeof ds, o->model_dir, "-dspark");
    if (!o->dflash_dir) o->dflash_dir = beside(df, sizeof df, o->model_dir, "-dflash");
    int threads = o->threads > 0 ? o->threads : cpu_count();
    rc = 1;
    if (list_files(&b) || load_models(&b, threads)) goto done;
    int max_prompt = model_config(b.e.target)->max_pos - o->max_new - 65;
    for (int f = 0; f < b.n_files; f++)
        if (load_file(&b, f, max_prompt)) goto done;
    if (!b.n_prompts) {
        fprintf(stderr, "error: no prompts to run (check --prompts and --categories)\n");
        goto done;
    }
    b.stats = calloc((size_t)o->n_runs * (size_t)o->trials * (size_t)b.n_prompts, sizeof *b.stats);
    if (!b.stats) goto done;
    char cpu[256];
    bench_cpu_name(cpu, sizeof cpu);
    printf("dspark benchmark: %s, %d cores, %d threads\n", cpu, cpu_count(), threads);
    if (o->gpu)
        printf("target on the GPU: %s, matmul inputs %s\n", gpu_device_name(),
               gpu_model_input_terms(model_gpu(b.e.target)) == 1 ? "rounded to bf16"
                                                                 : "exact (three bf16 terms)");
    printf("model %s", o->model_dir);
    if (b.e.draft) printf(", drafter %s", o->drafter_dir);
    if (b.dspark) printf(", DSpark drafter %s", o->dspark_dir);
    if (b.dflash) printf(", DFlash drafter %s", o->dflash_dir);
    printf("; %d prompts, up to %d new tokens, %d trials, %s, %s\n", b.n_prompts, o->max_new,
           o->trials, o->temperature > 0 ? "sampling" : "greedy",
           o->chat ? "ChatML user turn" : "raw text");
    for (int c = 0; c < b.n_cats; c++) {
        printf("  %-8s", b.cats[c]);
        for (int f = 0; f < b.n_files; f++) {
            int n = 0;
            for (int i = 0; i < b.n_prompts; i++)
                n += b.prompts[i].file == f && b.prompts[i].cat == c;
            if (n) printf(" %s (%d)", b.files[f], n);
        }
        printf("\n");
    }
    fflush(stdout);
    if (o->widths) {
        if (!(b.cost = cJSON_CreateObject()) ||
            bench_cost(b.e.target, "target", 256, o->widths, b.cost) ||
            (b.e.draft && bench_cost(b.e.draft, "drafter", 256, o->widths, b.cost)))
            goto done;
        fflush(stdout);
    }
    if (calibrate_runs(&b, threads) || measure(&b)) goto done;
    bench_print_table(&b);
    if (o->json_path && bench_write_json(&b, o->json_path, threads)) goto done;
    char svg[4096];
    const char *sp = svg_path(o, svg, sizeof svg);
    if (sp && bench_write_svg(&b, sp, threads)) goto done;
    rc = b.mismatches ? 1 : 0;
done:
    for (int i = 0; i < b.n_prompts; i++) free(b.prompts[i].ids), free(b.prompts[i].ref);
    free(b.prompts);
    for (int i = 0; i < b.n_files; i++) free(b.file_mem[i]);
    free(b.stats);
    for (int i = 0; i < o->n_runs; i++) free(o->tune[i]);
    cJSON_Delete(b.cost);
    block_model_free(b.dspark);
    block_model_free(b.dflash);
    model_free(b.e.draft);
    model_free(b.e.target);
    tokenizer_free(b.e.tok);
    return rc;
}
