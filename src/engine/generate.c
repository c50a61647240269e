/* engine/generate.c: see generate.h. The loop: prefill the prompt and commit the first token
 * from its last row, then rounds of (propose, verify) with the newest token pending, until
 * EOS, a stop string, the token budget or the context's end. Committed text passes through a
 * stop-string filter that holds back the longest stop string's length minus one byte. */
#include "engine/generate.h"

#include "base/err.h"
#include "base/log.h"
#include "base/timer.h"
#include "cache/prefix.h"
#include "spec/block_model.h"
#include "spec/drafter.h"
#include "spec/verify.h"
#include "tokenizer/tokenizer.h"
#include "tune/controller.h"
#include "tune/loadaware.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(GEN_MAX_CAP == TUNE_MAX_CAP, "one cap range");

struct gen_seq {
    const struct gen_engine *e;
    const struct gen_params *p; /* the caller's; it and its stop strings outlive the seq */
    gen_emit_fn *emit;
    void *ctx;
    struct gen_result *out; /* &res */
    struct gen_result res;
    int32_t *seq; /* prompt + committed output */
    int n_seq, cap_seq;
    int ids_cap;
    size_t text_cap, emitted; /* text[0..emitted) was passed to emit */
    size_t max_stop;
    struct detok *dt;
    int32_t tok_eos;
    int done;
    int rc;
    int failed;     /* a forward pass failed: the cache's contents are unknown */
    int n_prompt;   /* seq[0..n_prompt) is the prompt */
    int prefilling; /* prompt tokens remain to be run (gen_seq_prefill) */
    /* the sequence's engine state */
    struct drafter lookup, dm;
    struct kv_cache *kv;
    struct sampler *s;
    struct verify v;
    int max_draft, tapped, tap_width, drafted_cap;
    /* --max-draft auto: a controller per source of drafts (TUNE_SRC_*) */
    int tuned, round_cap;
    struct tune_ctl ctl[2];
    long cap;
    double t0; /* decode start */
    /* the round in flight: pending token + drafts, and where they go in the cache */
    int32_t in[1 + VERIFY_MAX_DRAFT];
    const struct sample_dist *qs[VERIFY_MAX_DRAFT];
    float confs[VERIFY_MAX_DRAFT]; /* the drafter's survival products (load-aware) */
    struct draft d;
    int n_in, from_lookup, pos;
};

static int push_id(int32_t **a, int *n, int *cap, int32_t id) {
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 256;
        int32_t *b = realloc(*a, sizeof(int32_t) * (size_t)c);
        if (!b) return ERR_NOMEM;
        *a = b;
        *cap = c;
    }
    (*a)[(*n)++] = id;
    return OK;
}

static int append_text(struct gen_seq *r, const char *s, size_t n) {
    struct gen_result *o = r->out;
    if (o->text_len + n + 1 > r->text_cap) {
        size_t c = r->text_cap ? r->text_cap : 256;
        while (c < o->text_len + n + 1) c *= 2;
        char *t = realloc(o->text, c);
        if (!t) return ERR_NOMEM;
        o->text = t;
        r->text_cap = c;
    }
    memcpy(o->text + o->text_len, s, n);
    o->text_len += n;
    o->text[o->text_len] = 0;
    return OK;
}

static int is_eos(const struct gen_seq *r, int32_t id) {
    for (int i = 0; i < r->p->n_stop_ids; i++)
        if (r->p->stop_ids[i] == id) return 1;
    if (r->p->ignore_eos) return 0;
    return hf_config_is_eos(model_config(r->e->target), id) || id == r->tok_eos;
}

/* Earliest stop string in text at or after `from`; returns its start or -1. */
static long find_stop(const struct gen_seq *r, size_t from) {
    const char *t = r->out->text;
    long best = -1;
    for (int i = 0; i < r->p->n_stop; i++) {
        const char *s = r->p->stop[i];
        size_t n = strlen(s);
        if (!n) continue;
        const char *hit = memmem(t + from, r->out->text_len - from, s, n);
        if (hit && (best < 0 || hit - t < best)) best = hit - t;
    }
    return best;
}

