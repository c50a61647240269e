/* cli/cmd_serve.c: `dspark serve`: the OpenAI-compatible HTTP server. */
#include "cli/args.h"
#include "cli/auto.h"
#include "cli/commands.h"

#include "base/fs.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: dspark serve [--model DIR] [flags]\n\n"
               "  --model DIR              Hugging Face model folder (default: models/pycoder)\n"
               "  --drafter DIR            drafter for draft, dspark, dflash (default: DIR-draft,\n"
               "                           DIR-dspark, DIR-dflash)\n"
               "  --mode M                 baseline | lookup | draft | dspark | dflash | auto\n"
               "                           (default lookup; auto: the best drafter found for\n"
               "                           the model, see `dspark models`)\n"
               "  --max-draft N|auto       drafts verified per round at most (default 15 lookup,\n"
               "                           3 draft, 4 dspark, auto dflash); auto: chosen\n"
               "                           per sequence every few rounds from this machine's\n"
               "                           measured costs (at start, once) and its acceptance\n"
               "  --calibration-file F     --max-draft auto's cost cache (default\n"
               "                           ~/.cache/dspark/calibration.json)\n"
               "  --recalibrate            measure the costs again even when they are cached\n"
               "  --load-aware             dspark mode with --max-batch: each batched pass keeps\n"
               "                           the drafts worth their cost, best confidence first\n"
               "                           (DSpark paper Alg. 1; costs calibrated as for auto)\n"
               "  --no-lookup-drafts       in draft mode, always ask the draft model\n"
               "  --host ADDR              IPv4 address to listen on (default 127.0.0.1)\n"
               "  --port N                 TCP port (default 8080; 0 picks a free one)\n"
               "  --api-key KEY            require Authorization: Bearer KEY\n"
               "  --no-thinking            enable_thinking=false unless a request says otherwise\n"
               "  --default-max-tokens N   max_tokens when a request gives none (default 2048)\n"
               "  --max-tokens-cap N       clamp every request's max_tokens (default 32768)\n"
               "  --default-temperature T  sampling defaults (request > these > generation_config\n"
               "  --default-top-p P          > greedy)\n"
               "  --default-top-k K\n"
               "  --max-body-mb N          reject larger request bodies with 413 (default 8)\n"
               "  --max-queue N            queued requests beyond this get 503 (default 64)\n"
               "  --prefix-cache-entries N finished conversations kept so a follow-up turn\n"
               "                           prefills only its new tokens (default 4)\n"
               "  --kv-cache-mb N          memory the prefix cache may hold (default 0: no limit)\n"
               "  --kv-pool-mb N           K/V memory the running requests may hold; others wait\n"
               "                           in the queue (default 0: no limit)\n"
               "  --no-prefix-cache        do not reuse prompt prefixes\n"
               "  --prefix-cache-dir DIR   save entries leaving RAM here and reuse them, also\n"
               "                           after a restart (compressed, checksummed)\n"
               "  --prefix-cache-dir-mb N  disk the folder may hold for the model (default 4096;\n"
               "                           least recently used files go first; 0: no limit)\n"
               "  --prefill-chunk N        prompt tokens prefilled per step while other requests\n"
               "                           stream, so a long prompt never stalls them (default\n"
               "                           2048; 256 with --gpu)\n"
               "  --max-batch N            sequences generated together, sharing each weight\n"
               "                           read (default 1)\n"
               "  --threads N              CPU threads (default: all cores)\n"
               "  --gpu                    run the target and its drafter on the GPU (a `make\n"
               "                           CUDA=1` build)\n"
               "  --gpu-inputs exact|bf16  GPU matmul inputs: rounded to bf16 as PyTorch's\n"
               "                           bf16 models do (default), or exact float32 products\n"
               "                           as on the CPU (slower verify rounds and prompts)\n"
               "  --gpu-kv f32|bf16        GPU K/V cache elements: float32 (default) or\n"
               "                           bfloat16 (half the memory and of attention's reads;\n"
               "                           keys and values rounded as they are stored)\n");
}

