/* Unit tests of tune/controller: cost interpolation, the acceptance estimate, and the
 * controller against every fixed cap on simulated cost curves and acceptance sequences.
 * The simulator marks each output position easy or hard (a draft there is kept or not) from
 * a seeded hash and a per-position acceptance rate, so every cap sees the same text: a round
 * at position pos keeps the drafts of the easy run after pos (up to the cap) and commits one
 * more token (correction or bonus), as greedy verification does. */
#include "test.h"

#include "tune/controller.h"

#include <stdint.h>
#include <string.h>

/* pycoder on the 2-vCPU machine (docs/perf.md): a width-w pass in units of a decode step */
static const double step = 0.669e-3;
static const double ratio[] = {0, 1.00, 1.30, 1.57, 1.90, 2.60, 2.92, 3.20, 3.24, 4.04};

static void costs_pycoder(struct tune_costs *c, double draft_fixed, double draft_per) {
    memset(c, 0, sizeof *c);
    c->max_cap = 8;
    for (int w = 1; w <= 9; w++) c->verify[w] = ratio[w] * step;
    for (int k = 1; k <= 8; k++) c->draft[k] = draft_fixed + draft_per * k;
    c->overhead = 0.02e-3;
}

static double unit(uint64_t seed, long pos) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)pos * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (double)(x >> 11) / 9007199254740992.0;
}

/* Per-position acceptance of a scenario. */
enum scen { GEOM, DRIFT, COPY };
struct sim {
    enum scen kind;
    double alpha; /* GEOM */
    uint64_t seed;
};

static double alpha_at(const struct sim *s, long pos) {
    switch (s->kind) {
    case GEOM:
        return s->alpha;
    case DRIFT: /* drifts between easy and hard stretches of 400 tokens */
    {
        static const double a[] = {0.9, 0.3, 0.75, 0.15, 0.95, 0.5};
        return a[(pos / 400) % 6];
    }
    case COPY: /* copied spans (all kept) between stretches of new text (rarely kept) */
        return (pos / 60) % 3 == 1 ? 0.1 : 0.97;
    }
    return 0;
}

static int easy(const struct sim *s, long pos) {
    return unit(s->seed, pos) < alpha_at(s, pos);
}

/* Tokens per second over n_seq sequences of len tokens each; cap < 0: the controller, each
 * sequence starting from the estimate the earlier ones left (as the engine does). */
static double run(const struct sim *s, const struct tune_costs *c, int free_drafts, int cap,
                  int n_seq, long len, int *caps_used) {
    double t = 0;
    long tokens = 0;
    struct tune_est shared[2];
    tune_est_init(&shared[0]), tune_est_init(&shared[1]);
    for (int q = 0; q < n_seq; q++) {
        struct tune_ctl ctl;
        tune_ctl_init(&ctl, c, free_drafts, q ? shared : NULL);
        long base = (long)q * len, pos = 0;
        while (pos < len) {
            int k = cap >= 0 ? cap : tune_ctl_cap(&ctl, 1);
            if (caps_used) caps_used[k]++;
            int acc = 0;
            while (acc < k && easy(s, base + pos + 1 + acc)) acc++;
            t += tune_round_seconds(c, k, 1, free_drafts);
            pos += acc + 1;
            if (cap < 0) tune_ctl_observe(&ctl, k, acc, shared);
        }
        tokens += pos;
    }
    return tokens / t;
}

/* The controller against the best fixed cap: within 5%. */
static int near_best(const struct sim *s, const struct tune_costs *c, int free_drafts, int n_seq,
                     long len, const char *what) {
    double best = 0;
    int best_k = 0;
    for (int k = 0; k <= c->max_cap; k++) {
        double r = run(s, c, free_drafts, k, n_seq, len, NULL);
        if (r > best) best = r, best_k = k;
    }
    int used[TUNE_MAX_CAP + 1] = {0};
    double a = run(s, c, free_drafts, -1, n_seq, len, used);
    int ok = a >= 0.95 * best;
    if (!ok) {
        printf("  %s: auto %.0f tok/s, best fixed cap %d %.0f tok/s; caps used:", what, a, best_k,
               best);
        for (int k = 0; k <= c->max_cap; k++) printf(" %d", used[k]);
        printf("\n");
    }
    return ok;
}

