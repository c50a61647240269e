/* backend/cuda/sample.cu: sampling summaries of logit rows (gpu.h's gpu_row_summary), so that
 * a sampled row sends the host a few hundred candidates instead of its whole vocabulary. They
 * are computed as sample/dist.c's sample_row_summarize() computes them on the CPU, bit for bit:
 * - the row's max (NaN ignored; a row holding a NaN asks for the row itself, n = -1);
 * - the sum of kern_exp((x - max) * inv_t) over the row in kern_sum's order: blocks of 256
 *   values, eight double lanes each (lane j adding values j, j + 8, .. in order), the lanes
 *   added ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)), then the blocks' sums added pairwise
 *   level by level, an odd last one carried up;
 * - the logit of the row's draft token (the next input of its sequence);
 * - the candidates in id order: with top-k, every token at or above the k-th largest logit
 *   (found by a radix select over order-preserving keys); with nucleus only, every token at or
 *   above max - 8 * temperature (the CPU's first stage); none without truncation;
 * - where asked (no truncation), the token that sample_dist_draw_u() draws from the row at a
 *   given u, so that the row never leaves the device; for greedy rows only the argmax;
 * - all of it after the presence and frequency penalties, which it applies in place.
 * One block of 1024 threads per row. The exp is kern.h's kern_exp itself, compiled for the
 * device; the other arithmetic that must match the CPU's uses the _rn intrinsics, so that nvcc
 * cannot contract it into other roundings. */
#include "backend/cuda/cuda.cuh"
#include "sample/dist.h" /* SAMPLE_NUCLEUS_NATS, SAMPLE_DRAW_CHUNK, sample_untruncated */
#include "sample/kern.h" /* kern_exp, KERN_SUM_BLOCK */

#define ST        1024                         /* threads per row */
#define SUM_BLOCK KERN_SUM_BLOCK               /* kern_sum's blocks */
#define SUM_MAX   (SAMP_MAX_VOCAB / SUM_BLOCK) /* blocks of a row at most */
#define DRAW_CHUNK SAMPLE_DRAW_CHUNK               /* sample_dist_draw_u()'s chunks */
#define DRAW_SPAN  SAMPLE_DRAW_SPAN                /* and its spans of chunks */
#define LOADS      8 /* values a thread loads before it uses them, in the compaction and selection */
static_assert(SAMP_CAP <= ST, "top-k's floor takes the k-th of ST thread maxima");

/* ascending order-preserving key of a (non-NaN) float, -0 and +0 equal */
__device__ __forceinline__ unsigned ukey(float f) {
    unsigned u = __float_as_uint(f + 0.0f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float ukey_float(unsigned k) {
    return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

struct samp_smem {
    double bsum[SUM_MAX];
    float tmax[ST]; /* each thread's max of its values (a floor for top-k) */
    unsigned hist[2048];
    int wsum[ST / 32];
    float fred[ST / 32];
    int ired[ST / 32];
    unsigned pick[2];
};

/* eight neighbouring lanes' values added as kern_sum adds its lanes: ((0 + 1) + (2 + 3)) +
 * ((4 + 5) + (6 + 7)) (each add commutes exactly); every lane of the warp must call it */
__device__ __forceinline__ double lanes8_sum(double acc) {
    acc = __dadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 1));
    acc = __dadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 2));
    return __dadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 4));
}

/* exclusive prefix sum of v over the block's threads (thread order); *total gets the sum */
__device__ int block_scan(int v, int *total, samp_smem &s) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) s.wsum[warp] = x;
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < ST / 32; w++) before += w < warp ? s.wsum[w] : 0, all += s.wsum[w];
    __syncthreads();
    *total = all;
    return before + x - v;
}

/* The candidates x[i] >= thr, i in id order, into ids/lg (at most cap); returns their number.
 * Each warp takes a contiguous segment (its lanes reading neighbours): it counts its
 * candidates, a scan over the warps gives each segment's place, and each warp writes its
 * own in order, a ballot at a time. */
