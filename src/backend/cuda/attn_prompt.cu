/* backend/cuda/attn_prompt.cu: attention for passes with long query blocks (prompt chunks),
 * giving each (row, head, span) partial the bits k_attn gives it (attention.cu): a score is
 * one chain of fmaf over the head dimension in order, times the scale; the span's softmax is
 * att_softmax's; a value sum is one chain of fmaf over the keys in order. What changes is how
 * many products each shared-memory load serves: a work item is a span of keys against up to
 * AP_PAIRS (row, head) pairs, and each thread keeps a register tile of scores (AP_PW / 4 pairs
 * x 8 keys), then of values (AP_PW pairs x D / 32 dims). The merge of the partials is
 * merge.cu's. */
#include "backend/cuda/attention.cuh"

#define AP_THREADS 256
#define AP_PAIRS   128 /* (row, head slot) pairs an item: its rows times the heads padded to 4 */
/* a warp scores AP_PW pairs (a lane AP_PW / 4 of them) and adds the values of AP_PW / 4 quads
 * (a row's four head slots) */
#define AP_PW (AP_PAIRS / (AP_THREADS / 32))
static_assert(AP_PW % 4 == 0, "four pair slots a warp's 8-lane groups");

/* A block per work item (span, kv head, up to AP_PAIRS / G4 rows of a sequence), looping over the
 * items. Shared memory: the span's keys and values [ATT_SPAN][DP], the item's queries by pair
 * slot (row r, head h at r G4 + h) [AP_PAIRS][QP], and the scores, then weights,
 * [rows][ATT_SPAN][G4]. The keys and queries of the next item load during this item's softmax
 * and values, its values during its scores. */
