/* backend/cuda/forward.cu: the decoder forward on an NVIDIA GPU (see backend/gpu.h): weight
 * upload, the layer loop, and CUDA graphs. A pass of 1..GPU_GROUP rows is captured once per
 * row count and output mode and replayed; positions and the cache pointers are read from
 * device memory (struct step_params), so one graph serves every step of every sequence, and a
 * round is one parameter copy, one graph launch and one copy back. Longer chunks (prefill)
 * launch their kernels directly. The device caches are kv.cu's. Per layer: RMSNorm -> qkv ->
 * norm/RoPE/append -> attention -> o (+residual) -> RMSNorm -> gate/up (+SwiGLU) -> down
 * (+residual). */
#include "backend/cuda/cuda.cuh"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpu_pdl_on = 1;

#define E(call)                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return e_;                                                          \
    } while (0)

/* ---- memory ---- */

int dev_alloc(gpu_model *g, void **p, size_t bytes) {
    if (g->n_allocs == g->cap_allocs) {
        int c = g->cap_allocs ? g->cap_allocs * 2 : 64;
        void **a = (void **)realloc(g->allocs, sizeof(void *) * (size_t)c);
        if (!a) return ERR_NOMEM;
        g->allocs = a, g->cap_allocs = c;
    }
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* or the next check of any model would report it again */
        log_error("cannot allocate %.1f MB on the GPU: %s", (double)bytes / 1e6,
                  cudaGetErrorString(e));
        return ERR_NOMEM;
    }
    g->allocs[g->n_allocs++] = *p;
    return OK;
}

static int dev_zeros(gpu_model *g, void **p, size_t bytes) {
    int rc = dev_alloc(g, p, bytes);
    if (rc) return rc;
    CK(cudaMemset(*p, 0, bytes));
    return OK;
}