/* How much text may be shown: everything except what could still begin a stop string, never
 * cutting a UTF-8 character. */
static size_t safe_len(const struct gen_seq *r) {
    size_t n = r->out->text_len;
    if (r->max_stop > 1 && !r->done) n = n > r->max_stop - 1 ? n - (r->max_stop - 1) : 0;
    const char *t = r->out->text;
    while (n > r->emitted && n < r->out->text_len && ((unsigned char)t[n] & 0xc0) == 0x80) n--;
    return n < r->emitted ? r->emitted : n;
}

static int commit(void *ctx, int32_t id, const struct logprobs *lp) {
    struct gen_seq *r = ctx;
    struct gen_result *o = r->out;
    if ((r->rc = push_id(&o->ids, &o->n_ids, &r->ids_cap, id)) ||
        (r->rc = push_id(&r->seq, &r->n_seq, &r->cap_seq, id)))
        return 1;
    o->stats.n_generated++;
    if (is_eos(r, id)) {
        o->finish = GEN_FINISH_STOP;
        r->done = 1;
    } else if (r->dt) {
        const char *piece;
        size_t len;
        if (detok_push(r->dt, id, &piece, &len) == OK && len) {
            size_t from = o->text_len;
            if ((r->rc = append_text(r, piece, len))) return 1;
            if (r->p->n_stop) {
                size_t back = r->max_stop - 1;
                long at = find_stop(r, from > back ? from - back : 0);
                if (at >= 0) {
                    o->text_len = (size_t)at;
                    o->text[at] = 0;
                    o->finish = GEN_FINISH_STOP;
                    r->done = 1;
                }
            }
        }
    }
    if (!r->done && o->stats.n_generated >= r->p->max_tokens) {
        o->finish = GEN_FINISH_LENGTH;
        r->done = 1;
    }
    if (r->done && r->dt && o->finish == GEN_FINISH_LENGTH) {
        const char *tail;
        size_t len;
        if (detok_flush(r->dt, &tail, &len) == OK && len && (r->rc = append_text(r, tail, len)))
            return 1;
    }
    size_t safe = safe_len(r);
    if (r->emit && r->emit(r->ctx, id, o->text + r->emitted, safe - r->emitted, lp)) r->done = 1;
    r->emitted = safe;
    return r->done;
}

static int record_round(struct gen_seq *r, const struct draft *d, int acc, int from_lookup,
                        int *drafted_cap) {
    struct gen_result *o = r->out;
    int n = o->stats.rounds;
    struct gen_round *rr = realloc(o->rounds, sizeof *rr * (size_t)(n + 1));
    if (!rr) return ERR_NOMEM;
    o->rounds = rr;
    int n_drafted = o->stats.drafted; /* drafts of the rounds before this one */
    rr[n] = (struct gen_round){d->n, acc, from_lookup, n_drafted};
    for (int i = 0; i < d->n; i++) {
        int rc = push_id(&o->drafted, &n_drafted, drafted_cap, d->ids[i]);
        if (rc) return rc;
    }
    return OK;
}

