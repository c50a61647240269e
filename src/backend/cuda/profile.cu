/* backend/cuda/profile.cu: gpu_profile(): each kind of step work timed alone, for the
 * benchmark's per-kernel bandwidth table. An op runs over all layers in one captured graph
 * (so a matrix smaller than L2 is not re-read from cache), best of several replays. */
#include "backend/cuda/cuda.cuh"

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
enum { OP_QKV, OP_O, OP_GU, OP_DOWN, OP_HEAD, OP_ATTN, OP_NORM, OP_READ, OP_STREAMS, OP_PASS,
       OP_PASS_LESS, N_OPS = OP_PASS_LESS + LAB_KINDS };
static const char *op_names[N_OPS] = {
    "qkv",       "o",         "gate_up",  "down",    "lm_head",  "attention",
    "rmsnorm",   "hbm read",  "hbm streams", "pass", "pass-qkv", "pass-attn",
    "pass-o",    "pass-gu",   "pass-down", "pass-norm"};

static double mat_bytes(const dmat *m) {
    return m->mma ? (double)m->MS * m->KT * 512
                  : (double)m->M * m->K * dtype_size((enum dtype)m->dtype);
}

static cudaError_t op_enqueue(gpu_model *g, int op, int n, double *bytes) {
    int L = g->d.n_layers;
    *bytes = 0;
    for (int li = 0; li < (op == OP_HEAD || op >= OP_READ ? 1 : L); li++) {
        const dlayer *l = &g->layers[li];
        mm_call c = {NULL, NULL, n,    0,    n,    EPI_STORE, NULL, 0,
                     NULL, NULL, NULL, NULL, NULL, NULL,      NULL};
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
            if (li == 0) e = rope_table_launch(g, n); /* as a pass has it */
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
    if (n < 1 || nseq < 1 || nseq > GPU_SEQS || (long)n * nseq > g->rows) return ERR_ARG;
    g->n_pass++; /* the logits of the last pass are overwritten */
    step_params *sp = g->hsp;
    sp->n_seq = nseq;
    for (int s = 0; s < nseq; s++) {
        if (pos0 < kv[s]->nb || pos0 + n > kv[s]->cap) return ERR_ARG;
        sp->seq[s] = seq_of(s * n, n, pos0, kv[s], 0);
        for (int i = 0; i < n; i++) sp->ids[s * n + i] = 0, sp->row_seq[s * n + i] = s;
    }
    const int per = n; /* rows of each sequence */
    n *= nseq;         /* the pass's rows */
    CK(cudaMemcpy(g->dsp, sp, offsetof(step_params, rope), cudaMemcpyHostToDevice));
    attn_choose(g);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int k = 0;
    for (int op = 0; op < N_OPS && k < max; op++) {
        double bytes;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
        cudaError_t e = op_enqueue(g, op, n, &bytes);
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
            bytes = 2.0 * g->d.n_layers * g->d.n_kv_heads * (double)(p - lo) * g->D *
                    kv_elem_bytes(g) * n;
        }
        snprintf(out[k].name, sizeof out[k].name, "%s", op_names[op]);
        out[k].us = best * 1e3;
        out[k].bytes = bytes;
        k++;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    CK(cudaGetLastError());
    return k;
}
