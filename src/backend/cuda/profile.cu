/* backend/cuda/profile.cu: gpu_profile(): each kind of step work timed alone, for the
 * benchmark's per-kernel bandwidth table. An op runs over all layers in one captured graph
 * (so a matrix smaller than L2 is not re-read from cache), best of several replays. */
#include "backend/cuda/mm.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef DSPARK_LAB_STAMPS
int lab_stamps_take(FILE *f);
#endif

/* a plain streaming read of n 16-byte words: the bandwidth ceiling */
__global__ void k_read(const uint4 *p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
              d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += stride) acc ^= __ldcs(p + i).x;
    if (acc == 0x9e3779b9u) *sink = acc; /* keeps the loads */
}

/* the same bytes as warp-private streams of 512-byte steps, 16 in flight per warp: the
 * matmuls' access pattern without their arithmetic */
__global__ void k_read_streams(const uint4 *p, size_t n, unsigned *sink) {
    size_t warps = (size_t)gridDim.x * (blockDim.x / 32),
           w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    size_t per = n / warps / 32 * 32, lane = threadIdx.x & 31;
    const uint4 *q = p + w * per + lane;
    unsigned acc = 0;
    for (size_t i = 0; i + 16 * 32 <= per; i += 16 * 32) {
        uint4 v[16];
#pragma unroll
        for (int j = 0; j < 16; j++) v[j] = __ldcs(q + i + j * 32);
#pragma unroll
        for (int j = 0; j < 16; j++) acc ^= v[j].x;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

/* then whole passes (greedy ids of every row): all of it, and without each kind of a layer's
 * work in turn (LAB_*; the outputs are then meaningless), whose difference is that kind's
 * share of a real pass, overlaps and boundaries included */
enum { OP_QKV, OP_O, OP_GU, OP_DOWN, OP_HEAD, OP_ATTN, OP_NORM, OP_READ, OP_STREAMS, OP_CHAIN,
       OP_CHAIN_P, OP_PASS, OP_PASS_LESS, N_OPS = OP_PASS_LESS + LAB_KINDS };
static const char *op_names[N_OPS] = {
    "qkv",       "o",         "gate_up",  "down",    "lm_head",  "attention",
    "rmsnorm",   "hbm read",  "hbm streams", "chain", "chain-p", "pass", "pass-qkv",
    "pass-attn", "pass-o",    "pass-gu",   "pass-down", "pass-norm"};

/* The chain: the four matmuls of every layer as a pass runs them with deferred norms (q|k|v,
 * o, gate/up, down; no attention, so o's input is stale), as kernels ("chain") and as one
 * persistent kernel ("chain-p", mm_chain_launch), for what the kernel boundaries cost. */
struct chain {
    mm_call *calls;
    qkv_epi *qe;
    mm_args *args; /* device */
    unsigned *bar; /* device, zeros */
    int n;
};

static int chain_make(gpu_model *g, int T, chain *ch) {
    const int L = g->d.n_layers;
    memset(ch, 0, sizeof *ch);
    if (L < 1 || L > 1024 || !g->prescale || 128 % g->D || (T != 1 && xb_ntiles(T) != 6))
        return ERR_UNSUPPORTED;
    for (int li = 0; li < L; li++)
        if (!g->layers[li].gu.interleaved) return ERR_UNSUPPORTED;
    if (mm_chain_init(g, T)) return ERR_UNSUPPORTED;
    ch->n = 4 * L;
    ch->calls = (mm_call *)calloc((size_t)ch->n, sizeof *ch->calls);
    ch->qe = (qkv_epi *)calloc((size_t)L, sizeof *ch->qe);
    if (!ch->calls || !ch->qe) return ERR_NOMEM;
    for (int li = 0; li < L; li++) {
        const dlayer *l = &g->layers[li];
        ch->qe[li] = qkv_epi{g->dsp,          g->q, l->q_norm, l->k_norm,   g->inv_freq, g->d.n_heads,
                            g->d.n_kv_heads, g->D, li,        g->d.rms_eps};
        const float *next = li + 1 < L ? g->layers[li + 1].attn_norm : NULL;
        mm_call c[4] = {
            {&l->qkv, g->xa, T, 0, T, EPI_QKV, NULL, 0, l->bqkv, NULL, &ch->qe[li], NULL, NULL,
             NULL, g->ss_a},
            {&l->o, g->xo, T, 0, T, EPI_RESID, g->x, g->H, NULL, NULL, NULL, l->ffn_norm, g->xf,
             g->ss_f, NULL},
            {&l->gu, g->xf, T, 0, T, EPI_SWIGLU, NULL, 0, NULL, g->xh, NULL, NULL, NULL, NULL,
             g->ss_f},
            {&l->down, g->xh, T, 0, T, EPI_RESID, g->x, g->H, NULL, NULL, NULL, next, g->xa,
             g->ss_a, NULL}};
        memcpy(ch->calls + 4 * li, c, sizeof c);
    }
    CK(cudaMalloc((void **)&ch->args, sizeof(mm_args) * ch->n));
    CK(cudaMalloc((void **)&ch->bar, sizeof(unsigned) * ch->n));
    CK(cudaMemset(ch->bar, 0, sizeof(unsigned) * ch->n));
    return mm_chain_args(g, ch->calls, ch->n, ch->args);
}

static void chain_free(chain *ch) {
    free(ch->calls);
    free(ch->qe);
    cudaFree(ch->args);
    cudaFree(ch->bar);
}

static cudaError_t chain_enqueue(gpu_model *g, const chain *ch, int persistent, int T) {
    if (persistent) return mm_chain_launch(g, ch->args, ch->n, T, ch->bar);
    for (int i = 0; i < ch->n; i++) {
        cudaError_t e = mm_launch(g, &ch->calls[i]);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* the floats of x (the residual rows) that differ between the chain as kernels and as one
 * persistent kernel, each from the same x, xa and ss_a; -1 when either fails */
static long chain_diff(gpu_model *g, const chain *ch, int T) {
    const size_t nx = sizeof(float) * T * g->H;
    const size_t na = sizeof(uint2) * (GPU_ROWS / GPU_GROUP) * xb_group_stride(g->KT_H);
    const size_t ns = sizeof(double) * GPU_ROWS * g->n_ssg;
    void *save = NULL;
    float *out[2] = {(float *)malloc(nx), (float *)malloc(nx)};
    long diff = -1;
    if (out[0] && out[1] && cudaMalloc(&save, nx + na + ns) == cudaSuccess &&
        cudaMemcpy(save, g->x, nx, cudaMemcpyDeviceToDevice) == cudaSuccess &&
        cudaMemcpy((char *)save + nx, g->xa, na, cudaMemcpyDeviceToDevice) == cudaSuccess &&
        cudaMemcpy((char *)save + nx + na, g->ss_a, ns, cudaMemcpyDeviceToDevice) == cudaSuccess) {
        diff = 0;
        for (int p = 0; p < 2 && diff >= 0; p++) {
            if (cudaMemcpy(g->x, save, nx, cudaMemcpyDeviceToDevice) != cudaSuccess ||
                cudaMemcpy(g->xa, (char *)save + nx, na, cudaMemcpyDeviceToDevice) ||
                cudaMemcpy(g->ss_a, (char *)save + nx + na, ns, cudaMemcpyDeviceToDevice) ||
                chain_enqueue(g, ch, p, T) != cudaSuccess || cudaStreamSynchronize(g->stream) ||
                cudaMemcpy(out[p], g->x, nx, cudaMemcpyDeviceToHost))
                diff = -1;
        }
        for (size_t i = 0; diff >= 0 && i < nx / 4; i++)
            diff += memcmp(&out[0][i], &out[1][i], 4) != 0;
    }
    cudaGetLastError();
    cudaFree(save);
    free(out[0]);
    free(out[1]);
    return diff;
}

static double mat_bytes(const dmat *m) {
    return m->mma ? (double)m->MS * m->KT * 512
                  : (double)m->M * m->K * dtype_size((enum dtype)m->dtype);
}

static cudaError_t op_enqueue(gpu_model *g, int op, int n, double *bytes, const chain *ch) {
    int L = g->d.n_layers;
    *bytes = 0;
    if (op == OP_CHAIN || op == OP_CHAIN_P) {
        for (int i = 0; i < ch->n; i++) *bytes += mat_bytes(ch->calls[i].w);
        return chain_enqueue(g, ch, op == OP_CHAIN_P, n);
    }
    for (int li = 0; li < (op == OP_HEAD || op >= OP_READ ? 1 : L); li++) {
        const dlayer *l = &g->layers[li];
        mm_call c = {NULL, NULL, n, 0, n, EPI_STORE, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        qkv_epi qe = {g->dsp,          g->q, l->q_norm, l->k_norm,   g->inv_freq, g->d.n_heads,
                      g->d.n_kv_heads, g->D, li,        g->d.rms_eps};
        cudaError_t e = cudaSuccess;
        if (op >= OP_PASS) {
            g->lab_skip = op > OP_PASS ? 1u << (op - OP_PASS_LESS) : 0;
            e = pass_enqueue(g, n);
            g->lab_skip = 0;
            if (e != cudaSuccess) return e;
            break;
        }
        switch (op) {
        case OP_QKV:
            c.w = &l->qkv, c.xb = g->xa, c.y = g->qkv, c.ldy = g->QKV, c.bias = l->bqkv;
            c.in_ss = g->ss_a; /* NULL unless the norms are deferred (as in a pass) */
            if (l->qkv.mma && 128 % g->D == 0) c.epi = EPI_QKV, c.qe = &qe;
            break;
        case OP_O:
            c.w = &l->o, c.xb = g->xo, c.epi = EPI_RESID, c.y = g->x, c.ldy = g->H;
            if (g->prescale) c.norm_w = l->ffn_norm, c.norm_out = g->xf, c.out_ss = g->ss_f;
            break;
        case OP_GU:
            c.w = &l->gu, c.xb = g->xf, c.in_ss = g->ss_f;
            if (l->gu.interleaved)
                c.epi = EPI_SWIGLU, c.xb_out = g->xh;
            else
                c.y = g->gu, c.ldy = 2 * g->I;
            break;
        case OP_DOWN:
            c.w = &l->down, c.xb = g->xh, c.epi = EPI_RESID, c.y = g->x, c.ldy = g->H;
            if (g->prescale) c.norm_w = l->attn_norm, c.norm_out = g->xa, c.out_ss = g->ss_a;
            break;
        case OP_HEAD:
            c.w = &g->lm_head, c.xb = g->xa, c.y = g->logits, c.ldy = g->V;
            break;
        case OP_ATTN:
            e = attn_launch(g, li, n);
            break;
        case OP_NORM: /* what a pass runs: with deferred norms, only layer 0's k_prescale */
            if (!g->prescale)
                e = norm_launch(g, g->xa, l->attn_norm, 0, n);
            else if (li == 0)
                e = prescale_launch(g, g->xa, l->attn_norm, g->ss_a, n);
            break;
        case OP_STREAMS: {
            size_t words = (size_t)g->lm_head.MS * g->lm_head.KT * 32;
            e = launch(k_read_streams, dim3(g->slots), dim3(256), 0, g->stream,
                       (const uint4 *)g->lm_head.w, words, g->cnt + CNT_ATT - 1);
            *bytes += (double)words * 16;
            break;
        }
        case OP_READ: {
            size_t words = (size_t)g->lm_head.MS * g->lm_head.KT * 32;
            e = launch(k_read, dim3(132 * 8), dim3(512), 0, g->stream, (const uint4 *)g->lm_head.w,
                       words, g->cnt + CNT_ATT - 1);
            *bytes += (double)words * 16;
            break;
        }
        }
        if (e != cudaSuccess) return e;
        if (c.w) {
            if ((e = mm_launch(g, &c)) != cudaSuccess) return e;
            *bytes += mat_bytes(c.w);
        }
    }
    return cudaSuccess;
}

extern "C" int gpu_profile(gpu_model *g, gpu_kv **kv, int nseq, int pos0, int n, gpu_op_time *out,
                           int max) {
    if (n < 1 || nseq < 1 || nseq > GPU_SEQS || (long)n * nseq > GPU_ROWS) return ERR_ARG;
    step_params *sp = g->hsp;
    sp->n_seq = nseq;
    for (int s = 0; s < nseq; s++) {
        if (pos0 < kv[s]->nb || pos0 + n > kv[s]->cap) return ERR_ARG;
        sp->seq[s] = seq_of(s * n, n, pos0, kv[s], 0);
        for (int i = 0; i < n; i++) sp->ids[s * n + i] = 0, sp->row_seq[s * n + i] = s;
    }
    const int per = n; /* rows of each sequence */
    n *= nseq;         /* the pass's rows */
    CK(cudaMemcpy(g->dsp, sp, sizeof *sp, cudaMemcpyHostToDevice));
    attn_choose(g);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int k = 0;
    chain ch;
    const int chain_ok = chain_make(g, n, &ch) == OK;
    for (int op = 0; op < N_OPS && k < max; op++) {
        double bytes;
        if ((op == OP_CHAIN || op == OP_CHAIN_P) && !chain_ok) continue;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
        cudaError_t e = op_enqueue(g, op, n, &bytes, &ch);
        CK(cudaStreamEndCapture(g->stream, &graph));
        CK(e);
        CK(cudaGraphInstantiate(&exec, graph, 0));
        float best = 1e30f;
        for (int rep = 0; rep < 12; rep++) {
            CK(cudaEventRecord(e0, g->stream));
            CK(cudaGraphLaunch(exec, g->stream));
            CK(cudaEventRecord(e1, g->stream));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep >= 2 && ms < best) best = ms;
        }
#ifdef DSPARK_LAB_STAMPS /* one more replay of the whole pass, its blocks' stamps saved */
        if (op == OP_PASS && getenv("DSPARK_LAB_STAMPS")) {
            char path[512];
            snprintf(path, sizeof path, "%s-%dx%d.txt", getenv("DSPARK_LAB_STAMPS"), nseq, per);
            FILE *f = fopen(path, "w");
            lab_stamps_take(NULL);
            CK(cudaGraphLaunch(exec, g->stream));
            lab_stamps_take(f);
            if (f) fclose(f);
        }
#endif
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        if (op == OP_ATTN) { /* K and V of every layer, read once per row */
            int p = pos0 + per, lo = g->d.window > 0 && p - g->d.window > 0 ? p - g->d.window : 0;
            bytes = 2.0 * g->d.n_layers * g->d.n_kv_heads * (double)(p - lo) * g->D * 4 * n;
        }
        snprintf(out[k].name, sizeof out[k].name, "%s", op_names[op]);
        out[k].us = best * 1e3;
        out[k].bytes = bytes;
        k++;
    }
    if (chain_ok && k < max) { /* "chain-diff": differing floats, in us; -1: did not run */
        snprintf(out[k].name, sizeof out[k].name, "chain-diff");
        out[k].us = (double)chain_diff(g, &ch, n);
        out[k].bytes = 0;
        k++;
    }
    chain_free(&ch);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    CK(cudaGetLastError());
    return k;
}