template <int D, int G4C, bool KV16>
__global__ void __launch_bounds__(AP_THREADS, 1) k_attnp(attn_args a) {
    constexpr int DP = D + 4, D4 = D / 4, QP = att_qp(D), DM = D / 32;
    static_assert(D % 32 == 0, "a lane adds dims lane + 32 m");
    extern __shared__ __align__(16) float sm[];
    float *Ks = sm, *Vs = Ks + ATT_SPAN * DP, *Qs = Vs + ATT_SPAN * DP, *S = Qs + AP_PAIRS * QP;
    /* G4C: the heads' slots a row when compiled (4: up to four heads), 0: at run time */
    const int G = a.G, G4 = G4C ? G4C : (G + 3) & ~3, RU = AP_PAIRS / G4;
    __shared__ att_seq seqs[GPU_SEQS];
    __shared__ att_row rows_of[2][AP_PAIRS / 4];
    __shared__ int info[3];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    /* no early launch of the merge after it: its blocks start as these leave (a 4,096-token
     * prompt 0.45% faster than with the launch at the start, docs/perf.md) */
    pdl_wait();
    const step_params *sp = a.sp;
    if (warp == 0) att_seq_table(a, seqs, info, lane, RU);
    __syncthreads();
    const int n_items = info[0], s_first = info[1], ns = info[2];
    struct geo {
        int ok, item, k0, klo, k1, si, ua, nr, kvh, span;
        size_t hh;
    };
    /* The first item from `item` on, in steps of the grid, that a row of it sees (a causal
     * prompt's early rows see none of its later spans): its keys [klo, k1) of the tile at k0
     * and rows [ua, ua + nr), the rows into rows_of[rb]; ok 0 when none is left. */
    auto geom = [&](int item, int rb) {
        for (; item < n_items; item += gridDim.x) {
            const att_span_item w = att_item_at(a, seqs, ns, s_first, item, RU);
            if (!w.ok) continue;
            if (tid < w.nr) rows_of[rb][tid] = att_item_row(a, w, w.ua + tid);
            return geo{1, item, w.k0, w.klo, w.k1, w.si, w.ua, w.nr, w.kvh, w.span,
                       (size_t)a.layer * a.nkv + w.kvh};
        }
        return geo{};
    };
    auto copy_kq = [&](const geo &g) { /* the keys and the queries */
        if (!g.ok) return;
        att_copy_rows<D, AP_THREADS, KV16>(
            Ks, g.k0, att_lines_of<KV16>(sp->seq[g.si], g.hh, D, true), g.klo, g.k1, tid);
        for (int x = tid; x < g.nr * G4 * D4; x += AP_THREADS) {
            const int p = x / D4, c = (x % D4) * 4; /* slot p: row p / G4, head p % G4 */
            if (p % G4 < G)
                cp_async16(Qs + p * QP + c,
                           a.q + ((size_t)(g.ua + p / G4) * a.nh + g.kvh * G + p % G4) * D + c);
        }
    };
    auto copy_v = [&](const geo &g) {
        if (g.ok)
            att_copy_rows<D, AP_THREADS, KV16>(
                Vs, g.k0, att_lines_of<KV16>(sp->seq[g.si], g.hh, D, false), g.klo, g.k1, tid);
    };
    int rb = 0;
    geo cur = geom(blockIdx.x, rb);
    copy_kq(cur);
    cp_async_commit();
    copy_v(cur);
    cp_async_commit();
    while (cur.ok) {
        cp_async_wait1(); /* this item's keys and queries */
        __syncthreads();
        if (KV16) att_expand<D, AP_THREADS>(Ks, tid);
        const att_row *rows = rows_of[rb];
        const int nq = cur.nr * G4; /* pair slots */
        if (warp * AP_PW < nq) {
            /* scores: lane (key slot lane % 8, pair slot lane / 8) of warp w takes keys
             * ks + 8 i and pair slots AP_PW w + ps + 4 j; a round of loads reads 8 keys and 4
             * queries, one wavefront each */
            const int ks = lane & 7, p0 = warp * AP_PW + (lane >> 3);
            float s[AP_PW / 4][8];
#pragma unroll
            for (int j = 0; j < AP_PW / 4; j++)
#pragma unroll
                for (int i = 0; i < 8; i++) s[j][i] = 0.f;
            const float *kp = Ks + ks * DP, *qp = Qs + p0 * QP;
#pragma unroll 2
            for (int d = 0; d < D; d += 4) {
                float4 kk[8], qq[AP_PW / 4];
#pragma unroll
                for (int i = 0; i < 8; i++) kk[i] = *(const float4 *)(kp + 8 * i * DP + d);
#pragma unroll
                for (int j = 0; j < AP_PW / 4; j++) qq[j] = *(const float4 *)(qp + 4 * j * QP + d);
#pragma unroll
                for (int j = 0; j < AP_PW / 4; j++)
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        float x = s[j][i];
                        x = fmaf(qq[j].x, kk[i].x, x), x = fmaf(qq[j].y, kk[i].y, x);
                        x = fmaf(qq[j].z, kk[i].z, x), x = fmaf(qq[j].w, kk[i].w, x);
                        s[j][i] = x;
                    }
            }
            /* The span's softmax of pair p0 + 4 j, by the 8 lanes of the pair's key slots
             * (lanes 8 (lane / 8) + ks), with att_softmax's values: the largest score (a max
             * in any order), the weights, and their sum in its tree. There, lane L adds keys L
             * and L + 32, then butterflies over L with 16, 8, 4, 2, 1: here key ks + 8 i is
             * this lane's i-th, so L = ks + 8 r holds i = r and r + 4, and the steps 16 and 8
             * (r ^ 2, r ^ 1) stay in the lane, 4, 2 and 1 cross lanes. */
#pragma unroll
            for (int j = 0; j < AP_PW / 4; j++) {
                const int p = p0 + 4 * j, r = min(p, nq - 1) / G4, h = p % G4;
                const att_row rw = rows[r];
                float v[8], m = -INFINITY;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int key = ks + 8 * i;
                    v[i] = key >= rw.j0 && key < rw.j1 ? s[j][i] * a.scale : -INFINITY;
                    m = fmaxf(m, v[i]);
                }
                for (int off = 1; off < 8; off <<= 1)
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
                float e[8];
#pragma unroll
                for (int i = 0; i < 8; i++) e[i] = v[i] == -INFINITY ? 0.f : expf(v[i] - m);
                float l[4];
#pragma unroll
                for (int i = 0; i < 4; i++) l[i] = e[i] + e[i + 4];
                const float l16[2] = {l[0] + l[2], l[1] + l[3]};
                float sum = l16[0] + l16[1];
                for (int off = 4; off; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
                if (p >= nq) continue; /* past the item's rows (and past S for some G) */
                float *o = S + (size_t)r * ATT_SPAN * G4 + h;
#pragma unroll
                for (int i = 0; i < 8; i++) o[(ks + 8 * i) * G4] = e[i];
                if (ks == 0 && h < G && rw.j1) {
                    const size_t slot =
                        ((size_t)(rw.t - a.r0) * a.nh + cur.kvh * G + h) * a.spans + cur.span;
                    a.ml[slot * 2] = m, a.ml[slot * 2 + 1] = sum;
                }
            }
        }
        __syncthreads();
        /* the keys and queries are done with: the next item's load while this one finishes */
        const geo nxt = geom(cur.item + gridDim.x, rb ^ 1);
        copy_kq(nxt);
        cp_async_commit();
        cp_async_wait1(); /* this item's values */
        __syncthreads();
        if (KV16) att_expand<D, AP_THREADS>(Vs, tid);
        if (warp * (AP_PW / 4) < nq / 4) {
            /* values: warp w takes the quads (row, four head slots) from AP_PW / 4 w on, lane the
             * dims lane + 32 m, over the keys any of those rows sees; a key a row does not see
             * has weight 0 there and adding 0 v to a sum from +0 changes no bit (as in
             * att_values_tiled), so each sum is att_values_row's over the row's own keys */
            const int QR = G4 / 4; /* quads a row */
            int jlo = ATT_SPAN, jhi = 0;
#pragma unroll
            for (int u = 0; u < AP_PW / 4; u++) {
                const int qd = warp * (AP_PW / 4) + u;
                if (qd >= nq / 4) break;
                const att_row r = rows[qd / QR];
                if (r.j1) jlo = min(jlo, r.j0), jhi = max(jhi, r.j1);
            }
            float o[AP_PW / 4][4][DM];
#pragma unroll
            for (int u = 0; u < AP_PW / 4; u++)
#pragma unroll
                for (int h = 0; h < 4; h++)
#pragma unroll
                    for (int m = 0; m < DM; m++) o[u][h][m] = 0.f;
            const float *wq[AP_PW / 4];
#pragma unroll
            for (int u = 0; u < AP_PW / 4; u++) { /* quad u's weights of key j: wq[u] + j G4 */
                const int qd = min(warp * (AP_PW / 4) + u, nq / 4 - 1);
                wq[u] = S + (size_t)(qd / QR) * ATT_SPAN * G4 + (qd % QR) * 4;
            }
#pragma unroll 2
            for (int j = jlo; j < jhi; j++) {
                float v[DM];
#pragma unroll
                for (int m = 0; m < DM; m++) v[m] = Vs[j * DP + lane + 32 * m];
#pragma unroll
                for (int u = 0; u < AP_PW / 4; u++) {
                    const float4 w = *(const float4 *)(wq[u] + j * G4);
#pragma unroll
                    for (int m = 0; m < DM; m++) {
                        o[u][0][m] = fmaf(w.x, v[m], o[u][0][m]);
                        o[u][1][m] = fmaf(w.y, v[m], o[u][1][m]);
                        o[u][2][m] = fmaf(w.z, v[m], o[u][2][m]);
                        o[u][3][m] = fmaf(w.w, v[m], o[u][3][m]);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < AP_PW / 4; u++) {
                const int qd = warp * (AP_PW / 4) + u;
                if (qd >= nq / 4) break;
                const att_row r = rows[qd / QR];
                if (!r.j1) continue;
                const int g0 = (qd % QR) * 4;
                const size_t slot = ((size_t)(r.t - a.r0) * a.nh + cur.kvh * G) * a.spans + cur.span;
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    if (g0 + h >= G) break;
                    float *out = a.acc + (slot + (size_t)(g0 + h) * a.spans) * D + lane;
#pragma unroll
                    for (int m = 0; m < DM; m++) out[32 * m] = o[u][h][m];
                }
            }
        }
        __syncthreads(); /* the values' tile and S are the next item's */
        copy_v(nxt);
        cp_async_commit();
        cur = nxt, rb ^= 1;
    }
    cp_async_wait0();
}

