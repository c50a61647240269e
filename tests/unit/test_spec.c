/* tests/unit/test_spec.c: speculative decoding never changes the output. Greedy: every mode
 * and draft length gives the baseline's tokens, including rounds cut by EOS and by the token
 * budget. Sampling: with a deliberately poor draft distribution, the committed tokens follow
 * the truncated, penalised target distribution. Uses the golden models in tests/data (all
 * share a 151-token vocabulary, so any of them can draft for another). */
#include "test.h"

#include "backend/gpu.h"
#include "base/fs.h"
#include "base/log.h"
#include "cache/prefix.h"
#include "engine/generate.h"
#include "model/model.h"
#include "sample/dist.h"
#include "sample/penalty.h"
#include "sample/rng.h"
#include "sample/sampler.h"
#include "spec/drafter.h"
#include "spec/verify.h"

#include <stdlib.h>
#include <string.h>

#define TARGET "tests/data/golden/qwen3_f32"
#define POOR   "tests/data/golden/llama3_f32"

static struct model *load(const char *dir) {
    struct model *m = NULL;
    /* one thread: these models are too small for a second to pay off */
    model_load(dir, &(struct model_opts){.n_threads = 1}, &m);
    return m;
}

/* 50 prompts: random ones, and copy-heavy ones that repeat a span so n-gram lookup fires. */
static int make_prompt(int i, int32_t *p) {
    uint64_t x = 0x1234567ull * (uint64_t)(i + 1);
    int n = 8 + i % 23;
    for (int j = 0; j < n; j++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[j] = 3 + (int32_t)((x >> 33) % 148);
    }
    if (i % 2) { /* copy-heavy: the prompt ends by repeating its own beginning */
        int span = n < 12 ? n : 12;
        memcpy(p + n, p, sizeof(int32_t) * (size_t)span);
        n += span;
    }
    return n;
}

static int run(struct gen_engine *e, const int32_t *prompt, int n, struct gen_params *gp,
               struct gen_result *r) {
    return gen_run(e, prompt, n, gp, NULL, NULL, r);
}

TEST(greedy_identical_in_every_mode) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *t = load(TARGET), *self = load(TARGET), *poor = load(POOR);
    REQUIRE(t && self && poor);
    int n_cases = 0, n_lookup_rounds = 0, n_accepted = 0, n_cut = 0;
    for (int i = 0; i < 50; i++) {
        int32_t prompt[64];
        int n = make_prompt(i, prompt);
        struct gen_engine e = {.target = t};
        struct gen_params base = {.max_tokens = 24 + i % 17, .top_logprobs = -1};
        struct gen_result ref;
        REQUIRE(run(&e, prompt, n, &base, &ref) == 0);
        /* every 5th prompt also ends at an "EOS": a token the baseline produces mid-way */
        int32_t stop_id = ref.ids[ref.n_ids / 2];
        if (i % 5 == 0) {
            gen_result_free(&ref);
            base.stop_ids = &stop_id;
            base.n_stop_ids = 1;
            REQUIRE(run(&e, prompt, n, &base, &ref) == 0);
            CHECK(ref.finish == GEN_FINISH_STOP && ref.ids[ref.n_ids - 1] == stop_id);
        }
        for (int mode = GEN_LOOKUP; mode <= GEN_DRAFT; mode++) {
            for (int dsrc = 0; dsrc < (mode == GEN_DRAFT ? 2 : 1); dsrc++) {
                static const int ks[] = {1, 2, 4, 8};
                for (int ki = 0; ki < 4; ki++) {
                    struct gen_engine es = {.target = t, .draft = dsrc ? poor : self};
                    struct gen_params gp = base;
                    gp.mode = (enum gen_mode)mode;
                    gp.max_draft = ks[ki];
                    gp.lookup_drafts = i % 3 != 0;
                    struct gen_result r;
                    REQUIRE(run(&es, prompt, n, &gp, &r) == 0);
                    int same = r.n_ids == ref.n_ids &&
                               !memcmp(r.ids, ref.ids, sizeof(int32_t) * (size_t)r.n_ids);
                    if (!same)
                        printf("  prompt %d mode %d drafter %d k %d: differs\n", i, mode, dsrc,
                               ks[ki]);
                    CHECK(same);
                    CHECK(r.finish == ref.finish);
                    CHECK(r.stats.n_generated == ref.stats.n_generated);
                    n_lookup_rounds += r.stats.lookup_rounds;
                    n_accepted += r.stats.accepted;
                    n_cut += r.stats.rounds > 0 && r.finish == GEN_FINISH_LENGTH;
                    n_cases++;
                    gen_result_free(&r);
                }
            }
        }
        gen_result_free(&ref);
    }
    printf("  %d runs equal to baseline; %d lookup rounds, %d drafts accepted\n", n_cases,
           n_lookup_rounds, n_accepted);
    CHECK(n_lookup_rounds > 0 && n_accepted > 1000 && n_cut > 0); /* the paths were exercised */
    model_free(t), model_free(self), model_free(poor);
}

