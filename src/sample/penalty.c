/* sample/penalty.c: the count table (open addressing with linear probing over indices into
 * a dense id list) and penalty application. */
#include "sample/penalty.h"

#include <assert.h>
#include <stdlib.h>

#include "base/err.h"

static uint32_t hash_id(int32_t id) {
    return (uint32_t)id * 0x9e3779b1u;
}

void penalty_init(struct penalty_counts *c) {
    *c = (struct penalty_counts){0};
}

void penalty_deinit(struct penalty_counts *c) {
    free(c->ids);
    free(c->counts);
    free(c->slots);
    penalty_init(c);
}

void penalty_clear(struct penalty_counts *c) {
    c->n_seen = 0;
    for (int i = 0; i < c->n_slots; i++) c->slots[i] = -1;
}

/* Slot holding id, or the empty slot where it would go. */
static int find_slot(const struct penalty_counts *c, int32_t id) {
    uint32_t mask = (uint32_t)c->n_slots - 1;
    uint32_t h = hash_id(id) & mask;
    while (c->slots[h] >= 0 && c->ids[c->slots[h]] != id) h = (h + 1) & mask;
    return (int)h;
}

static int grow(struct penalty_counts *c) {
    int cap = c->cap ? 2 * c->cap : 64;
    int n_slots = 2 * cap;
    int32_t *ids = realloc(c->ids, (size_t)cap * sizeof *ids);
    if (!ids) return ERR_NOMEM;
    c->ids = ids;
    int32_t *counts = realloc(c->counts, (size_t)cap * sizeof *counts);
    if (!counts) return ERR_NOMEM;
    c->counts = counts;
    int32_t *slots = malloc((size_t)n_slots * sizeof *slots);
    if (!slots) return ERR_NOMEM;
    free(c->slots);
    c->slots = slots;
    c->n_slots = n_slots;
    c->cap = cap;
    for (int i = 0; i < n_slots; i++) slots[i] = -1;
    for (int i = 0; i < c->n_seen; i++) slots[find_slot(c, c->ids[i])] = i;
    return OK;
}

int penalty_add(struct penalty_counts *c, int32_t id) {
    assert(id >= 0);
    if (c->n_slots > 0) {
        int s = find_slot(c, id);
        if (c->slots[s] >= 0) {
            c->counts[c->slots[s]]++;
            return OK;
        }
    }
    if (c->n_seen == c->cap) {
        int err = grow(c);
        if (err) return err;
    }
    int s = find_slot(c, id);
    c->ids[c->n_seen] = id;
    c->counts[c->n_seen] = 1;
    c->slots[s] = c->n_seen++;
    return OK;
}

int32_t penalty_count(const struct penalty_counts *c, int32_t id) {
    if (c->n_slots == 0) return 0;
    int s = find_slot(c, id);
    return c->slots[s] >= 0 ? c->counts[c->slots[s]] : 0;
}

float penalty_amount(float presence, float frequency, int32_t count) {
    return presence + frequency * (float)count;
}

/* The one formula, so base and extra paths round identically. */
static float penalised(float logit, float presence, float frequency, int32_t count) {
    return logit - penalty_amount(presence, frequency, count);
}

void penalty_apply(const struct penalty_counts *c, float presence, float frequency, float *logits,
                   int n_vocab, const int32_t *extra, int n_extra) {
    if (presence == 0.0f && frequency == 0.0f) return;
    /* A 64-bit filter of (id mod 64) over the extras makes "is this seen id also an extra?"
     * a single bit test for almost every seen id. */
    uint64_t filter = 0;
    for (int j = 0; j < n_extra; j++) filter |= 1ull << (extra[j] & 63);
    for (int i = 0; i < c->n_seen; i++) {
        int32_t id = c->ids[i];
        assert(id < n_vocab);
        if (filter >> (id & 63) & 1) {
            int in_extra = 0;
            for (int j = 0; j < n_extra && !in_extra; j++) in_extra = extra[j] == id;
            if (in_extra) continue; /* done below with the combined count */
        }
        logits[id] = penalised(logits[id], presence, frequency, c->counts[i]);
    }
    for (int j = 0; j < n_extra; j++) {
        int32_t id = extra[j];
        assert(id >= 0 && id < n_vocab);
        int first = 1, n_here = 1;
        for (int k = 0; k < j && first; k++) first = extra[k] != id;
        if (!first) continue;
        for (int k = j + 1; k < n_extra; k++) n_here += extra[k] == id;
        logits[id] = penalised(logits[id], presence, frequency, penalty_count(c, id) + n_here);
    }
}