__device__ int compact(const float *x, int V, float thr, int32_t *ids, float *lg, int cap,
                       samp_smem &s) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, NW = ST / 32;
    const int seg = ((V + NW - 1) / NW + 31) & ~31, b = min(V, warp * seg), e = min(V, b + seg);
    int c = 0;
    for (int i0 = b + lane; i0 < e + lane; i0 += 32 * LOADS) { /* LOADS tiles in flight */
        float v[LOADS];
#pragma unroll
        for (int q = 0; q < LOADS; q++) v[q] = i0 + 32 * q < e ? x[i0 + 32 * q] : 0.0f;
#pragma unroll
        for (int q = 0; q < LOADS; q++)
            c += __popc(__ballot_sync(0xffffffffu, i0 + 32 * q < e && v[q] >= thr));
    }
    if (lane == 0) s.wsum[warp] = c;
    __syncthreads();
    int at = 0, total = 0;
    for (int w = 0; w < NW; w++) at += w < warp ? s.wsum[w] : 0, total += s.wsum[w];
    __syncthreads();
    for (int i0 = b + lane; i0 < e + lane && at < cap; i0 += 32 * LOADS) {
        float v[LOADS];
#pragma unroll
        for (int q = 0; q < LOADS; q++) v[q] = i0 + 32 * q < e ? x[i0 + 32 * q] : 0.0f;
#pragma unroll
        for (int q = 0; q < LOADS; q++) {
            const int i = i0 + 32 * q;
            const bool take = i < e && v[q] >= thr;
            const unsigned bits = __ballot_sync(0xffffffffu, take);
            const int to = at + __popc(bits & ((1u << lane) - 1));
            if (take && to < cap) ids[to] = i, lg[to] = v[q];
            at += __popc(bits);
        }
    }
    return total;
}

/* the key of the k-th largest value of x (no NaN): a radix select over 11, 11 and 10 bits,
 * each pass a histogram in shared memory of the values that share the bits chosen so far.
 * Values below floor are left out: floor must be at most the answer. */
__device__ unsigned kth_largest(const float *x, int V, int k, float floor, samp_smem &s) {
    const int tid = threadIdx.x;
    unsigned prefix = 0, hi = 0; /* the key bits chosen so far, and their mask */
    for (int pass = 0; pass < 3; pass++) {
        const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0, nb = pass == 2 ? 1024 : 2048;
        for (int i = tid; i < 2048; i += ST) s.hist[i] = 0;
        __syncthreads();
        for (int i0 = tid; i0 < V; i0 += LOADS * ST) { /* the loads first, then the atomics */
            float v[LOADS];
#pragma unroll
            for (int q = 0; q < LOADS; q++) v[q] = i0 + q * ST < V ? x[i0 + q * ST] : -INFINITY;
#pragma unroll
            for (int q = 0; q < LOADS; q++) {
                const unsigned u = ukey(v[q]);
                if (i0 + q * ST < V && v[q] >= floor && (u & hi) == prefix)
                    atomicAdd(&s.hist[(u >> shift) & (nb - 1)], 1u);
            }
        }
        __syncthreads();
        /* thread t holds bins nb - 1 - 2t and nb - 2 - 2t: the scan counts from the top */
        const int top = nb - 1 - 2 * tid;
        const int c0 = top >= 0 ? (int)s.hist[top] : 0, c1 = top >= 1 ? (int)s.hist[top - 1] : 0;
        int total;
        const int above = block_scan(c0 + c1, &total, s);
        if (above < k && above + c0 + c1 >= k) {
            const int d = above + c0 >= k ? top : top - 1;
            s.pick[0] = (unsigned)d, s.pick[1] = (unsigned)(k - above - (d == top ? 0 : c0));
        }
        __syncthreads();
        prefix |= s.pick[0] << shift;
        hi |= (unsigned)(nb - 1) << shift;
        k = (int)s.pick[1];
        __syncthreads();
    }
    return prefix;
}

/* sample_dist_draw_u() at u over the row's untruncated distribution, as the CPU builds it
 * (probabilities e * (float)(1 / total), e the row's kern_exp((x - max) * inv_t) kept by the
 * sum's pass, in id order): the chunks' sums of
 * DRAW_CHUNK probabilities in parallel (eight lanes and a tree; a short last chunk in order),
 * each span's sum of its chunks' in order on its own thread, then thread 0 walks the spans,
 * the chunks of the span it stops in and the entries of the chunk, as the host does.
 * cs: a double a chunk, then one a span. */
