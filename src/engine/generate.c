/* engine/generate.c: see generate.h. */
#include "engine/generate.h"

#include "base/err.h"
#include "base/log.h"
#include "base/timer.h"

#include <stdlib.h>
#include <string.h>

static int is_stop(const struct model *m, const struct gen_opts *o, int32_t id) {
    if (o->ignore_eos) return 0;
    if (hf_config_is_eos(model_config(m), id)) return 1;
    for (int i = 0; i < o->n_extra_eos; i++)
        if (o->extra_eos[i] == id) return 1;
    return 0;
}

int gen_run(struct model *m, struct sampler *s, const int32_t *prompt, int n_prompt,
            const struct gen_opts *o, gen_token_fn *on_token, void *ctx,
            struct gen_stats *st) {
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    if (n_prompt <= 0) {
        log_error("the prompt is empty: at least one token is needed");
        return ERR_ARG;
    }
    const struct hf_config *c = model_config(m);
    if (n_prompt >= c->max_pos) {
        log_error("the prompt has %d tokens; the model's context is %d", n_prompt, c->max_pos);
        return ERR_FULL;
    }
    int cap = n_prompt + (o->max_tokens > 0 ? o->max_tokens : 0);
    if (cap > c->max_pos) cap = c->max_pos;
    struct kv_cache *kv = NULL;
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int rc = logits ? kv_new(m, cap, &kv) : ERR_NOMEM;
    if (rc) goto done;
    double t0 = timer_now();
    if ((rc = model_forward(m, kv, prompt, n_prompt, logits, 0))) goto done;
    st->prefill_s = timer_now() - t0;
    t0 = timer_now();
    for (;;) {
        int32_t id = sampler_sample(s, logits);
        if (id < 0) {
            log_error("the model produced unusable logits (NaN or infinite)");
            rc = ERR_FORMAT;
            break;
        }
        if ((rc = sampler_accept(s, id))) break;
        st->n_generated++;
        if (is_stop(m, o, id)) {
            st->hit_eos = 1;
            break;
        }
        if (on_token && on_token(ctx, id)) break;
        if (st->n_generated >= o->max_tokens || kv_len(kv) >= cap) break;
        if ((rc = model_forward(m, kv, &id, 1, logits, 0))) break;
    }
    st->decode_s = timer_now() - t0;
done:
    kv_free(kv);
    free(logits);
    return rc;
}
