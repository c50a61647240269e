/* cli/bench_report.c: the results of `dspark benchmark`: per run and prompt group (a category,
 * all prompts, the prompts where lookup never fired), token-weighted rates within each trial,
 * then medians over trials; speedups are paired (the ratio to baseline within the same trial,
 * then the median), which cancels most of a slow drift of the machine's speed. */
#include "cli/bench.h"

#include "backend/gpu.h"
#include "base/thread.h"
#include "tune/controller.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prompt groups: a category (0 .. n_cats-1), all prompts, or those where lookup never fired. */
static int group_all(const struct bench *b) {
    return b->n_cats;
}
static int in_group(const struct bench *b, int pi, int g) {
    const struct prompt *p = &b->prompts[pi];
    return g < b->n_cats ? p->cat == g : g == group_all(b) ? 1 : !p->fired;
}
static const char *group_name(const struct bench *b, int g) {
    return g < b->n_cats ? b->cats[g] : g == group_all(b) ? "all" : "no-fire";
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double ratio(double a, double c) {
    return c > 0 ? a / c : 0;
}

struct summary {
    int prompts;
    double gen;                                     /* tokens generated per trial */
    double decode_tok_s, decode_best, decode_worst; /* median, max and min over trials */
    double tok_s;                                   /* end to end (prefill + decode), median */
    double accept, tok_round;                       /* accepted drafts and tokens per round */
    double lookup_share, lookup_prompts;            /* of rounds, of prompts */
    double draft_share;                             /* of decode time spent drafting */
    double speedup; /* median over trials of decode tok/s / baseline's in the same trial */
};

/* Token-weighted rates over a group's prompts within each trial, then median over trials. */
static void rates(const struct bench *b, int ri, int g, struct summary *s, double *dec) {
    int T = b->o.trials;
    double e2e[1000];
    double gen = 0, rounds = 0, accepted = 0, lookups = 0, ds = 0, dd = 0, lp = 0;
    memset(s, 0, sizeof *s);
    s->decode_worst = 1e300;
    for (int t = 0; t < T; t++) {
        double tg = 0, tdec = 0, tpre = 0;
        for (int pi = 0; pi < b->n_prompts; pi++) {
            if (!in_group(b, pi, g)) continue;
            const struct gen_stats *st = bench_stats(b, ri, t, pi);
            tg += st->n_generated, tdec += st->decode_s, tpre += st->prefill_s;
            rounds += st->rounds, accepted += st->accepted, lookups += st->lookup_rounds;
            ds += st->draft_s, lp += st->lookup_rounds > 0;
            s->prompts += t == 0;
        }
        dec[t] = ratio(tg, tdec);
        e2e[t] = ratio(tg, tdec + tpre);
        gen += tg, dd += tdec;
        if (dec[t] > s->decode_best) s->decode_best = dec[t];
        if (dec[t] < s->decode_worst) s->decode_worst = dec[t];
    }
    s->tok_s = median(e2e, T);
    s->gen = gen / T;
    /* greedy rounds are the same in every trial; under sampling these are means over trials */
    s->accept = ratio(accepted, rounds);
    s->tok_round = ratio(gen, rounds);
    s->lookup_share = ratio(lookups, rounds);
    s->lookup_prompts = ratio(lp, (double)T * s->prompts);
    s->draft_share = ratio(ds, dd);
}

static void summarize(const struct bench *b, int ri, int g, struct summary *s) {
    int T = b->o.trials;
    double dec[1000], base[1000], paired[1000];
    rates(b, 0, g, s, base);
    rates(b, ri, g, s, dec);
    for (int t = 0; t < T; t++) paired[t] = ratio(dec[t], base[t]);
    s->speedup = median(paired, T);
    s->decode_tok_s = median(dec, T); /* sorts dec */
}

static int n_groups(const struct bench *b) {
    return b->n_cats + 1 + b->have_lookup; /* the categories, all, no-fire */
}

int bench_n_groups(const struct bench *b) {
    return n_groups(b);
}

const char *bench_group_name(const struct bench *b, int g) {
    return group_name(b, g);
}

double bench_group_decode(const struct bench *b, int ri, int g) {
    struct summary s;
    summarize(b, ri, g, &s);
    return s.prompts ? s.decode_tok_s : 0;
}

/* Rounds of run ri by the cap in force, over every trial and prompt (--max-draft auto). */
static void cap_rounds(const struct bench *b, int ri, long *rounds, long *total) {
    *total = 0;
    for (int k = 0; k <= GEN_MAX_CAP; k++) rounds[k] = 0;
    for (int t = 0; t < b->o.trials; t++)
        for (int pi = 0; pi < b->n_prompts; pi++)
            for (int k = 0; k <= GEN_MAX_CAP; k++) {
                rounds[k] += bench_stats(b, ri, t, pi)->cap_rounds[k];
                *total += bench_stats(b, ri, t, pi)->cap_rounds[k];
            }
}

void bench_print_table(const struct bench *b) {
    printf("\n%-16s %-8s %7s %7s %12s %7s %10s %8s %9s %9s %8s %7s\n", "run", "category", "prompts",
           "tokens", "decode tok/s", "range%", "e2e tok/s", "speedup", "acc/round", "tok/round",
           "lookup%", "draft%");
    for (int ri = 0; ri < b->o.n_runs; ri++) {
        for (int g = 0; g < n_groups(b); g++) {
            struct summary s;
            summarize(b, ri, g, &s);
            if (!s.prompts || (g == group_all(b) && b->n_cats == 1)) continue;
            printf("%-16s %-8s %7d %7.0f %12.1f %7.1f %10.1f %7.2fx %9.2f %9.2f %8.1f %7.1f\n",
                   b->o.runs[ri].name, group_name(b, g), s.prompts, s.gen, s.decode_tok_s,
                   100 * ratio(s.decode_best - s.decode_worst, s.decode_tok_s), s.tok_s, s.speedup,
                   s.accept, s.tok_round, 100 * s.lookup_share, 100 * s.draft_share);
        }
    }
    printf("\ndecode tok/s: median over trials of generated tokens / decode seconds, summed over "
           "the group's prompts; range%%: (max - min) / median; speedup: median over trials of the "
           "ratio to baseline's decode tok/s in the same trial; lookup%%: share of rounds "
           "drafted by the n-gram index; draft%%: share of decode time spent drafting");
    if (b->have_lookup) printf("; no-fire: prompts on which lookup never proposed a draft");
    printf("\n");
    double worst = 0;
    for (int t = 0; t < b->o.trials; t++) worst = b->busy[t] > worst ? b->busy[t] : worst;
    printf("other processes used %.0f%% of the CPUs during the measurement (%.0f%% in the busiest "
           "trial)%s\n",
           100 * b->busy_all, 100 * worst,
           worst > 0.05 ? ": the figures are disturbed, re-run on a quiet machine" : "");
    for (int ri = 0; ri < b->o.n_runs; ri++) {
        long rounds[GEN_MAX_CAP + 1], total;
        if (!b->o.tune[ri]) continue;
        cap_rounds(b, ri, rounds, &total);
        printf("%s: rounds by cap", b->o.runs[ri].name);
        for (int k = 0; k <= GEN_MAX_CAP; k++)
            if (rounds[k]) printf(" %d:%.0f%%", k, 100.0 * (double)rounds[k] / (double)total);
        printf("\n");
    }
    if (b->o.temperature <= 0)
        printf("exactness: %d greedy outputs compared with baseline's ids, %d mismatch%s\n",
               b->compared, b->mismatches, b->mismatches == 1 ? "" : "es");
    else
        printf("exactness: not checked (temperature > 0)\n");
}

void bench_cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = 0;
        snprintf(out, cap, "%s", colon);
        break;
    }
    if (f) fclose(f);
}

