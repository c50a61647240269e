/* cli/cmd_generate.c: `dspark generate`: load a model folder (and a draft model), encode the
 * prompt (raw text, no chat template yet, or token ids), run plain or speculative generation,
 * stream the text to stdout and the speed report to stderr; or, with --json, print one JSON
 * object with the ids, the text, the statistics and every round's drafts. */
#include "cli/args.h"
#include "cli/auto.h"
#include "cli/commands.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/thread.h"
#include "engine/generate.h"
#include "spec/block_model.h"
#include "tokenizer/tokenizer.h"
#include "tune/calib.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MODEL "models/pycoder"
#define MAX_STOP      8

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark generate [--model DIR] (--prompt TEXT | --prompt-ids IDS) [flags]\n\n"
            "  --model DIR            Hugging Face model folder (default: " DEFAULT_MODEL ")\n"
            "  --prompt TEXT          prompt text, used as is (no chat template)\n"
            "  --prompt-ids IDS       prompt as comma-separated token ids\n"
            "  --max-tokens N         new tokens at most (default 128)\n"
            "  --temperature T        0 = greedy (default: generation_config.json, else 0)\n"
            "  --top-p P              nucleus sampling mass (default: generation_config.json)\n"
            "  --top-k K              keep the K most likely tokens (0 = off)\n"
            "  --presence-penalty X   OpenAI presence penalty (default 0)\n"
            "  --frequency-penalty X  OpenAI frequency penalty (default 0)\n"
            "  --seed S               random seed (default 0): same seed, same output\n"
            "  --stop TEXT            stop before this text (repeatable, up to 8)\n"
            "  --ignore-eos           do not stop at end-of-sequence tokens\n"
            "  --mode M               baseline | lookup | draft | dspark | dflash | auto\n"
            "                         (default baseline; auto: the best drafter found for the\n"
            "                         model, see `dspark models`)\n"
            "  --drafter DIR          drafter folder for draft, dspark and dflash modes\n"
            "                         (default: DIR-draft, DIR-dspark, DIR-dflash)\n"
            "  --max-draft N|auto     drafts verified per round at most (default 15 lookup,\n"
            "                         3 draft, 4 dspark, auto dflash; 0: the whole block);\n"
            "                         auto: chosen every few rounds from this machine's\n"
            "                         measured costs and the acceptance so far\n"
            "  --calibration-file F   --max-draft auto's cost cache (default\n"
            "                         ~/.cache/dspark/calibration.json)\n"
            "  --recalibrate          measure the costs again even when they are cached\n"
            "  --confidence-threshold X  dspark: end the block where the chance that every\n"
            "                         draft so far is accepted falls below X (default 0: off)\n"
            "  --confidence-per-slot  ... judged by each draft's own confidence instead\n"
            "  --lookup-drafts        in draft mode, verify an n-gram continuation when the\n"
            "                         prompt or output has one (default on)\n"
            "  --no-lookup-drafts     always ask the draft model\n"
            "  --logprobs N           with --json: raw logprobs with N alternatives per token\n"
            "  --json                 print one JSON object (ids, text, stats, rounds)\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --gpu                  run the target and its drafter on the GPU (a `make CUDA=1`\n"
            "                         build)\n"
            "  --gpu-inputs exact|bf16  GPU matmul inputs: rounded to bf16 as PyTorch's bf16\n"
            "                         models do (default), or three bf16 terms each, so that\n"
            "                         products are exact float32 ones as on the CPU (slower\n"
            "                         verify rounds and prompts)\n"
            "  --gpu-kv f32|bf16      GPU K/V cache elements: float32 (default) or bfloat16\n"
            "                         (half the memory and of attention's reads at long\n"
            "                         contexts; keys and values rounded as they are stored)\n"
            "  --activations f32|bf16 activation precision (default f32; bf16 rounds where\n"
            "                         transformers' bfloat16 path rounds, to reproduce it)\n"
            "  --no-progress          no progress bar while loading\n");
}

