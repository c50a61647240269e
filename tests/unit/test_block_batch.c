/* tests/unit/test_block_batch.c: the DSpark and DFlash drafters under continuous batching and
 * over the prefix cache, on models/pycoder with its shipped drafters. Batched proposals
 * (propose_batch: one block pass for many sequences) must give every sequence the drafts,
 * confidences and draft distributions it gets alone, and batched generation the outputs and
 * round-by-round drafts of generation alone, greedy and sampled. A follow-up turn over a
 * cached prefix must restore the drafter's context: the same drafts and output as a cold
 * run, prefilling only the new suffix, also when the entry comes back from a spill file. */
#include "test.h"

#include "base/fs.h"
#include "cache/prefix.h"
#include "cache/spill.h"
#include "engine/generate.h"
#include "model/model.h"
#include "sample/dist.h"
#include "sample/sampler.h"
#include "spec/block_model.h"
#include "spec/drafter.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NS 6 /* sequences */

static int32_t base_ids[256];
static int n_base;

/* Real prompts' ids (the drafters' test data, concatenated), windows of which make the
 * prompts. */
static int load_base(void) {
    if (n_base) return 0;
    if (!fs_exists("models/pycoder-dspark") || !fs_exists("tests/data/drafters")) return -1;
    size_t n;
    char *text = NULL;
    fs_read_file("tests/data/drafters/dspark_pycoder.json", &text, &n, (size_t)64 << 20);
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!g) return -1;
    const cJSON *cs, *it;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(g, "cases")) {
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(cs, "prompt_ids")) {
            if (n_base < 256) base_ids[n_base++] = (int32_t)it->valueint;
        }
    }
    cJSON_Delete(g);
    if (n_base >= 100) return 0;
    n_base = 0;
    return -1;
}

static int prompt_of(int i, int32_t *out) {
    int n = 14 + 5 * i, off = (i * 11) % (n_base - n);
    memcpy(out, base_ids + off, sizeof(int32_t) * (size_t)n);
    return n;
}

/* ---- the drafter alone against propose_batch ---- */

struct seqd {
    struct drafter a, b; /* the same drafter twice: a proposes alone, b in batches */
    struct kv_cache *kv;
    int32_t seq[256];
    int n;
    int32_t ids_a[16], ids_b[16];
    const struct sample_dist *q_a[16], *q_b[16];
    float conf_a[16], conf_b[16];
    struct draft da, db;
};

static int same_dist(const struct sample_dist *x, const struct sample_dist *y) {
    if (!x || !y) return x == y;
    return x->n == y->n && x->sorted == y->sorted && x->mass == y->mass &&
           !memcmp(x->ids, y->ids, sizeof(int32_t) * (size_t)x->n) &&
           !memcmp(x->probs, y->probs, sizeof(float) * (size_t)x->n);
}

/* Runs rows ids[0..n) of sequence s through the target and gives both drafters their taps. */
static int commit_rows(struct model *t, struct seqd *s, int n, int W) {
    float *taps = malloc(sizeof(float) * (size_t)W * (size_t)n);
    int pos = kv_len(s->kv);
    int rc = taps ? model_forward_taps(t, s->kv, s->seq + pos, n, NULL, 0, taps) : -1;
    if (!rc) rc = s->a.ops->observe(&s->a, taps, pos, n);
    if (!rc) rc = s->b.ops->observe(&s->b, taps, pos, n);
    free(taps);
    return rc;
}

