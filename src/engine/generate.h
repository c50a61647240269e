/* engine/generate.h: generation of one sequence, plain or speculative. Every mode runs the
 * same loop: the drafter (if any) proposes, spec/verify.c commits; baseline is a round with
 * no drafts. Greedy output is therefore token-identical across modes (the kernels are
 * batch-invariant), and sampled output is an exact sample of the same distribution.
 * The caller owns the models and the tokenizer; gen_run() allocates the sequence's KV cache,
 * sampler and drafters and frees them before returning. struct gen_result owns its arrays
 * until gen_result_free(). Not thread-safe: one gen_run() per model at a time. */
#ifndef DSPARK_ENGINE_GENERATE_H
#define DSPARK_ENGINE_GENERATE_H

#include "model/model.h"
#include "sample/logprobs.h"
#include "sample/sampler.h"

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct block_model;
struct prefix_cache;
struct tune_auto;

enum gen_mode { GEN_BASELINE, GEN_LOOKUP, GEN_DRAFT, GEN_DSPARK, GEN_DFLASH };
enum gen_finish { GEN_FINISH_LENGTH, GEN_FINISH_STOP };

const char *gen_mode_name(enum gen_mode m);               /* "baseline", "lookup", ... */
int gen_mode_parse(const char *name, enum gen_mode *out); /* 0, or -1 for no such mode */
/* --max-draft when none is given: lookup 15 (scaled drafts, a verify of up to 16 rows), draft
 * model 3, DSpark 4, DFlash 0 (its whole block), baseline 0. docs/perf.md has the measurements
 * behind these. */
int gen_default_max_draft(enum gen_mode m);
/* 1 when the mode drafts with --max-draft auto unless a cap is given: DFlash, whose whole
 * block is a wide verify for what it keeps (docs/perf.md: on the 2-core CPU auto gives 1.35x
 * the whole block's tokens/s alone and 2.5x at 16 concurrent streams). */
int gen_default_auto_draft(enum gen_mode m);

struct gen_engine {
    struct model *target;
    struct model *draft;        /* GEN_DRAFT's draft model (same tokenizer), or NULL */
    struct block_model *block;  /* GEN_DSPARK / GEN_DFLASH drafter, or NULL */
    struct prefix_cache *cache; /* reuse earlier sequences' KV (and a DSpark or DFlash
                                 * drafter's context) for shared prompt prefixes, or NULL */
    struct tokenizer *tok;      /* for text, EOS and stop strings; may be NULL (ids only) */
};

struct gen_params {
    int max_tokens; /* new tokens at most (>= 1) */
    int ignore_eos;
    struct sample_params sp;
    const char *const *stop; /* stop strings, matched on the decoded text */
    int n_stop;
    const int32_t *stop_ids; /* further end-of-sequence token ids */
    int n_stop_ids;
    int top_logprobs; /* < 0: none; else raw logprobs with this many alternatives */
    enum gen_mode mode;
    int max_draft;              /* drafts per round at most (lookup default 6) */
    struct tune_auto *tune;     /* --max-draft auto: each round's cap, up to max_draft, is chosen
                                 * from these costs and the acceptance seen (NULL: max_draft) */
    int lookup_drafts;          /* GEN_DRAFT: verify an n-gram continuation when there is one */
    float confidence_threshold; /* GEN_DSPARK: end the block at low confidence (0 = off) */
    int confidence_per_slot;    /* ... judged per draft, not by the survival product */
    /* Batched steps: load-aware verification (tune/loadaware.h) over the DSpark drafter's
     * confidences, priced by these pass costs (NULL: off). */
    const struct tune_costs *load_aware;
    int trace; /* record every round's drafts in the result */
};

#define GEN_ACCEPT_BUCKETS 10 /* rounds by drafts accepted: 0..8, and 9 or more */
#define GEN_MAX_CAP        16 /* --max-draft auto chooses caps 0..16 */