/* The committed tokens of a round whose first draft comes from a reversed distribution q must
 * follow p at row 0, and at row 1 given that the first draft was kept. The round's logits are
 * computed once and replayed through verify_decide(). */
struct stat_case {
    float temperature, top_p;
    int top_k;
    float presence, frequency;
};

struct record {
    int32_t got[8];
    int n;
};

static int record_cb(void *ctx, int32_t id, const struct logprobs *lp) {
    (void)lp;
    struct record *r = ctx;
    r->got[r->n++] = id;
    return 0;
}

static double tv(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs(a[i] - b[i]);
    return s / 2;
}

#define HIST 4
static const int32_t history[HIST] = {17, 99, 99, 23}; /* "already generated": penalties */

/* Back to the history's counts; the rng keeps going (sampler_reset would reseed it). */
static void reset_counts(struct sampler *s) {
    penalty_clear(sampler_counts(s));
    for (int i = 0; i < HIST; i++) sampler_accept(s, history[i]);
}

TEST(sampling_matches_target_distribution) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *t = load(TARGET);
    REQUIRE(t);
    int V = model_config(t)->vocab_size;
    REQUIRE(V <= 512);
    static const struct stat_case cases[] = {
        {8, 1, 0, 0, 0}, {6, 0.9f, 0, 0, 0}, {10, 1, 12, 0, 0}, {8, 0.95f, 20, 1.5f, 0.7f}};
    int32_t prompt[12] = {1, 17, 99, 23, 5, 88, 140, 3, 61, 42, 77, 9};
    float *rows = malloc(sizeof(float) * V * 2);
    void *qmem = malloc(sample_dist_bytes(V));
    struct sample_dist q;
    sample_dist_init(&q, qmem, V);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct stat_case *c = &cases[ci];
        struct sample_params sp = {c->temperature, c->top_p,     c->top_k,
                                   c->presence,    c->frequency, 1000 + ci};
        struct sampler *s = sampler_new(&sp, V);
        struct kv_cache *kv;
        REQUIRE(s && kv_new(t, 64, &kv) == 0);
        struct verify v;
        REQUIRE(verify_init(&v, t, kv, s, 2, -1, 0) == 0);
        /* row 0: after the prompt; its expected p and a reversed q */
        REQUIRE(model_forward(t, kv, prompt, 12, v.logits, 0) == 0);
        memcpy(rows, v.logits, sizeof(float) * V);
        float rev[512];
        for (int i = 0; i < V; i++) rev[i] = -rows[i];
        REQUIRE(sample_dist_build(&q, rev, c->temperature, 0, 1) == 0);
        double exp0[512] = {0}, emp0[512] = {0}, exp1[512] = {0}, emp1[512] = {0};
        float tmp[512];
        const struct sample_dist *pd;
        reset_counts(s);
        memcpy(tmp, rows, sizeof(float) * V);
        REQUIRE(sampler_build_dist(s, tmp, NULL, 0, &pd) == 0);
        int32_t d0 = pd->ids[0];
        for (int i = 0; i < pd->n; i++) {
            exp0[pd->ids[i]] = pd->probs[i];
            if (pd->probs[i] > exp0[d0]) d0 = pd->ids[i];
        }
        /* row 1: after prompt + d0, with d0 counted as generated */
        int32_t next[1] = {d0};
        REQUIRE(model_forward(t, kv, next, 1, v.logits, 0) == 0);
        memcpy(rows + V, v.logits, sizeof(float) * V);
        sampler_accept(s, d0);
        memcpy(tmp, rows + V, sizeof(float) * V);
        REQUIRE(sampler_build_dist(s, tmp, NULL, 0, &pd) == 0);
        for (int i = 0; i < pd->n; i++) exp1[pd->ids[i]] = pd->probs[i];
        struct rng dr;
        rng_seed(&dr, 77 + ci);
        int n0 = 0, n1 = 0;
        int bad = 0;
        for (int it = 0; (n0 < 40000 || n1 < 40000) && it < 4000000 && !bad; it++) {
            reset_counts(s);
            memcpy(v.logits, rows, sizeof(float) * V * 2);
            /* half the rounds draft from the reversed q, half propose d0 one-hot; the second
             * draft is a fixed one-hot guess (id 7) */
            int32_t ids[2] = {it % 2 ? d0 : sample_dist_draw(&q, &dr), 7};
            const struct sample_dist *qs[2] = {it % 2 ? NULL : &q, NULL};
            struct draft d = {ids, qs, 2, 2, NULL};
            struct record rec = {{0}, 0};
            int acc, stopped;
            bad = verify_decide(&v, &d, record_cb, &rec, &acc, &stopped) != 0;
            if (n0 < 40000) emp0[rec.got[0]]++, n0++;
            if (acc >= 1 && rec.got[0] == d0 && n1 < 40000) emp1[rec.got[1]]++, n1++;
        }
        CHECK(!bad && n1 == 40000);
        for (int i = 0; i < V; i++) emp0[i] /= n0, emp1[i] /= n1 ? n1 : 1;
        double tv0 = tv(emp0, exp0, V), tv1 = tv(emp1, exp1, V);
        printf("  T=%.0f top_p=%.2f top_k=%d penalties=%.1f/%.1f: TV row0 %.4f, row1 %.4f "
               "(%d draws each)\n",
               c->temperature, c->top_p, c->top_k, c->presence, c->frequency, tv0, tv1, n0);
        CHECK(tv0 < 0.02);
        CHECK(tv1 < 0.02);
        verify_deinit(&v);
        kv_free(kv);
        sampler_free(s);
    }
    free(rows), free(qmem);
    model_free(t);
}