static int setup_drafters(const struct gen_params *p, const struct gen_engine *e, int max_draft,
                          int cap, struct drafter *lookup, struct drafter *dm) {
    int rc = OK;
    /* alone: n-grams from 1 token, scaled drafts; ahead of a drafter: 4-5-grams, as found */
    if (p->mode == GEN_LOOKUP) rc = lookup_drafter_new(1, 4, 1, lookup);
    if (p->mode == GEN_DSPARK || p->mode == GEN_DFLASH) {
        enum arch want = p->mode == GEN_DSPARK ? ARCH_DSPARK : ARCH_DFLASH;
        if (!e->block || block_model_config(e->block)->arch != want) {
            log_error("%s mode needs a %s drafter (--drafter DIR)",
                      p->mode == GEN_DSPARK ? "dspark" : "dflash",
                      p->mode == GEN_DSPARK ? "DSpark" : "DFlash");
            return ERR_ARG;
        }
        struct block_drafter_opts o = {.max_draft = max_draft,
                                       .cap = cap,
                                       .confidence_threshold = p->confidence_threshold,
                                       .per_slot = p->confidence_per_slot};
        if (p->lookup_drafts) rc = lookup_drafter_new(4, 5, 0, lookup);
        if (!rc) rc = block_drafter_new(e->block, &p->sp, &o, dm);
    }
    if (p->mode == GEN_DRAFT) {
        if (!e->draft) {
            log_error("draft mode needs a draft model (--drafter DIR)");
            return ERR_ARG;
        }
        if (model_config(e->draft)->vocab_size > model_config(e->target)->vocab_size) {
            log_error("the draft model's vocabulary (%d) is larger than the target's (%d)",
                      model_config(e->draft)->vocab_size, model_config(e->target)->vocab_size);
            log_hint("the draft model must share the target's tokenizer");
            return ERR_ARG;
        }
        if (p->lookup_drafts) rc = lookup_drafter_new(4, 5, 0, lookup);
        if (!rc) rc = draft_model_drafter_new(e->draft, &p->sp, p->max_draft, dm);
    }
    return rc;
}

static int uses_cache(const struct gen_seq *r) {
    return r->e->cache != NULL;
}

int gen_shared_prefix(const struct gen_engine *e, const struct gen_params *p, const int32_t *prompt,
                      int n_prompt) {
    if (!e->cache || n_prompt < 1) return 0;
    uint64_t tag = 0; /* a DSpark or DFlash drafter needs entries with its context */
    if ((p->mode == GEN_DSPARK || p->mode == GEN_DFLASH) && e->block &&
        !(tag = block_model_fingerprint(e->block)))
        return 0;
    return prefix_cache_peek(e->cache, prompt, n_prompt, tag);
}

/* The drafter's context of the first n positions, for the prefix cache (none: tag 0). */
static struct prefix_ctx save_ctx(struct gen_seq *r, int n) {
    struct drafter *d = &r->dm;
    struct prefix_ctx c = {0};
    if (!n || !d->n_taps || !d->ops->ctx_save || !d->ctx_tag) return c;
    if ((c.rows = malloc(sizeof(float) * (size_t)d->ctx_width * (size_t)n))) {
        c.tag = d->ctx_tag, c.width = d->ctx_width;
        c.n = d->ops->ctx_save(d, c.rows, n);
    }
    return c;
}

/* Frees the engine state; the result stays in r->res. The KV cache holds seq[0..kv_len) (the
 * prompt as far as it was prefilled, then everything but the pending token): it goes to the
 * prefix cache, also when the sequence was abandoned, with the context a DSpark or DFlash
 * drafter built for those positions. */
static void seq_release(struct gen_seq *r) {
    if (r->kv && uses_cache(r)) {
        int ok = !r->failed && kv_len(r->kv) <= r->n_seq, n = ok ? kv_len(r->kv) : 0;
        struct prefix_ctx c = save_ctx(r, n);
        prefix_cache_put_ctx(r->e->cache, r->seq, n, r->kv, &c);
        r->kv = NULL;
    }
    /* the target's taps stay set: other sequences of the same engine may still read them */
    drafter_free(&r->lookup);
    drafter_free(&r->dm);
    verify_deinit(&r->v);
    sampler_free(r->s);
    kv_free(r->kv);
    detok_free(r->dt);
    free(r->seq);
    r->tapped = 0, r->kv = NULL, r->s = NULL, r->dt = NULL, r->seq = NULL;
}

void gen_seq_free(struct gen_seq *r) {
    if (!r) return;
    seq_release(r);
    gen_result_free(&r->res);
    free(r);
}

/* Runs the next max_rows (<= 0: all remaining) prompt tokens; their taps go to the drafter.
 * The call that reaches the prompt's end commits the first token from the last row, as a
 * round without drafts would. */
