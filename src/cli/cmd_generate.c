/* cli/cmd_generate.c: `dspark generate`: load a model folder, encode the prompt (raw, no
 * chat template yet), stream the generated text to stdout, then print speed on stderr. */
#include "cli/args.h"
#include "cli/commands.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/thread.h"
#include "engine/generate.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MODEL "models/pycoder"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark generate [--model DIR] --prompt TEXT [flags]\n\n"
            "  --model DIR            Hugging Face model folder (default: " DEFAULT_MODEL ")\n"
            "  --prompt TEXT          prompt text, used as is (no chat template)\n"
            "  --max-tokens N         new tokens at most (default 128)\n"
            "  --temperature T        0 = greedy (default: generation_config.json, else 0)\n"
            "  --top-p P              nucleus sampling mass (default: generation_config.json)\n"
            "  --top-k K              keep the K most likely tokens (0 = off)\n"
            "  --presence-penalty X   OpenAI presence penalty (default 0)\n"
            "  --frequency-penalty X  OpenAI frequency penalty (default 0)\n"
            "  --seed S               random seed (default 0): same seed, same output\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --ignore-eos           do not stop at end-of-sequence tokens\n"
            "  --activations f32|bf16 activation precision (default f32; bf16 rounds where\n"
            "                         transformers' bfloat16 path rounds, to reproduce it)\n"
            "  --no-progress          no progress bar while loading\n");
}

struct out_ctx {
    struct detok *dt;
};

static int on_token(void *ctx, int32_t id) {
    struct out_ctx *o = ctx;
    const char *text;
    size_t len;
    if (detok_push(o->dt, id, &text, &len) == OK && len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *model_dir = NULL, *prompt = NULL;
    int max_tokens = 128, threads = 0, ignore_eos = 0, progress = 1, bf16_acts = 0;
    float temperature = -1, top_p = -1, pp = 0, fp = 0;
    int top_k = -1;
    uint64_t seed = 0;
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        int bad = 0;
        if (!strcmp(argv[a.i], "--help") || !strcmp(argv[a.i], "-h")) {
            usage(stdout);
            return 0;
        } else if (args_flag(&a, "--model")) {
            bad = !(model_dir = a.value);
        } else if (args_flag(&a, "--prompt")) {
            bad = !(prompt = a.value);
        } else if (args_flag(&a, "--max-tokens")) {
            bad = args_int("--max-tokens", a.value, 1, 1 << 24, &max_tokens);
        } else if (args_flag(&a, "--temperature")) {
            bad = args_float("--temperature", a.value, 0, 100, &temperature);
        } else if (args_flag(&a, "--top-p")) {
            bad = args_float("--top-p", a.value, 0, 1, &top_p);
        } else if (args_flag(&a, "--top-k")) {
            bad = args_int("--top-k", a.value, 0, 1 << 24, &top_k);
        } else if (args_flag(&a, "--presence-penalty")) {
            bad = args_float("--presence-penalty", a.value, -2, 2, &pp);
        } else if (args_flag(&a, "--frequency-penalty")) {
            bad = args_float("--frequency-penalty", a.value, -2, 2, &fp);
        } else if (args_flag(&a, "--seed")) {
            bad = args_u64("--seed", a.value, &seed);
        } else if (args_flag(&a, "--threads")) {
            bad = args_int("--threads", a.value, 1, 1024, &threads);
        } else if (args_flag(&a, "--activations")) {
            if (!a.value || (strcmp(a.value, "f32") && strcmp(a.value, "bf16"))) {
                fprintf(stderr, "error: --activations takes f32 or bf16\n");
                return 2;
            }
            bf16_acts = !strcmp(a.value, "bf16");
        } else if (!strcmp(argv[a.i], "--ignore-eos")) {
            ignore_eos = 1;
        } else if (!strcmp(argv[a.i], "--no-progress")) {
            progress = 0;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark generate --help)\n", argv[a.i]);
            return 2;
        }
        if (bad) return 2;
    }
    if (!prompt) {
        fprintf(stderr, "error: --prompt is required (see dspark generate --help)\n");
        return 2;
    }
    if (!model_dir) {
        model_dir = DEFAULT_MODEL;
        if (!fs_exists(model_dir)) {
            fprintf(stderr, "error: no --model given and %s does not exist here\n", model_dir);
            fprintf(stderr, "hint: run from the repository root or pass --model DIR\n");
            return 2;
        }
    }
    int rc = 1;
    struct tokenizer *tok = NULL;
    struct model *m = NULL;
    struct sampler *s = NULL;
    struct detok *dt = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    if (tokenizer_load(model_dir, &tok)) goto done;
    struct model_opts mo = {.n_threads = threads, .show_progress = progress && isatty(2),
                            .bf16_activations = bf16_acts};
    if (model_load(model_dir, &mo, &m)) goto done;
    const struct hf_config *c = model_config(m);
    /* generation_config.json supplies the defaults when it asks for sampling */
    struct sample_params sp = {
        .temperature = temperature >= 0 ? temperature : (c->do_sample ? c->temperature : 0),
        .top_p = top_p >= 0 ? top_p : (c->do_sample ? c->top_p : 1),
        .top_k = top_k >= 0 ? top_k : (c->do_sample ? c->top_k : 0),
        .presence_penalty = pp,
        .frequency_penalty = fp,
        .seed = seed,
    };
    if (!(s = sampler_new(&sp, c->vocab_size)) || !(dt = detok_new(tok))) goto done;
    if (tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n_ids)) goto done;
    int32_t tok_eos = tokenizer_eos_id(tok);
    struct gen_opts go = {.max_tokens = max_tokens, .ignore_eos = ignore_eos,
                          .extra_eos = &tok_eos, .n_extra_eos = tok_eos >= 0};
    struct out_ctx oc = {.dt = dt};
    struct gen_stats st;
    fwrite(prompt, 1, strlen(prompt), stdout);
    fflush(stdout);
    if (gen_run(m, s, ids, n_ids, &go, on_token, &oc, &st)) goto done;
    const char *tail;
    size_t tail_len;
    if (detok_flush(dt, &tail, &tail_len) == OK) fwrite(tail, 1, tail_len, stdout);
    printf("\n");
    fflush(stdout);
    int n_dec = st.n_generated > 1 ? st.n_generated - 1 : 0; /* the first token comes from prefill */
    fprintf(stderr,
            "prefill: %d tokens in %.3f s (%.1f tok/s) | decode: %d tokens in %.3f s "
            "(%.1f tok/s) | %d threads%s\n",
            st.n_prompt, st.prefill_s, st.n_prompt / (st.prefill_s > 0 ? st.prefill_s : 1e-9),
            n_dec, st.decode_s, n_dec / (st.decode_s > 0 ? st.decode_s : 1e-9),
            threads > 0 ? threads : cpu_count(), st.hit_eos ? " | stopped at EOS" : "");
    rc = 0;
done:
    free(ids);
    detok_free(dt);
    sampler_free(s);
    model_free(m);
    tokenizer_free(tok);
    return rc;
}
