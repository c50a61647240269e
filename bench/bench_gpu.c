/* bench/bench_gpu.c: the CUDA forward's speed on one model folder: prefill tokens/s, B=1
 * decode tokens/s against the weight-read roofline (greedy: one id back; and with the logits
 * copied back), the cost of a pass over k new tokens (a verify round) relative to one for
 * k = 1..32, each kind of kernel's time and bandwidth, and optionally the GPU's greedy
 * tokens against the CPU's on the same weights. Build with `make CUDA=1 build/cuda/bench_gpu`;
 * run on the GPU machine:
 *   bench_gpu MODEL_DIR [--bw GBps] [--ctx N,N..] [--long N] [--cpu-check N] [--quick]
 *             [--decode-only] [--lab] [--batch B,B..] [--mixed C]
 *             [--gemm-check] [--prefill-only] [--probe W,N] [--inputs exact|bf16] [--sampled]
 * --lab: prefill of 512 tokens (and --long's), decode, the verify curve and the kernel table
 * (for comparing variants).
 * --batch: continuous-batching decode, B sequences at the first context stepping one token
 * each per pass (model_forward_batch, greedy ids back): aggregate tokens/s against B = 1.
 * --mixed C (with --batch): a pass of 16 such sequences and the first C rows of a prompt.
 * --prefill-only: the prefill lines (512 tokens and --long's, best of 3), then exit.
 * --probe W,N: only N passes of W rows at the first context (for a profiler), then exit;
 * W up to --long's + 64 less that context (e.g. --ctx 1 --long 512 --probe 512,1: a prompt).
 * --gemm-check: prefill with one matmul launch over all rows of a pass (the default where it
 * fills the GPU) and with a launch per 32 rows (a second copy of the model loaded with
 * DSPARK_GPU_GEMM=0): their times, and whether all 256 rows' logits are the same bits.
 * --sampled: sampled verify rounds of 1, 5 and 17 rows, and sampled steps of 16 sequences
 * (--sampled-sets MASK: only the settings of MASK's bits, 1 = the first)
 * (five sampling settings, two with penalties, and greedy with penalties), with the rows' sampling
 * summaries brought back against their logits, pass and host decisions included.
 * --inputs exact: matmul inputs as three bf16 terms, exact products (DSPARK_GPU_INPUTS=exact,
 * the default of every model it loads; default bf16, inputs rounded).
 * Times are the median of repeated runs (minimum in brackets). */
#include "backend/gpu.h"
#include "base/timer.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec/verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stat2 {
    double med, min;
};

/* n rows after a context of base tokens, greedy ids of every row (or logits when lg) */
static struct stat2 time_pass(struct model *m, struct kv_cache *kv, int base, const int32_t *ids,
                              int n, float *lg, int reps) {
    double t[64];
    int32_t out[64];
    if (reps > 64) reps = 64;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up (graph capture) */
        kv_truncate(kv, base);
        double t0 = timer_now();
        int rc =
            lg ? model_forward(m, kv, ids, n, lg, 1) : model_forward_greedy(m, kv, ids, n, out, 1);
        if (rc) return (struct stat2){-1, -1};
        if (r >= 0) t[r] = timer_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return (struct stat2){t[reps / 2], t[0]};
}

/* A sampled verify round of n rows at context base (the pending token and n - 1 drafts that
 * the random model rejects, so the round decides its first row): the pass, what comes back,
 * and the host's decision, as the engine runs them. With summaries (DSPARK_GPU_SAMPLE_SUMMARY
 * unset) the rows' sampling summaries come back, else their logits. Median of reps (minimum
 * in brackets). */
static struct stat2 time_sampled(struct model *m, struct kv_cache *kv, int base, const int32_t *ids,
                                 int n, const struct sample_params *sp, int summaries, int reps) {
    double t[64];
    if (reps > 64) reps = 64;
    if (summaries)
        unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
    else
        setenv("DSPARK_GPU_SAMPLE_SUMMARY", "0", 1);
    struct sampler *s = sampler_new(sp, model_config(m)->vocab_size);
    struct verify v;
    if (!s || verify_init(&v, m, kv, s, n - 1, -1, 0)) return (struct stat2){-1, -1};
    unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
    struct draft d = {(int32_t *)ids + 1, NULL, n - 1, n - 1, NULL};
    for (int r = -1; r < reps; r++) {
        kv_truncate(kv, base);
        double t0 = timer_now();
        struct model_batch_item it = verify_item(&v, ids, n);
        int acc, stopped;
        if (model_forward_batch(m, &it, 1) || verify_decide(&v, &d, NULL, NULL, &acc, &stopped))
            return (struct stat2){-1, -1};
        if (r >= 0) t[r] = timer_now() - t0;
    }
    verify_deinit(&v);
    sampler_free(s);
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return (struct stat2){t[reps / 2], t[0]};
}