struct gen_stats {
    int n_prompt, n_generated;
    int cached_tokens;   /* prompt tokens taken from the prefix cache, not prefilled */
    int rounds;          /* verify rounds (target forwards after the prefill) */
    int target_forwards; /* rounds plus prefill passes */
    int drafted;         /* draft tokens verified */
    int accepted;        /* draft tokens kept */
    int lookup_rounds;   /* rounds whose drafts came from the n-gram index */
    int load_aware_cut;  /* drafts load-aware verification left out of a batched pass */
    int summary_rounds;  /* sampled rounds decided from GPU sampling summaries */
    int rows_fetched;    /* rows of those whose logits came back for a draw */
    int accept_hist[GEN_ACCEPT_BUCKETS];
    double prefill_s, decode_s, draft_s; /* draft_s is part of decode_s */
    /* --max-draft auto (params.tune): rounds by the cap in force; at the end, the cap of the
     * main source of drafts (the drafter, else lookup), its acceptance estimate per draft and
     * the predicted tokens/s of every cap */
    int cap_rounds[GEN_MAX_CAP + 1];
    int auto_cap;
    float auto_accept;
    float auto_rates[GEN_MAX_CAP + 1];
};

struct gen_round {
    int n_drafted, n_accepted;
    int from_lookup;
    int first; /* index of its drafts in gen_result.drafted */
};

struct gen_result {
    int32_t *ids; /* [n_ids] committed tokens (EOS included when it ended the output) */
    int n_ids;
    char *text; /* decoded output, stop string excluded, NUL-terminated */
    size_t text_len;
    enum gen_finish finish;
    struct gen_stats stats;
    struct gen_round *rounds; /* [stats.rounds] when params.trace */
    int32_t *drafted;         /* all rounds' drafts, concatenated */
};

/* Called for each committed token with the text it made safe to show (possibly empty: text
 * is held back while it could be the start of a stop string). Nonzero cancels generation. */
typedef int gen_emit_fn(void *ctx, int32_t id, const char *text, size_t len,
                        const struct logprobs *lp);

int gen_run(const struct gen_engine *e, const int32_t *prompt, int n_prompt,
            const struct gen_params *p, gen_emit_fn *emit, void *ctx, struct gen_result *out);

/* ---- the same, one round at a time, for schedulers that interleave sequences ----
 * gen_seq_new() prefills and commits the first token; each step runs one round; steps of
 * several sequences can share one batched target pass (gen_step_batch), with results
 * bit-identical to stepping each alone. params (and its stop strings) must outlive the seq.
 * gen_seq_finish() hands over the result and frees the seq. All sequences stepped together
 * must use the same engine and mode. A sequence's KV cache goes to the engine's prefix cache
 * when it is finished or freed, with as much of the prompt and output as it holds.
 * Chunked prefill: gen_seq_start() is gen_seq_new() without the prefill (the prefix cache is
 * consulted); gen_seq_prefill() then runs up to max_rows more prompt tokens per call (<= 0:
 * the rest), and the call that ends the prompt commits the first token. Until then the steps
 * skip the sequence, so a scheduler can run other sequences' rounds between chunks. */
#define GEN_MAX_BATCH 64
struct gen_seq;
int gen_seq_new(const struct gen_engine *e, const int32_t *prompt, int n_prompt,
                const struct gen_params *p, gen_emit_fn *emit, void *ctx, struct gen_seq **out);
int gen_seq_start(const struct gen_engine *e, const int32_t *prompt, int n_prompt,
                  const struct gen_params *p, gen_emit_fn *emit, void *ctx, struct gen_seq **out);
int gen_seq_prefill(struct gen_seq *s, int max_rows);
/* The prompt positions a sequence started now would share with the prefix cache's entries
 * without memory of its own for them (prefix_cache_peek(), for this mode's drafter context);
 * 0 without a cache. */
int gen_shared_prefix(const struct gen_engine *e, const struct gen_params *p, const int32_t *prompt,
                      int n_prompt);
/* A running sequence's positions in pages that the prefix cache's entries still hold
 * (prefix_cache_shares()): what gen_shared_prefix() promised at its start, less what left RAM */
int gen_seq_cache_shared(const struct gen_seq *s);
int gen_seq_prefill_left(const struct gen_seq *s); /* prompt tokens not run yet */
int gen_seq_step(struct gen_seq *s);
int gen_step_batch(struct gen_seq **seqs, int n);
/* gen_step_batch() until every one of seqs[0..n) is done (none may still be prefilling) */
int gen_run_batch(struct gen_seq **seqs, int n);
int gen_seq_done(const struct gen_seq *s);
int gen_seq_finish(struct gen_seq *s, struct gen_result *out);
void gen_seq_free(struct gen_seq *s); /* abandons it; NULL is a no-op */
void gen_result_free(struct gen_result *r);

#endif
