/* tune/controller.h: the draft-length controller behind --max-draft auto. A round of k drafts
 * costs a target pass of k + 1 rows, the drafter's work and a fixed overhead (struct
 * tune_costs, measured once by calib.c); it commits 1 + (accepted drafts) tokens. From an
 * estimate of how deep drafts survive (struct tune_est, fed by every verified round) the
 * controller picks the cap with the most tokens per second, re-picking every few rounds and
 * switching only for a clear gain (hysteresis). Pure functions over caller-owned structs: no
 * I/O, clock or allocation, so tests drive them with simulated curves and acceptance. A cap
 * changes how many drafts are proposed, never which tokens are committed: output is exact
 * whatever the cap. */
#ifndef DSPARK_TUNE_CONTROLLER_H
#define DSPARK_TUNE_CONTROLLER_H

#define TUNE_MAX_CAP     16 /* drafts per round the controller may choose, at most */
#define TUNE_MAX_BATCHES 6  /* batched pass sizes priced (2, 4, ..., 64) */
#define TUNE_REPICK      4  /* rounds between decisions */
#define TUNE_HYSTERESIS  0.03
#define TUNE_PROBE_EVERY 8  /* at cap 0, rounds between probes of one draft (at first) */
#define TUNE_PROBE_MAX   64 /* ... at most */

struct tune_costs {
    int max_cap;                     /* caps 0..max_cap are priced (<= TUNE_MAX_CAP) */
    double verify[TUNE_MAX_CAP + 2]; /* [w] seconds of a target pass of w rows, 1..max_cap+1 */
    double draft[TUNE_MAX_CAP + 1];  /* [k] seconds for the drafter to propose k; [0] = 0 */
    double overhead;                 /* seconds per round besides the pass and the drafting */
    int n_batches;                   /* batched passes measured (0: none) */
    int batch[TUNE_MAX_BATCHES];     /* their sequence counts, ascending, each >= 2 */
    double grid[TUNE_MAX_BATCHES][TUNE_MAX_CAP + 2]; /* [b][w]: batch[b] sequences of w rows */
};

/* Seconds of one round at cap k for a sequence stepped together with n_seqs - 1 others that
 * draft alike (n_seqs <= 1: alone). free_drafts: proposing costs nothing (n-gram lookup). */
double tune_round_seconds(const struct tune_costs *c, int k, int n_seqs, int free_drafts);

/* How deep drafts survive. For draft position i (1-based): decayed counts of rounds that
 * verified a draft at i with every draft before it accepted (tried), and of those that kept
 * it (kept). Position i's acceptance, a_i = P(keep i | kept 1..i-1), is the ratio shrunk
 * towards a_(i-1) (a_0: the prior), so positions never tried inherit the last one's rate. */
struct tune_est {
    double tried[TUNE_MAX_CAP + 1];
    double kept[TUNE_MAX_CAP + 1];
};

#define TUNE_PRIOR  0.65 /* a_1 before any round is seen */
#define TUNE_DECAY  0.04 /* weight an observation loses per later round */
#define TUNE_SHRINK 2.0  /* pseudo-rounds of the shrinkage */

void tune_est_init(struct tune_est *e);
/* A round verified `drafted` drafts and kept the first `accepted` of them. */
void tune_est_observe(struct tune_est *e, int drafted, int accepted);
/* Scales the counts so that position 1 weighs at most `rounds` rounds (a prior for a new
 * sequence that its own rounds soon outweigh). */
void tune_est_cap_weight(struct tune_est *e, double rounds);
double tune_est_accept(const struct tune_est *e, int i); /* a_i */
double tune_est_tokens(const struct tune_est *e, int k); /* tokens a round of k drafts commits */
double tune_est_rate(const struct tune_est *e);          /* kept / tried over all positions */

/* The cap with the most predicted tokens per second; rates[0..max_cap] (optional) receives
 * every cap's prediction. */
int tune_best_cap(const struct tune_costs *c, const struct tune_est *e, int n_seqs, int free_drafts,
                  double *rates);

/* One sequence's controller for one source of drafts. Acceptance runs in streaks (a copied
 * span keeps every draft, new text loses the first), so the estimate is kept twice: after a
 * round that kept every draft it drafted, and after any other round; the last round picks
 * which one (and which cap) applies next. For drafts independent of each other both converge
 * to the same. */
struct tune_ctl {
    const struct tune_costs *costs; /* not owned; outlives the controller */
    int free_drafts;
    int ctx;                /* 1: the last round kept every draft */
    struct tune_est est[2]; /* [ctx] */
    int cap[2];             /* in force per ctx; < 0 before the first decision */
    int rounds[2];          /* rounds since the last decision */
    int parked[2], gap[2];  /* at cap 0: rounds since the last probe, rounds between probes */
    double rate[2];         /* predicted tokens per second at cap, as of the last decision */
};

/* prior[2] (optional): the engine's estimates so far, weighed down to a few rounds each, so a
 * new sequence starts where the last ones ended and soon follows its own text; NULL starts
 * from TUNE_PRIOR. */
void tune_ctl_init(struct tune_ctl *c, const struct tune_costs *costs, int free_drafts,
                   const struct tune_est *prior);
/* The cap for this round. Parked at 0, it probes with one draft every TUNE_PROBE_EVERY rounds,
 * doubling the interval after each probe that does not unpark it (up to TUNE_PROBE_MAX). */
int tune_ctl_cap(struct tune_ctl *c, int n_seqs);
/* The round verified `drafted` drafts and kept `accepted`. shared[2] (optional) learns too. */
void tune_ctl_observe(struct tune_ctl *c, int drafted, int accepted, struct tune_est *shared);
int tune_ctl_current(const struct tune_ctl *c, double *rate); /* cap in force, its prediction */

/* What --max-draft auto keeps for one engine and mode: the costs, and what all its sequences
 * have seen so far per source of drafts and context, which each new sequence starts from.
 * Used by the thread that runs the sequences. */
enum { TUNE_SRC_DRAFTER, TUNE_SRC_LOOKUP };
struct tune_auto {
    struct tune_costs costs;
    struct tune_est seen[2][2]; /* [TUNE_SRC_*][ctx] */
};

#endif