/* A sampled decode step of B sequences of one row each at context P (continuous batching), as
 * the server runs it: one pass, then each sequence's decision. Median of reps [min]. */
static struct stat2 time_sampled_batch(struct model *m, struct kv_cache **kvs, int B, int P,
                                       const int32_t *ids, const struct sample_params *sp,
                                       int summaries, int reps) {
    double t[64];
    struct sampler *s[64];
    struct verify v[64];
    struct model_batch_item items[64];
    static const struct draft none = {0};
    if (reps > 64) reps = 64;
    if (summaries)
        unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
    else
        setenv("DSPARK_GPU_SAMPLE_SUMMARY", "0", 1);
    for (int i = 0; i < B; i++)
        if (!(s[i] = sampler_new(sp, model_config(m)->vocab_size)) ||
            verify_init(&v[i], m, kvs[i], s[i], 0, -1, 0))
            return (struct stat2){-1, -1};
    unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
    for (int r = -1; r < reps; r++) {
        for (int i = 0; i < B; i++) kv_truncate(kvs[i], P);
        double t0 = timer_now();
        for (int i = 0; i < B; i++) items[i] = verify_item(&v[i], ids + P + i, 1);
        if (model_forward_batch(m, items, B)) return (struct stat2){-1, -1};
        for (int i = 0; i < B; i++) {
            int acc, stopped;
            if (verify_decide(&v[i], &none, NULL, NULL, &acc, &stopped))
                return (struct stat2){-1, -1};
        }
        if (r >= 0) t[r] = timer_now() - t0;
    }
    for (int i = 0; i < B; i++) verify_deinit(&v[i]), sampler_free(s[i]);
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return (struct stat2){t[reps / 2], t[0]};
}