static int up_vec(gpu_model *g, const float *src, size_t n, float **out) {
    *out = NULL;
    if (!src) return OK;
    int rc = dev_alloc(g, (void **)out, n * sizeof(float));
    if (rc) return rc;
    CK(cudaMemcpy(*out, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return OK;
}

/* The rows of parts[0..np) stacked into one matrix; BF16 goes through scratch into fragments. */
static int up_mat(gpu_model *g, dmat *m, const gpu_weight *const *parts, int np, int interleave,
                  void *scratch) {
    int dt = parts[0]->dtype;
    int64_t M = 0, K = parts[0]->cols;
    for (int i = 0; i < np; i++) {
        if (parts[i]->dtype != dt || parts[i]->cols != K) {
            log_error("GPU: fused weights differ in type or width");
            return ERR_UNSUPPORTED;
        }
        M += parts[i]->rows;
    }
    size_t esz = dtype_size((enum dtype)dt);
    void *dst = scratch;
    if (dt != DTYPE_BF16) {
        int rc = dev_alloc(g, &dst, (size_t)M * K * esz);
        if (rc) return rc;
    }
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        size_t b = (size_t)parts[i]->rows * K * esz;
        CK(cudaMemcpy((char *)dst + off, parts[i]->data, b, cudaMemcpyHostToDevice));
        off += b;
    }
    return mm_prepare(g, m, dst, dt, (int)M, (int)K, interleave);
}

/* ---- device and model ---- */

extern "C" int gpu_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* DSPARK_GPU_INPUTS: "exact" (three terms) or "bf16" (one); anything else: one */
extern "C" int gpu_input_terms(void) {
    const char *s = getenv("DSPARK_GPU_INPUTS");
    return s && !strcmp(s, "exact") ? 3 : 1;
}

extern "C" int gpu_kv_default_bytes(void) {
    const char *s = getenv("DSPARK_GPU_KV");
    return s && !strcmp(s, "bf16") ? 2 : 4;
}

/* a value of environment variable var that is neither a nor b: said once a process (*said) */
static void env_check(const char *var, const char *a, const char *b, const char *means,
                      int *said) {
    const char *s = getenv(var);
    if (!s || !*s || !strcmp(s, a) || !strcmp(s, b) || (*said)++) return;
    log_error("%s=%s is neither %s nor %s; %s", var, s, a, b, means);
}

extern "C" int gpu_model_kv_bytes(const gpu_model *g) {
    return g ? (int)kv_elem_bytes(g) : 0;
}

extern "C" int gpu_model_input_terms(const gpu_model *g) {
    return g ? g->terms : 0;
}

extern "C" int gpu_model_rows(const gpu_model *g) {
    return g ? g->rows : 0;
}

extern "C" const char *gpu_device_name(void) {
    static char name[256];
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "none";
    snprintf(name, sizeof name, "%s", p.name);
    return name;
}

/* The captured graphs, to be captured again (they hold pointers and sizes that changed) */
void drop_graphs(gpu_model *g) {
    for (int t = 0; t <= GPU_GROUP; t++)
        for (int m = 0; m < GPU_MODES; m++)
            for (int f = 0; f < ATT_KINDS; f++)
                if (g->graphs[t][m][f].exec) {
                    cudaGraphExecDestroy(g->graphs[t][m][f].exec);
                    g->graphs[t][m][f].exec = NULL;
                }
}

extern "C" void gpu_model_free(gpu_model *g) {
    if (!g) return;
    drop_graphs(g);
    if (g->att_acc) cudaFree(g->att_acc);
    if (g->att_ml) cudaFree(g->att_ml);
    if (g->stream) cudaStreamDestroy(g->stream);
    for (int i = 0; i < g->n_allocs; i++) cudaFree(g->allocs[i]);
    if (g->hsp) cudaFreeHost(g->hsp);
    if (g->hids) cudaFreeHost(g->hids);
    if (g->hsel) cudaFreeHost(g->hsel);
    summary_free(g);
    free(g->allocs);
    free(g->layers);
    free(g);
}

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

static size_t part_floats(const dmat *m) {
    return m->mma && m->ks != 1 ? (size_t)m->nb * 2 * GPU_GROUP * 128 : 0; /* 1: no pieces */
}

static int check_shape(const gpu_model_desc *d) {
    int D = d->head_dim;
    if (D > 256 || D % 16 || d->hidden % 4 || d->hidden > 8192 || d->n_kv_heads <= 0 ||
        d->n_heads % d->n_kv_heads || d->n_heads / d->n_kv_heads > ATT_GMAX ||
        d->n_layers > GPU_MAX_LAYERS || d->max_pos <= 0) {
        log_error("the GPU backend does not support this shape (hidden %d, %d heads, %d kv "
                  "heads, head_dim %d)",
                  d->hidden, d->n_heads, d->n_kv_heads, D);
        return ERR_UNSUPPORTED;
    }
    return OK;
}

static int upload(gpu_model *g, const gpu_model_desc *d) {
    int H = g->H, I = g->I, V = g->V, D = g->D, QD = g->QD, KD = g->KD, rc;
    /* scratch for one row-major BF16 matrix on its way to fragments */
    size_t scratch_bytes = (size_t)V * H;
    size_t big[] = {(size_t)(QD + 2 * KD) * H, (size_t)2 * I * H, (size_t)H * I, (size_t)H * QD,
                    d->fc.data ? (size_t)H * d->fc.cols : 0,
                    d->markov_w2.data ? (size_t)d->markov_w2.rows * d->markov_w2.cols : 0};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        if (big[i] > scratch_bytes) scratch_bytes = big[i];
    scratch_bytes *= 2; /* bytes of bf16 */
    void *scratch;
    CK(cudaMalloc(&scratch, scratch_bytes));
    rc = OK;
    if (!d->embed.data && d->share) { /* another model's, in device memory already */
        g->embed = d->share->embed, g->embed_dtype = d->share->embed_dtype;
    } else {
        size_t esz = dtype_size(d->embed.dtype);
        rc = dev_alloc(g, (void **)&g->embed, (size_t)V * H * esz);
        if (!rc && cudaMemcpy((void *)g->embed, d->embed.data, (size_t)V * H * esz,
                              cudaMemcpyHostToDevice) != cudaSuccess)
            rc = ERR_NOMEM;
        g->embed_dtype = d->embed.dtype;
    }
    const gpu_weight *head[] = {&d->lm_head}, *fc[] = {&d->fc};
    if (!rc && !d->lm_head.data && d->share)
        g->lm_head = d->share->lm_head;
    else if (!rc)
        rc = up_mat(g, &g->lm_head, head, 1, 0, scratch);
    if (!rc && d->fc.data) {
        rc = up_mat(g, &g->fc, fc, 1, 0, scratch);
        if (!rc) rc = up_vec(g, d->hidden_norm, (size_t)H, &g->hidden_norm);
    }
    /* DSpark's Markov head where its W2 is large enough that one pass over it on the device
     * (a round trip of some 25 us) beats the CPU: 2 MB and up, i.e. real checkpoints (78 MB at
     * rank 256 over a 152k vocabulary); models/pycoder's 0.5 MB measured faster on the CPU.
     * DSPARK_GPU_MARKOV=1 always, 0 never. */
    const gpu_weight *w2[] = {&d->markov_w2};
    size_t b = (size_t)d->markov_w1.rows * d->markov_w1.cols * dtype_size(d->markov_w1.dtype);
    int markov = env_int("DSPARK_GPU_MARKOV", -1);
    if (markov < 0) markov = b >= ((size_t)2 << 20);
    if (!rc && markov && d->markov_w2.data && d->markov_w1.data && d->markov_w2.cols <= H) {
        void *w1;
        if (!(rc = dev_alloc(g, &w1, b)) &&
            cudaMemcpy(w1, d->markov_w1.data, b, cudaMemcpyHostToDevice) != cudaSuccess)
            rc = ERR_NOMEM;
        g->markov_w1 = w1, g->markov_dtype = d->markov_w1.dtype;
        if (!rc) rc = up_mat(g, &g->markov, w2, 1, 0, scratch);
    }
    if (!rc) rc = up_vec(g, d->final_norm, (size_t)H, &g->final_norm);
    if (!rc) rc = up_vec(g, d->inv_freq, (size_t)D / 2, &g->inv_freq);
    float *bias = NULL;
    for (int i = 0; !rc && i < d->n_layers; i++) {
        const gpu_layer_desc *s = &d->layers[i];
        dlayer *l = &g->layers[i];
        const gpu_weight *qkv[] = {&s->wq, &s->wk, &s->wv}, *o[] = {&s->wo},
                         *gu[] = {&s->wg, &s->wu}, *dn[] = {&s->wd};
        if ((rc = up_mat(g, &l->qkv, qkv, 3, 0, scratch)) ||
            (rc = up_mat(g, &l->o, o, 1, 0, scratch)) ||
            (rc = up_mat(g, &l->gu, gu, 2, 1, scratch)) ||
            (rc = up_mat(g, &l->down, dn, 1, 0, scratch)))
            break;
        if (s->bq || s->bk || s->bv) {
            if (!bias && !(bias = (float *)calloc((size_t)QD + 2 * KD, sizeof(float)))) {
                rc = ERR_NOMEM;
                break;
            }
            memset(bias, 0, sizeof(float) * ((size_t)QD + 2 * KD));
            if (s->bq) memcpy(bias, s->bq, sizeof(float) * QD);
            if (s->bk) memcpy(bias + QD, s->bk, sizeof(float) * KD);
            if (s->bv) memcpy(bias + QD + KD, s->bv, sizeof(float) * KD);
            if ((rc = up_vec(g, bias, (size_t)QD + 2 * KD, &l->bqkv))) break;
        }
        if ((rc = up_vec(g, s->attn_norm, (size_t)H, &l->attn_norm)) ||
            (rc = up_vec(g, s->ffn_norm, (size_t)H, &l->ffn_norm)) ||
            (rc = up_vec(g, s->q_norm, (size_t)D, &l->q_norm)) ||
            (rc = up_vec(g, s->k_norm, (size_t)D, &l->k_norm)))
            break;
    }
    free(bias);
    cudaDeviceSynchronize();
    cudaFree(scratch);
    return rc;
}

static int alloc_state(gpu_model *g) {
    const gpu_model_desc *d = &g->d;
    size_t R = (size_t)g->rows, groups = R / GPU_GROUP;
    size_t parts = part_floats(&g->lm_head);
    if (g->fc.w && part_floats(&g->fc) > parts) parts = part_floats(&g->fc);
    if (g->markov.w && part_floats(&g->markov) > parts) parts = part_floats(&g->markov);
    for (int i = 0; i < d->n_layers; i++) {
        const dlayer *l = &g->layers[i];
        const dmat *ms[] = {&l->qkv, &l->o, &l->gu, &l->down};
        for (int j = 0; j < 4; j++)
            if (part_floats(ms[j]) > parts) parts = part_floats(ms[j]);
    }
    int rc;
    if ((rc = dev_alloc(g, (void **)&g->x, sizeof(float) * R * g->H)) ||
        (rc = dev_alloc(g, (void **)&g->qkv, sizeof(float) * R * g->QKV)) ||
        (rc = dev_alloc(g, (void **)&g->q, sizeof(float) * R * g->QD)) ||
        (rc = dev_alloc(g, (void **)&g->gu, sizeof(float) * R * 2 * g->I)) ||
        (rc = dev_zeros(g, (void **)&g->xa, sizeof(uint2) * groups * xb_group_stride(g->KT_H))) ||
        (rc = dev_zeros(g, (void **)&g->xf, sizeof(uint2) * groups * xb_group_stride(g->KT_H))) ||
        (rc = dev_zeros(g, (void **)&g->xo, sizeof(uint2) * groups * xb_group_stride(g->KT_QD))) ||
        (rc = dev_zeros(g, (void **)&g->xh, sizeof(uint2) * groups * xb_group_stride(g->KT_I))) ||
        (rc = dev_alloc(g, (void **)&g->logits, sizeof(float) * R * g->V)) ||
        (rc = dev_alloc(g, (void **)&g->part, sizeof(float) * (parts ? parts : 1))) ||
        (rc = dev_zeros(g, (void **)&g->cnt, sizeof(unsigned) * CNT_ATT)) ||
        (rc = dev_alloc(g, (void **)&g->amax_v, sizeof(float) * R * ARGMAX_BLOCKS)) ||
        (rc = dev_alloc(g, (void **)&g->amax_i, sizeof(int) * R * ARGMAX_BLOCKS)) ||
        (rc = dev_alloc(g, (void **)&g->out_ids, sizeof(int32_t) * R)) ||
        (rc = dev_alloc(g, (void **)&g->dsel, sizeof(int32_t) * R)) ||
        (rc = dev_alloc(g, (void **)&g->dsp, sizeof(step_params))))
        return rc;
    g->n_ssg = (int)cdiv(g->H, 128);
    if (g->prescale && ((rc = dev_zeros(g, (void **)&g->ss_a, sizeof(double) * R * g->n_ssg)) ||
                        (rc = dev_zeros(g, (void **)&g->ss_f, sizeof(double) * R * g->n_ssg))))
        return rc;
    if (g->fc.w) { /* a drafter: its context input, and the hidden rows it reports */
        size_t KT = (size_t)g->fc.KT;
        if ((rc = dev_alloc(g, (void **)&g->ctx_in, sizeof(float) * R * g->fc.K)) ||
            (rc = dev_zeros(g, (void **)&g->xt, sizeof(uint2) * groups * xb_group_stride(KT))) ||
            (rc = dev_alloc(g, (void **)&g->hid, sizeof(float) * R * g->H)))
            return rc;
    }
    /* the host's copy stops before the RoPE table, which only the device writes and reads */
    CK(cudaMallocHost((void **)&g->hsp, offsetof(step_params, rope)));
    CK(cudaMallocHost((void **)&g->hids, sizeof(int32_t) * R));
    CK(cudaMallocHost((void **)&g->hsel, sizeof(int32_t) * R));
    return OK;
}

extern "C" int gpu_model_new(const gpu_model_desc *d, gpu_model **out) {
    *out = NULL;
    if (!gpu_available()) {
        log_error("no CUDA device found");
        return ERR_UNSUPPORTED;
    }
    int rc = check_shape(d);
    if (rc) return rc;
    static int said_kv, said_inputs; /* before the settings they change are stated */
    env_check("DSPARK_GPU_KV", "f32", "bf16", "K/V caches in float32", &said_kv);
    env_check("DSPARK_GPU_INPUTS", "bf16", "exact", "matmul inputs rounded to bf16", &said_inputs);
    const int terms = d->input_terms ? d->input_terms : gpu_input_terms();
    if (terms != 1 && terms != 3) {
        log_error("GPU: matmul inputs of %d bf16 terms: 3 (exact) or 1 (bf16) only", terms);
        return ERR_ARG;
    }
    if (terms == 1 && !d->share)
        log_info("GPU: matmul inputs rounded to bf16, as PyTorch's bf16 models take them "
                 "(--gpu-inputs exact: exact float32 products, as on the CPU)");
    gpu_model *g = (gpu_model *)calloc(1, sizeof *g);
    if (!g) return ERR_NOMEM;
    g->terms = terms;
    g->d = *d;
    g->d.layers = NULL;
    g->H = d->hidden, g->D = d->head_dim, g->I = d->ffn, g->V = d->vocab;
    g->QD = d->n_heads * g->D, g->KD = d->n_kv_heads * g->D, g->QKV = g->QD + 2 * g->KD;
    g->G = d->n_heads / d->n_kv_heads;
    g->KT_H = (g->H + 15) / 16, g->KT_QD = (g->QD + 15) / 16, g->KT_I = (g->I + 15) / 16;
    g->use_graphs = env_int("DSPARK_GPU_GRAPHS", 1);
    g->even_split = env_int("DSPARK_GPU_SK", 1);
    g->early_merge = env_int("DSPARK_GPU_EARLY", 1);
    g->sel_rows = env_int("DSPARK_GPU_SEL", 1);
    g->gemm = env_int("DSPARK_GPU_GEMM", 1);
    g->gemm4 = env_int("DSPARK_GPU_GEMM4", g->gemm == 2 ? 2 : 1);
    g->gemm4_tma = env_int("DSPARK_GPU_GEMM4_TMA", 1);
    g->gemm4_split = env_int("DSPARK_GPU_SPLIT", 1);
    /* longer chunks fill the GPU with the prompt kernels' tiles (docs/perf.md); a drafter's
     * block runs in one pass, so a setting below its block size fails its blocks */
    g->rows = env_int("DSPARK_GPU_ROWS", 512) / GPU_GROUP * GPU_GROUP;
    g->rows = g->rows < GPU_GROUP ? GPU_GROUP : g->rows > GPU_ROWS_MAX ? GPU_ROWS_MAX : g->rows;
    g->att_wide = env_int("DSPARK_GPU_ATT_WIDE", 1);
    g->att_early_kv = env_int("DSPARK_GPU_ATT_EARLY_KV", 1);
    g->att_pre_kv = env_int("DSPARK_GPU_ATT_PRE_KV", 1);
    g->kv16 = d->kv_bf16 > 0 || (!d->kv_bf16 && gpu_kv_default_bytes() == 2);
    g->merge_dims = env_int("DSPARK_GPU_MERGE_DIMS", 1);
    g->merge_warp = env_int("DSPARK_GPU_MERGE_WARP", 2); /* every pass but single steps */
    g->merge_ch = env_int("DSPARK_GPU_MERGE_CH", 0); /* 0: MERGE_CH (tests take fewer) */
    g->pre_kt = env_int("DSPARK_GPU_PRE_KT", 0); /* measured slower at 8, 16 */
    int sms = 132;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    g->sms = sms;
    g->att_rows = GPU_GROUP; /* att_reserve sets it with the first cache */
    g->slots = sms * env_int("DSPARK_GPU_BLOCKS_PER_SM", 2);
    g->att_nb = env_int("DSPARK_GPU_ATT_NB", 2); /* 1: never two buffers; attn_init may take 1 */
    g->att_one = env_int("DSPARK_GPU_ATT1", 6); /* k_attn1's blocks a SM; attn_init: a grid */
    g->attp_min = env_int("DSPARK_GPU_ATTP", 64); /* rows of a sequence that take k_attnp */
    g->attp_pos = env_int("DSPARK_GPU_ATTP_POS", 1024); /* and the position they reach */
    for (int i = 0; i < GPU_MAX_LAYERS; i++) g->tap_of[i] = -1;
    gpu_pdl_on = env_int("DSPARK_GPU_PDL", 1);
    g->layers = (dlayer *)calloc((size_t)d->n_layers, sizeof *g->layers);
    rc = g->layers ? OK : ERR_NOMEM;
    if (!rc && (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess ||
                mm_init() || attn_init(g, d->max_pos / ATT_SPAN + 1)))
        rc = ERR_UNSUPPORTED;
    g->att_grid = sms * env_int("DSPARK_GPU_ATT_BLOCKS_PER_SM", 2); /* one-buffer blocks */
    /* passes of up to this many attention items per SM take the two-buffer kernel */
    g->att_few_items = sms * env_int("DSPARK_GPU_ATT_FEW", 1);
    if (!rc) rc = upload(g, d);
    if (!rc) { /* the layers' norms deferred into their matmuls where all four take epilogues */
        g->prescale = env_int("DSPARK_GPU_PRESCALE", 1);
        for (int i = 0; i < d->n_layers; i++) {
            const dlayer *l = &g->layers[i];
            if (!l->qkv.mma || !l->o.mma || !l->gu.mma || !l->down.mma) g->prescale = 0;
        }
    }
    if (!rc) rc = alloc_state(g);
    if (rc) {
        gpu_model_free(g);
        cudaGetLastError(); /* a failed load leaves no error for the models that stay */
        return rc;
    }
    *out = g;
    return OK;
}

/* ---- the pass ---- */

/* What a pass brings back: nothing, the logits (or greedy ids) of its last row, of all rows,
 * or (SEL, passes longer than a graph's, with some rows nobody asked for) of the rows listed
 * in dsel. Graphs exist for the first five. */
enum {
    MODE_NONE, MODE_LAST, MODE_ALL, MODE_GREEDY_LAST, MODE_GREEDY_ALL, MODE_SEL, MODE_GREEDY_SEL
};

/* the matmul over all T rows of a chunk */
static cudaError_t mm_rows(gpu_model *g, const dmat *w, const uint16_t *xb, int T, int epi,
                           float *y, int ldy, const float *bias, uint16_t *xb_out,
                           const qkv_epi *qe, const float *norm_w, uint16_t *norm_out) {
    mm_call c = {w, xb, T, 0, T, epi, y, ldy, bias, xb_out, qe, norm_w, norm_out, NULL, NULL};
    return mm_launch(g, &c);
}

/* Passes of up to this many rows fuse each RMSNorm into the residual matmul before it (its
 * grid's last block normalises the rows); longer ones run the norm kernel. Both give the same
 * bits. */
#define FUSE_NORM_ROWS 2

static int fuses_norm(const gpu_model *g, int li, int T) {
    const dlayer *l = &g->layers[li];
    return T <= FUSE_NORM_ROWS && l->o.mma && l->down.mma;
}

/* layer li's q|k|v of the T rows in xa: q normed and roped, k and v into the caches; in_ss:
 * xa's deferred RMSNorm to finish (mm_call), or NULL */
static cudaError_t qkv_rows(gpu_model *g, int li, int T, const double *in_ss) {
    const dlayer *l = &g->layers[li];
    mm_call c = {&l->qkv, g->xa, T, 0, T, EPI_STORE, g->qkv, g->QKV, l->bqkv, NULL, NULL, NULL,
                 NULL, NULL, in_ss};
    if (l->qkv.mma && 128 % g->D == 0) { /* norm, RoPE and the cache append in the epilogue */
        qkv_epi qe = {g->dsp,          g->q, l->q_norm, l->k_norm,   g->inv_freq, g->d.n_heads,
                      g->d.n_kv_heads, g->D, li,        g->d.rms_eps};
        c.epi = EPI_QKV, c.y = NULL, c.ldy = 0, c.qe = &qe;
        return mm_launch(g, &c);
    }
    E(mm_launch(g, &c));
    return rope_launch(g, l, li, T);
}

/* Layer li over the T rows. Each RMSNorm is deferred into the matmuls around it
 * (g->prescale: the residual matmul writes w * x and the rows' group sums of squares, q|k|v
 * and gate/up finish the norm in their epilogues, so nothing waits for whole rows), fused
 * into the residual matmul's last block (short passes), or a kernel of its own. ss_a and
 * ss_f are NULL unless the norms are deferred. */
static cudaError_t layer(gpu_model *g, int li, int T) {
    const dlayer *l = &g->layers[li];
    const unsigned skip = g->lab_skip; /* 0 but in profile.cu */
    const int pre = g->prescale, fuse = pre || fuses_norm(g, li, T);
    const int done_before = li > 0 && (pre || fuses_norm(g, li - 1, T)); /* by the last down */
    if (!done_before && !(skip >> LAB_NORM & 1))
        E(pre ? prescale_launch(g, g->xa, l->attn_norm, g->ss_a, T)
              : norm_launch(g, g->xa, l->attn_norm, 0, T));
    if (!(skip >> LAB_QKV & 1)) E(qkv_rows(g, li, T, g->ss_a));
    if (!(skip >> LAB_ATTN & 1)) E(attn_launch(g, li, T));
    if (!(skip >> LAB_O & 1)) {
        mm_call c = {&l->o,  g->xo, T, 0, T, EPI_RESID, g->x, g->H, NULL, NULL, NULL,
                     fuse ? l->ffn_norm : NULL, g->xf, g->ss_f, NULL};
        E(mm_launch(g, &c));
    }
    if (!fuse && !(skip >> LAB_NORM & 1)) E(norm_launch(g, g->xf, l->ffn_norm, 0, T));
    if (!(skip >> LAB_GU & 1)) {
        mm_call c = {&l->gu, g->xf, T, 0, T, EPI_SWIGLU, NULL, 0, NULL, g->xh, NULL, NULL, NULL,
                     NULL, g->ss_f};
        if (!l->gu.interleaved) c.epi = EPI_STORE, c.y = g->gu, c.ldy = 2 * g->I, c.xb_out = NULL;
        E(mm_launch(g, &c));
        if (!l->gu.interleaved) E(swiglu_launch(g, T));
    }
    const int next = fuse && li + 1 < g->d.n_layers; /* the last layer's rows take the final norm */
    if (!(skip >> LAB_DOWN & 1)) {
        mm_call c = {&l->down, g->xh, T, 0, T, EPI_RESID, g->x, g->H, NULL, NULL, NULL,
                     next ? g->layers[li + 1].attn_norm : NULL, g->xa, g->ss_a, NULL};
        E(mm_launch(g, &c));
    }
    if (g->taps && g->tap_of[li] >= 0) E(tap_launch(g, g->tap_of[li], T));
    return cudaSuccess;
}

/* n_sel: the rows listed in dsel (SEL modes) */
static cudaError_t enqueue(gpu_model *g, int T, int mode, int n_sel) {
    E(embed_launch(g, T));
    E(rope_table_launch(g, T)); /* once for every layer's prompt tiles */
    for (int li = 0; li < g->d.n_layers; li++) E(layer(g, li, T));
    if (mode == MODE_NONE) return cudaSuccess;
    int all = mode == MODE_ALL || mode == MODE_GREEDY_ALL,
        sel = mode == MODE_SEL || mode == MODE_GREEDY_SEL, n = all ? T : sel ? n_sel : 1;
    if (sel)
        E(norm_sel_launch(g, g->xa, g->final_norm, g->dsel, n));
    else
        E(norm_launch(g, g->xa, g->final_norm, all ? 0 : T - 1, n));
    if (g->hid) E(unsplit_launch(g, g->hid, g->xa, g->H, g->KT_H, n)); /* a drafter's rows */
    E(mm_rows(g, &g->lm_head, g->xa, n, EPI_STORE, g->logits, g->V, NULL, NULL, NULL, NULL,
              NULL));
    if (mode == MODE_GREEDY_LAST || mode == MODE_GREEDY_ALL || mode == MODE_GREEDY_SEL)
        E(argmax_launch(g, n));
    return cudaSuccess;
}

cudaError_t pass_enqueue(gpu_model *g, int T) {
    return enqueue(g, T, MODE_GREEDY_ALL, 0);
}

/* The graph of T rows in this mode, captured on first use; NULL when capture fails (graphs
 * are then turned off and passes launch directly). */
static cudaGraphExec_t graph_for(gpu_model *g, int T, int mode) {
    gpu_graph *gr = &g->graphs[T][mode][g->att_kind];
    if (gr->exec) return gr->exec;
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        goto off;
    {
        cudaError_t e = enqueue(g, T, mode, 0);
        cudaError_t e2 = cudaStreamEndCapture(g->stream, &graph);
        if (e != cudaSuccess || e2 != cudaSuccess || !graph) goto off;
    }
    if (cudaGraphInstantiate(&gr->exec, graph, 0) != cudaSuccess) {
        gr->exec = NULL;
        goto off;
    }
    cudaGraphDestroy(graph);
    return gr->exec;
off:
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    log_info("CUDA graph capture failed: launching kernels directly");
    g->use_graphs = 0;
    return NULL;
}

/* One pass over the rows of seqs[0..n) (their ids at their positions, one after another,
 * T <= g->rows rows, n <= GPU_SEQS); outputs stay on the device until copied. */
struct pass_seq {
    gpu_kv *kv;
    int pos0, n;
    const int32_t *ids; /* NULL: none (a context pass) */
    int noncausal;
};

/* the pass parameters of seqs[0..n) (T rows) into device memory */
static int put_params(gpu_model *g, const pass_seq *seqs, int n, int T) {
    step_params *sp = g->hsp;
    sp->n_seq = n;
    for (int i = 0, row = 0; i < n; i++) {
        const pass_seq *q = &seqs[i];
        sp->seq[i] = seq_of(row, q->n, q->pos0, q->kv, q->noncausal);
        if (q->ids) memcpy(sp->ids + row, q->ids, sizeof(int32_t) * (size_t)q->n);
        memset(sp->row_seq + row, i, (size_t)q->n);
        row += q->n;
    }
    CK(cudaMemcpyAsync(g->dsp, sp, offsetof(step_params, ids) + sizeof(int32_t) * (size_t)T,
                       cudaMemcpyHostToDevice, g->stream));
    attn_choose(g);
    return OK;
}

static int pass(gpu_model *g, const pass_seq *seqs, int n, int T, int mode, int n_sel) {
    g->n_pass++; /* the logits of the last pass are overwritten */
    int rc = put_params(g, seqs, n, T);
    if (rc) return rc;
    if (n_sel)
        CK(cudaMemcpyAsync(g->dsel, g->hsel, sizeof(int32_t) * (size_t)n_sel,
                           cudaMemcpyHostToDevice, g->stream));
    cudaGraphExec_t ge = T <= GPU_GROUP && g->use_graphs && mode < MODE_SEL
                             ? graph_for(g, T, mode)
                             : NULL;
    if (ge) {
        CK(cudaGraphLaunch(ge, g->stream));
    } else {
        CK(enqueue(g, T, mode, n_sel));
    }
    return OK;
}

/* whether a sequence asks for anything of its rows: logits, greedy ids, or (drafters) hidden
 * rows */
static int wants_rows(const gpu_model *g, const gpu_seq_io *s) {
    return s->logits || s->out_ids || (s->hidden && g->hid);
}

/* Of a sequence's n rows in a pass (done before it), the last rows_out() are those whose
 * logits or greedy ids it asked for: all of them, its last row when the pass holds it, or none */
static int rows_out(const gpu_seq_io *s, int done, int n) {
    return s->all_rows ? n : done + n == s->n ? 1 : 0;
}

/* whether sequence s's rows of this pass may come back as sampling summaries: it asked, the
 * whole batch runs in this one pass (so that its logits stay on the device until the next),
 * and a summary can spare a row's logits (not a lone untruncated row, unless the device
 * draws it) */
static int summarisable(const gpu_model *g, const gpu_seq_io *s, int rows, int one_pass) {
    return s->sample && s->logits && rows && one_pass &&
           (s->sample->temperature > 0 || s->sample->penalised) && /* greedy: after penalties */
           g->V <= SAMP_MAX_VOCAB && s->sample->top_k <= SAMP_CAP && /* else past the cap */
           !(rows == 1 && summary_untruncated(g, s->sample) && !summary_draws(g, s->sample));
}

/* The outputs of a pass that its sequences asked for: logits and greedy ids of every row
 * (all_rows) or of a sequence's last row when the pass holds it, and taps of every row; or,
 * for sequences that asked and where the pass allows, sampling summaries of those rows in
 * place of their logits (sample.cu). */
static int collect(gpu_model *g, gpu_seq_io *io, const int *done, const pass_seq *ps, int n,
                   int mode, int n_sel, int one_pass) {
    int V = g->V, H = g->H, all_mode = mode == MODE_ALL || mode == MODE_GREEDY_ALL;
    int sel_mode = mode == MODE_SEL || mode == MODE_GREEDY_SEL;
    int dev[GPU_SEQS]; /* each sequence's first row in the logits (and ids) brought back */
    int summ[GPU_SEQS], n_summ = 0; /* each sequence's first summary, or -1 */
    /* Summaries where at least two rows of the pass take them, or a row drawn on the device:
     * one launch summarises them all, a block a row; for a lone row that the host draws from,
     * bringing it back costs less than the launch. */
    int summ_rows = 0, n_draw = 0, n_exp = 0, pen_need = 0, n_pen = 0;
    for (int i = 0; i < n; i++) {
        int rows = rows_out(&io[i], done[i], ps[i].n);
        int yes = summarisable(g, &io[i], rows, one_pass);
        summ_rows += yes ? rows : 0;
        n_draw += yes && summary_draws(g, io[i].sample);
        n_exp += yes && summary_draws(g, io[i].sample) && io[i].sample->temperature > 0;
        pen_need += yes ? summary_pen_entries(io[i].sample, rows) : 0;
    }
    const int summarise = (summ_rows >= 2 || n_draw) && summary_ready(g, pen_need, n_exp);
    int eager[GPU_SEQS]; /* sequences whose last row comes back with the summaries */
    for (int i = 0, row = 0, k = 0; i < n; row += ps[i].n, i++) {
        gpu_seq_io *s = &io[i];
        int rows = rows_out(s, done[i], ps[i].n), r0 = row + ps[i].n - rows;
        size_t at = s->all_rows ? (size_t)done[i] : 0;
        /* MODE_LAST computes only the pass's last row; SEL the wanted rows in order */
        dev[i] = all_mode ? r0 : sel_mode ? k : 0;
        if (rows && wants_rows(g, s)) k += rows;
        summ[i] = -1, eager[i] = 0;
        if (s->sample) s->sample->filled = 0;
        if (summarise && summarisable(g, s, rows, one_pass)) {
            eager[i] = summary_jobs(g, s->sample, dev[i], r0, rows, s->all_rows, n_summ, &n_pen);
            summ[i] = n_summ;
            n_summ += rows;
        } else if (rows && s->logits)
            CK(cudaMemcpyAsync(s->logits + at * V, g->logits + (size_t)dev[i] * V,
                               sizeof(float) * (size_t)rows * V, cudaMemcpyDeviceToHost,
                               g->stream));
        if (rows && s->hidden && g->hid)
            CK(cudaMemcpyAsync(s->hidden + at * H, g->hid + (size_t)dev[i] * H,
                               sizeof(float) * (size_t)rows * H, cudaMemcpyDeviceToHost,
                               g->stream));
        if (s->taps && g->taps)
            CK(cudaMemcpyAsync(s->taps + (size_t)done[i] * g->n_taps * H,
                               g->taps + (size_t)row * g->n_taps * H,
                               sizeof(float) * (size_t)ps[i].n * g->n_taps * H,
                               cudaMemcpyDeviceToHost, g->stream));
    }
    if (n_summ) {
        CK(summary_launch(g, n_summ, n_pen));
        for (int i = 0; i < n; i++) {
            if (!eager[i]) continue;
            int rows = rows_out(&io[i], done[i], ps[i].n);
            size_t at = io[i].all_rows ? (size_t)done[i] : 0;
            CK(cudaMemcpyAsync(io[i].logits + (at + rows - 1) * V,
                               g->logits + (size_t)(dev[i] + rows - 1) * V, sizeof(float) * V,
                               cudaMemcpyDeviceToHost, g->stream));
        }
    }
    int greedy = mode == MODE_GREEDY_ALL || mode == MODE_GREEDY_LAST || mode == MODE_GREEDY_SEL;
    if (greedy) {
        int T = 0;
        for (int i = 0; i < n; i++) T += ps[i].n;
        CK(cudaMemcpyAsync(g->hids, g->out_ids,
                           sizeof(int32_t) * (size_t)(all_mode ? T : sel_mode ? n_sel : 1),
                           cudaMemcpyDeviceToHost, g->stream));
    }
    CK(cudaStreamSynchronize(g->stream)); /* the pinned parameters are reused next pass */
    CK(cudaGetLastError());
    for (int i = 0; i < n; i++)
        if (summ[i] >= 0)
            summary_read(g, io[i].sample, summ[i], rows_out(&io[i], done[i], ps[i].n), eager[i],
                         dev[i]);
    if (!greedy) return OK;
    for (int i = 0; i < n; i++) {
        gpu_seq_io *s = &io[i];
        if (!s->out_ids) continue;
        if (s->all_rows)
            memcpy(s->out_ids + done[i], g->hids + dev[i], sizeof(int32_t) * (size_t)ps[i].n);
        else if (done[i] + ps[i].n == s->n)
            s->out_ids[0] = g->hids[dev[i]];
    }
    return OK;
}

extern "C" int gpu_logits_row(gpu_model *g, const gpu_sample_req *req, int row, float *out) {
    if (!req->filled || req->pass != g->n_pass || row < 0 || req->dev_row + row >= g->rows)
        return ERR_UNSUPPORTED;
    CK(cudaMemcpyAsync(out, g->logits + (size_t)(req->dev_row + row) * g->V,
                       sizeof(float) * g->V, cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return OK;
}

extern "C" int gpu_forward_batch(gpu_model *g, gpu_seq_io *io, int n) {
    int total_rows = 0;
    for (int i = 0; i < n; i++) total_rows += io[i].n;
    const int one_pass = n <= GPU_SEQS && total_rows <= g->rows;
    for (int i = 0; i < n; i++)
        if (io[i].n < 1 || io[i].pos0 < io[i].kv->nb || /* shared rows are never written */
            (io[i].noncausal && io[i].n > g->rows))   /* a block runs in one pass */
            return ERR_ARG;
        else if (io[i].pos0 + io[i].n > io[i].kv->cap)
            return ERR_FULL;
    int done[GPU_SEQS];
    pass_seq ps[GPU_SEQS];
    for (int first = 0; first < n;) {
        int k = n - first < GPU_SEQS ? n - first : GPU_SEQS;
        gpu_seq_io *io_k = io + first;
        for (int i = 0; i < k; i++) done[i] = 0;
        for (;;) { /* passes until every sequence of this group has run all its rows */
            int T = 0, m = 0, idx[GPU_SEQS], ids = 0, out = 0, all = 0;
            for (int i = 0; i < k && T < g->rows; i++) {
                if (done[i] == io_k[i].n) continue;
                int take = io_k[i].n - done[i];
                if (take > g->rows - T) take = g->rows - T;
                if (io_k[i].noncausal && take < io_k[i].n) continue; /* whole, next pass */
                ps[m] = (pass_seq){io_k[i].kv, io_k[i].pos0 + done[i], take, io_k[i].ids + done[i],
                                   io_k[i].noncausal};
                idx[m++] = i;
                T += take;
                if (rows_out(&io_k[i], done[i], take)) {
                    out |= wants_rows(g, &io_k[i]);
                    ids |= io_k[i].out_ids != NULL;
                    all |= io_k[i].all_rows;
                }
            }
            if (!m) break;
            int single_last = m == 1 && !all && done[idx[0]] + ps[0].n == io_k[idx[0]].n;
            int mode = !out          ? MODE_NONE
                       : single_last ? (ids ? MODE_GREEDY_LAST : MODE_LAST)
                                     : (ids ? MODE_GREEDY_ALL : MODE_ALL);
            /* a pass too long for a graph brings back only the rows asked for (a prompt chunk
             * beside decoding sequences needs the logits of its last row at most) */
            int n_sel = 0;
            if (T > GPU_GROUP && g->sel_rows && (mode == MODE_ALL || mode == MODE_GREEDY_ALL)) {
                for (int j = 0, row = 0; j < m; row += ps[j].n, j++) {
                    const gpu_seq_io *s = &io_k[idx[j]];
                    if (!wants_rows(g, s)) continue;
                    for (int r = ps[j].n - rows_out(s, done[idx[j]], ps[j].n); r < ps[j].n; r++)
                        g->hsel[n_sel++] = row + r;
                }
                if (n_sel < T)
                    mode = mode == MODE_ALL ? MODE_SEL : MODE_GREEDY_SEL;
                else
                    n_sel = 0;
            }
            int rc = pass(g, ps, m, T, mode, n_sel);
            gpu_seq_io sub[GPU_SEQS];
            int dsub[GPU_SEQS];
            for (int j = 0; j < m; j++) sub[j] = io_k[idx[j]], dsub[j] = done[idx[j]];
            if (!rc) rc = collect(g, sub, dsub, ps, m, mode, n_sel, one_pass);
            if (rc) return rc;
            for (int j = 0; j < m; j++) done[idx[j]] += ps[j].n;
        }
        first += k;
    }
    return OK;
}

extern "C" int gpu_forward(gpu_model *g, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                           float *logits, int all_rows) {
    gpu_seq_io s = {kv, pos0, ids, n, logits, NULL, NULL, all_rows, 0, NULL, NULL};
    return gpu_forward_batch(g, &s, 1);
}

extern "C" int gpu_forward_greedy(gpu_model *g, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                                  int32_t *out_ids, int all_rows) {
    gpu_seq_io s = {kv, pos0, ids, n, NULL, out_ids, NULL, all_rows, 0, NULL, NULL};
    return gpu_forward_batch(g, &s, 1);
}

/* A drafter's context chunk of n <= g->rows rows at positions pos0..: the fused taps (in
 * ctx_in) through fc into x, hidden_norm into xa, and every layer's q|k|v matmul of those
 * rows, whose epilogue norms, ropes and writes k and v into the cache (q is not used). */
static cudaError_t enqueue_ctx(gpu_model *g, int n) {
    E(split_launch(g, g->xt, g->ctx_in, g->fc.K, g->fc.KT, n));
    E(mm_rows(g, &g->fc, g->xt, n, EPI_STORE, g->x, g->H, NULL, NULL, NULL, NULL, NULL));
    E(norm_launch(g, g->xa, g->hidden_norm, 0, n));
    E(rope_table_launch(g, n));
    for (int li = 0; li < g->d.n_layers; li++) E(qkv_rows(g, li, n, NULL));
    return cudaSuccess;
}

extern "C" int gpu_ctx_append(gpu_model *g, gpu_kv *kv, int pos0, const float *fused, int n) {
    if (!g->fc.w) return ERR_UNSUPPORTED;
    if (n < 0 || pos0 < kv->nb) return ERR_ARG;
    if (pos0 + n > kv->cap) return ERR_FULL;
    const int K = g->fc.K;
    for (int done = 0; done < n; done += g->rows) {
        int m = n - done < g->rows ? n - done : g->rows;
        pass_seq ps = {kv, pos0 + done, m, NULL, 0};
        int rc = put_params(g, &ps, 1, m);
        if (rc) return rc;
        CK(cudaMemcpyAsync(g->ctx_in, fused + (size_t)done * K, sizeof(float) * (size_t)m * K,
                           cudaMemcpyHostToDevice, g->stream));
        CK(enqueue_ctx(g, m));
        CK(cudaStreamSynchronize(g->stream)); /* the pinned parameters are reused next pass */
        CK(cudaGetLastError());
    }
    return OK;
}

/* W1's rows of the previous tokens split into xa (K = r <= H fits its layout), W2 over them
 * into the logits buffer, each row out to its host bias */
extern "C" int gpu_markov_bias(gpu_model *g, const int32_t *prev, int n, float *const *bias) {
    if (!g->markov.w) return ERR_UNSUPPORTED;
    g->n_pass++; /* the logits buffer is overwritten */
    const int V = g->markov.M, r = g->markov.K;
    for (int done = 0; done < n; done += g->rows) {
        int m = n - done < g->rows ? n - done : g->rows;
        memcpy(g->hsel, prev + done, sizeof(int32_t) * (size_t)m);
        CK(cudaMemcpyAsync(g->dsel, g->hsel, sizeof(int32_t) * (size_t)m, cudaMemcpyHostToDevice,
                           g->stream));
        CK(gather_launch(g, g->xa, g->markov_w1, g->markov_dtype, r, g->dsel, m));
        CK(mm_rows(g, &g->markov, g->xa, m, EPI_STORE, g->logits, V, NULL, NULL, NULL, NULL, NULL));
        for (int i = 0; i < m; i++)
            CK(cudaMemcpyAsync(bias[done + i], g->logits + (size_t)i * V, sizeof(float) * V,
                               cudaMemcpyDeviceToHost, g->stream));
        CK(cudaStreamSynchronize(g->stream)); /* hsel is reused */
        CK(cudaGetLastError());
    }
    return OK;
}

extern "C" int gpu_set_taps(gpu_model *g, const int *layers, int n) {
    if (n < 0 || n > MAX_TAPS_GPU) return ERR_ARG;
    int same = n == g->n_taps;
    for (int i = 0; same && i < n; i++)
        same = layers[i] >= 0 && layers[i] < g->d.n_layers && g->tap_of[layers[i]] == i;
    if (same) return OK; /* keep the captured graphs */
    if (n > 0 && !g->taps) {
        int rc =
            dev_alloc(g, (void **)&g->taps, sizeof(float) * (size_t)g->rows * MAX_TAPS_GPU * g->H);
        if (rc) return rc;
    }
    for (int i = 0; i < GPU_MAX_LAYERS; i++) g->tap_of[i] = -1;
    for (int i = 0; i < n; i++) {
        if (layers[i] < 0 || layers[i] >= g->d.n_layers) return ERR_ARG;
        if (g->tap_of[layers[i]] >= 0) {
            log_error("layer %d is tapped twice: the GPU taps each layer once", layers[i]);
            return ERR_UNSUPPORTED;
        }
        g->tap_of[layers[i]] = i;
    }
    g->n_taps = n;
    drop_graphs(g); /* the graphs hold the tap copies */
    return OK;
}