/* Row r of a pass penalised as backend/cuda/sample.cu does it from a request's lists: the
 * base entries whose id is not among the row's own, then the row's own. */
static void apply_lists(float *row, const struct gpu_sample_req *q, int r) {
    const int32_t *own = q->ext_ids + q->ext_at[r];
    for (int i = 0; i < q->n_pen; i++) {
        int mine = 0;
        for (int e = 0; e < q->ext_n[r]; e++) mine |= own[e] == q->pen_ids[i];
        if (!mine) row[q->pen_ids[i]] -= q->pen_amt[i];
    }
    for (int e = 0; e < q->ext_n[r]; e++) row[own[e]] -= q->ext_amt[q->ext_at[r] + e];
}

/* Rounds decided from sampling summaries (what a GPU target sends instead of its logits, see
 * spec/verify.h) commit what rounds decided from the logits commit, and draw the same random
 * numbers: untruncated drafts tested from the summary alone, truncated rows built from their
 * candidates, rows whose summary does not suffice (a small capacity) built from the row; drafts
 * one-hot or drawn from a q, accepted or not; with penalties, the rows penalised from the lists
 * verify_item() makes for the device. The summaries come from sample_row_summarize(), the
 * CPU's reference that the GPU's kernel matches bit for bit. */
TEST(summaries_decide_as_logits) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *t = load(TARGET);
    REQUIRE(t);
    const int V = model_config(t)->vocab_size, K = 4;
    static const struct {
        float t, p;
        int k, cap;
        float pres, freq;
    } set[] = {{1.0f, 1.0f, 0, 1024, 0, 0},       {0.8f, 0.9f, 0, 1024, 0, 0},
               {1.2f, 1.0f, 12, 1024, 0, 0},      {0.7f, 0.95f, 20, 1024, 0, 0},
               {1.5f, 0.99f, 0, 8, 0, 0},         {0.6f, 1.0f, 30, 16, 0, 0},
               {0.6f, 1.0f, 0, 8, 0, 0},          {1.7f, 1.0f, 0, 1024, 0, 0},
               {1.0f, 1.0f, 0, 1024, 0.5f, 0.3f}, {0.8f, 0.9f, 0, 1024, 0.4f, 0.2f},
               {1.2f, 1.0f, 12, 1024, 0, 0.6f},   {0.7f, 0.95f, 20, 8, 0.3f, 0.3f},
               {0, 1.0f, 0, 1024, 0.5f, 0.4f}};
    void *qmem = malloc(sample_dist_bytes(V)), *q2mem = malloc(sample_dist_bytes(V));
    float *qrow = malloc(sizeof(float) * V);
    REQUIRE(qmem && q2mem && qrow);
    struct sample_dist q, q2;
    sample_dist_init(&q, qmem, V);
    sample_dist_init(&q2, q2mem, V);
    int rounds = 0, same = 0, accepted = 0, from_summary = 0, drawn_rows = 0, drawn_used = 0;
    int pen_rows = 0, pen_same = 0, greedy_rows = 0;
    for (size_t c = 0; c < sizeof set / sizeof *set; c++)
        for (int trial = 0; trial < 150; trial++) {
            struct sample_params sp = {set[c].t,    set[c].p,    set[c].k,
                                       set[c].pres, set[c].freq, 100u * c + trial};
            int pen = set[c].pres != 0 || set[c].freq != 0;
            struct sampler *s1 = sampler_new(&sp, V), *s2 = sampler_new(&sp, V);
            struct kv_cache *kv;
            REQUIRE(s1 && s2 && kv_new(t, 16, &kv) == 0);
            struct verify v1, v2;
            REQUIRE(verify_init(&v1, t, kv, s1, K, -1, 0) == 0);
            REQUIRE(verify_init(&v2, t, kv, s2, K, -1, 0) == 0);
            /* rows of logits: peaked around a few tokens, some flat */
            struct rng r;
            rng_seed(&r, 7u + 1000u * c + trial);
            for (int i = 0; i < (K + 1) * V; i++)
                v1.logits[i] =
                    (trial % 3 ? 6.0f : 1.0f) * (rng_float(&r) - 0.5f) + (i % V < 5 ? 4.0f : 0.0f);
            memcpy(v2.logits, v1.logits, sizeof(float) * (K + 1) * V);
            /* drafts: the likeliest tokens (often kept) or random ones, one-hot or from q */
            int32_t ids[4];
            const struct sample_dist *qs[4] = {NULL, NULL, NULL, NULL};
            int with_q = trial % 2;
            for (int i = 0; i < K; i++) ids[i] = trial % 4 < 2 ? i % 5 : (int32_t)rng_below(&r, V);
            if (with_q) {
                for (int i = 0; i < V; i++) qrow[i] = 3.0f * rng_float(&r);
                REQUIRE(sample_dist_build(&q, qrow, 1.0f, 0, 1) == 0);
                for (int i = 0; i < K; i++) qs[i] = &q;
            }
            /* a completion so far, counted by both samplers: drafts among it sometimes */
            for (int h = 0; pen && h < 25; h++) {
                int32_t tok = h % 4 == 0   ? ids[h % K]
                              : h % 4 == 1 ? h % 5
                                           : (int32_t)rng_below(&r, (uint32_t)V);
                REQUIRE(sampler_accept(s1, tok) == 0 && sampler_accept(s2, tok) == 0);
            }
            /* v2 decides from the rows' summaries, as after a GPU pass */
            size_t per = (size_t)set[c].cap;
            v2.req =
                calloc(1, sizeof *v2.req + (K + 1) * (sizeof(struct gpu_row_summary) +
                                                      per * (sizeof(int32_t) + sizeof(float))));
            REQUIRE(v2.req);
            if (pen) { /* verify_init() gives these to GPU targets with penalties */
                v2.ext_at = malloc(sizeof(int) * (K + 1)), v2.ext_n = malloc(sizeof(int) * (K + 1));
                v2.ext_ids = malloc(sizeof(int32_t) * (K * (K + 1) / 2 + 1));
                v2.ext_amt = malloc(sizeof(float) * (K * (K + 1) / 2 + 1));
                REQUIRE(v2.ext_at && v2.ext_n && v2.ext_ids && v2.ext_amt);
            }
            struct gpu_row_summary *rows = (struct gpu_row_summary *)(v2.req + 1);
            int32_t *cid = (int32_t *)(rows + K + 1);
            float *clg = (float *)(cid + (K + 1) * per);
            *v2.req = (struct gpu_sample_req){
                .temperature = set[c].t, .top_k = set[c].k, .top_p = set[c].p, .rows = rows};
            int32_t in[8] = {3};
            memcpy(in + 1, ids, sizeof(int32_t) * K);
            struct model_batch_item it = verify_item(&v2, in, K + 1);
            CHECK(it.sample == v2.req && v2.req->penalised == pen);
            /* the penalties, as sample.cu applies the pass's lists to its rows, against
             * penalty_apply() with the drafts before each row as extras */
            for (int i = 0; pen && i <= K; i++) {
                float *row = v2.logits + (size_t)i * V;
                memcpy(qrow, row, sizeof(float) * V);
                penalty_apply(sampler_counts(s1), set[c].pres, set[c].freq, qrow, V, ids, i);
                apply_lists(row, v2.req, i);
                pen_rows++, pen_same += !memcmp(qrow, row, sizeof(float) * V);
            }
            for (int i = 0; i <= K; i++) {
                const float *row = v2.logits + (size_t)i * V;
                struct sample_row_summary sum = {0, 0, 0, cid + i * per, clg + i * per};
                sample_row_summarize(row, V, set[c].t, set[c].k, set[c].p, set[c].cap, &sum);
                rows[i] = (struct gpu_row_summary){.max = sum.max,
                                                   .logit_t = i < K ? row[ids[i]] : 0.0f,
                                                   .total = sum.total,
                                                   .n = sum.n,
                                                   .in_logits = 1,
                                                   .drawn = -1,
                                                   .ids = sum.ids,
                                                   .logits = sum.logits};
            }
            /* greedy with penalties: every row's argmax of its penalised logits, as the device
             * gives it; the rows themselves are not at hand */
            for (int i = 0; set[c].t <= 0 && i <= K; i++) {
                rows[i].drawn = sample_greedy(v2.logits + (size_t)i * V, V);
                rows[i].in_logits = 0;
                greedy_rows++;
            }
            /* untruncated: the last row drawn "on the device" (sample_dist_draw_u() at the u
             * verify_item() picked, as sample.cu draws); every fifth trial a u that the rng
             * never gives with a wrong token, which the host must not use */
            if (v2.req->draw) {
                REQUIRE(sample_dist_build(&q2, v2.logits + (size_t)K * V, set[c].t, 0, 1) == 0);
                rows[K].drawn = sample_dist_draw_u(&q2, v2.req->u);
                if (trial % 5 == 0) v2.req->u = 2.0, rows[K].drawn = (rows[K].drawn + 1) % V;
                /* else the row itself is not at hand: fetching it would fail the round */
                else
                    rows[K].in_logits = 0;
                drawn_rows++;
            }
            v2.req->filled = 1;
            struct draft d = {ids, qs, K, K, NULL};
            struct record r1 = {{0}, 0}, r2 = {{0}, 0};
            int acc1, acc2, st1, st2;
            int rc1 = verify_decide(&v1, &d, record_cb, &r1, &acc1, &st1);
            int rc2 = verify_decide(&v2, &d, record_cb, &r2, &acc2, &st2);
            rounds++;
            same += rc1 == 0 && rc2 == 0 && acc1 == acc2 && r1.n == r2.n &&
                    !memcmp(r1.got, r2.got, sizeof(int32_t) * (size_t)r1.n) &&
                    rng_next(sampler_rng(s1)) == rng_next(sampler_rng(s2));
            accepted += acc1;
            drawn_used += v2.req->draw && trial % 5 && acc2 == K && r2.n == K + 1;
            from_summary += v2.n_summarised;
            verify_deinit(&v1), verify_deinit(&v2);
            kv_free(kv);
            sampler_free(s1), sampler_free(s2);
        }
    printf("  sampled rounds from summaries: %d of %d decided as from the logits (%d drafts "
           "accepted; %d last rows drawn as on the device, %d of them committed; %d of %d rows "
           "penalised from the lists as by penalty_apply; %d greedy rows decided from their "
           "device argmax)\n",
           same, rounds, accepted, drawn_rows, drawn_used, pen_same, pen_rows, greedy_rows);
    CHECK(same == rounds && from_summary == rounds && accepted > rounds / 2 && drawn_rows == 600 &&
          drawn_used >= 20 && pen_same == pen_rows && pen_rows == 5 * 150 * (K + 1) &&
          greedy_rows == 150 * (K + 1));
    free(qmem), free(q2mem), free(qrow);
    model_free(t);
}