static void git_commit(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *p = popen("git rev-parse HEAD 2>/dev/null", "r");
    char line[128];
    if (p && fgets(line, sizeof line, p) && strlen(line) >= 40) {
        line[strcspn(line, "\n")] = 0;
        size_t n = strlen(line) < cap - 1 ? strlen(line) : cap - 1; /* a hash fits; never cut */
        memcpy(out, line, n);
        out[n] = 0;
    }
    if (p) pclose(p);
}

static cJSON *summary_json(cJSON *o, const struct summary *s) {
    cJSON_AddNumberToObject(o, "prompts", s->prompts);
    cJSON_AddNumberToObject(o, "tokens", s->gen);
    cJSON_AddNumberToObject(o, "tok_s", s->tok_s);
    cJSON_AddNumberToObject(o, "decode_tok_s", s->decode_tok_s);
    cJSON_AddNumberToObject(o, "decode_tok_s_best", s->decode_best);
    cJSON_AddNumberToObject(o, "decode_tok_s_worst", s->decode_worst);
    cJSON_AddNumberToObject(o, "speedup", s->speedup);
    cJSON_AddNumberToObject(o, "accept", s->accept);
    cJSON_AddNumberToObject(o, "tokens_per_round", s->tok_round);
    cJSON_AddNumberToObject(o, "lookup_share", s->lookup_share);
    cJSON_AddNumberToObject(o, "lookup_prompt_share", s->lookup_prompts);
    cJSON_AddNumberToObject(o, "draft_time_share", s->draft_share);
    return o;
}

