/* tests/unit/golden.h: reading ../shared/golden's reference data in the tests that compare
 * against it (test_drafters on the CPU, test_gpu on the device): token ids of a JSON array, a
 * tensor of a known size, and the rounds of a greedy speculative trace. */
#ifndef DSPARK_TESTS_GOLDEN_H
#define DSPARK_TESTS_GOLDEN_H

#include "engine/generate.h"
#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

static inline int ids_of(const cJSON *a, int32_t *out, int cap) {
    int n = 0;
    for (const cJSON *it = a ? a->child : NULL; it && n < cap; it = it->next)
        out[n++] = (int32_t)it->valuedouble;
    return n;
}

/* the tensor's data when it holds n values, else NULL */
static inline const float *tensor_of(struct st_set *st, const char *name, size_t n) {
    const struct st_tensor *t = st_find(st, name);
    return t && (size_t)st_numel(t) == n ? t->data : NULL;
}

/* The reference trace's rounds against r's (run with trace on): how many of those compared
 * have the same drafts (the verified ones where the reference says how many) and accepted
 * counts; *compared counts the rounds compared, which stop where the token budget cut ours
 * shorter. */
static inline int golden_rounds(const cJSON *rounds, const struct gen_result *r, int *compared) {
    int i = 0, same = 0;
    *compared = 0;
    for (const cJSON *rd = rounds ? rounds->child : NULL; rd && i < r->stats.rounds;
         rd = rd->next, i++) {
        int32_t d[16];
        int nd = ids_of(cJSON_GetObjectItem(rd, "draft_ids"), d, 16);
        const cJSON *nv = cJSON_GetObjectItem(rd, "n_verified_drafts");
        if (nv) nd = (int)nv->valuedouble;
        int acc = (int)cJSON_GetObjectItem(rd, "accepted")->valuedouble;
        const struct gen_round *our = &r->rounds[i];
        if (our->n_drafted < nd) break;
        (*compared)++;
        same += our->n_drafted == nd && our->n_accepted == acc &&
                !memcmp(r->drafted + our->first, d, sizeof(int32_t) * (size_t)nd);
    }
    return same;
}

#endif