/* Sequences stepped together in batched passes give exactly what each gives alone: greedy or
 * sampled (own seed), penalised or not, with logprobs or not, in every batch-capable mode. */
TEST(batched_sequences_equal_single_runs) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *t = load(TARGET), *self = load(TARGET);
    REQUIRE(t && self);
    enum { NS = 12 };
    int total = 0, same = 0;
    for (int mode = GEN_BASELINE; mode <= GEN_DRAFT; mode++) {
        struct gen_engine e = {.target = t, .draft = self};
        struct gen_params gp[NS];
        int32_t prompts[NS][64];
        int n[NS];
        struct gen_result alone[NS];
        for (int i = 0; i < NS; i++) {
            n[i] = make_prompt(i * 3 + mode, prompts[i]);
            gp[i] = (struct gen_params){.max_tokens = 10 + (i * 5) % 23,
                                        .top_logprobs = i % 4 == 1 ? 3 : -1,
                                        .mode = (enum gen_mode)mode,
                                        .max_draft = 1 + i % 5,
                                        .lookup_drafts = i % 2};
            gp[i].sp = (struct sample_params){.temperature = i % 3 ? 0.9f : 0,
                                              .top_p = i % 4 ? 0.95f : 1,
                                              .top_k = i % 5 ? 0 : 20,
                                              .presence_penalty = i % 6 == 2 ? 0.8f : 0,
                                              .frequency_penalty = i % 6 == 3 ? 0.5f : 0,
                                              .seed = 100 + (uint64_t)i};
            REQUIRE(gen_run(&e, prompts[i], n[i], &gp[i], NULL, NULL, &alone[i]) == 0);
        }
        struct gen_seq *seqs[NS];
        for (int i = 0; i < NS; i++)
            REQUIRE(gen_seq_new(&e, prompts[i], n[i], &gp[i], NULL, NULL, &seqs[i]) == 0);
        REQUIRE(gen_run_batch(seqs, NS) == 0);
        for (int i = 0; i < NS; i++) {
            struct gen_result r;
            REQUIRE(gen_seq_finish(seqs[i], &r) == 0);
            total++;
            same += r.n_ids == alone[i].n_ids && r.finish == alone[i].finish &&
                    !memcmp(r.ids, alone[i].ids, sizeof(int32_t) * (size_t)r.n_ids);
            gen_result_free(&r);
            gen_result_free(&alone[i]);
        }
    }
    printf("  %d of %d batched sequences equal to their single runs\n", same, total);
    CHECK(same == total);
    model_free(t), model_free(self);
}