/* One entry per prompt: where it came from and, per run, its median decode speed. */
static cJSON *prompts_json(const struct bench *b) {
    int T = b->o.trials;
    cJSON *arr = cJSON_CreateArray();
    for (int pi = 0; pi < b->n_prompts; pi++) {
        const struct prompt *p = &b->prompts[pi];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, x);
        cJSON_AddStringToObject(x, "file", b->files[p->file]);
        cJSON_AddNumberToObject(x, "line", p->line);
        cJSON_AddStringToObject(x, "category", b->cats[p->cat]);
        cJSON_AddNumberToObject(x, "prompt_tokens", p->n_ids);
        cJSON_AddNumberToObject(x, "tokens", bench_stats(b, 0, 0, pi)->n_generated);
        cJSON *runs = cJSON_AddObjectToObject(x, "runs");
        for (int ri = 0; ri < b->o.n_runs; ri++) {
            double dec[1000], paired[1000];
            for (int t = 0; t < T; t++) {
                const struct gen_stats *st = bench_stats(b, ri, t, pi),
                                       *sb = bench_stats(b, 0, t, pi);
                dec[t] = ratio(st->n_generated, st->decode_s);
                paired[t] = ratio(dec[t], ratio(sb->n_generated, sb->decode_s));
            }
            const struct gen_stats *st = bench_stats(b, ri, 0, pi);
            cJSON *r = cJSON_AddObjectToObject(runs, b->o.runs[ri].name);
            cJSON_AddNumberToObject(r, "decode_tok_s", median(dec, T));
            cJSON_AddNumberToObject(r, "speedup", median(paired, T));
            cJSON_AddNumberToObject(r, "rounds", st->rounds);
            cJSON_AddNumberToObject(r, "accepted", st->accepted);
            cJSON_AddNumberToObject(r, "lookup_rounds", st->lookup_rounds);
        }
    }
    return arr;
}