__device__ int draw_row(const float *e, int V, double total, double u, double *cs,
                        samp_smem &s) {
    const int tid = threadIdx.x, nch = (V + DRAW_CHUNK - 1) / DRAW_CHUNK;
    const int nsp = (nch + DRAW_SPAN - 1) / DRAW_SPAN, g8 = tid >> 3, j = tid & 7;
    double *ss = cs + nch;
    const float inv = __double2float_rn(__ddiv_rn(1.0, total));
    for (int c0 = 0; c0 < nch; c0 += ST / 8) {
        const int c = c0 + g8, base = c * DRAW_CHUNK;
        const int len = c < nch ? min(DRAW_CHUNK, V - base) : 0;
        double acc = 0, seq = 0;
        if (len == DRAW_CHUNK) {
#pragma unroll
            for (int i = 0; i < DRAW_CHUNK / 8; i++)
                acc = __dadd_rn(acc, (double)__fmul_rn(e[base + j + 8 * i], inv));
        } else if (j == 0) {
            for (int i = 0; i < len; i++)
                seq = __dadd_rn(seq, (double)__fmul_rn(e[base + i], inv));
        }
        acc = lanes8_sum(acc);
        if (j == 0 && len > 0) cs[c] = len == DRAW_CHUNK ? acc : seq;
    }
    __syncthreads();
    for (int k = tid; k < nsp; k += ST) { /* a span's chunks in order */
        double sum = 0;
        for (int c = k * DRAW_SPAN; c < min(nch, (k + 1) * DRAW_SPAN); c++)
            sum = __dadd_rn(sum, cs[c]);
        ss[k] = sum;
    }
    __syncthreads();
    if (tid == 0) {
        double mass = 0;
        for (int k = 0; k < nsp; k++) mass = __dadd_rn(mass, ss[k]);
        const double target = __dmul_rn(u, mass);
        double cum = 0;
        int id = -1, k = 0;
        for (; k < nsp && !(__dadd_rn(cum, ss[k]) > target); k++) cum = __dadd_rn(cum, ss[k]);
        if (k < nsp) { /* the span's chunks, then the chunk's entries */
            int c = k * DRAW_SPAN;
            const int cend = min(nch, (k + 1) * DRAW_SPAN);
            for (; c < cend && !(__dadd_rn(cum, cs[c]) > target); c++) cum = __dadd_rn(cum, cs[c]);
            if (c < cend) {
                const int base = c * DRAW_CHUNK, len = min(DRAW_CHUNK, V - base);
                for (int i = 0; i < len; i++) {
                    const float p = __fmul_rn(e[base + i], inv);
                    cum = __dadd_rn(cum, (double)p);
                    if (cum > target && p > 0) {
                        id = base + i;
                        break;
                    }
                }
            }
        }
        s.pick[0] = (unsigned)id;
        s.pick[1] = 0;
    }
    __syncthreads();
    const int id = (int)s.pick[0];
    if (id >= 0) return id;
    /* rounding left the target unreached: the last entry with a positive probability */
    int last = 0;
    for (int i = tid; i < V; i += ST)
        if (__fmul_rn(e[i], inv) > 0) last = i;
    atomicMax(&s.pick[1], (unsigned)last);
    __syncthreads();
    return (int)s.pick[1];
}

/* Block r summarises job r: logits row job.lrow; its draft, if it has one, is the pass's
 * input after its own row; with job.draw, it also draws the row (untruncated) at job.u. */
