/* tune/calib.c: see calib.h. The measurement follows one round's parts after a context of
 * CTX synthetic tokens (a pass's cost does not depend on which tokens it runs): the target's
 * pass of w rows (with the drafter's hidden-state taps when it reads them), the drafter
 * proposing k tokens through its real propose(), and the acceptance decision of a round. Every
 * repetition sweeps all widths and caps, and the curves come from the quietest sweeps
 * (quiet_curves()). A run that other processes disturbed is repeated (up to MAX_PASSES runs,
 * keeping the quietest), and the curves are made monotone (monotone()).
 * The time is budgeted, so that a large model on a CPU calibrates in seconds too: a sweep of a
 * small model takes milliseconds and is repeated REPS times, one of a 0.6B model on two cores
 * half a second, repeated MIN_REPS times. The batched passes (2 to --max-batch sequences of 1
 * to B + 1 rows, the dearest part) measure widths 1, 2, 4, 8, ... and B + 1 only, the widths
 * between interpolated, unless a sweep of every width is cheap (GRID_DENSE_S), and repeat a
 * sweep 3 to GRID_REPS times within GRID_BUDGET_S. */
#include "tune/calib.h"

#include "base/cpuload.h"
#include "base/err.h"
#include "base/log.h"
#include "base/thread.h"
#include "base/timer.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec/block_model.h"
#include "spec/drafter.h"
#include "spec/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX            256
#define WARMUP         3 /* sweeps before the timed ones, fewer when they take over WARMUP_S */
#define WARMUP_S       1.0
#define REPS           24 /* timed sweeps, fewer when they would take over SWEEP_BUDGET_S */
#define MIN_REPS       8
#define SWEEP_BUDGET_S 3.0
#define GRID_REPS      5 /* per batch size: sweeps of the batched widths, 3 at least */
#define GRID_BUDGET_S  1.0
#define GRID_DENSE_S   0.5 /* every width when GRID_REPS sweeps of them take no longer */
#define MAX_PASSES     4   /* measurements while other processes disturb them */

struct meter {
    const struct tune_subject *s;
    int show, done, total, last_pct;
    double t0;
};

static void tick(struct meter *m, int n) {
    m->done += n;
    if (!m->show) return;
    int pct = m->total ? 100 * m->done / m->total : 100, width = 30;
    if (pct == m->last_pct) return;
    m->last_pct = pct;
    int filled = pct * width / 100;
    fprintf(stderr, "\rcalibrating %s for --max-draft auto: [%.*s%*s] %3d%%", m->s->mode, filled,
            "==============================", width - filled, "", pct);
    if (m->done >= m->total) fprintf(stderr, "\n");
}

/* planned steps that will not run after all (a budget cut the repetitions) */
static void unplan(struct meter *m, int steps) {
    m->total -= steps;
    tick(m, 0);
}

static int clamp_int(double x, int lo, int hi) {
    return x < lo ? lo : x > hi ? hi : (int)x;
}

/* Repetition r swept rows lo..hi of a (a[row * reps + r]) and of b (optional). Other processes
 * only ever add time, and on a shared machine they come and go: each point taken at its own
 * quietest moment would mix conditions (a cheap 1-row pass beside dear 2-row ones). So the
 * curves come from the quietest sweeps, those with the least total time (a quarter of them, 3
 * at least), as the median of each point over them. */