int gen_seq_prefill(struct gen_seq *r, int max_rows) {
    if (!r->prefilling) return OK;
    if (r->failed) return ERR_ARG;
    struct gen_stats *st = &r->res.stats;
    int pos = kv_len(r->kv), left = r->n_prompt - pos;
    int n = max_rows > 0 && max_rows < left ? max_rows : left, last = n == left;
    float *ptaps = NULL;
    double t0 = timer_now();
    if (r->tapped && !(ptaps = malloc(sizeof(float) * (size_t)r->tap_width * (size_t)n)))
        return ERR_NOMEM;
    struct model_batch_item it = {r->kv, r->seq + pos,           n, NULL,
                                  ptaps, last ? r->v.ids : NULL, 1, NULL};
    int rc = r->v.greedy_ids ? model_forward_batch(r->e->target, &it, 1)
                             : model_forward_taps(r->e->target, r->kv, r->seq + pos, n,
                                                  last ? r->v.logits : NULL, 0, ptaps);
    if (!rc && r->tapped) rc = r->dm.ops->observe(&r->dm, ptaps, pos, n);
    free(ptaps);
    if (rc) {
        r->failed = 1;
        return rc;
    }
    st->target_forwards += (n - 1) / model_pass_rows(r->e->target) + 1;
    st->prefill_s += timer_now() - t0;
    if (!last) return OK;
    r->prefilling = 0;
    int acc, stopped;
    static const struct draft none = {0};
    if ((rc = verify_decide(&r->v, &none, commit, r, &acc, &stopped))) return rc;
    r->t0 = timer_now();
    return r->rc;
}

int gen_seq_cache_shared(const struct gen_seq *r) {
    return r->e->cache && r->kv ? prefix_cache_shares(r->e->cache, r->kv) : 0;
}

int gen_seq_prefill_left(const struct gen_seq *r) {
    return r->prefilling ? r->n_prompt - kv_len(r->kv) : 0;
}

int gen_seq_new(const struct gen_engine *e, const int32_t *prompt, int n_prompt,
                const struct gen_params *p, gen_emit_fn *emit, void *ctx, struct gen_seq **out) {
    int rc = gen_seq_start(e, prompt, n_prompt, p, emit, ctx, out);
    if (!rc && (rc = gen_seq_prefill(*out, 0))) {
        gen_seq_free(*out);
        *out = NULL;
    }
    return rc;
}