struct opts {
    const char *model_dir, *drafter_dir, *prompt, *prompt_ids;
    const char *stop[MAX_STOP];
    int n_stop, threads, progress, bf16_acts, json, max_draft, gpu, gpu_inputs, gpu_kv, auto_mode;
    float temperature, top_p;
    int top_k;
    struct gen_params gp;
    int auto_draft, recalibrate; /* --max-draft auto */
    const char *calib_file;
};

static int parse_mode(const char *v, struct opts *o) {
    if (v && !strcmp(v, "auto")) return o->auto_mode = 1, 0;
    if (v && !gen_mode_parse(v, &o->gp.mode)) return o->auto_mode = 0, 0;
    fprintf(stderr, "error: --mode takes baseline, lookup, draft, dspark, dflash or auto\n");
    return -1;
}

/* Returns 0 to go on, else the exit code (help printed: 0 through -1). */
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
        } else if (args_flag(&a, "--prompt-ids")) {
            bad = !(o->prompt_ids = a.value);
        } else if (args_flag(&a, "--prompt")) {
            bad = !(o->prompt = a.value);
        } else if (args_flag(&a, "--max-tokens")) {
            bad = args_int(arg, a.value, 1, 1 << 24, &o->gp.max_tokens);
        } else if (args_flag(&a, "--temperature")) {
            bad = args_float("--temperature", a.value, 0, 100, &o->temperature);
        } else if (args_flag(&a, "--top-p")) {
            bad = args_float("--top-p", a.value, 0, 1, &o->top_p);
        } else if (args_flag(&a, "--top-k")) {
            bad = args_int("--top-k", a.value, 0, 1 << 24, &o->top_k);
        } else if (args_flag(&a, "--presence-penalty")) {
            bad = args_float("--presence-penalty", a.value, -2, 2, &o->gp.sp.presence_penalty);
        } else if (args_flag(&a, "--frequency-penalty")) {
            bad = args_float("--frequency-penalty", a.value, -2, 2, &o->gp.sp.frequency_penalty);
        } else if (args_flag(&a, "--seed")) {
            bad = args_u64("--seed", a.value, &o->gp.sp.seed);
        } else if (args_flag(&a, "--stop")) {
            if (!a.value || o->n_stop == MAX_STOP || !*a.value) {
                fprintf(stderr, "error: --stop takes a non-empty text, at most %d times\n",
                        MAX_STOP);
                bad = 1;
            } else {
                o->stop[o->n_stop++] = a.value;
            }
        } else if (args_flag(&a, "--mode")) {
            bad = parse_mode(a.value, o);
        } else if (args_flag(&a, "--confidence-threshold")) {
            bad = args_float("--confidence-threshold", a.value, 0, 1, &o->gp.confidence_threshold);
        } else if (!strcmp(arg, "--confidence-per-slot")) {
            o->gp.confidence_per_slot = 1;
        } else if (args_flag(&a, "--max-draft")) {
            o->auto_draft = a.value && !strcmp(a.value, "auto");
            if (!o->auto_draft && args_int("--max-draft", a.value, 0, 64, &o->max_draft)) {
                fprintf(stderr, "hint: --max-draft takes a number of drafts or auto\n");
                bad = 1;
            }
        } else if (args_flag(&a, "--calibration-file")) {
            bad = !(o->calib_file = a.value);
        } else if (!strcmp(arg, "--recalibrate")) {
            o->recalibrate = 1;
        } else if (args_flag(&a, "--logprobs")) {
            bad = args_int("--logprobs", a.value, 0, LOGPROBS_MAX_TOP, &o->gp.top_logprobs);
        } else if (args_flag(&a, "--threads")) {
            bad = args_int("--threads", a.value, 1, 1024, &o->threads);
        } else if (args_flag(&a, "--activations")) {
            if (!a.value || (strcmp(a.value, "f32") && strcmp(a.value, "bf16"))) {
                fprintf(stderr, "error: --activations takes f32 or bf16\n");
                bad = 1;
            } else {
                o->bf16_acts = !strcmp(a.value, "bf16");
            }
        } else if (!strcmp(arg, "--lookup-drafts")) {
            o->gp.lookup_drafts = 1;
        } else if (!strcmp(arg, "--no-lookup-drafts")) {
            o->gp.lookup_drafts = 0;
        } else if (!strcmp(arg, "--ignore-eos")) {
            o->gp.ignore_eos = 1;
        } else if (!strcmp(arg, "--gpu")) {
            o->gpu = 1;
        } else if (args_flag(&a, "--gpu-inputs")) {
            bad = args_gpu_inputs(a.value, &o->gpu_inputs);
        } else if (args_flag(&a, "--gpu-kv")) {
            bad = args_gpu_kv(a.value, &o->gpu_kv);
        } else if (!strcmp(arg, "--json")) {
            o->json = 1;
        } else if (!strcmp(arg, "--no-progress")) {
            o->progress = 0;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark generate --help)\n", arg);
            return 2;
        }
        if (bad) return 2;
    }
    if (!o->prompt == !o->prompt_ids) {
        fprintf(stderr, "error: give exactly one of --prompt and --prompt-ids\n");
        return 2;
    }
    return 0;
}

