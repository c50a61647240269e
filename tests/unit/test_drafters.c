/* tests/unit/test_drafters.c: the DSpark and DFlash drafters against ../shared/golden, data
 * computed by the original implementations (DeepSpec, z-lab/dflash) on tiny random models:
 * the target's taps, the fused context rows, the block's layers, logits, Markov bias,
 * confidences and drafts of the first round, and the full greedy speculative traces. */
#include "test.h"
#include "unit/golden.h"
#include "tune/controller.h"

#include "base/fs.h"
#include "engine/generate.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "spec/block_model.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define G "../shared/golden/"

static cJSON *load_json(const char *path) {
    char *t;
    size_t n;
    if (fs_read_file(path, &t, &n, 1 << 24)) return NULL;
    cJSON *j = cJSON_Parse(t);
    free(t);
    return j;
}

static const cJSON *at(const cJSON *o, const char *path) { /* "a.b.c" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k && o; k = strtok(NULL, ".")) o = cJSON_GetObjectItem(o, k);
    return o;
}

/* max |a - b| / max |b|, printed with its name */
static double rel(const char *what, const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    double e = mb > 0 ? md / mb : md;
    printf("  %-28s rel err %.2e\n", what, e);
    return e;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

struct fixture {
    struct model *target;
    struct block_model *bm;
    struct st_set *gst;
    cJSON *gj, *tj;
    int32_t prompt[64];
    int n_prompt, V, H;
};

static int setup(struct fixture *f, const char *drafter, const char *golden) {
    memset(f, 0, sizeof *f);
    char js[256], st[256];
    snprintf(js, sizeof js, G "%s_golden.json", golden);
    snprintf(st, sizeof st, G "%s_golden.safetensors", golden);
    if (model_load(G "target", &(struct model_opts){.n_threads = 2}, &f->target)) return -1;
    if (block_model_load(drafter, f->target, &f->bm)) return -1;
    if (!(f->gj = load_json(js)) || !(f->tj = load_json(G "target_golden.json"))) return -1;
    if (st_open_file(st, &f->gst)) return -1;
    f->n_prompt = ids_of(cJSON_GetObjectItem(f->tj, "prompt_ids"), f->prompt, 64);
    f->V = model_config(f->target)->vocab_size;
    f->H = model_config(f->target)->hidden_size;
    return 0;
}

static void teardown(struct fixture *f) {
    block_model_free(f->bm);
    model_free(f->target);
    st_close(f->gst);
    cJSON_Delete(f->gj);
    cJSON_Delete(f->tj);
}

/* Round 0: prefill with taps, fuse, run the block; returns drafts through the caller. */
static void round0(struct fixture *f, int dspark) {
    const struct hf_config *dc = block_model_config(f->bm);
    int V = f->V, H = f->H, B = dc->block_size, nt = dc->n_target_layer_ids, L = f->n_prompt;
    REQUIRE(model_set_taps(f->target, dc->target_layer_ids, nt) == 0);
    struct kv_cache *kv;
    REQUIRE(kv_new(f->target, 256, &kv) == 0);
    float *fused = malloc(sizeof(float) * L * nt * H), *ctx = malloc(sizeof(float) * L * H);
    float *logits = malloc(sizeof(float) * 16 * V), *hid = malloc(sizeof(float) * 16 * H);
    float *lay = malloc(sizeof(float) * dc->n_layers * 16 * H), *bias = malloc(sizeof(float) * V);
    CHECK(model_forward_taps(f->target, kv, f->prompt, L, NULL, 0, fused) == 0);
    const float *g = tensor_of(f->gst, "fused_input", (size_t)L * nt * H);
    REQUIRE(g);
    CHECK(rel("fused taps", fused, g, (size_t)L * nt * H) <= 1e-4);
    struct block_state *st;
    REQUIRE(block_state_new(f->bm, 256, &st) == 0);
    CHECK(block_ctx_append(st, fused, L, ctx) == 0);
    CHECK(rel("context rows", ctx, tensor_of(f->gst, "round0.ctx_rows", (size_t)L * H),
              (size_t)L * H) <= 1e-4);
    int32_t block[16], want[16], prev[16];
    int nb = ids_of(at(f->gj, "round0.block_input_ids"), block, 16);
    int nd = ids_of(at(f->gj, "round0.draft_ids"), want, 16);
    REQUIRE(nb == B);
    CHECK(block_forward(st, block, B, hid, lay) == 0);
    CHECK(rel("block layer outputs", lay,
              tensor_of(f->gst, "round0.layer_out", (size_t)dc->n_layers * B * H),
              (size_t)dc->n_layers * B * H) <= 1e-4);
    CHECK(rel("block hidden", hid, tensor_of(f->gst, "round0.block_hidden", (size_t)B * H),
              (size_t)B * H) <= 1e-4);
    block_logits(st, hid, B, logits);
    int32_t got[16];
    if (dspark) {
        CHECK(rel("base logits", logits, tensor_of(f->gst, "round0.base_logits", (size_t)B * V),
                  (size_t)B * V) <= 1e-4);
        ids_of(at(f->gj, "round0.prev_ids"), prev, 16);
        const float *gb = tensor_of(f->gst, "round0.markov_bias", (size_t)B * V);
        const float *gc = tensor_of(f->gst, "round0.corrected_logits", (size_t)B * V);
        double eb = 0, ec = 0, econf = 0;
        const cJSON *cl = at(f->gj, "round0.confidence_logits");
        int32_t p = block[0];
        for (int i = 0; i < B; i++) {
            CHECK(p == prev[i]); /* our sequential prev equals the reference's */
            block_markov_bias(st, p, bias);
            float *row = logits + (size_t)i * V;
            double e1 = rel("", bias, gb + (size_t)i * V, V);
            for (int v = 0; v < V; v++) row[v] += bias[v];
            double e2 = rel("", row, gc + (size_t)i * V, V);
            eb = e1 > eb ? e1 : eb, ec = e2 > ec ? e2 : ec;
            double cg = cJSON_GetArrayItem(cl, i)->valuedouble;
            double ce = fabs(block_confidence_logit(st, hid + (size_t)i * H, p) - cg);
            econf = ce > econf ? ce : econf;
            got[i] = argmax(row, V);
            p = got[i];
        }
        printf("  markov bias %.2e, corrected logits %.2e, confidence logits |d| %.2e\n", eb, ec,
               econf);
        CHECK(eb <= 1e-4 && ec <= 1e-4 && econf <= 1e-4);
    } else {
        CHECK(rel("block logits", logits, tensor_of(f->gst, "round0.block_logits", (size_t)B * V),
                  (size_t)B * V) <= 1e-4);
        for (int i = 1; i < B; i++) got[i - 1] = argmax(logits + (size_t)i * V, V);
    }
    CHECK(!memcmp(got, want, sizeof(int32_t) * (size_t)nd));
    /* the target's verify rows over [anchor, drafts] */
    int32_t vin[17];
    int nv = ids_of(at(f->gj, "round0.verify_input_ids"), vin, 17);
    float *vl = malloc(sizeof(float) * 17 * V);
    CHECK(model_forward(f->target, kv, vin, nv, vl, 1) == 0);
    CHECK(rel("verify logits", vl, tensor_of(f->gst, "round0.verify_logits", (size_t)nv * V),
              (size_t)nv * V) <= 1e-4);
    model_set_taps(f->target, NULL, 0);
    free(vl), free(fused), free(ctx), free(logits), free(hid), free(lay), free(bias);
    block_state_free(st);
    kv_free(kv);
}

/* The whole greedy speculative trace through the engine: same drafts, accepted counts and
 * committed tokens, round by round, as the reference loop. */
static void trace(struct fixture *f, enum gen_mode mode, const char *key, float threshold) {
    const cJSON *t = cJSON_GetObjectItem(f->gj, key); /* keys may hold dots */
    int32_t want[128];
    int n_want = ids_of(cJSON_GetObjectItem(t, "new_ids"), want, 128);
    struct gen_engine e = {.target = f->target, .block = f->bm};
    struct gen_params gp = {.max_tokens = n_want,
                            .ignore_eos = 1,
                            .top_logprobs = -1,
                            .mode = mode,
                            .max_draft = 0,
                            .lookup_drafts = 0,
                            .trace = 1,
                            .confidence_threshold = threshold,
                            .confidence_per_slot = 1};
    struct gen_result r;
    REQUIRE(gen_run(&e, f->prompt, f->n_prompt, &gp, NULL, NULL, &r) == 0);
    CHECK(r.n_ids == n_want && !memcmp(r.ids, want, sizeof(int32_t) * (size_t)n_want));
    int compared, same = golden_rounds(cJSON_GetObjectItem(t, "rounds"), &r, &compared);
    printf("  %s: %d tokens equal; %d of %d rounds compared are identical (%d rounds)\n", key,
           n_want, same, compared, r.stats.rounds);
    CHECK(same == compared && compared >= r.stats.rounds - 1);
    gen_result_free(&r);
}

TEST(dspark_golden) {
    if (!fs_exists(G "dspark")) SKIP("../shared/golden is absent");
    struct fixture f;
    REQUIRE(setup(&f, G "dspark", "dspark") == 0);
    round0(&f, 1);
    trace(&f, GEN_DSPARK, "trace", 0);
    trace(&f, GEN_DSPARK, "trace_threshold_0.5", 0.5f);
    teardown(&f);
}

TEST(dflash_golden) {
    if (!fs_exists(G "dflash")) SKIP("../shared/golden is absent");
    struct fixture f;
    REQUIRE(setup(&f, G "dflash", "dflash") == 0);
    round0(&f, 0);
    trace(&f, GEN_DFLASH, "trace", 0);
    teardown(&f);
}

/* Greedy output with DSpark and DFlash drafts equals plain decoding on 50 prompts, for draft
 * lengths 1, 2, 4 and the whole block, with and without n-gram lookup rounds. */
TEST(block_drafters_never_change_greedy_output) {
    if (!fs_exists(G "dspark")) SKIP("../shared/golden is absent");
    struct fixture f;
    REQUIRE(setup(&f, G "dspark", "dspark") == 0);
    struct block_model *dflash;
    REQUIRE(block_model_load(G "dflash", f.target, &dflash) == 0);
    int runs = 0, equal = 0, accepted = 0;
    for (int i = 0; i < 50; i++) {
        int32_t prompt[80];
        int n = 6 + (i * 7) % 30;
        for (int j = 0; j < n; j++) prompt[j] = (int32_t)((j * 131 + i * 977 + j * j * 7) % 511);
        if (i % 5 == 0) { /* the golden prompt: the drafters were tuned on its continuation */
            n = f.n_prompt;
            memcpy(prompt, f.prompt, sizeof(int32_t) * (size_t)n);
        }
        struct gen_engine e = {.target = f.target};
        struct gen_params base = {.max_tokens = 20 + i % 13, .ignore_eos = 1, .top_logprobs = -1};
        struct gen_result ref;
        REQUIRE(gen_run(&e, prompt, n, &base, NULL, NULL, &ref) == 0);
        static const int ks[] = {1, 2, 4, 0};
        for (int m = 0; m < 2; m++) {
            for (int ki = 0; ki < 4; ki++) {
                struct gen_engine es = {.target = f.target, .block = m ? dflash : f.bm};
                struct gen_params gp = base;
                gp.mode = m ? GEN_DFLASH : GEN_DSPARK;
                gp.max_draft = ks[ki];
                gp.lookup_drafts = (i + ki) % 2;
                struct gen_result r;
                REQUIRE(gen_run(&es, prompt, n, &gp, NULL, NULL, &r) == 0);
                runs++;
                equal += r.n_ids == ref.n_ids &&
                         !memcmp(r.ids, ref.ids, sizeof(int32_t) * (size_t)r.n_ids);
                accepted += r.stats.accepted;
                gen_result_free(&r);
            }
        }
        gen_result_free(&ref);
    }
    printf("  %d of %d runs equal to baseline, %d drafts accepted\n", equal, runs, accepted);
    CHECK(equal == runs && accepted > 100);
    block_model_free(dflash);
    teardown(&f);
}

/* The shipped drafters for models/pycoder reproduce the training code's reference traces. */
static void shipped(const char *drafter, const char *golden, enum gen_mode mode) {
    if (!fs_exists(drafter) || !fs_exists(golden)) SKIP("models/ or tests/data/drafters absent");
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load(drafter, t, &bm) == 0);
    cJSON *g = load_json(golden);
    REQUIRE(g);
    int cases = 0, equal = 0, rounds_same = 0, rounds_total = 0;
    for (const cJSON *c = cJSON_GetObjectItem(g, "cases")->child; c; c = c->next) {
        int32_t prompt[256], want[256], acc[256];
        int np = ids_of(cJSON_GetObjectItem(c, "prompt_ids"), prompt, 256);
        int nw = ids_of(cJSON_GetObjectItem(c, "new_ids"), want, 256);
        int nr = ids_of(cJSON_GetObjectItem(c, "accepted_per_round"), acc, 256);
        struct gen_engine e = {.target = t, .block = bm};
        struct gen_params gp = {
            .max_tokens = nw, .ignore_eos = 1, .top_logprobs = -1, .mode = mode, .trace = 1};
        struct gen_result r;
        REQUIRE(gen_run(&e, prompt, np, &gp, NULL, NULL, &r) == 0);
        cases++;
        equal += r.n_ids == nw && !memcmp(r.ids, want, sizeof(int32_t) * (size_t)nw);
        for (int i = 0; i < nr && i < r.stats.rounds - 1; i++) /* the last round may be cut */
            rounds_same += r.rounds[i].n_accepted == acc[i], rounds_total++;
        gen_result_free(&r);
    }
    printf("  %s: %d of %d traces equal, %d of %d rounds accept the same\n", drafter, equal, cases,
           rounds_same, rounds_total);
    CHECK(cases == 3 && equal == cases && rounds_same == rounds_total);
    cJSON_Delete(g);
    block_model_free(bm);
    model_free(t);
}

/* Greedy output with the shipped drafters equals plain decoding on models/pycoder over 50
 * prompts taken from the drafters' own test data and tokenizer-free id windows. */
static void shipped_equal(const char *drafter, enum gen_mode mode) {
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load(drafter, t, &bm) == 0);
    cJSON *g = load_json("tests/data/drafters/dspark_pycoder.json");
    REQUIRE(g);
    int32_t base_ids[256];
    int nb = ids_of(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "cases")->child, "prompt_ids"),
                    base_ids, 256);
    int runs = 0, equal = 0, accepted = 0;
    for (int i = 0; i < 50; i++) {
        /* windows of a real prompt, some with a repeated span so lookup rounds happen too */
        int32_t prompt[128];
        int off = (i * 3) % (nb - 12), n = 12 + (i * 5) % (nb - off - 11);
        memcpy(prompt, base_ids + off, sizeof(int32_t) * (size_t)n);
        if (i % 4 == 0 && n + 8 <= 128) memcpy(prompt + n, prompt, sizeof(int32_t) * 8), n += 8;
        struct gen_engine e = {.target = t, .block = bm};
        struct gen_params gp = {.max_tokens = 12 + i % 9, .ignore_eos = 1, .top_logprobs = -1};
        struct gen_result ref, r;
        REQUIRE(gen_run(&e, prompt, n, &gp, NULL, NULL, &ref) == 0);
        gp.mode = mode;
        gp.max_draft = i % 3 == 0 ? 2 : 0;
        gp.lookup_drafts = i % 2;
        REQUIRE(gen_run(&e, prompt, n, &gp, NULL, NULL, &r) == 0);
        runs++;
        equal += r.n_ids == ref.n_ids && !memcmp(r.ids, ref.ids, sizeof(int32_t) * (size_t)r.n_ids);
        accepted += r.stats.accepted;
        gen_result_free(&r), gen_result_free(&ref);
    }
    printf("  %s: %d of %d prompts equal to baseline, %d drafts accepted\n", drafter, equal, runs,
           accepted);
    CHECK(equal == runs && accepted > 0);
    cJSON_Delete(g);
    block_model_free(bm);
    model_free(t);
}