TEST(round_seconds_adds_pass_drafts_and_overhead) {
    struct tune_costs c;
    costs_pycoder(&c, 0, 0.1e-3);
    CHECK_NEAR(tune_round_seconds(&c, 0, 1, 0), step + 0.02e-3, 1e-12);
    CHECK_NEAR(tune_round_seconds(&c, 3, 1, 0), 1.90 * step + 0.3e-3 + 0.02e-3, 1e-12);
    CHECK_NEAR(tune_round_seconds(&c, 3, 1, 1), 1.90 * step + 0.02e-3, 1e-12);
    CHECK_NEAR(tune_round_seconds(&c, 99, 1, 1), tune_round_seconds(&c, 8, 1, 1), 1e-15);
    /* batched: measured at 2 and 4 sequences, interpolated at 3, linear beyond 4 */
    c.n_batches = 2;
    c.batch[0] = 2, c.batch[1] = 4;
    for (int w = 1; w <= 9; w++) c.grid[0][w] = 1.2 * c.verify[w], c.grid[1][w] = 2 * c.verify[w];
    CHECK_NEAR(tune_round_seconds(&c, 1, 3, 1), 1.6 * c.verify[2] + 3 * 0.02e-3, 1e-12);
    CHECK_NEAR(tune_round_seconds(&c, 1, 8, 1), 4 * c.verify[2] + 8 * 0.02e-3, 1e-12);
}

TEST(estimate_learns_geometric_acceptance) {
    struct tune_est e;
    tune_est_init(&e);
    CHECK_NEAR(tune_est_accept(&e, 1), TUNE_PRIOR, 1e-12);
    CHECK_NEAR(tune_est_accept(&e, 5), TUNE_PRIOR, 1e-12);
    CHECK_NEAR(tune_est_tokens(&e, 0), 1, 1e-12);
    struct sim s = {GEOM, 0.8, 7};
    long pos = 0;
    for (int r = 0; r < 400; r++) {
        int acc = 0;
        while (acc < 4 && easy(&s, pos + 1 + acc)) acc++;
        tune_est_observe(&e, 4, acc);
        pos += acc + 1;
    }
    for (int i = 1; i <= 4; i++) CHECK_NEAR(tune_est_accept(&e, i), 0.8, 0.12);
    /* positions never drafted inherit the deepest measured rate */
    CHECK_NEAR(tune_est_accept(&e, 8), tune_est_accept(&e, 4), 1e-9);
    double want = 1 + 0.8 + 0.64 + 0.512;
    CHECK_NEAR(tune_est_tokens(&e, 3), want, 0.35);
    /* a prior for a new sequence weighs a few rounds only */
    tune_est_cap_weight(&e, 8);
    CHECK(e.tried[1] <= 8 + 1e-9);
    CHECK_NEAR(tune_est_accept(&e, 1), 0.8, 0.15);
}

TEST(best_cap_maximises_predicted_rate) {
    struct tune_costs c;
    costs_pycoder(&c, 0, 0.12e-3);
    struct tune_est e;
    double rates[TUNE_MAX_CAP + 1];
    for (double a = 0.05; a < 1; a += 0.1) {
        tune_est_init(&e);
        for (int r = 0; r < 2000; r++) tune_est_observe(&e, 8, (int)(a * 8 + 0.5));
        int k = tune_best_cap(&c, &e, 1, 0, rates);
        for (int j = 0; j <= 8; j++) CHECK(rates[j] <= rates[k]);
        CHECK_NEAR(rates[k], tune_est_tokens(&e, k) / tune_round_seconds(&c, k, 1, 0), 1e-6);
    }
    /* hopeless drafts: no drafting; near-certain ones: the widest cap */
    tune_est_init(&e);
    for (int r = 0; r < 500; r++) tune_est_observe(&e, 8, 0);
    CHECK(tune_best_cap(&c, &e, 1, 0, NULL) == 0);
    tune_est_init(&e);
    for (int r = 0; r < 500; r++) tune_est_observe(&e, 8, 8);
    /* 8 tokens for 3.24 steps beat 9 for 4.04 */
    CHECK(tune_best_cap(&c, &e, 1, 1, NULL) == 7);
}

TEST(costlier_batches_choose_shorter_drafts) {
    struct tune_costs c;
    costs_pycoder(&c, 0, 0);
    /* at 8 sequences the pass is compute-bound: every row costs the same */
    c.n_batches = 1;
    c.batch[0] = 8;
    for (int w = 1; w <= 9; w++) c.grid[0][w] = 4 * step * w;
    struct tune_est e;
    tune_est_init(&e);
    for (int r = 0; r < 500; r++) tune_est_observe(&e, 8, r % 2 ? 1 : 4);
    int alone = tune_best_cap(&c, &e, 1, 1, NULL), batched = tune_best_cap(&c, &e, 8, 1, NULL);
    CHECK(alone >= 2);
    CHECK(batched < alone);
}