static void quiet_curves(const double *a, int lo, int hi, const double *b, int lo2, int hi2,
                         int reps, double *out_a, double *out_b) {
    double total[64];
    int order[64], q = reps / 4 > 3 ? reps / 4 : 3;
    if (q > reps) q = reps;
    for (int r = 0; r < reps; r++) {
        total[r] = 0;
        for (int i = lo; i <= hi; i++) total[r] += a[i * reps + r];
        for (int i = lo2; b && i <= hi2; i++) total[r] += b[i * reps + r];
        order[r] = r;
    }
    for (int i = 1; i < reps; i++) /* insertion sort of the reps by total */
        for (int j = i; j > 0 && total[order[j]] < total[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    for (int pass = 0; pass < 2; pass++) {
        const double *v = pass ? b : a;
        double *out = pass ? out_b : out_a;
        int from = pass ? lo2 : lo, to = pass ? hi2 : hi;
        for (int i = from; v && i <= to; i++) {
            double x[64];
            for (int k = 0; k < q; k++) x[k] = v[i * reps + order[k]];
            for (int k = 1; k < q; k++) /* median of q values */
                for (int j = k; j > 0 && x[j] < x[j - 1]; j--) {
                    double y = x[j];
                    x[j] = x[j - 1], x[j - 1] = y;
                }
            out[i] = q % 2 ? x[q / 2] : 0.5 * (x[q / 2 - 1] + x[q / 2]);
        }
    }
}

static int no_commit(void *ctx, int32_t id, const struct logprobs *lp) {
    (void)ctx, (void)id, (void)lp;
    return 0;
}

/* The drafter of s over a sequence of n_ctx + 1 tokens (its context observed), or none. */
static int drafter_setup(const struct tune_subject *s, struct kv_cache *kv, const int32_t *ids,
                         int n_ctx, const struct sample_params *sp, struct drafter *d, float **taps,
                         int *tap_width) {
    int B = s->max_cap, rc = OK;
    const struct hf_config *c = model_config(s->target);
    if (!strcmp(s->mode, "draft")) {
        if (!s->draft) return ERR_ARG;
        rc = draft_model_drafter_new(s->draft, sp, B, d);
    } else if (!strcmp(s->mode, "dspark") || !strcmp(s->mode, "dflash")) {
        if (!s->block) return ERR_ARG;
        int bs = block_model_config(s->block)->block_size;
        struct block_drafter_opts o = {.max_draft = B, .cap = n_ctx + 1 + bs + B};
        rc = block_drafter_new(s->block, sp, &o, d);
        if (!rc) rc = model_set_taps(s->target, d->tap_layers, d->n_taps);
        *tap_width = d->n_taps * c->hidden_size;
    }
    if (!rc && *tap_width) {
        size_t rows = (size_t)(n_ctx > B + 1 ? n_ctx : B + 1);
        if (!(*taps = malloc(sizeof(float) * (size_t)*tap_width * rows))) rc = ERR_NOMEM;
    }
    /* the context: the target's prefill, whose taps the block drafter reads */
    if (!rc) rc = model_forward_taps(s->target, kv, ids, n_ctx, NULL, 0, *taps);
    if (!rc && *tap_width) rc = d->ops->observe(d, *taps, 0, n_ctx);
    return rc;
}

int tune_grid_widths(int B, int dense, int *w) {
    int n = 0;
    for (int x = 1; x <= B + 1; x = dense ? x + 1 : 2 * x) w[n++] = x;
    if (w[n - 1] != B + 1) w[n++] = B + 1;
    return n;
}

void tune_interpolate(const int *w, const double *c, int nw, double *out) {
    for (int i = 0; i + 1 < nw; i++)
        for (int x = w[i]; x <= w[i + 1]; x++)
            out[x] = c[i] + (c[i + 1] - c[i]) * (double)(x - w[i]) / (double)(w[i + 1] - w[i]);
    if (nw == 1) out[w[0]] = c[0];
}

/* Passes of n sequences of w rows each, for the batch grid. Each sequence's context is a copy
 * of ctx's n_ctx positions (prefilling each would cost more than the grid itself). */
static int grid_measure(const struct tune_subject *s, struct meter *m, const int32_t *ids,
                        const struct kv_cache *ctx, int n_ctx, struct tune_costs *out) {
    int B = s->max_cap, max_n = 0, rc = OK;
    for (int n = 2; n <= s->max_batch && out->n_batches < TUNE_MAX_BATCHES; n *= 2)
        out->batch[out->n_batches++] = max_n = n;
    if (max_n < s->max_batch && out->n_batches < TUNE_MAX_BATCHES)
        out->batch[out->n_batches++] = max_n = s->max_batch;
    else if (max_n < s->max_batch)
        out->batch[out->n_batches - 1] = max_n = s->max_batch;
    struct kv_cache **kvs = calloc((size_t)max_n, sizeof *kvs);
    struct model_batch_item *items = calloc((size_t)max_n, sizeof *items);
    int V = model_config(s->target)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)max_n * (size_t)(B + 1) * (size_t)V);
    int32_t *out_ids = malloc(sizeof(int32_t) * (size_t)max_n * (size_t)(B + 1));
    int ids_only = model_on_gpu(s->target); /* as the engine's greedy rounds there */
    double *t = malloc(sizeof(double) * GRID_REPS * (size_t)(B + 2));
    if (!kvs || !items || !logits || !t || !out_ids) rc = ERR_NOMEM;
    for (int i = 0; !rc && i < max_n; i++) {
        if (!(rc = kv_new(s->target, n_ctx + B + 2, &kvs[i])))
            rc = kv_copy_prefix(kvs[i], ctx, n_ctx);
        items[i] = (struct model_batch_item){
            kvs[i], ids + n_ctx,
            0,      ids_only ? NULL : logits + (size_t)i * (size_t)(B + 1) * (size_t)V,
            NULL,   ids_only ? out_ids + (size_t)i * (size_t)(B + 1) : NULL,
            0,      NULL};
    }
    for (int b = 0; !rc && b < out->n_batches; b++) {
        int n = out->batch[b], ws[TUNE_MAX_CAP + 2];
        double tw = 0; /* passes of the widest width warm up and price a sweep (a second
                        * one when the first was cheap) */
        for (int w = B + 1, r = 0; !rc && r < 2 && (r == 0 || tw < 0.05); r++) {
            for (int i = 0; i < n; i++) items[i].n = w;
            double t0 = timer_now();
            rc = model_forward_batch(s->target, items, n);
            tw = timer_now() - t0;
            for (int i = 0; i < n; i++) kv_truncate(kvs[i], n_ctx);
        }
        int dense = tw * (B + 2) / 2 * GRID_REPS <= GRID_DENSE_S; /* a pass ~ its rows */
        int nw = tune_grid_widths(B, dense, ws), sum = 0;
        for (int i = 0; i < nw; i++) sum += ws[i];
        /* 3 sweeps at least: the median of 3 drops one that another process disturbed */
        int reps = clamp_int(GRID_BUDGET_S / (tw * sum / (B + 1) + 1e-9), 3, GRID_REPS);
        unplan(m, (1 + GRID_REPS) * (B + 1) - 1 - reps * nw);
        for (int r = 0; !rc && r < reps; r++) {
            for (int k = 0; !rc && k < nw; k++) {
                for (int i = 0; i < n; i++) items[i].n = ws[k];
                double t0 = timer_now();
                rc = model_forward_batch(s->target, items, n);
                t[(size_t)k * (size_t)reps + (size_t)r] = timer_now() - t0;
                for (int i = 0; i < n; i++) kv_truncate(kvs[i], n_ctx);
                tick(m, 1);
            }
        }
        double pts[TUNE_MAX_CAP + 2];
        if (!rc) {
            quiet_curves(t, 0, nw - 1, NULL, 0, -1, reps, pts, NULL);
            tune_interpolate(ws, pts, nw, out->grid[b]);
        }
        tick(m, 1);
    }
    for (int i = 0; kvs && i < max_n; i++) kv_free(kvs[i]);
    free(kvs), free(items), free(logits), free(t), free(out_ids);
    return rc;
}