int cmd_serve(int argc, char **argv) {
    struct server_opts o = {
        .model_dir = "models/pycoder",
        .host = "127.0.0.1",
        .port = 8080,
        .mode = GEN_LOOKUP,
        .max_draft = -1,
        .lookup_drafts = 1,
        .thinking = 1,
        .default_temperature = -1,
        .default_top_p = -1,
        .default_top_k = -1,
        .prefix_cache_entries = 4,
        .prefix_cache_dir_mb = 4096,
        .prefill_chunk = 0, /* 2048, or 256 with --gpu (below): streams stall one chunk */
        .show_progress = isatty(2),
    };
    int mb = 8, auto_mode = 0;
    char draft_default[4096];
    struct args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        const char *arg = argv[a.i];
        int bad = 0;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 0;
        } else if (args_flag(&a, "--model")) {
            bad = !(o.model_dir = a.value);
        } else if (args_flag(&a, "--drafter")) {
            bad = !(o.drafter_dir = a.value);
        } else if (args_flag(&a, "--mode")) {
            auto_mode = a.value && !strcmp(a.value, "auto");
            if (!a.value || (!auto_mode && gen_mode_parse(a.value, &o.mode))) {
                fprintf(stderr, "error: --mode takes baseline, lookup, draft, dspark, dflash or "
                                "auto\n");
                bad = 1;
            }
        } else if (args_flag(&a, "--max-draft")) {
            o.auto_draft = a.value && !strcmp(a.value, "auto");
            if (!o.auto_draft && args_int(arg, a.value, 0, 64, &o.max_draft)) {
                fprintf(stderr, "hint: --max-draft takes a number of drafts or auto\n");
                bad = 1;
            }
        } else if (args_flag(&a, "--calibration-file")) {
            bad = !(o.calib_file = a.value);
        } else if (!strcmp(arg, "--recalibrate")) {
            o.recalibrate = 1;
        } else if (!strcmp(arg, "--load-aware")) {
            o.load_aware = 1;
        } else if (args_flag(&a, "--host")) {
            bad = !(o.host = a.value);
        } else if (args_flag(&a, "--port")) {
            bad = args_int("--port", a.value, 0, 65535, &o.port);
        } else if (args_flag(&a, "--api-key")) {
            bad = !(o.api_key = a.value);
        } else if (args_flag(&a, "--default-max-tokens")) {
            bad = args_int("--default-max-tokens", a.value, 1, 1 << 24, &o.default_max_tokens);
        } else if (args_flag(&a, "--max-tokens-cap")) {
            bad = args_int("--max-tokens-cap", a.value, 1, 1 << 24, &o.max_tokens_cap);
        } else if (args_flag(&a, "--default-temperature")) {
            bad = args_float("--default-temperature", a.value, 0, 2, &o.default_temperature);
        } else if (args_flag(&a, "--default-top-p")) {
            bad = args_float("--default-top-p", a.value, 0, 1, &o.default_top_p);
        } else if (args_flag(&a, "--default-top-k")) {
            bad = args_int("--default-top-k", a.value, 0, 1 << 24, &o.default_top_k);
        } else if (args_flag(&a, "--max-body-mb")) {
            bad = args_int("--max-body-mb", a.value, 1, 4096, &mb);
        } else if (args_flag(&a, "--prefix-cache-entries")) {
            bad = args_int("--prefix-cache-entries", a.value, 0, 1024, &o.prefix_cache_entries);
        } else if (args_flag(&a, "--kv-cache-mb")) {
            bad = args_int("--kv-cache-mb", a.value, 0, 1 << 24, &o.kv_cache_mb);
        } else if (args_flag(&a, "--kv-pool-mb")) {
            bad = args_int("--kv-pool-mb", a.value, 0, 1 << 24, &o.kv_pool_mb);
        } else if (args_flag(&a, "--prefix-cache-dir")) {
            bad = !(o.prefix_cache_dir = a.value);
        } else if (args_flag(&a, "--prefix-cache-dir-mb")) {
            bad = args_int("--prefix-cache-dir-mb", a.value, 0, 1 << 30, &o.prefix_cache_dir_mb);
        } else if (args_flag(&a, "--prefill-chunk")) {
            bad = args_int("--prefill-chunk", a.value, 1, 1 << 20, &o.prefill_chunk);
        } else if (!strcmp(arg, "--no-prefix-cache")) {
            o.prefix_cache_entries = 0;
        } else if (args_flag(&a, "--max-batch")) {
            bad = args_int("--max-batch", a.value, 1, 64, &o.max_batch);
        } else if (args_flag(&a, "--max-queue")) {
            bad = args_int("--max-queue", a.value, 1, 1 << 16, &o.max_queue);
        } else if (args_flag(&a, "--threads")) {
            bad = args_int("--threads", a.value, 1, 1024, &o.n_threads);
        } else if (!strcmp(arg, "--gpu")) {
            o.gpu = 1;
        } else if (args_flag(&a, "--gpu-inputs")) {
            bad = args_gpu_inputs(a.value, &o.gpu_inputs);
        } else if (args_flag(&a, "--gpu-kv")) {
            bad = args_gpu_kv(a.value, &o.gpu_kv);
        } else if (!strcmp(arg, "--no-thinking")) {
            o.thinking = 0;
        } else if (!strcmp(arg, "--no-lookup-drafts")) {
            o.lookup_drafts = 0;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see dspark serve --help)\n", arg);
            return 2;
        }
        if (bad) return 2;
    }
    o.max_body_bytes = (size_t)mb << 20;
    /* GPU prefill runs about 2.4k tokens/s on an 8B model (docs/perf.md), so a 2048-token
     * chunk would stall the running streams for 0.85 s; 256 keeps it near 0.1 s */
    if (!o.prefill_chunk) o.prefill_chunk = o.gpu ? 256 : 2048;
    int rc = auto_mode ? cli_mode_auto(o.model_dir, o.drafter_dir, &o.mode, draft_default,
                                       sizeof draft_default, &o.drafter_dir)
                       : 0;
    if (rc) return rc;
    static const char *suffix[] = {"", "", "-draft", "-dspark", "-dflash"};
    if (o.max_draft < 0 && gen_default_auto_draft(o.mode)) o.auto_draft = 1;
    if (o.max_draft < 0) o.max_draft = gen_default_max_draft(o.mode);
    if (o.mode >= GEN_DRAFT && !o.drafter_dir) {
        snprintf(draft_default, sizeof draft_default, "%s%s", o.model_dir, suffix[o.mode]);
        o.drafter_dir = draft_default;
    }
#if defined(__GLIBC__)
    /* A server allocates and frees K/V pages and prefix-cache buffers of up to tens of MB all
     * the time. glibc gives blocks that size back to the kernel when they are freed, and the
     * next one is faulted in again page by page, which on a virtual machine costs ~10 us a
     * page: a follow-up turn read from --prefix-cache-dir took 60-140 ms instead of 10-15.
     * Here freed memory stays in the process for the next request: RSS keeps its high-water
     * mark, which --kv-pool-mb and --kv-cache-mb bound for the engine thread, whose arena
     * holds the K/V pages and cache buffers (other threads allocate little). No-ops under
     * AddressSanitizer, and where glibc refuses a value. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
    /* every thread started from here on leaves SIGINT/SIGTERM to server_run's sigwait */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct server *s;
    if (server_new(&o, &s)) return 1;
    printf("dspark serving %s on http://%s:%d (mode %s)\n", o.model_dir, o.host, server_port(s),
           gen_mode_name(o.mode));
    fflush(stdout);
    server_run(s);
    server_free(s);
    return 0;
}