TEST(hysteresis_and_parking) {
    struct tune_costs c;
    costs_pycoder(&c, 0, 0.12e-3);
    struct tune_ctl ctl;
    tune_ctl_init(&ctl, &c, 0, NULL);
    /* stationary acceptance: after settling, the caps stay put */
    struct sim s = {GEOM, 0.7, 3};
    long pos = 0;
    int changes = 0, last[2] = {-1, -1};
    for (int r = 0; r < 600; r++) {
        int k = tune_ctl_cap(&ctl, 1), acc = 0;
        while (acc < k && easy(&s, pos + 1 + acc)) acc++;
        tune_ctl_observe(&ctl, k, acc, NULL);
        pos += acc + 1;
        for (int x = 0; x < 2; x++) {
            if (r >= 200) changes += last[x] >= 0 && ctl.cap[x] != last[x];
            last[x] = ctl.cap[x];
        }
    }
    CHECK(changes <= 10);
    double rate;
    tune_ctl_current(&ctl, &rate);
    CHECK(rate > 0);
    /* every draft rejected: parks at 0 and probes with 1 draft, ever more rarely */
    int probe_at[64], n_probes = 0;
    for (int r = 0; r < 600; r++) {
        int k = tune_ctl_cap(&ctl, 1);
        tune_ctl_observe(&ctl, k, 0, NULL);
        CHECK(k <= 1 || r < 100);
        if (k == 1 && n_probes < 64) probe_at[n_probes++] = r;
    }
    REQUIRE(n_probes >= 6);
    int g1 = probe_at[n_probes - 1] - probe_at[n_probes - 2];
    int g2 = probe_at[n_probes - 2] - probe_at[n_probes - 3];
    CHECK(g1 == TUNE_PROBE_MAX && g2 == TUNE_PROBE_MAX);
    CHECK(tune_ctl_current(&ctl, NULL) == 0);
}

TEST(auto_within_5_percent_of_best_fixed_cap) {
    struct tune_costs draft, lookup, block;
    costs_pycoder(&draft, 0.01e-3, 0.12e-3); /* a draft model: one step per draft */
    costs_pycoder(&lookup, 0, 0);            /* n-gram lookup: free drafts */
    costs_pycoder(&block, 0.30e-3, 0.01e-3); /* a block drafter: one pass, lm_head per row */
    const struct tune_costs *cs[] = {&draft, &lookup, &block};
    const char *names[] = {"draft", "lookup", "block"};
    static const double alphas[] = {0.1, 0.3, 0.5, 0.65, 0.8, 0.9, 0.97};
    char what[96];
    for (int ci = 0; ci < 3; ci++) {
        for (size_t ai = 0; ai < sizeof alphas / sizeof alphas[0]; ai++) {
            struct sim s = {GEOM, alphas[ai], 11 + ai};
            snprintf(what, sizeof what, "%s, alpha %.2f, one long sequence", names[ci], alphas[ai]);
            CHECK(near_best(&s, cs[ci], ci == 1, 1, 6000, what));
            snprintf(what, sizeof what, "%s, alpha %.2f, 40 x 128 tokens", names[ci], alphas[ai]);
            CHECK(near_best(&s, cs[ci], ci == 1, 40, 128, what));
        }
        struct sim drift = {DRIFT, 0, 5}, copy = {COPY, 0, 9};
        snprintf(what, sizeof what, "%s, drifting acceptance", names[ci]);
        CHECK(near_best(&drift, cs[ci], ci == 1, 1, 12000, what));
        CHECK(near_best(&drift, cs[ci], ci == 1, 60, 200, what));
        snprintf(what, sizeof what, "%s, copied spans", names[ci]);
        CHECK(near_best(&copy, cs[ci], ci == 1, 1, 6000, what));
        CHECK(near_best(&copy, cs[ci], ci == 1, 40, 128, what));
    }
}

int main(void) {
    RUN(round_seconds_adds_pass_drafts_and_overhead);
    RUN(estimate_learns_geometric_acceptance);
    RUN(best_cap_maximises_predicted_rate);
    RUN(costlier_batches_choose_shorter_drafts);
    RUN(hysteresis_and_parking);
    RUN(auto_within_5_percent_of_best_fixed_cap);
    return test_report();
}