__global__ void __launch_bounds__(ST, 1)
    k_summary(float *logits, int V, const step_params *sp, const samp_job *jobs,
              samp_head *head, int32_t *cids, float *clg, int cap, const int32_t *pen_ids,
              const float *pen_amt, float *exps) {
    __shared__ samp_smem s;
    extern __shared__ double cs[]; /* draw_row()'s, a double a chunk and a span */
    const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const samp_job job = jobs[r];
    const float temp = job.temp, inv_t = job.inv_t, top_p = job.top_p;
    const int top_k = job.top_k;
    float *xw = logits + (size_t)job.lrow * V;
    const float *x = xw;
    samp_head *h = head + r;
    if (job.n_pen + job.n_ext) { /* the penalties, in place: each id once, before all else */
        for (int i = tid; i < job.n_pen; i += ST) {
            const int32_t id = pen_ids[job.pen_at + i];
            int own = 0; /* the row's own entry replaces the base's */
            for (int e = 0; e < job.n_ext; e++) own |= pen_ids[job.ext_at + e] == id;
            if (!own) xw[id] = __fsub_rn(xw[id], pen_amt[job.pen_at + i]);
        }
        for (int e = tid; e < job.n_ext; e += ST) {
            const int32_t id = pen_ids[job.ext_at + e];
            xw[id] = __fsub_rn(xw[id], pen_amt[job.ext_at + e]);
        }
        __syncthreads();
    }
    if (job.draw == 2) { /* greedy: the first index of the largest value, NaN ignored */
        float m = -INFINITY;
        int at = -1;
        for (int i = tid; i < V; i += ST)
            if (x[i] > m) m = x[i], at = i;
        for (int o = 16; o; o >>= 1) {
            const float mo = __shfl_xor_sync(0xffffffffu, m, o);
            const int ao = __shfl_xor_sync(0xffffffffu, at, o);
            if (ao >= 0 && (at < 0 || mo > m || (mo == m && ao < at))) m = mo, at = ao;
        }
        if (lane == 0) s.fred[warp] = m, s.ired[warp] = at;
        __syncthreads();
        if (tid == 0) {
            for (int w = 0; w < ST / 32; w++) {
                const float mo = s.fred[w];
                const int ao = s.ired[w];
                if (ao >= 0 && (at < 0 || mo > m || (mo == m && ao < at))) m = mo, at = ao;
            }
            h->max = m, h->logit_t = 0, h->total = 0, h->n = 0, h->drawn = at >= 0 ? at : 0;
        }
        return;
    }
    /* the max, and whether any value is NaN */
    float m = -INFINITY;
    int nan = 0;
#pragma unroll 8
    for (int i = tid; i < V; i += ST) {
        const float v = x[i];
        nan |= v != v;
        m = v > m ? v : m;
    }
    s.tmax[tid] = m; /* read after the barriers below */
    for (int o = 16; o; o >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o);
        m = mo > m ? mo : m;
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    if (lane == 0) s.fred[warp] = m, s.ired[warp] = nan;
    __syncthreads();
    m = -INFINITY, nan = 0;
    for (int w = 0; w < ST / 32; w++) m = s.fred[w] > m ? s.fred[w] : m, nan |= s.ired[w];
    const int draft = job.has_draft ? sp->ids[job.prow + 1] : -1;
    if (tid == 0) {
        h->max = m;
        h->logit_t = draft >= 0 && draft < V ? x[draft] : 0.0f;
        h->drawn = -1;
    }
    if (!isfinite(m)) {
        if (tid == 0) h->total = 0, h->n = -1;
        return;
    }
    /* the sum of exp over the row, in kern_sum's order: 8 threads a block of 256 values */
    float *ex = job.draw == 1 ? exps + (size_t)job.eslot * V : NULL;
    const int nblk = (V + SUM_BLOCK - 1) / SUM_BLOCK, g8 = tid >> 3, j = tid & 7;
    for (int b0 = 0; b0 < nblk; b0 += ST / 8) {
        const int b = b0 + g8, base = b * SUM_BLOCK;
        const int len = b < nblk ? min(SUM_BLOCK, V - base) : 0;
        double acc = 0;
#pragma unroll
        for (int i = 0; i < SUM_BLOCK / 8; i++) {
            const int at = j + 8 * i;
            if (at < len) {
                const float y = kern_exp(__fmul_rn(__fsub_rn(x[base + at], m), inv_t));
                if (ex) ex[base + at] = y; /* kept for the draw */
                acc = __dadd_rn(acc, (double)y);
            }
        }
        acc = lanes8_sum(acc);
        if (j == 0 && b < nblk) s.bsum[b] = acc;
    }
    __syncthreads();
    for (int n = nblk; n > 1;) { /* pairwise, level by level */
        const int half = n / 2;
        double a = 0, carry = 0; /* half <= SUM_MAX / 2 = ST */
        if (tid < half) a = __dadd_rn(s.bsum[2 * tid], s.bsum[2 * tid + 1]);
        if (tid == 0 && (n & 1)) carry = s.bsum[n - 1];
        __syncthreads();
        if (tid < half) s.bsum[tid] = a;
        if (tid == 0 && (n & 1)) s.bsum[half] = carry;
        __syncthreads();
        n = half + (n & 1);
    }
    const double total = s.bsum[0];
    if (tid == 0) h->total = total;
    if (nan) { /* the row itself is needed (kern_exp counts a NaN as 0) */
        if (tid == 0) h->n = -1;
        return;
    }
    if (job.draw) {
        const int id = draw_row(ex, V, total, job.u, cs, s);
        if (tid == 0) h->drawn = id;
    }
    /* the candidates */
    int nc = 0;
    if (top_k > 0) {
        /* The k-th largest of the threads' maxima (k <= ST) is a floor: k values are at least
         * that. Near-flat rows then give the passes a few thousand values, not the row. */
        float h0 = -INFINITY; /* the floor, then the k-th largest (one call site: inlined) */
        for (int step = 0; step < 2; step++)
            h0 = ukey_float(kth_largest(step ? x : s.tmax, step ? V : ST, top_k, h0, s));
        nc = compact(x, V, h0, cids + (size_t)r * cap, clg + (size_t)r * cap, cap, s);
    } else if (top_p < 1.0f) {
        const float thr = __fsub_rn(m, __fmul_rn(SAMPLE_NUCLEUS_NATS, temp));
        nc = compact(x, V, thr, cids + (size_t)r * cap, clg + (size_t)r * cap, cap, s);
    }
    if (tid == 0) h->n = nc <= cap ? nc : -1;
}