static int measure_once(const struct tune_subject *s, int show_progress, struct tune_costs *out) {
    const struct hf_config *c = model_config(s->target);
    int B = s->max_cap;
    memset(out, 0, sizeof *out);
    if (B < 1 || B > TUNE_MAX_CAP) return ERR_ARG;
    out->max_cap = B;
    int bs = s->block ? block_model_config(s->block)->block_size : 0;
    int n_ctx = CTX;
    if (n_ctx + B + bs + 2 > c->max_pos) n_ctx = c->max_pos - B - bs - 2;
    if (n_ctx < 1) return ERR_ARG;
    int n_batches = 0;
    for (int n = 2; n <= s->max_batch; n *= 2) n_batches++;
    n_batches += s->max_batch > 1 && (s->max_batch & (s->max_batch - 1));
    struct meter m = {.s = s, .show = show_progress, .last_pct = -1, .t0 = timer_now()};
    m.total = (WARMUP + REPS) * (2 * B + 1) + REPS + n_batches * (1 + GRID_REPS) * (B + 1);
    int V = c->vocab_size, rc = OK, tap_width = 0;
    struct kv_cache *kv = NULL;
    struct sampler *smp = NULL;
    struct drafter d = {0};
    struct verify v = {0};
    float *taps = NULL;
    struct sample_params sp = {.top_p = 1};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_ctx + B + 2));
    double *t = malloc(sizeof(double) * REPS * (size_t)(2 * B + 3));
    if (!ids || !t) rc = ERR_NOMEM;
    int span = V - 16 < 1000 ? V - 16 : 1000;
    for (int i = 0; !rc && i < n_ctx + B + 2; i++) ids[i] = 16 + (i * 37) % (span > 0 ? span : 1);
    if (!rc) rc = kv_new(s->target, n_ctx + B + 2, &kv);
    if (!rc && !(smp = sampler_new(&sp, V))) rc = ERR_NOMEM;
    if (!rc) rc = drafter_setup(s, kv, ids, n_ctx, &sp, &d, &taps, &tap_width);
    if (!rc) rc = verify_init(&v, s->target, kv, smp, B, -1, tap_width);
    tick(&m, 0);
    /* the target's passes and the drafter's proposals, interleaved per repetition */
    double *tv = t, *td = t + (size_t)(B + 2) * REPS;
    int32_t drafted[TUNE_MAX_CAP];
    const struct sample_dist *qs[TUNE_MAX_CAP];
    struct draft dr = {.ids = drafted, .q = qs, .n = 0, .cap = B};
    int32_t pend[TUNE_MAX_CAP + 2];
    for (int w = 0; w < B + 1; w++) pend[w] = ids[n_ctx + w];
    /* warm-up sweeps (fewer past WARMUP_S), then as many timed ones as SWEEP_BUDGET_S holds
     * (MIN_REPS..REPS) by the last warm-up sweep's time; sweep r < 0 is not recorded */
    int reps = REPS, warm = 0;
    double warm0 = timer_now();
    for (int r = -1; !rc && r < reps; r++) {
        double s0 = timer_now();
        for (int w = 1; !rc && w <= B + 1; w++) {
            double t0 = timer_now();
            struct model_batch_item it = verify_item(&v, pend, w); /* as the engine's rounds */
            rc = model_forward_batch(s->target, &it, 1);
            if (r >= 0) tv[w * reps + r] = timer_now() - t0;
            kv_truncate(kv, n_ctx);
            tick(&m, 1);
        }
        for (int k = 1; !rc && k <= B; k++) {
            double t0 = timer_now();
            if (d.ops) rc = d.ops->propose(&d, ids, n_ctx + 1, k, &dr);
            if (r >= 0) td[k * reps + r] = d.ops ? timer_now() - t0 : 0;
            tick(&m, 1);
        }
        if (r >= 0) continue;
        double sweep = timer_now() - s0;
        if (++warm < WARMUP && timer_now() - warm0 < WARMUP_S) {
            r--; /* another warm-up sweep */
            continue;
        }
        reps = clamp_int(SWEEP_BUDGET_S / (sweep + 1e-9), MIN_REPS, REPS);
        unplan(&m, (WARMUP - warm + REPS - reps) * (2 * B + 1));
    }
    if (!rc) quiet_curves(tv, 1, B + 1, td, 1, B, reps, out->verify, out->draft);
    /* the per-round decision on a one-row pass */
    static const struct draft none = {0};
    struct model_batch_item one = verify_item(&v, pend, 1);
    if (!rc) rc = model_forward_batch(s->target, &one, 1);
    kv_truncate(kv, n_ctx);
    for (int r = 0; !rc && r < REPS; r++) {
        int acc, stopped;
        double t0 = timer_now();
        rc = verify_decide(&v, &none, no_commit, NULL, &acc, &stopped);
        tv[r] = timer_now() - t0;
        tick(&m, 1);
    }
    if (!rc) quiet_curves(tv, 0, 0, NULL, 0, -1, REPS, &out->overhead, NULL);
    if (!rc && s->max_batch > 1) rc = grid_measure(s, &m, ids, kv, n_ctx, out);
    if (rc) {
        if (m.show && m.done < m.total) fprintf(stderr, "\n");
        log_error("calibration failed: %s", err_str(rc));
    } else if (m.show && m.done < m.total) {
        m.done = m.total - 1;
        tick(&m, 1);
    }
    verify_deinit(&v);
    drafter_free(&d);
    sampler_free(smp);
    kv_free(kv);
    free(taps), free(ids), free(t);
    return rc;
}