static void drafts_alone_and_batched(const char *dir, float temperature) {
    if (load_base()) SKIP("models/pycoder-dspark or tests/data/drafters is absent");
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load(dir, t, &bm) == 0);
    const struct hf_config *c = block_model_config(bm);
    int W = c->n_target_layer_ids * model_config(t)->hidden_size;
    REQUIRE(model_set_taps(t, c->target_layer_ids, c->n_target_layer_ids) == 0);
    struct seqd *s = calloc(NS, sizeof *s);
    REQUIRE(s);
    for (int i = 0; i < NS; i++) {
        struct sample_params sp = {.temperature = temperature,
                                   .top_p = i % 2 ? 0.9f : 1,
                                   .top_k = i % 3 ? 0 : 40,
                                   .seed = 100 + (uint64_t)i};
        /* DSpark: some sequences end blocks at low confidence, by product or per draft */
        struct block_drafter_opts o = {.max_draft = 16,
                                       .cap = 512,
                                       .confidence_threshold = i % 3 == 1 ? 0.3f : 0,
                                       .per_slot = i == 4};
        REQUIRE(block_drafter_new(bm, &sp, &o, &s[i].a) == 0);
        REQUIRE(block_drafter_new(bm, &sp, &o, &s[i].b) == 0);
        REQUIRE(kv_new(t, 512, &s[i].kv) == 0);
        s[i].n = prompt_of(i, s[i].seq);
        REQUIRE(commit_rows(t, &s[i], s[i].n - 1, W) == 0); /* the last token is pending */
    }
    struct drafter *ds[NS];
    const int32_t *sq[NS];
    int ns[NS], nmax[NS];
    struct draft *outs[NS];
    int rounds = 0, same = 0, drafted = 0, with_conf = 0, with_q = 0;
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < NS; i++) {
            struct seqd *x = &s[i];
            /* caps from none to past the block; load-aware rounds ask for confidences */
            nmax[i] = (i + round) % 5 == 0 ? 0 : 1 + (i * 3 + round * 5) % 18;
            float *ca = (i + round) % 2 ? x->conf_a : NULL, *cb = ca ? x->conf_b : NULL;
            x->da = (struct draft){x->ids_a, x->q_a, 0, 16, ca};
            x->db = (struct draft){x->ids_b, x->q_b, 0, 16, cb};
            memset(x->conf_a, 0, sizeof x->conf_a), memset(x->conf_b, 0, sizeof x->conf_b);
            REQUIRE(x->a.ops->propose(&x->a, x->seq, x->n, nmax[i], &x->da) == 0);
            ds[i] = &x->b, sq[i] = x->seq, ns[i] = x->n, outs[i] = &x->db;
        }
        REQUIRE(s[0].b.ops->propose_batch(ds, sq, ns, nmax, outs, NS) == 0);
        for (int i = 0; i < NS; i++) {
            struct seqd *x = &s[i];
            int ok = x->da.n == x->db.n && !memcmp(x->ids_a, x->ids_b, sizeof(int32_t) * x->da.n) &&
                     !memcmp(x->conf_a, x->conf_b, sizeof x->conf_a);
            for (int k = 0; k < x->da.n; k++) ok &= same_dist(x->q_a[k], x->q_b[k]);
            rounds++, same += ok, drafted += x->da.n;
            with_conf += x->da.conf && x->conf_a[0] > 0;
            with_q += x->da.n && x->q_a[0];
            /* commit the pending token, some drafts and a token of our own, as a round might */
            int keep = x->da.n < 1 + (i + round) % 3 ? x->da.n : 1 + (i + round) % 3;
            memcpy(x->seq + x->n, x->ids_a, sizeof(int32_t) * (size_t)keep);
            x->n += keep;
            x->seq[x->n++] = base_ids[(i * 5 + round * 7) % n_base];
            REQUIRE(commit_rows(t, x, x->n - 1 - kv_len(x->kv), W) == 0);
        }
    }
    printf("  %s, T=%.1f: %d of %d proposals equal alone and batched (%d drafts; %d with "
           "confidences, %d with distributions)\n",
           dir, temperature, same, rounds, drafted, with_conf, with_q);
    CHECK(same == rounds && drafted > 0);
    CHECK((temperature > 0) == (with_q > 0));
    if (c->arch == ARCH_DSPARK) CHECK(with_conf > 0);
    for (int i = 0; i < NS; i++) {
        drafter_free(&s[i].a), drafter_free(&s[i].b);
        kv_free(s[i].kv);
    }
    free(s);
    model_set_taps(t, NULL, 0);
    block_model_free(bm);
    model_free(t);
}

TEST(batched_block_drafts_equal_alone) {
    drafts_alone_and_batched("models/pycoder-dspark", 0);
    drafts_alone_and_batched("models/pycoder-dspark", 0.8f);
    drafts_alone_and_batched("models/pycoder-dflash", 0);
    drafts_alone_and_batched("models/pycoder-dflash", 0.8f);
}

/* ---- whole generations ---- */

static int same_result(const struct gen_result *x, const struct gen_result *y) {
    if (x->n_ids != y->n_ids || memcmp(x->ids, y->ids, sizeof(int32_t) * (size_t)x->n_ids))
        return 0;
    if (x->stats.rounds != y->stats.rounds || x->stats.drafted != y->stats.drafted) return 0;
    for (int i = 0; i < x->stats.rounds; i++)
        if (x->rounds[i].n_drafted != y->rounds[i].n_drafted ||
            x->rounds[i].n_accepted != y->rounds[i].n_accepted)
            return 0;
    return !memcmp(x->drafted, y->drafted, sizeof(int32_t) * (size_t)x->stats.drafted);
}