/* the sampling summaries' buffers, on first use; g->samp is set last, when all are there
 * (a failure leaves the pass on the logits path) */
static int samp_alloc(gpu_model *g) {
    if (g->samp) return OK;
    const size_t R = (size_t)g->rows;
    samp_head *samp;
    if ((!g->samp_ids && dev_alloc(g, (void **)&g->samp_ids, sizeof(int32_t) * R * SAMP_CAP)) ||
        (!g->samp_lg && dev_alloc(g, (void **)&g->samp_lg, sizeof(float) * R * SAMP_CAP)) ||
        (!g->jobs && dev_alloc(g, (void **)&g->jobs, sizeof(samp_job) * R)))
        return ERR_NOMEM;
    void **host[4] = {(void **)&g->hjobs, (void **)&g->hsamp, (void **)&g->hsamp_ids,
                      (void **)&g->hsamp_lg};
    const size_t bytes[4] = {sizeof(samp_job) * R, sizeof(samp_head) * R,
                             sizeof(int32_t) * R * SAMP_CAP, sizeof(float) * R * SAMP_CAP};
    for (int i = 0; i < 4; i++)
        if (!*host[i] && cudaMallocHost(host[i], bytes[i]) != cudaSuccess) {
            *host[i] = NULL;
            cudaGetLastError(); /* or the pass would report it */
            return ERR_NOMEM;
        }
    if (dev_alloc(g, (void **)&samp, sizeof(samp_head) * R)) return ERR_NOMEM;
    g->samp = samp;
    return OK;
}

/* room for n penalty entries in the pass's lists (they grow by doubling; a failure leaves
 * the pass on the logits path) */