/* Timings only ever gain from a disturbance, and a pass of more rows (or more drafts) cannot
 * cost less than one of fewer: each point becomes the least of itself and every wider one. */
static void monotone(double *v, int lo, int hi) {
    for (int i = hi - 1; i >= lo; i--)
        if (v[i + 1] < v[i]) v[i] = v[i + 1];
}

/* What a measurement's curves add up to: the quieter of two runs has the smaller sum. */
static double curve_sum(const struct tune_costs *c) {
    double sum = 0;
    for (int w = 1; w <= c->max_cap + 1; w++) sum += c->verify[w];
    for (int k = 1; k <= c->max_cap; k++) sum += c->draft[k];
    return sum;
}

int tune_measure(const struct tune_subject *s, int show_progress, struct tune_costs *out) {
    struct cpu_mark mark = cpu_mark_now();
    int rc = measure_once(s, show_progress, out);
    double busy = cpu_others_share(&mark);
    /* disturbed: measure again (a few times at most), keeping the quietest run */
    for (int pass = 1; !rc && busy > 0.2 && pass < MAX_PASSES; pass++) {
        struct tune_costs again;
        log_info("other processes used %.0f%% of the CPUs while calibrating: measuring again",
                 100 * busy);
        mark = cpu_mark_now();
        if ((rc = measure_once(s, show_progress, &again))) break;
        busy = cpu_others_share(&mark);
        if (curve_sum(&again) < curve_sum(out)) *out = again;
    }
    if (rc) return rc;
    if (busy > 0.2) {
        log_info("the calibration was disturbed (other processes used %.0f%% of the CPUs)",
                 100 * busy);
        log_hint("--recalibrate when the machine is quieter");
    }
    monotone(out->verify, 1, out->max_cap + 1);
    monotone(out->draft, 1, out->max_cap);
    for (int b = 0; b < out->n_batches; b++) monotone(out->grid[b], 1, out->max_cap + 1);
    return OK;
}