int gen_seq_start(const struct gen_engine *e, const int32_t *prompt, int n_prompt,
                  const struct gen_params *p, gen_emit_fn *emit, void *ctx, struct gen_seq **out) {
    *out = NULL;
    const struct hf_config *c = model_config(e->target);
    if (n_prompt <= 0 || p->max_tokens <= 0) {
        log_error(n_prompt <= 0 ? "the prompt is empty: at least one token is needed"
                                : "max_tokens must be at least 1");
        return ERR_ARG;
    }
    if (n_prompt >= c->max_pos) {
        log_error("the prompt has %d tokens; the model's context is %d", n_prompt, c->max_pos);
        return ERR_FULL;
    }
    struct gen_seq *r = calloc(1, sizeof *r);
    if (!r) return ERR_NOMEM;
    *r = (struct gen_seq){.e = e, .p = p, .emit = emit, .ctx = ctx, .tok_eos = -1};
    r->out = &r->res;
    r->res.stats.n_prompt = n_prompt;
    int max_draft = p->mode == GEN_BASELINE ? 0 : p->max_draft;
    if ((p->mode == GEN_DSPARK || p->mode == GEN_DFLASH) && e->block && max_draft <= 0) {
        int B = block_model_config(e->block)->block_size; /* 0: the whole block */
        max_draft = p->mode == GEN_DSPARK ? B : B - 1;
    }
    if (max_draft < 0) max_draft = 0;
    if (max_draft > VERIFY_MAX_DRAFT) max_draft = VERIFY_MAX_DRAFT;
    r->max_draft = max_draft;
    if (p->tune && p->mode != GEN_BASELINE) {
        r->tuned = 1;
        if (r->max_draft > p->tune->costs.max_cap) r->max_draft = p->tune->costs.max_cap;
        /* a sampled sequence starts from the prior, not from what earlier sequences saw: its
         * caps, hence its random draws, depend on nothing but its own rounds */
        for (int src = 0; src < 2; src++)
            tune_ctl_init(&r->ctl[src], &p->tune->costs, src == TUNE_SRC_LOOKUP,
                          p->sp.temperature > 0 ? NULL : p->tune->seen[src]);
    }
    r->cap = (long)n_prompt + p->max_tokens + max_draft + 1;
    /* with some room to spare, a follow-up turn often fits in this cache: it is then lent to
     * that turn's sequence as it is, without a copy (cache/prefix.c) */
    if (uses_cache(r)) r->cap = (r->cap + PREFIX_CAP_STEP - 1) / PREFIX_CAP_STEP * PREFIX_CAP_STEP;
    if (r->cap > c->max_pos) r->cap = c->max_pos;
    for (int i = 0; i < p->n_stop; i++)
        if (strlen(p->stop[i]) > r->max_stop) r->max_stop = strlen(p->stop[i]);
    int rc = OK;
    if (e->tok) {
        r->tok_eos = tokenizer_eos_id(e->tok);
        if (!(r->dt = detok_new(e->tok))) rc = ERR_NOMEM;
    }
    if (!rc) rc = append_text(r, "", 0);
    if (!rc && !(r->s = sampler_new(&p->sp, c->vocab_size))) rc = ERR_NOMEM;
    if (!rc) rc = setup_drafters(p, e, max_draft, (int)r->cap, &r->lookup, &r->dm);
    int reused = 0;
    const float *ctx_rows = NULL;
    /* a drafter reading the target's taps gets its context for the reused prefix back */
    if (!rc && uses_cache(r) && (!r->dm.n_taps || r->dm.ctx_tag))
        r->kv = prefix_cache_take_ctx(e->cache, prompt, n_prompt, (int)r->cap,
                                      r->dm.n_taps ? r->dm.ctx_tag : 0, r->dm.ctx_width, &reused,
                                      &ctx_rows);
    r->res.stats.cached_tokens = reused;
    if (!rc && !r->kv) rc = kv_new(e->target, (int)r->cap, &r->kv);
    if (!rc && ctx_rows) rc = r->dm.ops->ctx_load(&r->dm, ctx_rows, reused);
    r->tap_width = r->dm.n_taps * c->hidden_size; /* the drafter reads the target's layers */
    if (!rc && r->dm.n_taps && !(rc = model_set_taps(e->target, r->dm.tap_layers, r->dm.n_taps)))
        r->tapped = 1;
    if (!rc)
        rc = verify_init(&r->v, e->target, r->kv, r->s, max_draft, p->top_logprobs, r->tap_width);
    for (int i = 0; !rc && i < n_prompt; i++)
        rc = push_id(&r->seq, &r->n_seq, &r->cap_seq, prompt[i]);
    r->n_prompt = n_prompt;
    r->prefilling = 1;
    if (rc) {
        gen_seq_free(r);
        return rc;
    }
    *out = r;
    return OK;
}

int gen_seq_done(const struct gen_seq *r) {
    return r->done;
}

/* The first part of a round's proposal: lookup, when the sequence has it. Returns in *want the
 * number of drafts to ask the drafter for (0: none, lookup proposed or there is no room). */