static void generations(const char *dir, enum gen_mode mode, float temperature) {
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load(dir, t, &bm) == 0);
    struct gen_engine e = {.target = t, .block = bm};
    struct gen_params gp[NS];
    int32_t prompts[NS][64];
    int n[NS];
    struct gen_result alone[NS];
    for (int i = 0; i < NS; i++) {
        n[i] = prompt_of(i % 4, prompts[i]);
        gp[i] = (struct gen_params){.max_tokens = 20 + 3 * i,
                                    .ignore_eos = 1,
                                    .top_logprobs = -1,
                                    .mode = mode,
                                    .max_draft = i % 3 == 2 ? 3 : 0,
                                    .lookup_drafts = i % 2,
                                    .trace = 1};
        gp[i].sp = (struct sample_params){
            .temperature = temperature, .top_p = 0.95f, .seed = 7 + (uint64_t)i};
        REQUIRE(gen_run(&e, prompts[i], n[i], &gp[i], NULL, NULL, &alone[i]) == 0);
    }
    struct gen_seq *seqs[NS];
    for (int i = 0; i < NS; i++)
        REQUIRE(gen_seq_new(&e, prompts[i], n[i], &gp[i], NULL, NULL, &seqs[i]) == 0);
    REQUIRE(gen_run_batch(seqs, NS) == 0);
    int equal = 0, drafted = 0;
    for (int i = 0; i < NS; i++) {
        struct gen_result r;
        REQUIRE(gen_seq_finish(seqs[i], &r) == 0);
        equal += same_result(&r, &alone[i]);
        drafted += r.stats.drafted;
        gen_result_free(&r), gen_result_free(&alone[i]);
    }
    printf("  %s, T=%.1f: %d of %d batched generations equal alone (outputs and every round's "
           "drafts; %d drafts)\n",
           dir, temperature, equal, NS, drafted);
    CHECK(equal == NS && drafted > 0);
    block_model_free(bm);
    model_free(t);
}

TEST(batched_block_generations_equal_alone) {
    if (load_base()) SKIP("models/pycoder-dspark or tests/data/drafters is absent");
    generations("models/pycoder-dspark", GEN_DSPARK, 0);
    generations("models/pycoder-dspark", GEN_DSPARK, 0.9f);
    generations("models/pycoder-dflash", GEN_DFLASH, 0);
    generations("models/pycoder-dflash", GEN_DFLASH, 0.9f);
}

/* ---- a follow-up turn over the prefix cache ---- */