/* A follow-up request over a cached prefix prefills only its new suffix and gives exactly what
 * it gives without the cache. */
TEST(prefix_cache_reuses_and_stays_exact) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *t = load(TARGET);
    REQUIRE(t);
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(t, &(struct prefix_cache_opts){.max_entries = 2}, &pc) == 0);
    struct gen_engine cached = {.target = t, .cache = pc}, plain = {.target = t};
    int32_t p1[30], p2[60];
    for (int i = 0; i < 30; i++) p1[i] = 3 + (i * 17) % 140;
    struct gen_params gp = {
        .max_tokens = 20, .ignore_eos = 1, .top_logprobs = -1, .mode = GEN_LOOKUP, .max_draft = 4};
    struct gen_result a, b, c;
    REQUIRE(gen_run(&cached, p1, 30, &gp, NULL, NULL, &a) == 0);
    CHECK(a.stats.cached_tokens == 0);
    /* turn 2: the first prompt, the answer, and a new question */
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 30, a.ids, sizeof(int32_t) * 20);
    for (int i = 50; i < 60; i++) p2[i] = 5 + i;
    REQUIRE(gen_run(&cached, p2, 60, &gp, NULL, NULL, &b) == 0);
    REQUIRE(gen_run(&plain, p2, 60, &gp, NULL, NULL, &c) == 0);
    printf("  turn 2: %d of 60 prompt tokens from the cache\n", b.stats.cached_tokens);
    CHECK(b.stats.cached_tokens == 49); /* all but the answer's last token, never in a cache */
    CHECK(b.n_ids == c.n_ids && !memcmp(b.ids, c.ids, sizeof(int32_t) * (size_t)c.n_ids));
    /* a prompt that shares too little is a miss; the cache never serves a wrong prefix */
    int32_t p3[30];
    memcpy(p3, p1, sizeof p3);
    p3[5] = p1[5] + 1;
    struct gen_result d, e2;
    REQUIRE(gen_run(&cached, p3, 30, &gp, NULL, NULL, &d) == 0);
    REQUIRE(gen_run(&plain, p3, 30, &gp, NULL, NULL, &e2) == 0);
    CHECK(d.stats.cached_tokens == 0);
    CHECK(d.n_ids == e2.n_ids && !memcmp(d.ids, e2.ids, sizeof(int32_t) * (size_t)d.n_ids));
    struct prefix_stats ps = prefix_cache_stats(pc);
    CHECK(ps.hits == 1 && ps.misses == 2 && ps.entries == 2);
    gen_result_free(&a), gen_result_free(&b), gen_result_free(&c);
    gen_result_free(&d), gen_result_free(&e2);
    prefix_cache_free(pc);
    model_free(t);
}