static int propose_lookup(struct gen_seq *r, int n_seqs, int *want) {
    struct gen_stats *st = &r->res.stats;
    int room = (int)r->cap - kv_len(r->kv) - 1;
    int remaining = r->p->max_tokens - st->n_generated;
    r->d = (struct draft){.ids = r->in + 1, .q = r->qs, .n = 0, .cap = VERIFY_MAX_DRAFT};
    if (r->p->load_aware) {
        r->confs[0] = -1; /* stays negative unless the drafter has a confidence head */
        r->d.conf = r->confs;
    }
    r->from_lookup = 0;
    r->n_in = 0;
    *want = 0;
    if (room < 0) { /* the context is full */
        r->res.finish = GEN_FINISH_LENGTH;
        r->done = 1;
        return OK;
    }
    /* a sampled sequence's drafts decide which random draws it makes, so they must not depend
     * on the other sequences: its caps are priced as if it ran alone */
    if (r->p->sp.temperature > 0) n_seqs = 1;
    int kmax = r->max_draft;
    if (kmax > remaining - 1) kmax = remaining - 1;
    if (kmax > room) kmax = room;
    double td = timer_now();
    int rc = OK;
    if (kmax > 0 && r->lookup.ops) {
        /* alone, lookup drafts up to --max-draft; ahead of a drafter, up to 6 */
        int k = r->tuned ? tune_ctl_cap(&r->ctl[TUNE_SRC_LOOKUP], n_seqs) : r->dm.ops ? 6 : kmax;
        r->round_cap = k;
        rc = r->lookup.ops->propose(&r->lookup, r->seq, r->n_seq, kmax < k ? kmax : k, &r->d);
        r->from_lookup = r->d.n > 0;
    }
    if (!rc && kmax > 0 && !r->d.n && r->dm.ops) {
        int k = r->tuned ? tune_ctl_cap(&r->ctl[TUNE_SRC_DRAFTER], n_seqs) : kmax;
        r->round_cap = k;
        *want = kmax < k ? kmax : k;
    }
    st->draft_s += timer_now() - td;
    return rc;
}

/* The last part: r->in[0..n_in) is what the target must run. */
static void propose_done(struct gen_seq *r) {
    r->in[0] = r->seq[r->n_seq - 1];
    r->n_in = 1 + r->d.n;
    r->pos = kv_len(r->kv);
}

/* Load-aware verification over the batch (tune/loadaware.h): drafts with confidences are
 * admitted best first while the predicted tokens per second of the pass rises; the others
 * are trimmed (lossless: fewer drafts never change what is committed). Sequences without
 * confidences (lookup rounds, other drafters) keep their drafts. */
static void trim_load_aware(struct gen_seq **seqs, int n) {
    const struct tune_costs *costs = NULL;
    int R = 0, any = 0, ns[GEN_MAX_BATCH], len[GEN_MAX_BATCH], best[GEN_MAX_BATCH];
    const float *a[GEN_MAX_BATCH];
    struct gen_seq *who[GEN_MAX_BATCH];
    struct tune_la_cand cand[GEN_MAX_BATCH * VERIFY_MAX_DRAFT];
    for (int i = 0; i < n; i++) {
        struct gen_seq *r = seqs[i];
        if (r->done) continue;
        /* sampled sequences keep their drafts (as in propose_lookup: their random draws must not
         * depend on the batch); they count in the batch's tokens all the same */
        int has = r->d.conf && r->d.n > 0 && !r->from_lookup && r->confs[0] >= 0 &&
                  r->p->sp.temperature <= 0;
        if (has && !costs) costs = r->p->load_aware;
        any |= has;
        a[R] = has ? r->confs : NULL;
        ns[R] = r->d.n;
        who[R++] = r;
    }
    if (!any || R < 2) return; /* alone: the single-stream path decides its own drafts */
    tune_load_aware(costs, R, ns, a, len, cand, best);
    for (int i = 0; i < R; i++)
        if (len[i] < who[i]->d.n) {
            who[i]->res.stats.load_aware_cut += who[i]->d.n - len[i];
            who[i]->d.n = len[i];
        }
}

/* Chooses each sequence's drafts for this round; afterwards r->in[0..n_in) is what the target
 * must run. With --max-draft auto each source's controller sets its cap, priced for n_live
 * sequences. Drafters that can (a draft model shared by the sequences) run their passes for
 * all of them together; each sequence gets the drafts it would get alone. */