static size_t attnp_smem(int D) {
    return sizeof(float) *
           ((size_t)2 * ATT_SPAN * (D + 4) + (size_t)AP_PAIRS * att_qp(D) + (size_t)AP_PAIRS * ATT_SPAN);
}

/* k_attnp<D, G4C, KV16> for head dimension D, or NULL */
template <int G4C, bool KV16> static attn_kernel attnp_kernel_d(int D) {
    return D == 32    ? k_attnp<32, G4C, KV16>
           : D == 64  ? k_attnp<64, G4C, KV16>
           : D == 128 ? k_attnp<128, G4C, KV16>
                      : NULL;
}

/* the kernel for head dimension D, G query heads a kv head and bf16 caches (kv16), or NULL */
static attn_kernel attnp_kernel(int D, int G, int kv16) {
    if (G <= 4) return kv16 ? attnp_kernel_d<4, true>(D) : attnp_kernel_d<4, false>(D);
    return kv16 ? attnp_kernel_d<0, true>(D) : attnp_kernel_d<0, false>(D);
}

int attnp_init(gpu_model *g) {
    attn_kernel k = attnp_kernel(g->D, g->G, g->kv16);
    int fit = 0;
    if (!k || g->attp_min <= 0 || raise_smem((const void *)k, attnp_smem(g->D)) ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, AP_THREADS, attnp_smem(g->D)) !=
            cudaSuccess ||
        fit < 1) {
        cudaGetLastError();
        g->attp_grid = 0;
        return OK;
    }
    g->attp_grid = fit * g->sms;
    return OK;
}

cudaError_t attnp_launch(gpu_model *g, const attn_args *a) {
    return launch(attnp_kernel(g->D, g->G, g->kv16), dim3(g->attp_grid), dim3(AP_THREADS),
                  attnp_smem(g->D), g->stream, *a);
}