static void follow_up(const char *dir, enum gen_mode mode, float temperature) {
    struct model *t;
    struct block_model *bm;
    struct prefix_cache *pc;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load(dir, t, &bm) == 0);
    REQUIRE(prefix_cache_new(t, &(struct prefix_cache_opts){.max_entries = 4}, &pc) == 0);
    struct gen_engine cached = {.target = t, .block = bm, .cache = pc};
    struct gen_engine cold = {.target = t, .block = bm};
    struct gen_params gp = {.max_tokens = 24,
                            .ignore_eos = 1,
                            .top_logprobs = -1,
                            .mode = mode,
                            .trace = 1,
                            .sp = {.temperature = temperature, .top_p = 0.95f, .seed = 3}};
    int32_t p1[64], p2[160];
    int n1 = prompt_of(5, p1), ok = 1;
    struct gen_result r1, warm, ref;
    REQUIRE(gen_run(&cached, p1, n1, &gp, NULL, NULL, &r1) == 0);
    /* turn 2: turn 1's prompt and output, then a new message */
    int n2 = n1;
    memcpy(p2, p1, sizeof(int32_t) * (size_t)n1);
    memcpy(p2 + n2, r1.ids, sizeof(int32_t) * (size_t)r1.n_ids), n2 += r1.n_ids;
    memcpy(p2 + n2, base_ids + 40, sizeof(int32_t) * 12), n2 += 12;
    for (int turn = 0; turn < 2; turn++) { /* the entry lent, then copied from a kept entry */
        gp.max_tokens = 24 + turn;
        REQUIRE(gen_run(&cold, p2, n2, &gp, NULL, NULL, &ref) == 0);
        REQUIRE(gen_run(&cached, p2, n2, &gp, NULL, NULL, &warm) == 0);
        /* turn 1's cache holds every position but its pending last token; after a turn 2 the
         * entry holds all of turn 2's prompt (the last prompt token is always run) */
        int want = turn ? n2 - 1 : n1 + r1.n_ids - 1;
        printf("  %s, T=%.1f, turn 2%s: %d of %d prompt tokens reused, %d prefilled; %d drafts "
               "(cold run %d)\n",
               dir, temperature, turn ? " again" : "", warm.stats.cached_tokens, n2,
               n2 - warm.stats.cached_tokens, warm.stats.drafted, ref.stats.drafted);
        CHECK(warm.stats.cached_tokens == want);
        CHECK(ref.stats.cached_tokens == 0);
        ok &= same_result(&warm, &ref) && ref.stats.drafted > 0;
        gen_result_free(&warm), gen_result_free(&ref);
    }
    CHECK(ok);
    /* an engine without the drafter context (a plain entry) is not used by a dspark turn */
    struct gen_params base = gp;
    base.mode = GEN_BASELINE;
    struct prefix_cache *pc2;
    REQUIRE(prefix_cache_new(t, &(struct prefix_cache_opts){.max_entries = 4}, &pc2) == 0);
    struct gen_engine plain = {.target = t, .cache = pc2},
                      mixed = {.target = t, .block = bm, .cache = pc2};
    REQUIRE(gen_run(&plain, p1, n1, &base, NULL, NULL, &warm) == 0);
    gen_result_free(&warm);
    REQUIRE(gen_run(&mixed, p2, n2, &gp, NULL, NULL, &warm) == 0);
    REQUIRE(gen_run(&cold, p2, n2, &gp, NULL, NULL, &ref) == 0);
    CHECK(warm.stats.cached_tokens == 0 && same_result(&warm, &ref));
    gen_result_free(&warm), gen_result_free(&ref), gen_result_free(&r1);
    prefix_cache_free(pc2);
    prefix_cache_free(pc);
    block_model_free(bm);
    model_free(t);
}

TEST(follow_up_turn_restores_the_drafter) {
    if (load_base()) SKIP("models/pycoder-dspark or tests/data/drafters is absent");
    follow_up("models/pycoder-dspark", GEN_DSPARK, 0);
    follow_up("models/pycoder-dspark", GEN_DSPARK, 0.8f);
    follow_up("models/pycoder-dflash", GEN_DFLASH, 0);
}

/* The drafter context travels through a spill file: after a restart a DSpark follow-up turn
 * is served from disk with the drafter restored, and a file of the previous format version
 * is rejected. */