static int propose_all(struct gen_seq **seqs, int n, int n_live) {
    struct drafter *ds[GEN_MAX_BATCH];
    const int32_t *sq[GEN_MAX_BATCH];
    int ns[GEN_MAX_BATCH], wants[GEN_MAX_BATCH], k = 0;
    struct draft *outs[GEN_MAX_BATCH];
    struct gen_seq *who[GEN_MAX_BATCH];
    for (int i = 0; i < n; i++) {
        struct gen_seq *r = seqs[i];
        int want, rc = propose_lookup(r, n_live, &want);
        if (rc) return rc;
        if (want <= 0 || r->done) continue;
        ds[k] = &r->dm, sq[k] = r->seq, ns[k] = r->n_seq, wants[k] = want, outs[k] = &r->d;
        who[k++] = r;
    }
    /* together when there are several and they share a batched drafter, else one at a time */
    int together = k > 1;
    for (int i = 0; i < k && together; i++)
        together = ds[i]->ops->propose_batch && ds[i]->ops == ds[0]->ops;
    if (together) {
        double td = timer_now();
        int rc = ds[0]->ops->propose_batch(ds, sq, ns, wants, outs, k);
        double share = (timer_now() - td) / k;
        for (int i = 0; i < k; i++) who[i]->res.stats.draft_s += share;
        if (rc) return rc;
    }
    for (int i = 0; i < k && !together; i++) {
        double td = timer_now();
        int rc = ds[i]->ops->propose(ds[i], sq[i], ns[i], wants[i], outs[i]);
        who[i]->res.stats.draft_s += timer_now() - td;
        if (rc) return rc;
    }
    trim_load_aware(seqs, n);
    for (int i = 0; i < n; i++)
        if (!seqs[i]->done) propose_done(seqs[i]);
    return OK;
}

/* After the target ran r->in (logits and taps in r->v): decide, roll back, feed the drafter. */
static int apply(struct gen_seq *r) {
    struct gen_stats *st = &r->res.stats;
    int acc, stopped;
    int rc = verify_decide(&r->v, &r->d, commit, r, &acc, &stopped);
    kv_truncate(r->kv, r->pos + 1 + acc);
    if (!rc) rc = r->rc;
    /* the pending token and the accepted drafts are committed: the drafter reads them (also
     * after the last round when its context goes to the prefix cache) */
    if (!rc && r->tapped && (!r->done || uses_cache(r)))
        rc = r->dm.ops->observe(&r->dm, r->v.taps, r->pos, acc + 1);
    if (!rc && r->p->trace) rc = record_round(r, &r->d, acc, r->from_lookup, &r->drafted_cap);
    st->rounds++;
    st->target_forwards++;
    st->summary_rounds = r->v.n_summarised;
    st->rows_fetched = r->v.n_fetched;
    st->drafted += r->d.n;
    st->accepted += acc;
    st->accept_hist[acc < GEN_ACCEPT_BUCKETS - 1 ? acc : GEN_ACCEPT_BUCKETS - 1]++;
    st->lookup_rounds += r->from_lookup;
    if (r->tuned) {
        int src = r->from_lookup || !r->dm.ops ? TUNE_SRC_LOOKUP : TUNE_SRC_DRAFTER;
        /* a round cut short by the end of the output says nothing about the drafts */
        if (!stopped) tune_ctl_observe(&r->ctl[src], r->d.n, acc, r->p->tune->seen[src]);
        st->cap_rounds[r->round_cap < GEN_MAX_CAP ? r->round_cap : GEN_MAX_CAP]++;
    }
    if (!r->done && kv_len(r->kv) >= r->cap - 1) {
        r->res.finish = GEN_FINISH_LENGTH;
        r->done = 1;
    }
    return rc;
}

int gen_seq_step(struct gen_seq *r) {
    if (r->done || r->prefilling) return OK;
    int rc = propose_all(&r, 1, 1);
    if (rc || r->done) return rc;
    struct model_batch_item it = verify_item(&r->v, r->in, r->n_in);
    rc = model_forward_batch(r->e->target, &it, 1);
    if (!rc) rc = apply(r);
    if (rc) r->failed = 1;
    return rc;
}