/* The n-gram index on its own: the longest n-gram wins, the suffix's own occurrence is skipped,
 * drafts stop at the end of the sequence and at n_max, and scaled drafts are no longer than
 * the stretch that matches behind them. */
TEST(lookup_proposals) {
    /* 10 11 12 13 14 15 16 17 | 50 | 10 11 12 13 14 15 16 17 | 60 61 | 15 */
    const int32_t seq[] = {10, 11, 12, 13, 14, 15, 16, 17, 50, 10,
                           11, 12, 13, 14, 15, 16, 17, 60, 61, 15};
    const int n_seq = (int)(sizeof seq / sizeof *seq);
    int32_t ids[32];
    struct draft d = {.ids = ids, .q = (const struct sample_dist *[32]){0}, .cap = 32};
    struct drafter plain, scaled;
    REQUIRE(!lookup_drafter_new(1, 4, 0, &plain) && !lookup_drafter_new(1, 4, 1, &scaled));
    /* the first 14 tokens end in "11 12 13 14", seen before at 1..4 and followed by
     * 15 16 17 50 10 11 12 13 14: 9 tokens up to the end of the sequence */
    REQUIRE(!plain.ops->propose(&plain, seq, 14, 10, &d));
    CHECK(d.n == 9 && ids[0] == 15 && ids[3] == 50 && ids[8] == 14);
    REQUIRE(!plain.ops->propose(&plain, seq, 14, 3, &d));
    CHECK(d.n == 3 && ids[2] == 17); /* n_max */
    /* scaled: the match behind is 10 11 12 13 14 (5 tokens), so at most 5 drafts */
    REQUIRE(!scaled.ops->propose(&scaled, seq, 14, 10, &d));
    CHECK(d.n == 5 && ids[0] == 15 && ids[4] == 10);
    /* the whole sequence ends in "61 15": only the 1-gram "15" matches (at 5, followed by 16 17
     * 50 ...); plain drafts copy up to n_max, scaled ones risk a single token */
    REQUIRE(!plain.ops->propose(&plain, seq, n_seq, 4, &d));
    CHECK(d.n == 4 && ids[0] == 16 && ids[1] == 17);
    REQUIRE(!scaled.ops->propose(&scaled, seq, n_seq, 4, &d));
    CHECK(d.n == 1 && ids[0] == 16);
    /* nothing repeats: no proposal */
    const int32_t fresh[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    REQUIRE(!scaled.ops->propose(&scaled, fresh, 9, 4, &d));
    CHECK(d.n == 0);
    plain.ops->free(&plain);
    scaled.ops->free(&scaled);
}

int main(void) {
    RUN(lookup_proposals);
    RUN(prefix_cache_reuses_and_stays_exact);
    RUN(batched_sequences_equal_single_runs);
    RUN(greedy_identical_in_every_mode);
    RUN(sampling_matches_target_distribution);
    RUN(summaries_decide_as_logits);
    return test_report();
}