static int parse_list(const char *s, int *v, int max) {
    int n = 0;
    while (*s && n < max) {
        v[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

/* greedy continuation of n tokens after prompt on model m */
static int greedy_run(struct model *m, const int32_t *prompt, int np, int n, int32_t *out) {
    struct kv_cache *kv;
    if (kv_new(m, np + n + 1, &kv)) return -1;
    int32_t tok;
    int rc = model_forward_greedy(m, kv, prompt, np, &tok, 0);
    for (int i = 0; !rc && i < n; i++) {
        out[i] = tok;
        rc = model_forward_greedy(m, kv, &tok, 1, &tok, 0);
    }
    kv_free(kv);
    return rc;
}

/* each kind of kernel alone over all layers, n rows of each of nseq sequences after their
 * caches' tokens */
static void kernel_table(struct model *m, struct kv_cache **kv, int nseq, int n) {
    struct gpu_op_time ops[24];
    int k = model_gpu_profile(m, kv, nseq, n, ops, 24);
    if (nseq > 1)
        printf("kernels alone, %d sequences of %d row%s at context %d (all layers):\n", nseq, n,
               n > 1 ? "s" : "", kv_len(kv[0]));
    else
        printf("kernels alone, %d row%s at context %d (all layers):\n", n, n > 1 ? "s" : "",
               kv_len(kv[0]));
    double sum = 0, pass = 0;
    for (int i = 0; i < k; i++) {
        if (!strcmp(ops[i].name, "pass")) {
            printf("  sum %.1f us; the whole pass %.1f us, of which (the pass less the pass "
                   "without it):\n",
                   sum, ops[i].us);
            pass = ops[i].us;
        } else if (!strncmp(ops[i].name, "pass-", 5)) {
            printf("    %-9s %8.1f us\n", ops[i].name + 5, pass - ops[i].us);
        } else {
            printf("  %-10s %8.1f us  %7.1f MB  %6.0f GB/s\n", ops[i].name, ops[i].us,
                   ops[i].bytes / 1e6, ops[i].bytes / (ops[i].us * 1e3));
            if (strncmp(ops[i].name, "hbm", 3)) sum += ops[i].us;
        }
    }
}

static double time_prefill(struct model *m, struct kv_cache *kv, const int32_t *ids, int n) {
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        kv_truncate(kv, 0);
        double t0 = timer_now();
        if (model_forward(m, kv, ids, n, NULL, 0)) return -1;
        double t = timer_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

/* the one-launch matmuls and prompt attention kernel of long passes against a launch per 32 rows
 * and k_attn: speed and bits */
static int gemm_compare(const char *dir, struct model *m, struct kv_cache *kv, const int32_t *ids,
                        int n1, int n2) {
    struct model *m0;
    struct kv_cache *kv0;
    setenv("DSPARK_GPU_GEMM", "0", 1);
    setenv("DSPARK_GPU_ATTP", "0", 1); /* and attention's items of ATT_ROWS rows (k_attn) */
    int rc = model_load(dir, &(struct model_opts){.n_threads = 1, .gpu = 1}, &m0);
    unsetenv("DSPARK_GPU_GEMM");
    unsetenv("DSPARK_GPU_ATTP");
    const int cap = n1 > n2 ? n1 : n2; /* the prompts it times, and the 256-row check */
    if (rc || kv_new(m0, (cap > 256 ? cap : 256) + 1, &kv0)) return 1;
    const int L = 256, V = model_config(m)->vocab_size;
    float *a = malloc(sizeof(float) * (size_t)V * L), *b = malloc(sizeof(float) * (size_t)V * L);
    if (!a || !b) return 1;
    kv_truncate(kv, 0);
    rc = model_forward(m, kv, ids, L, a, 1);
    rc = rc || model_forward(m0, kv0, ids, L, b, 1);
    if (rc) return 1;
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)V * L; i++) diff += memcmp(a + i, b + i, sizeof(float)) != 0;
    printf("one launch over all rows and the prompt attention kernel vs a launch per 32 rows "
           "and k_attn, %d-row prompt: %zu of %zu logits differ\n",
           L, diff, (size_t)V * L);
    kv_truncate(kv, 0);
    kernel_table(m, &kv, 1, L);
    kv_truncate(kv0, 0);
    kernel_table(m0, &kv0, 1, L);
    int ns[2] = {n1, n2};
    for (int i = 0; i < 2; i++) {
        if (ns[i] <= 0) continue;
        double t1 = time_prefill(m, kv, ids, ns[i]), t0 = time_prefill(m0, kv0, ids, ns[i]);
        printf("prefill %d tokens: one launch %.1f ms (%.0f tok/s), per 32 rows %.1f ms (%.0f "
               "tok/s): %.2fx\n",
               ns[i], t1 * 1e3, ns[i] / t1, t0 * 1e3, ns[i] / t0, t0 / t1);
    }
    free(a), free(b);
    kv_free(kv0);
    model_free(m0);
    return diff != 0;
}

/* GPU greedy tokens against the CPU's on the same weights; on the first divergence, the CPU's
 * top-2 logit gap there (an fp near-tie is a gap of a few 1e-5 relative). */
static void cpu_check(const char *dir, struct model *gm, int n_tok) {
    struct model *cm;
    if (model_load(dir, &(struct model_opts){.n_threads = 0}, &cm)) {
        printf("cpu check: cannot load the model on the CPU\n");
        return;
    }
    int V = model_config(cm)->vocab_size, prompts = 4, same_all = 0;
    int32_t prompt[24], a[256], b[256];
    if (n_tok > 256) n_tok = 256;
    for (int p = 0; p < prompts; p++) {
        for (int i = 0; i < 24; i++) prompt[i] = (int32_t)((p * 7919 + i * 104729 + 11) % V);
        if (greedy_run(gm, prompt, 24, n_tok, a) || greedy_run(cm, prompt, 24, n_tok, b)) {
            printf("cpu check: forward failed\n");
            break;
        }
        int same = 0;
        while (same < n_tok && a[same] == b[same]) same++;
        same_all += same == n_tok;
        printf("cpu check prompt %d: GPU greedy equals CPU for %d of %d tokens", p, same, n_tok);
        if (same < n_tok) { /* the CPU's logits at the divergence */
            struct kv_cache *kv;
            float *lg = malloc(sizeof(float) * (size_t)V);
            int32_t ctx[24 + 256];
            memcpy(ctx, prompt, sizeof prompt);
            memcpy(ctx + 24, b, sizeof(int32_t) * (size_t)same);
            if (lg && !kv_new(cm, 24 + same + 1, &kv)) {
                if (!model_forward(cm, kv, ctx, 24 + same, lg, 0)) {
                    float amax = fabsf(lg[0]);
                    for (int i = 1; i < V; i++)
                        if (fabsf(lg[i]) > amax) amax = fabsf(lg[i]);
                    printf(" (CPU logits there: GPU's %d = %.6f, CPU's %d = %.6f, gap %.2e of max)",
                           a[same], lg[a[same]], b[same], lg[b[same]],
                           (lg[b[same]] - lg[a[same]]) / amax);
                }
                kv_free(kv);
            }
            free(lg);
        }
        printf("\n");
    }
    printf("cpu check: %d of %d prompts token-identical\n", same_all, prompts);
    model_free(cm);
}

/* B sequences at context P, one greedy token each per pass: seconds per pass (median) */
/* B sequences at context P stepping one greedy token each, and with chunk > 0 also the first
 * chunk rows of a prompt in kvs[B] (its last row's greedy token wanted), in one pass */
static double time_batch(struct model *m, struct kv_cache **kvs, int B, int P, const int32_t *ids,
                         int reps, int chunk) {
    struct model_batch_item items[65];
    int32_t out[65];
    double t[32];
    if (reps > 32) reps = 32;
    for (int r = -1; r < reps; r++) {
        for (int i = 0; i < B; i++) {
            kv_truncate(kvs[i], P);
            items[i] =
                (struct model_batch_item){kvs[i], ids + P + i, 1, NULL, NULL, out + i, 0, NULL};
        }
        if (chunk > 0) {
            kv_truncate(kvs[B], 0);
            items[B] = (struct model_batch_item){kvs[B], ids, chunk, NULL, NULL, out + B, 1, NULL};
        }
        double t0 = timer_now();
        if (model_forward_batch(m, items, B + (chunk > 0))) return -1;
        if (r >= 0) t[r] = timer_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s MODEL_DIR [--bw GBps] [--ctx N,N..] [--long N] "
                "[--cpu-check N] [--quick]\n",
                argv[0]);
        return 2;
    }
    double bw = 4300;
    int ctxs[8] = {512}, n_ctx = 1, longp = 0, check = 0, quick = 0, decode_only = 0, lab = 0;
    int batches[8], n_batch = 0, mixed = 0, gemm_check = 0, prefill_only = 0, probe[2] = {0, 0},
                    sampled = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--bw") && i + 1 < argc)
            bw = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
            n_ctx = parse_list(argv[++i], ctxs, 8);
        else if (!strcmp(argv[i], "--long") && i + 1 < argc)
            longp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-check") && i + 1 < argc)
            check = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--decode-only"))
            decode_only = 1, quick = 1;
        else if (!strcmp(argv[i], "--lab"))
            decode_only = 1, quick = 1, lab = 1;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            n_batch = parse_list(argv[++i], batches, 8);
        else if (!strcmp(argv[i], "--mixed") && i + 1 < argc)
            mixed = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill-only"))
            prefill_only = 1;
        else if (!strcmp(argv[i], "--gemm-check"))
            gemm_check = 1;
        else if (!strcmp(argv[i], "--probe") && i + 1 < argc)
            parse_list(argv[++i], probe, 2);
        else if (!strcmp(argv[i], "--inputs") && i + 1 < argc)
            setenv("DSPARK_GPU_INPUTS", argv[++i], 1);
        else if (!strcmp(argv[i], "--sampled"))
            sampled = 1;
        else if (!strcmp(argv[i], "--sampled-sets") && i + 1 < argc) /* a bitmask of them */
            sampled = atoi(argv[++i]) << 1;
    }
    double t_load = timer_now();
    struct model *m;
    if (model_load(argv[1], &(struct model_opts){.n_threads = 1, .gpu = 1}, &m)) return 1;
    t_load = timer_now() - t_load;
    const struct hf_config *c = model_config(m);
    int V = c->vocab_size, maxctx = 512;
    for (int i = 0; i < n_ctx; i++)
        if (ctxs[i] > maxctx) maxctx = ctxs[i];
    if (longp > maxctx) maxctx = longp;
    struct kv_cache *kv;
    if (kv_new(m, maxctx + 64, &kv)) return 1;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(maxctx + 64));
    float *logits = malloc(sizeof(float) * (size_t)V * 32);
    for (int i = 0; i < maxctx + 64; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    double wb = (double)model_weight_bytes(m), roof = wb / (bw * 1e9);
    printf("%s on %s: %.2f GB of weights per step, loaded in %.1f s; roofline %.3f ms at %.0f "
           "GB/s (%.1f tok/s); matmul inputs %s\n",
           argv[1], gpu_device_name(), wb / 1e9, t_load, roof * 1e3, bw, 1 / roof,
           gpu_model_input_terms(model_gpu(m)) == 1 ? "bf16" : "exact");

    model_forward(m, kv, ids, 64, NULL, 0); /* warm-up */
    if (probe[0] > 0) { /* for a profiler: N passes of W rows after the first context */
        if (ctxs[0] + probe[0] > maxctx + 64) { /* ids and the cache hold maxctx + 64 */
            fprintf(stderr, "--probe: at most %d rows a pass after context %d (raise --long)\n",
                    maxctx + 64 - ctxs[0], ctxs[0]);
            return 2;
        }
        kv_truncate(kv, 0);
        if (model_forward(m, kv, ids, ctxs[0], NULL, 0)) return 1;
        for (int r = 0; r < probe[1]; r++) {
            kv_truncate(kv, ctxs[0]);
            if (model_forward(m, kv, ids + ctxs[0], probe[0], NULL, 0)) return 1;
        }
        printf("probe: %d passes of %d rows at context %d\n", probe[1], probe[0], ctxs[0]);
        return 0;
    }
    int pre[2] = {512, longp};
    for (int i = 0; i < 2; i++) {
        if (pre[i] <= 0 || (decode_only && !lab)) continue;
        double best = 1e9;
        for (int r = 0; r < (quick ? 1 : 3); r++) {
            kv_truncate(kv, 0);
            double t0 = timer_now();
            if (model_forward(m, kv, ids, pre[i], NULL, 0)) return 1;
            double t = timer_now() - t0;
            if (t < best) best = t;
        }
        printf("prefill %d tokens: %.1f ms, %.0f tok/s\n", pre[i], best * 1e3, pre[i] / best);
    }
    if (prefill_only) return gemm_check && gemm_compare(argv[1], m, kv, ids, pre[0], pre[1]);

    int reps = quick ? 10 : 40;
    for (int ci = 0; ci < n_ctx; ci++) {
        int P = ctxs[ci];
        kv_truncate(kv, 0);
        if (model_forward(m, kv, ids, P, NULL, 0)) return 1;
        struct stat2 g1 = time_pass(m, kv, P, ids + P, 1, NULL, reps);
        struct stat2 l1 = time_pass(m, kv, P, ids + P, 1, logits, reps);
        printf("decode B=1 at context %d: greedy %.3f ms [%.3f] = %.1f tok/s, %.0f%% of roofline; "
               "with logits copied back %.3f ms [%.3f]\n",
               P, g1.med * 1e3, g1.min * 1e3, 1 / g1.med, 100 * roof / g1.med, l1.med * 1e3,
               l1.min * 1e3);
        if (ci || (decode_only && !lab)) continue;
        printf("verify cost by width (x one token, greedy ids of every row):\n");
        for (int k = 1; k <= 32; k++) {
            if (quick && k != 1 && k != 2 && k != 4 && k != 8 && k != 12 && k != 16 && k != 17 &&
                k != 24 && k != 32)
                continue;
            struct stat2 s = time_pass(m, kv, P, ids + P, k, NULL, quick ? 5 : 15);
            printf("  %2d: %.3f ms %.2fx%s", k, s.med * 1e3, s.med / g1.med,
                   k % 4 == 0 ? "\n" : "");
        }
        printf("\n");
        struct stat2 l16 = time_pass(m, kv, P, ids + P, 16, logits, quick ? 5 : 15);
        printf("  16 rows with all logits copied back: %.3f ms %.2fx\n", l16.med * 1e3,
               l16.med / g1.med);
        int widths[2] = {1, 16};
        for (int w = 0; w < 2; w++) {
            kv_truncate(kv, P);
            kernel_table(m, &kv, 1, widths[w]);
        }
    }
    if (sampled) { /* sampled verify rounds: summaries against logits */
        int P = ctxs[0];
        static const struct {
            const char *name;
            struct sample_params sp;
        } set[] = {{"temperature 1, no truncation", {1.0f, 1.0f, 0, 0, 0, 7}},
                   {"temperature 0.7, top_p 0.9", {0.7f, 0.9f, 0, 0, 0, 7}},
                   {"temperature 0.8, top_k 40", {0.8f, 1.0f, 40, 0, 0, 7}},
                   {"temperature 1, penalties", {1.0f, 1.0f, 0, 0.5f, 0.3f, 7}},
                   {"top_k 40, penalties", {0.8f, 1.0f, 40, 0.5f, 0.3f, 7}},
                   {"greedy, penalties", {0, 1.0f, 0, 0.5f, 0.3f, 7}}};
        static const int widths[] = {1, 5, 17};
        printf("sampled verify rounds at context %d (pass, what comes back, the host's decision; "
               "median [min] ms):\n",
               P);
        kv_truncate(kv, 0);
        if (model_forward(m, kv, ids, P, NULL, 0)) return 1;
        for (size_t k = 0; k < sizeof set / sizeof *set; k++)
            for (size_t w = 0;
                 (sampled == 1 || (sampled >> (k + 1) & 1)) && w < sizeof widths / sizeof *widths;
                 w++) {
                struct stat2 a = time_sampled(m, kv, P, ids + P, widths[w], &set[k].sp, 0, 20);
                struct stat2 b = time_sampled(m, kv, P, ids + P, widths[w], &set[k].sp, 1, 20);
                printf("  %-30s %2d rows: logits %.3f [%.3f], summaries %.3f [%.3f]\n", set[k].name,
                       widths[w], a.med * 1e3, a.min * 1e3, b.med * 1e3, b.min * 1e3);
            }
        struct kv_cache *kvs[16];
        int nk = 0;
        for (; nk < 16; nk++)
            if (kv_new(m, P + 2, &kvs[nk]) || model_forward(m, kvs[nk], ids, P, NULL, 0)) break;
        for (size_t k = 0; nk == 16 && k < sizeof set / sizeof *set; k++) {
            if (sampled != 1 && !(sampled >> (k + 1) & 1)) continue;
            struct stat2 a = time_sampled_batch(m, kvs, 16, P, ids, &set[k].sp, 0, 20);
            struct stat2 b = time_sampled_batch(m, kvs, 16, P, ids, &set[k].sp, 1, 20);
            printf("  %-30s B=16: logits %.3f [%.3f], summaries %.3f [%.3f]\n", set[k].name,
                   a.med * 1e3, a.min * 1e3, b.med * 1e3, b.min * 1e3);
        }
        for (int i = 0; i < nk; i++) kv_free(kvs[i]);
    }
    if (n_batch) { /* continuous batching: B sequences of context ctxs[0] */
        int P = ctxs[0], maxb = 1;
        for (int i = 0; i < n_batch; i++)
            if (batches[i] > maxb) maxb = batches[i] > 64 ? 64 : batches[i];
        struct kv_cache *kvs[64];
        int nk = 0;
        for (; nk < maxb; nk++) {
            if (kv_new(m, P + 2, &kvs[nk]) || model_forward(m, kvs[nk], ids, P, NULL, 0)) break;
        }
        double t1 = 0;
        for (int i = 0; i < n_batch; i++) {
            int B = batches[i] > nk ? nk : batches[i];
            double t = time_batch(m, kvs, B, P, ids, quick ? 10 : 20, 0);
            if (t < 0) break;
            if (B == 1) t1 = t;
            printf("batch B=%d at context %d: %.3f ms a pass, %.0f tok/s aggregate", B, P, t * 1e3,
                   B / t);
            if (t1 > 0) printf(", %.2fx B=1", B * t1 / t);
            printf("\n");
        }
        if (lab && nk >= 16) { /* the same kernels over 16 sequences of one row */
            for (int i = 0; i < 16; i++) kv_truncate(kvs[i], P);
            kernel_table(m, kvs, 16, 1);
        }
        if (mixed > 0 && nk > 16) { /* 16 decoding sequences beside a prompt chunk */
            double t0 = time_batch(m, kvs, 16, P, ids, quick ? 10 : 20, 0);
            double t = time_batch(m, kvs, 16, P, ids, quick ? 10 : 20, mixed);
            if (t0 > 0 && t > 0)
                printf("batch B=16 at context %d with a %d-row prompt chunk in the pass: %.3f ms "
                       "(%.3f ms without it)\n",
                       P, mixed, t * 1e3, t0 * 1e3);
        }
        for (int i = 0; i < nk; i++) kv_free(kvs[i]);
    }
    if (gemm_check && gemm_compare(argv[1], m, kv, ids, pre[0], pre[1])) return 1;
    if (check) cpu_check(argv[1], m, check);
    kv_free(kv);
    model_free(m);
    free(ids), free(logits);
    return 0;
}