static int pen_room(gpu_model *g, int n) {
    if (n <= g->pen_cap) return OK;
    int cap = g->pen_cap ? g->pen_cap : 4096;
    while (cap < n) cap *= 2;
    int32_t *di = NULL, *hi = NULL;
    float *da = NULL, *ha = NULL;
    if (cudaMalloc((void **)&di, sizeof(int32_t) * cap) != cudaSuccess ||
        cudaMalloc((void **)&da, sizeof(float) * cap) != cudaSuccess ||
        cudaMallocHost((void **)&hi, sizeof(int32_t) * cap) != cudaSuccess ||
        cudaMallocHost((void **)&ha, sizeof(float) * cap) != cudaSuccess) {
        cudaGetLastError(); /* or the pass would report it */
        if (di) cudaFree(di);
        if (da) cudaFree(da);
        if (hi) cudaFreeHost(hi);
        return ERR_NOMEM;
    }
    if (g->pen_ids) cudaFree(g->pen_ids), cudaFree(g->pen_amt);
    if (g->hpen_ids) cudaFreeHost(g->hpen_ids), cudaFreeHost(g->hpen_amt);
    g->pen_ids = di, g->pen_amt = da, g->hpen_ids = hi, g->hpen_amt = ha, g->pen_cap = cap;
    return OK;
}

int summary_pen_entries(const gpu_sample_req *q, int rows) {
    if (!q->penalised) return 0;
    int n = q->n_pen;
    for (int r = 0; r < rows; r++) n += q->ext_n[r];
    return n;
}

int summary_untruncated(const gpu_model *g, const gpu_sample_req *q) {
    return sample_untruncated(q->top_k, q->top_p, g->V);
}

int summary_draws(const gpu_model *g, const gpu_sample_req *q) {
    return !(q->temperature > 0) || (q->draw && summary_untruncated(g, q));
}

/* Fills the jobs [first, + rows) of a sequence's rows in the pass (its first at dev_row of
 * the logits and pass_row of the pass; drafts: its rows are a round's, each but the last
 * followed by its draft) and appends its penalty entries at *n_pen. Returns whether its last
 * row must also come back whole (an untruncated draw the host makes). */
int summary_jobs(gpu_model *g, const gpu_sample_req *q, int dev_row, int pass_row, int rows,
                 int drafts, int first, int *n_pen) {
    int top_k = q->top_k > 0 && q->top_k < g->V ? q->top_k : 0;
    int greedy = !(q->temperature > 0); /* every row's argmax */
    int base = *n_pen, nb = q->penalised ? q->n_pen : 0;
    if (nb) {
        memcpy(g->hpen_ids + *n_pen, q->pen_ids, sizeof(int32_t) * nb);
        memcpy(g->hpen_amt + *n_pen, q->pen_amt, sizeof(float) * nb);
        *n_pen += nb;
    }
    for (int r = 0; r < rows; r++) { /* the last row of a round has no draft */
        int ne = q->penalised ? q->ext_n[r] : 0;
        g->hjobs[first + r] = {dev_row + r,
                               pass_row + r,
                               drafts && r < rows - 1,
                               top_k,
                               q->temperature,
                               1.0f / q->temperature,
                               q->top_p,
                               greedy ? 2 : r == rows - 1 && summary_draws(g, q),
                               q->u,
                               base,
                               nb,
                               *n_pen,
                               ne,
                               0,
                               0};
        if (ne) {
            memcpy(g->hpen_ids + *n_pen, q->ext_ids + q->ext_at[r], sizeof(int32_t) * ne);
            memcpy(g->hpen_amt + *n_pen, q->ext_amt + q->ext_at[r], sizeof(float) * ne);
            *n_pen += ne;
        }
    }
    /* the last row has no draft: its draw needs the row, unless the device draws it (copied
     * after the summaries, which apply the penalties) */
    return !greedy && summary_untruncated(g, q) && !summary_draws(g, q);
}

/* After the pass's synchronisation: the summaries of jobs [first, + rows) into q's rows. */
void summary_read(gpu_model *g, gpu_sample_req *q, int first, int rows, int eager, int dev_row) {
    for (int r = 0; r < rows; r++) {
        const samp_head *h = &g->hsamp[first + r];
        gpu_row_summary *o = &q->rows[r];
        o->max = h->max, o->logit_t = h->logit_t, o->total = h->total, o->n = h->n;
        o->in_logits = eager && r == rows - 1;
        o->drawn = h->drawn;
        if (h->n > 0) {
            memcpy(o->ids, g->hsamp_ids + (size_t)(first + r) * SAMP_CAP,
                   sizeof(int32_t) * (size_t)h->n);
            memcpy(o->logits, g->hsamp_lg + (size_t)(first + r) * SAMP_CAP,
                   sizeof(float) * (size_t)h->n);
        }
    }
    q->filled = 1, q->dev_row = dev_row, q->pass = g->n_pass;
}