TEST(shipped_drafters) {
    if (fs_exists("models/pycoder-dspark") && fs_exists("tests/data/drafters")) {
        shipped_equal("models/pycoder-dspark", GEN_DSPARK);
        shipped_equal("models/pycoder-dflash", GEN_DFLASH);
    }
    shipped("models/pycoder-dspark", "tests/data/drafters/dspark_pycoder.json", GEN_DSPARK);
    shipped("models/pycoder-dflash", "tests/data/drafters/dflash_pycoder.json", GEN_DFLASH);
}

/* Load-aware verification (tune/loadaware.c) in batched DSpark steps: whatever the pass costs
 * say, each sequence's greedy output equals its run alone. With a flat cost curve no draft is
 * left out; with a cost linear in tokens every draft is (each lowers tokens per second);
 * pycoder's measured curve keeps some. */
TEST(load_aware_batches_stay_exact) {
    if (!fs_exists("models/pycoder-dspark") || !fs_exists("tests/data/drafters"))
        SKIP("models/pycoder-dspark or tests/data/drafters is absent");
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", t, &bm) == 0);
    REQUIRE(block_has_confidence(bm));
    cJSON *g = load_json("tests/data/drafters/dspark_pycoder.json");
    REQUIRE(g);
    int32_t base[256];
    int nb = ids_of(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "cases")->child, "prompt_ids"), base,
                    256);
    enum { NS = 8 };
    const double py[17] = {0.553, 0.609, 0.727, 0.710, 0.782, 0.815, 0.883, 0.888, 0.987,
                           1.035, 1.119, 1.149, 1.211, 1.240, 1.319, 1.311, 1.622};
    struct tune_costs curves[3];
    memset(curves, 0, sizeof curves);
    for (int c = 0; c < 3; c++) {
        curves[c].max_cap = 16;
        for (int w = 1; w <= 17; w++) curves[c].verify[w] = c == 0 ? 1.0 : c == 1 ? w : py[w - 1];
    }
    int cut[3] = {0}, drafted[3] = {0}, equal = 0, runs = 0;
    for (int c = 0; c < 3; c++) {
        struct gen_engine e = {.target = t, .block = bm};
        int32_t prompts[NS][64];
        int n[NS];
        struct gen_params gp = {.max_tokens = 24,
                                .ignore_eos = 1,
                                .top_logprobs = -1,
                                .mode = GEN_DSPARK,
                                .max_draft = 0};
        struct gen_result alone[NS];
        for (int i = 0; i < NS; i++) {
            int off = (i * 7) % (nb - 20);
            n[i] = 12 + i;
            memcpy(prompts[i], base + off, sizeof(int32_t) * (size_t)n[i]);
            REQUIRE(gen_run(&e, prompts[i], n[i], &gp, NULL, NULL, &alone[i]) == 0);
        }
        gp.load_aware = &curves[c];
        struct gen_seq *seqs[NS];
        for (int i = 0; i < NS; i++)
            REQUIRE(gen_seq_new(&e, prompts[i], n[i], &gp, NULL, NULL, &seqs[i]) == 0);
        REQUIRE(gen_run_batch(seqs, NS) == 0);
        for (int i = 0; i < NS; i++) {
            struct gen_result r;
            REQUIRE(gen_seq_finish(seqs[i], &r) == 0);
            runs++;
            equal += r.n_ids == alone[i].n_ids &&
                     !memcmp(r.ids, alone[i].ids, sizeof(int32_t) * (size_t)r.n_ids);
            cut[c] += r.stats.load_aware_cut;
            drafted[c] += r.stats.drafted;
            gen_result_free(&r), gen_result_free(&alone[i]);
        }
    }
    printf("  %d of %d batched outputs equal alone; drafts verified / left out: flat %d / %d, "
           "linear %d / %d, pycoder %d / %d\n",
           equal, runs, drafted[0], cut[0], drafted[1], cut[1], drafted[2], cut[2]);
    CHECK(equal == runs);
    CHECK(cut[0] == 0 && drafted[0] > 0);
    CHECK(cut[1] > 0 && drafted[1] < drafted[0]);
    cJSON_Delete(g);
    block_model_free(bm);
    model_free(t);
}

int main(void) {
    RUN(shipped_drafters);
    RUN(dspark_golden);
    RUN(dflash_golden);
    RUN(block_drafters_never_change_greedy_output);
    RUN(load_aware_batches_stay_exact);
    return test_report();
}