int gen_step_batch(struct gen_seq **seqs, int n) {
    struct model_batch_item items[GEN_MAX_BATCH];
    struct gen_seq *live[GEN_MAX_BATCH];
    int k = 0, rc = OK;
    if (n > GEN_MAX_BATCH) return ERR_ARG;
    int n_live = 0;
    for (int i = 0; i < n; i++) n_live += !seqs[i]->done;
    struct gen_seq *step[GEN_MAX_BATCH];
    int n_step = 0;
    for (int i = 0; i < n; i++)
        if (!seqs[i]->done && !seqs[i]->prefilling) step[n_step++] = seqs[i];
    if ((rc = propose_all(step, n_step, n_live))) return rc;
    for (int i = 0; i < n_step; i++) {
        struct gen_seq *r = step[i];
        if (r->done) continue;
        items[k] = verify_item(&r->v, r->in, r->n_in);
        live[k++] = r;
    }
    if (!k) return OK;
    rc = model_forward_batch(seqs[0]->e->target, items, k);
    for (int i = 0; i < k && !rc; i++) rc = apply(live[i]);
    for (int i = 0; i < k && rc; i++) live[i]->failed = 1;
    return rc;
}

int gen_run_batch(struct gen_seq **seqs, int n) {
    for (int i = 0; i < n; i++)
        if (seqs[i]->prefilling) return ERR_ARG; /* the steps would skip it forever */
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) live += !seqs[i]->done;
        if (!live) return OK;
        int rc = gen_step_batch(seqs, n);
        if (rc) return rc;
    }
}

int gen_seq_finish(struct gen_seq *r, struct gen_result *out) {
    struct gen_stats *st = &r->res.stats;
    st->decode_s = r->t0 > 0 ? timer_now() - r->t0 : 0;
    if (r->tuned) {
        const struct tune_ctl *c = &r->ctl[r->dm.ops ? TUNE_SRC_DRAFTER : TUNE_SRC_LOOKUP];
        double rates[TUNE_MAX_CAP + 1] = {0};
        tune_best_cap(c->costs, &c->est[c->ctx], 1, c->free_drafts, rates);
        st->auto_cap = tune_ctl_current(c, NULL);
        st->auto_accept = (float)tune_est_rate(&c->est[c->ctx]);
        for (int k = 0; k <= GEN_MAX_CAP; k++) st->auto_rates[k] = (float)rates[k];
    }
    if (!r->done && r->dt) r->done = 1; /* stopped from outside */
    if (r->dt) {                        /* show what was held back */
        size_t safe = safe_len(r);
        if (r->emit && safe > r->emitted)
            r->emit(r->ctx, -1, r->res.text + r->emitted, safe - r->emitted, NULL);
        r->emitted = safe;
    }
    *out = r->res;
    memset(&r->res, 0, sizeof r->res);
    gen_seq_free(r);
    return OK;
}

int gen_run(const struct gen_engine *e, const int32_t *prompt, int n_prompt,
            const struct gen_params *p, gen_emit_fn *emit, void *ctx, struct gen_result *out) {
    memset(out, 0, sizeof *out);
    struct gen_seq *r;
    int rc = gen_seq_new(e, prompt, n_prompt, p, emit, ctx, &r);
    if (rc) return rc;
    while (!rc && !r->done) rc = gen_seq_step(r);
    if (rc) {
        gen_seq_free(r);
        return rc;
    }
    return gen_seq_finish(r, out);
}

static const char *const mode_names[] = {"baseline", "lookup", "draft", "dspark", "dflash"};

const char *gen_mode_name(enum gen_mode m) {
    return (unsigned)m < sizeof mode_names / sizeof mode_names[0] ? mode_names[m] : "?";
}

int gen_default_max_draft(enum gen_mode m) {
    return m == GEN_LOOKUP ? 15 : m == GEN_DRAFT ? 3 : m == GEN_DSPARK ? 4 : 0;
}

int gen_default_auto_draft(enum gen_mode m) {
    return m == GEN_DFLASH;
}

int gen_mode_parse(const char *name, enum gen_mode *out) {
    for (size_t i = 0; i < sizeof mode_names / sizeof mode_names[0]; i++)
        if (!strcmp(name, mode_names[i])) return *out = (enum gen_mode)i, 0;
    return -1;
}

void gen_result_free(struct gen_result *r) {
    free(r->ids);
    free(r->text);
    free(r->rounds);
    free(r->drafted);
    struct gen_stats st = r->stats;
    memset(r, 0, sizeof *r);
    r->stats = st;
}