int bench_write_json(const struct bench *b, const char *path, int threads) {
    const struct opts *o = &b->o;
    char cpu[256], commit[64];
    bench_cpu_name(cpu, sizeof cpu);
    git_commit(commit, sizeof commit);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "device", cpu);
    if (b->o.gpu) {
        cJSON_AddStringToObject(j, "gpu", gpu_device_name());
        cJSON_AddStringToObject(
            j, "gpu_inputs", gpu_model_input_terms(model_gpu(b->e.target)) == 1 ? "bf16" : "exact");
        cJSON_AddStringToObject(j, "gpu_kv",
                                gpu_model_kv_bytes(model_gpu(b->e.target)) == 2 ? "bf16" : "f32");
    }
    cJSON_AddNumberToObject(j, "cores", cpu_count());
    cJSON_AddStringToObject(j, "model", o->model_dir);
    /* "drafter": the draft model's folder (null when no run used it); "drafters": every one */
    cJSON *dr = cJSON_CreateObject();
    const char *draft = NULL;
    for (int i = 0; i < o->n_runs; i++) {
        enum gen_mode m = o->runs[i].mode;
        const char *dir = m == GEN_DRAFT    ? o->drafter_dir
                          : m == GEN_DSPARK ? o->dspark_dir
                          : m == GEN_DFLASH ? o->dflash_dir
                                            : NULL;
        if (m == GEN_DRAFT) draft = dir;
        if (dir && !cJSON_HasObjectItem(dr, gen_mode_name(m)))
            cJSON_AddStringToObject(dr, gen_mode_name(m), dir);
    }
    if (draft)
        cJSON_AddStringToObject(j, "drafter", draft);
    else
        cJSON_AddNullToObject(j, "drafter");
    cJSON_AddItemToObject(j, "drafters", dr);
    cJSON_AddStringToObject(j, "commit", commit);
    cJSON *fl = cJSON_AddObjectToObject(j, "flags");
    cJSON *runs = cJSON_AddArrayToObject(fl, "modes"),
          *files = cJSON_AddArrayToObject(fl, "prompts");
    for (int i = 0; i < o->n_runs; i++)
        cJSON_AddItemToArray(runs, cJSON_CreateString(o->runs[i].name));
    for (int i = 0; i < b->n_files; i++)
        cJSON_AddItemToArray(files, cJSON_CreateString(b->files[i]));
    cJSON_AddNumberToObject(fl, "limit", o->limit);
    cJSON_AddNumberToObject(fl, "max_new_tokens", o->max_new);
    cJSON_AddNumberToObject(fl, "trials", o->trials);
    cJSON_AddNumberToObject(fl, "threads", threads);
    cJSON_AddNumberToObject(fl, "temperature", o->temperature);
    cJSON_AddBoolToObject(fl, "chat", o->chat);
    cJSON *out = cJSON_AddArrayToObject(j, "runs");
    for (int ri = 0; ri < o->n_runs; ri++) {
        struct gen_params gp;
        bench_params(b, &o->runs[ri], 0, &gp);
        struct summary all;
        summarize(b, ri, group_all(b), &all);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToArray(out, r);
        cJSON_AddStringToObject(r, "run", o->runs[ri].name);
        cJSON_AddNumberToObject(r, "max_draft", gp.max_draft);
        if (o->tune[ri]) { /* --max-draft auto: the rounds at each cap */
            long rounds[GEN_MAX_CAP + 1], total;
            char k[16];
            cap_rounds(b, ri, rounds, &total);
            cJSON_AddStringToObject(r, "cap", "auto");
            cJSON *cr = cJSON_AddObjectToObject(r, "cap_rounds");
            for (int c = 0; c <= GEN_MAX_CAP; c++) {
                snprintf(k, sizeof k, "%d", c);
                if (rounds[c]) cJSON_AddNumberToObject(cr, k, (double)rounds[c]);
            }
        } else {
            cJSON_AddNumberToObject(r, "cap", gp.max_draft);
        }
        summary_json(r, &all);
        cJSON *pc = cJSON_AddObjectToObject(r, "per_category");
        for (int g = 0; g < n_groups(b); g++) {
            struct summary s;
            if (g == group_all(b)) continue;
            summarize(b, ri, g, &s);
            if (s.prompts)
                cJSON_AddItemToObject(pc, group_name(b, g), summary_json(cJSON_CreateObject(), &s));
        }
    }
    if (b->cost) cJSON_AddItemReferenceToObject(j, "forward_cost", b->cost);
    cJSON *busy = cJSON_AddObjectToObject(j, "other_cpu_share");
    cJSON_AddNumberToObject(busy, "all", b->busy_all);
    cJSON_AddItemToObject(busy, "trials", cJSON_CreateDoubleArray(b->busy, o->trials));
    cJSON_AddItemToObject(j, "prompts", prompts_json(b));
    cJSON *ex = cJSON_AddObjectToObject(j, "exactness");
    cJSON_AddBoolToObject(ex, "checked", o->temperature <= 0);
    cJSON_AddNumberToObject(ex, "compared", b->compared);
    cJSON_AddNumberToObject(ex, "mismatches", b->mismatches);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = text ? fopen(path, "w") : NULL;
    int rc = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(text);
    if (rc) fprintf(stderr, "error: could not write %s\n", path);
    return rc;
}