void summary_free(gpu_model *g) {
    if (g->hsamp) cudaFreeHost(g->hsamp);
    if (g->hsamp_ids) cudaFreeHost(g->hsamp_ids);
    if (g->hsamp_lg) cudaFreeHost(g->hsamp_lg);
    if (g->hjobs) cudaFreeHost(g->hjobs);
    if (g->samp_e) cudaFree(g->samp_e);
    if (g->pen_ids) cudaFree(g->pen_ids);
    if (g->pen_amt) cudaFree(g->pen_amt);
    if (g->hpen_ids) cudaFreeHost(g->hpen_ids);
    if (g->hpen_amt) cudaFreeHost(g->hpen_amt);
}

/* dynamic shared memory of a launch with draws */
static size_t draw_smem(int V) {
    const int nch = (V + DRAW_CHUNK - 1) / DRAW_CHUNK;
    return sizeof(double) * (nch + (nch + DRAW_SPAN - 1) / DRAW_SPAN);
}

static int summary_draw_ready(gpu_model *g) {
    static size_t room = 48 * 1024 - sizeof(samp_smem); /* dynamic shared memory allowed */
    const size_t dyn = draw_smem(g->V);
    if (dyn > room) {
        if (cudaFuncSetAttribute(k_summary, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)dyn) != cudaSuccess) {
            cudaGetLastError(); /* or the pass would report it */
            return 0;
        }
        room = dyn;
    }
    if (!g->samp_e && cudaMalloc((void **)&g->samp_e, sizeof(float) * GPU_SEQS * g->V)) {
        g->samp_e = NULL;
        cudaGetLastError();
        return 0;
    }
    return 1;
}

int summary_ready(gpu_model *g, int pen_need, int draws) {
    return samp_alloc(g) == OK && pen_room(g, pen_need) == OK &&
           (!draws || summary_draw_ready(g));
}

cudaError_t summary_launch(gpu_model *g, int n, int n_pen) {
    if (g->V > SUM_MAX * SUM_BLOCK) return cudaErrorInvalidValue;
    cudaError_t e = cudaSuccess;
    int draws = 0;
    for (int i = 0; i < n; i++)
        if (g->hjobs[i].draw == 1) g->hjobs[i].eslot = draws++; /* at most one a sequence */
    if (draws > GPU_SEQS || (draws && !g->samp_e)) return cudaErrorInvalidValue;
    const size_t dyn = draws ? draw_smem(g->V) : 0;
    if (n_pen && ((e = cudaMemcpyAsync(g->pen_ids, g->hpen_ids, sizeof(int32_t) * n_pen,
                                       cudaMemcpyHostToDevice, g->stream)) != cudaSuccess ||
                  (e = cudaMemcpyAsync(g->pen_amt, g->hpen_amt, sizeof(float) * n_pen,
                                       cudaMemcpyHostToDevice, g->stream)) != cudaSuccess))
        return e;
    e = cudaMemcpyAsync(g->jobs, g->hjobs, sizeof(samp_job) * n, cudaMemcpyHostToDevice,
                        g->stream);
    if (e != cudaSuccess) return e;
    k_summary<<<n, ST, dyn, g->stream>>>(g->logits, g->V, g->dsp, g->jobs, g->samp, g->samp_ids,
                                         g->samp_lg, SAMP_CAP, g->pen_ids, g->pen_amt,
                                         g->samp_e);
    if ((e = cudaGetLastError()) != cudaSuccess ||
        (e = cudaMemcpyAsync(g->hsamp, g->samp, sizeof(samp_head) * n, cudaMemcpyDeviceToHost,
                             g->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(g->hsamp_ids, g->samp_ids, sizeof(int32_t) * n * SAMP_CAP,
                             cudaMemcpyDeviceToHost, g->stream)) != cudaSuccess)
        return e;
    return cudaMemcpyAsync(g->hsamp_lg, g->samp_lg, sizeof(float) * n * SAMP_CAP,
                           cudaMemcpyDeviceToHost, g->stream);
}