static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16;
    *n = 0;
    *ids = malloc(sizeof(int32_t) * (size_t)cap);
    while (*ids && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "error: --prompt-ids takes comma-separated token ids, e.g. 1,2,3\n");
            return ERR_ARG;
        }
        if (*n == cap && !(*ids = realloc(*ids, sizeof(int32_t) * (size_t)(cap *= 2))))
            return ERR_NOMEM;
        (*ids)[(*n)++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return *ids ? OK : ERR_NOMEM;
}

static int on_token(void *ctx, int32_t id, const char *text, size_t len,
                    const struct logprobs *lp) {
    (void)ctx, (void)id, (void)lp;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

static cJSON *ids_json(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

static void print_json(const struct gen_result *r, const struct gen_params *gp,
                       const char *drafter) {
    const struct gen_stats *st = &r->stats;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", gen_mode_name(gp->mode));
    if (gp->mode >= GEN_DRAFT && drafter) cJSON_AddStringToObject(o, "drafter", drafter);
    cJSON_AddItemToObject(o, "ids", ids_json(r->ids, r->n_ids));
    cJSON_AddStringToObject(o, "text", r->text ? r->text : "");
    cJSON_AddStringToObject(o, "finish_reason", r->finish == GEN_FINISH_STOP ? "stop" : "length");
    cJSON *s = cJSON_AddObjectToObject(o, "stats");
    cJSON_AddNumberToObject(s, "prompt_tokens", st->n_prompt);
    cJSON_AddNumberToObject(s, "generated_tokens", st->n_generated);
    cJSON_AddNumberToObject(s, "rounds", st->rounds);
    cJSON_AddNumberToObject(s, "target_forwards", st->target_forwards);
    cJSON_AddNumberToObject(s, "drafted", st->drafted);
    cJSON_AddNumberToObject(s, "accepted", st->accepted);
    cJSON_AddNumberToObject(s, "mean_accepted", st->rounds ? (double)st->accepted / st->rounds : 0);
    cJSON_AddNumberToObject(s, "lookup_rounds", st->lookup_rounds);
    cJSON_AddNumberToObject(s, "prefill_s", st->prefill_s);
    cJSON_AddNumberToObject(s, "decode_s", st->decode_s);
    cJSON_AddNumberToObject(s, "draft_s", st->draft_s);
    cJSON_AddNumberToObject(s, "decode_tok_s",
                            st->decode_s > 0 ? st->n_generated / st->decode_s : 0);
    if (gp->tune) { /* --max-draft auto */
        cJSON *a = cJSON_AddObjectToObject(s, "auto_draft");
        cJSON *rounds = cJSON_AddObjectToObject(a, "cap_rounds");
        cJSON *rates = cJSON_AddObjectToObject(a, "predicted_tok_s");
        char k[16];
        for (int i = 0; i <= gp->tune->costs.max_cap; i++) {
            snprintf(k, sizeof k, "%d", i);
            if (st->cap_rounds[i]) cJSON_AddNumberToObject(rounds, k, st->cap_rounds[i]);
            cJSON_AddNumberToObject(rates, k, st->auto_rates[i]);
        }
        cJSON_AddNumberToObject(a, "cap", st->auto_cap);
        cJSON_AddNumberToObject(a, "acceptance", st->auto_accept);
    }
    cJSON *rounds = cJSON_AddArrayToObject(o, "rounds");
    for (int i = 0; gp->trace && i < st->rounds; i++) {
        const struct gen_round *rr = &r->rounds[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToObject(x, "drafted", ids_json(r->drafted + rr->first, rr->n_drafted));
        cJSON_AddNumberToObject(x, "accepted", rr->n_accepted);
        cJSON_AddBoolToObject(x, "lookup", rr->from_lookup);
        cJSON_AddItemToArray(rounds, x);
    }
    char *text = cJSON_PrintUnformatted(o);
    if (text) printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
}

int cmd_generate(int argc, char **argv) {
    struct opts o = {.progress = 1,
                     .temperature = -1,
                     .top_p = -1,
                     .top_k = -1,
                     .max_draft = -1,
                     .gp = {.max_tokens = 128, .top_logprobs = -1, .lookup_drafts = 1}};
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.model_dir) {
        o.model_dir = DEFAULT_MODEL;
        if (!fs_exists(o.model_dir)) {
            fprintf(stderr, "error: no --model given and %s does not exist here\n", o.model_dir);
            fprintf(stderr, "hint: run from the repository root or pass --model DIR\n");
            return 2;
        }
    }
    char draft_default[4096];
    if (o.auto_mode && (rc = cli_mode_auto(o.model_dir, o.drafter_dir, &o.gp.mode, draft_default,
                                           sizeof draft_default, &o.drafter_dir)))
        return rc;
    static const char *suffix[] = {"", "", "-draft", "-dspark", "-dflash"};
    if (o.gp.mode >= GEN_DRAFT && !o.drafter_dir) {
        snprintf(draft_default, sizeof draft_default, "%s%s", o.model_dir, suffix[o.gp.mode]);
        o.drafter_dir = draft_default;
    }
    if (o.max_draft < 0 && gen_default_auto_draft(o.gp.mode)) o.auto_draft = 1;
    o.gp.max_draft = o.max_draft >= 0 ? o.max_draft : gen_default_max_draft(o.gp.mode);
    o.gp.stop = o.stop;
    o.gp.n_stop = o.n_stop;
    o.gp.trace = o.json;
    rc = 1;
    struct gen_engine e = {0};
    int32_t *ids = NULL;
    int n_ids = 0;
    struct gen_result res = {0};
    struct tune_auto *ta = NULL;
    char tokjson[4096];
    int have_tok =
        fs_join(tokjson, sizeof tokjson, o.model_dir, "tokenizer.json") == OK && fs_exists(tokjson);
    if ((o.prompt || !o.json || o.n_stop || have_tok) && tokenizer_load(o.model_dir, &e.tok))
        goto done;
    struct model_opts mo = {.n_threads = o.threads,
                            .show_progress = o.progress && isatty(2),
                            .bf16_activations = o.bf16_acts,
                            .gpu = o.gpu,
                            .gpu_inputs = o.gpu_inputs,
                            .gpu_kv = o.gpu_kv};
    if (model_load(o.model_dir, &mo, &e.target)) goto done;
    if (o.gp.mode == GEN_DRAFT) {
        struct model_opts dmo = mo;
        dmo.pool = model_pool(e.target); /* one set of threads for both models */
        if (model_load(o.drafter_dir, &dmo, &e.draft)) goto done;
    } else if (o.gp.mode >= GEN_DSPARK && block_model_load(o.drafter_dir, e.target, &e.block)) {
        goto done;
    }
    if (o.auto_draft && o.gp.mode != GEN_BASELINE) {
        const char *mode = gen_mode_name(o.gp.mode);
        struct tune_subject ts = {.target = e.target,
                                  .draft = e.draft,
                                  .block = e.block,
                                  .mode = mode,
                                  .target_dir = o.model_dir,
                                  .drafter_dir = o.gp.mode >= GEN_DRAFT ? o.drafter_dir : NULL,
                                  .max_cap = tune_default_max_cap(
                                      mode, e.block ? block_model_config(e.block)->block_size : 0),
                                  .max_batch = 1,
                                  .n_threads = o.threads > 0 ? o.threads : cpu_count(),
                                  .bf16_activations = o.bf16_acts,
                                  .gpu = o.gpu};
        struct tune_calib_opts co = {.cache_path = o.calib_file,
                                     .show_progress = o.progress && isatty(2),
                                     .force = o.recalibrate};
        if (!(ta = calloc(1, sizeof *ta)) || tune_calibrate(&ts, &co, &ta->costs, NULL)) goto done;
        o.gp.tune = ta;
        o.gp.max_draft = ts.max_cap;
    }
    const struct hf_config *c = model_config(e.target);
    /* generation_config.json supplies the defaults when it asks for sampling */
    o.gp.sp.temperature = o.temperature >= 0 ? o.temperature : (c->do_sample ? c->temperature : 0);
    o.gp.sp.top_p = o.top_p >= 0 ? o.top_p : (c->do_sample ? c->top_p : 1);
    o.gp.sp.top_k = o.top_k >= 0 ? o.top_k : (c->do_sample ? c->top_k : 0);
    if (o.prompt_ids ? parse_ids(o.prompt_ids, &ids, &n_ids)
                     : tokenizer_encode(e.tok, o.prompt, strlen(o.prompt), &ids, &n_ids))
        goto done;
    if (!o.json && o.prompt) {
        fwrite(o.prompt, 1, strlen(o.prompt), stdout);
        fflush(stdout);
    }
    if (gen_run(&e, ids, n_ids, &o.gp, o.json ? NULL : on_token, NULL, &res)) goto done;
    const struct gen_stats *st = &res.stats;
    if (o.json) {
        print_json(&res, &o.gp, o.drafter_dir);
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "prefill: %d tokens in %.3f s (%.1f tok/s) | decode: %d tokens in %.3f s "
                "(%.1f tok/s) | %d threads\n",
                st->n_prompt, st->prefill_s,
                st->n_prompt / (st->prefill_s > 0 ? st->prefill_s : 1e-9), st->n_generated,
                st->decode_s, st->n_generated / (st->decode_s > 0 ? st->decode_s : 1e-9),
                o.threads > 0 ? o.threads : cpu_count());
        if (o.gp.mode != GEN_BASELINE)
            fprintf(stderr,
                    "speculation: %d rounds, %.2f drafts accepted per round (%d of %d), "
                    "%d lookup rounds, drafting %.3f s\n",
                    st->rounds, st->rounds ? (double)st->accepted / st->rounds : 0, st->accepted,
                    st->drafted, st->lookup_rounds, st->draft_s);
        if (ta) {
            fprintf(stderr, "auto draft length: rounds by cap");
            for (int k = 0; k <= ta->costs.max_cap; k++)
                if (st->cap_rounds[k]) fprintf(stderr, " %d:%d", k, st->cap_rounds[k]);
            fprintf(stderr, "; ends at cap %d, %.2f of drafts kept, predicted %.0f tok/s\n",
                    st->auto_cap, st->auto_accept, st->auto_rates[st->auto_cap]);
        }
    }
    rc = 0;
done:
    gen_result_free(&res);
    free(ta);
    free(ids);
    model_free(e.draft);
    block_model_free(e.block);
    model_free(e.target);
    tokenizer_free(e.tok);
    return rc;
}
