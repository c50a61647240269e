/* model/fingerprint.c: model_fingerprint(), the digest that keys saved KV caches to the model
 * that computed them. It covers every input of the forward pass: the config fields the layer
 * loop reads, the RoPE frequencies, each tensor's name, dtype, shape and bytes, and the
 * activation mode. A file path or a modification time is not part of it, so a copied model
 * folder keeps its caches while a fine-tune (same names and shapes) gets new ones. */
#include "model/model_impl.h"

#include <string.h>
#include <xxhash.h>

static void add(XXH3_state_t *h, const void *p, size_t n) {
    XXH3_64bits_update(h, p, n);
}

static void add_int(XXH3_state_t *h, int64_t v) {
    add(h, &v, sizeof v);
}

static void add_float(XXH3_state_t *h, float f) {
    add(h, &f, sizeof f);
}

uint64_t model_fingerprint(struct model *m) {
    if (m->fingerprint) return m->fingerprint;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    XXH3_64bits_reset(h);
    const struct hf_config *c = &m->cfg;
    add(h, "dspark-kv-f32", 13); /* the cache's element type and layout */
    add(h, c->arch_name, strlen(c->arch_name) + 1);
    int64_t ints[] = {c->arch,
                      c->vocab_size,
                      c->hidden_size,
                      c->intermediate_size,
                      c->n_layers,
                      c->n_heads,
                      c->n_kv_heads,
                      c->head_dim,
                      c->max_pos,
                      c->sliding_window,
                      c->qk_norm,
                      c->tie_embeddings,
                      c->rope_orig_max_pos,
                      m->act_bf16,
                      m->gpu != NULL};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) add_int(h, ints[i]);
    if (gpu_model_input_terms(m->gpu) == 1) add(h, "gpu-inputs-bf16", 15); /* other K/V bits */
    if (gpu_model_kv_bytes(m->gpu) == 2) add(h, "gpu-kv-bf16", 11);         /* K/V rounded */
    float floats[] = {c->rms_eps, c->rope_theta, c->rope_factor, c->rope_low_freq_factor,
                      c->rope_high_freq_factor};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) add_float(h, floats[i]);
    add(h, m->inv_freq, sizeof(float) * (size_t)(c->head_dim / 2));
    for (int i = 0; i < st_count(m->st); i++) {
        const struct st_tensor *t = st_at(m->st, i);
        add(h, t->name, strlen(t->name) + 1);
        add(h, t->dtype_name, sizeof t->dtype_name);
        add_int(h, t->n_dims);
        for (int d = 0; d < t->n_dims; d++) add_int(h, t->shape[d]);
        add_int(h, (int64_t)t->n_bytes);
        add(h, t->data, t->n_bytes);
    }
    uint64_t fp = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    m->fingerprint = fp ? fp : 1; /* 0 means "not computed yet" */
    return m->fingerprint;
}