int tune_default_max_cap(const char *mode, int block_size) {
    int k = !strcmp(mode, "dspark") ? block_size : !strcmp(mode, "dflash") ? block_size - 1 : 8;
    return k < 1 ? 1 : k > TUNE_MAX_CAP ? TUNE_MAX_CAP : k;
}

int tune_calibrate(const struct tune_subject *s, const struct tune_calib_opts *o,
                   struct tune_costs *out, int *from_cache) {
    char path[4096], key[1024];
    const char *file = o && o->cache_path ? o->cache_path : NULL;
    if (from_cache) *from_cache = 0;
    if (!file && tune_cache_default_path(path, sizeof path) == OK) file = path;
    int have_key = tune_cache_key(s, key, sizeof key) == OK;
    if (file && have_key && !(o && o->force) && tune_cache_load(file, key, s->max_cap, out) == OK) {
        if (from_cache) *from_cache = 1;
        return OK;
    }
    double t0 = timer_now();
    int rc = tune_measure(s, o && o->show_progress, out);
    if (rc) return rc;
    if (!file) {
        log_error("no calibration cache: neither XDG_CACHE_HOME nor HOME is set");
        log_hint("pass --calibration-file FILE to keep the calibration between runs");
    } else if (have_key) {
        tune_cache_store(file, key, out);
    }
    log_info("calibrated %s in %.1f s (caps 0-%d: verify %.3f-%.3f ms, drafting up to %.3f ms)%s%s",
             s->mode, timer_now() - t0, s->max_cap, 1e3 * out->verify[1],
             1e3 * out->verify[s->max_cap + 1], 1e3 * out->draft[s->max_cap],
             file ? ", cached in " : "", file ? file : "");
    return OK;
}