TEST(follow_up_over_a_spilled_drafter_context) {
    if (load_base()) SKIP("models/pycoder-dspark or tests/data/drafters is absent");
    char dir[] = "/tmp/dspark-test-ctx-XXXXXX";
    REQUIRE(mkdtemp(dir));
    struct model *t;
    struct block_model *bm;
    struct prefix_cache *pc;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", t, &bm) == 0);
    struct prefix_cache_opts po = {.max_entries = 4, .spill_dir = dir};
    REQUIRE(prefix_cache_new(t, &po, &pc) == 0);
    struct gen_engine cached = {.target = t, .block = bm, .cache = pc};
    struct gen_engine cold = {.target = t, .block = bm};
    struct gen_params gp = {
        .max_tokens = 40, .ignore_eos = 1, .top_logprobs = -1, .mode = GEN_DSPARK, .trace = 1};
    int32_t p1[64], p2[160];
    int n1 = prompt_of(5, p1);
    struct gen_result r1, warm, ref;
    REQUIRE(gen_run(&cached, p1, n1, &gp, NULL, NULL, &r1) == 0);
    prefix_cache_free(pc); /* saves the entry to the folder */
    int n2 = n1;
    memcpy(p2, p1, sizeof(int32_t) * (size_t)n1);
    memcpy(p2 + n2, r1.ids, sizeof(int32_t) * (size_t)r1.n_ids), n2 += r1.n_ids;
    memcpy(p2 + n2, base_ids + 40, sizeof(int32_t) * 12), n2 += 12;
    REQUIRE(prefix_cache_new(t, &po, &pc) == 0); /* a restarted server */
    cached.cache = pc;
    gp.max_tokens = 24;
    REQUIRE(gen_run(&cached, p2, n2, &gp, NULL, NULL, &warm) == 0);
    REQUIRE(gen_run(&cold, p2, n2, &gp, NULL, NULL, &ref) == 0);
    struct prefix_stats ps = prefix_cache_stats(pc);
    printf("  turn 2 after a restart: %d of %d prompt tokens reused from disk (%ld read), %d "
           "drafts (cold run %d)\n",
           warm.stats.cached_tokens, n2, ps.spill_reads, warm.stats.drafted, ref.stats.drafted);
    CHECK(warm.stats.cached_tokens == n1 + r1.n_ids - 1 && ps.spill_reads == 1);
    CHECK(same_result(&warm, &ref) && ref.stats.drafted > 0);
    gen_result_free(&warm), gen_result_free(&ref), gen_result_free(&r1);
    prefix_cache_free(pc);
    /* a version 1 file (same header, consistent checksum) is deleted, never used */
    const struct hf_config *c = model_config(t);
    struct spill_geometry g = {c->n_layers, c->n_kv_heads, c->head_dim};
    struct spill *sp;
    char path[256];
    REQUIRE(spill_open(dir, model_fingerprint(t), &g, 0, &sp) == 0);
    int files = spill_stats(sp).files;
    REQUIRE(files > 0 && spill_file_path(sp, 0, path, sizeof path) == 0);
    spill_close(sp);
    FILE *f = fopen(path, "r+b");
    unsigned char h[96];
    REQUIRE(f && fread(h, 1, sizeof h, f) == sizeof h);
    uint32_t v = 1;
    memcpy(h + 8, &v, 4);
    uint64_t hh = XXH64(h, 88, 0);
    memcpy(h + 88, &hh, 8);
    REQUIRE(fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, f) == sizeof h);
    fclose(f);
    REQUIRE(spill_open(dir, model_fingerprint(t), &g, 0, &sp) == 0);
    struct spill_stats ss = spill_stats(sp);
    CHECK(ss.rejects == 1 && ss.files == files - 1);
    for (int i = 0; spill_file_path(sp, i, path, sizeof path) == 0; i++) remove(path);
    spill_close(sp);
    snprintf(path, sizeof path, "%s/%016llx", dir, (unsigned long long)model_fingerprint(t));
    remove(path), remove(dir);
    block_model_free(bm);
    model_free(t);
}

/* The context rows a drafter saves load into another state exactly: the blocks run over
 * both give bit-identical hidden rows. */
TEST(context_rows_round_trip) {
    if (load_base()) SKIP("models/pycoder-dspark or tests/data/drafters is absent");
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &t) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", t, &bm) == 0);
    const struct hf_config *c = block_model_config(bm);
    int H = c->hidden_size, B = c->block_size, L = 40, W = block_ctx_width(bm);
    int T = c->n_target_layer_ids * H;
    float *fused = malloc(sizeof(float) * (size_t)L * T), *rows = malloc(sizeof(float) * L * W);
    float *h1 = malloc(sizeof(float) * (size_t)B * H), *h2 = malloc(sizeof(float) * B * H);
    REQUIRE(fused && rows && h1 && h2);
    for (int i = 0; i < L * T; i++) fused[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    struct block_state *a, *b;
    REQUIRE(block_state_new(bm, 64, &a) == 0 && block_state_new(bm, 64, &b) == 0);
    REQUIRE(block_ctx_append(a, fused, L, NULL) == 0);
    CHECK(block_ctx_save(a, rows, L + 5) == L);
    REQUIRE(block_ctx_load(b, rows, L) == 0);
    CHECK(block_state_len(b) == L);
    int32_t ids[16];
    for (int i = 0; i < B; i++) ids[i] = i ? c->mask_token_id : base_ids[3];
    REQUIRE(block_forward(a, ids, B, h1, NULL) == 0 && block_forward(b, ids, B, h2, NULL) == 0);
    CHECK(!memcmp(h1, h2, sizeof(float) * (size_t)B * H));
    CHECK(block_ctx_load(b, rows, 65) != 0); /* past the capacity */
    CHECK(block_model_fingerprint(bm) != 0);
    block_state_free(a), block_state_free(b);
    free(fused), free(rows), free(h1), free(h2);
    block_model_free(bm);
    model_free(t);
}

int main(void) {
    RUN(batched_block_drafts_equal_alone);
    RUN(batched_block_generations_equal_alone);
    RUN(follow_up_turn_restores_the_drafter);
    RUN(follow_up_over_a_spilled_drafter_context);
    RUN(context_rows_round_trip);
    return test_report();
}
