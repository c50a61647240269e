/* backend/cuda/attention.cu: per-head RMSNorm and RoPE of the new q/k rows with the cache
 * append (for matmuls without the fused epilogue), and causal attention over each row's
 * sequence's cache in key spans (flash-decoding; see the comment above k_attn). */
#include "backend/cuda/attention.cuh"
#include "backend/cuda/mm.cuh"

/* One block per (row, head slot): slots [0, nh) are query heads, [nh, nh + nkv) key heads
 * (whose block also appends the value row to the row's sequence's cache). */
__global__ void k_rope(const float *qkv, float *qout, const step_params *sp, const float *q_norm,
                       const float *k_norm, const float *inv_freq, int nh, int nkv, int D,
                       float eps, int layer) {
    pdl_wait();
    pdl_launch();
    __shared__ double red[128];
    int t = blockIdx.x, h = blockIdx.y, half = D / 2, i = threadIdx.x;
    int QD = nh * D, KD = nkv * D;
    bool isq = h < nh;
    const float *src = qkv + (size_t)t * (QD + 2 * KD) + (isq ? h * D : QD + (h - nh) * D);
    const float *nw = isq ? q_norm : k_norm;
    float a = 0, b = 0;
    if (i < half) a = __ldcg(src + i), b = __ldcg(src + i + half);
    if (nw) {
        red[i] = (double)a * a + (double)b * b;
        __syncthreads();
        for (int o = 64; o; o >>= 1) {
            if (i < o) red[i] += red[i + o];
            __syncthreads();
        }
        float inv = (float)(1.0 / sqrt(red[0] / D + (double)eps));
        if (i < half) a = nw[i] * (a * inv), b = nw[i + half] * (b * inv);
    }
    if (i >= half) return;
    int pos = row_pos(sp, t);
    float c, s;
    rope_cs(pos, inv_freq[i], &c, &s);
    float ra = a * c - b * s, rb = b * c + a * s;
    if (isq) {
        float *o = qout + ((size_t)t * nh + h) * D;
        o[i] = ra, o[i + half] = rb;
        return;
    }
    int kvh = h - nh;
    const kv_row kr = row_cache(sp, t, layer, nkv, kvh, D);
    kv_put(kr, 0, i, ra), kv_put(kr, 0, i + half, rb);
    const float *vs = qkv + (size_t)t * (QD + 2 * KD) + QD + KD + kvh * D;
    kv_put(kr, 1, i, __ldcg(vs + i)), kv_put(kr, 1, i + half, __ldcg(vs + i + half));
}

cudaError_t rope_launch(gpu_model *g, const dlayer *l, int layer, int T) {
    const gpu_model_desc *d = &g->d;
    return launch(k_rope, dim3(T, d->n_heads + d->n_kv_heads), dim3(128), 0, g->stream, g->qkv,
                  g->q, g->dsp, l->q_norm, l->k_norm, g->inv_freq, d->n_heads, d->n_kv_heads, g->D,
                  d->rms_eps, layer);
}

/* step_params.rope of the pass's T rows: the values rope_cs gives each row's position and
 * frequency, computed once for every layer's q|k|v epilogue */
__global__ void k_rope_table(step_params *sp, const float *inv_freq, int T, int half) {
    pdl_wait();
    pdl_launch();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < T * half; i += gridDim.x * blockDim.x) {
        const int t = i / half, j = i - t * half;
        rope_cs(row_pos(sp, t), inv_freq[j], &sp->rope[i].x, &sp->rope[i].y);
    }
}

cudaError_t rope_table_launch(gpu_model *g, int T) {
    const int half = g->D / 2;
    /* only the prompt tiles read it, in passes of more than GPU_GROUP rows (mmg_wanted), and
     * only for heads that divide 128 (else k_rope) */
    if (T <= GPU_GROUP || g->D > 128 || 128 % g->D) return cudaSuccess;
    return launch(k_rope_table, dim3(cdiv((size_t)T * half, 256)), dim3(256), 0, g->stream,
                  g->dsp, (const float *)g->inv_freq, T, half);
}

/* ---- attention ----
 * Keys are cut into spans of ATT_SPAN at fixed absolute positions, and a work item is (span,
 * kv head, up to ATT_ROWS rows of one sequence): its block loads the span's K and V once,
 * scores the keys for the kv head's G query heads of each row (each score one thread's chain
 * over the head dimension in order), takes a warp per (row, head) for the softmax and adds up
 * the values in key order, giving each row's span partial (max, sum, weighted values); how the
 * threads share that work depends on the item's rows, never the sums. A second kernel
 * (merge.cu) merges each row's partials in span order into the output projection's B operand.
 * A row's spans, the order of every sum and the keys it adds depend only on its own position,
 * so its output is the same bits whatever other rows and sequences share the pass. A fixed
 * grid of blocks loops over the items, so captured graphs serve any context length. */


/* One dim of one row's values over the span: for four heads at a time, the weights
 * e[j G4 + h] times value(j), key j's value in that dim, added in key order over the row's
 * keys [r.j0, r.j1); head h's sum goes to out[h * hstride] */
template <typename Value>
__device__ __forceinline__ void att_values_by(Value value, const float *e, att_row r, int G,
                                              float *out, size_t hstride) {
    const int G4 = (G + 3) & ~3;
    for (int g0 = 0; g0 < G; g0 += 4) {
        float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
        for (int j = r.j0; j < r.j1; j++) {
            float v = value(j);
            float4 w = *(const float4 *)(e + j * G4 + g0);
            o[0] = fmaf(w.x, v, o[0]), o[1] = fmaf(w.y, v, o[1]);
            o[2] = fmaf(w.z, v, o[2]), o[3] = fmaf(w.w, v, o[3]);
        }
#pragma unroll
        for (int gi = 0; gi < 4; gi++)
            if (g0 + gi < G) out[(size_t)(g0 + gi) * hstride] = o[gi];
    }
}
/* the same over a float tile: dim d of key j at Vs[j DP + d] */
template <int D>
__device__ __forceinline__ void att_values_row(const float *Vs, const float *e, att_row r, int G,
                                               int d, float *out, size_t hstride) {
    constexpr int DP = D + 4;
    att_values_by([=](int j) { return Vs[j * DP + d]; }, e, r, G, out, hstride);
}

/* out[gi] = scale * (q_gi . k) for the ng <= 4 queries q + gi * att_qp(D): each a chain over d
 * in order, as att_scores_tiled computes it, the key loaded once for all of them */
template <int D>
__device__ __forceinline__ void score4(const float *q, const float *k, int ng, float scale,
                                       float *out) {
    constexpr int QP = att_qp(D);
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
    for (int d = 0; d < D; d += 4) {
        float4 kk = *(const float4 *)(k + d);
#pragma unroll
        for (int gi = 0; gi < 4; gi++) {
            if (gi < ng) {
                float4 qq = *(const float4 *)(q + gi * QP + d);
                s[gi] = fmaf(qq.x, kk.x, s[gi]), s[gi] = fmaf(qq.y, kk.y, s[gi]);
                s[gi] = fmaf(qq.z, kk.z, s[gi]), s[gi] = fmaf(qq.w, kk.w, s[gi]);
            }
        }
    }
#pragma unroll
    for (int gi = 0; gi < 4; gi++)
        if (gi < ng) out[gi] = s[gi] * scale;
}

/* Items of more than ATT_COOP_ROWS rows: the same sums as score4 and the values loop of the
 * few-rows path, with each shared-memory load serving more products. Scores: a warp per tile
 * of 16 keys x 16 (row, head) pairs; lane (key slot lane % 8, pair slot lane / 8) scores keys
 * slot + 8i (i < 2) for pairs slot + 4j (j < 4), so a round of loads reads 8 keys and 4
 * queries, one wavefront each (rows DP and QP floats apart), for 32 products. S[(r ATT_SPAN
 * + j) G4 + h] takes row r's score of key j for head h; keys the rows do not see are scored
 * too (from whatever the tile holds there) and never read. */
template <int D>
__device__ __forceinline__ void att_scores_tiled(const float *Ks, const float *Qs, int nr, int G,
                                                 float scale, float *S) {
    constexpr int DP = D + 4, QP = att_qp(D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, P = nr * G, G4 = (G + 3) & ~3;
    for (int tile = warp; tile < (ATT_SPAN / 16) * ((P + 15) / 16); tile += ATT_THREADS / 32) {
        const int ka = (tile % (ATT_SPAN / 16)) * 16 + (lane & 7);
        const int pa = (tile / (ATT_SPAN / 16)) * 16 + (lane >> 3);
        const float *k0 = Ks + ka * DP, *k1 = Ks + (ka + 8) * DP;
        int qo[4];
#pragma unroll
        for (int j = 0; j < 4; j++) qo[j] = min(pa + 4 * j, P - 1) * QP;
        float sc[2][4];
#pragma unroll
        for (int j = 0; j < 4; j++) sc[0][j] = sc[1][j] = 0.f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            const float4 kk0 = *(const float4 *)(k0 + d), kk1 = *(const float4 *)(k1 + d);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float4 qq = *(const float4 *)(Qs + qo[j] + d);
                float x = sc[0][j], y = sc[1][j];
                x = fmaf(qq.x, kk0.x, x), x = fmaf(qq.y, kk0.y, x);
                x = fmaf(qq.z, kk0.z, x), x = fmaf(qq.w, kk0.w, x);
                y = fmaf(qq.x, kk1.x, y), y = fmaf(qq.y, kk1.y, y);
                y = fmaf(qq.z, kk1.z, y), y = fmaf(qq.w, kk1.w, y);
                sc[0][j] = x, sc[1][j] = y;
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int p = pa + 4 * j;
            if (p >= P) break;
            float *o = S + ((p / G) * ATT_SPAN + ka) * G4 + p % G;
            o[0] = sc[0][j] * scale, o[8 * G4] = sc[1][j] * scale;
        }
    }
}

/* Values of such items: a warp per (pair of rows, 64 dims), lane d adding dims d and d + 32 of
 * both rows for four heads at a time, keys in order. It runs over the keys either row sees;
 * a key one row does not see has weight 0 there (the softmax wrote it), and adding 0 * v (v
 * finite: the tile's loaded keys) to a sum that starts at +0 changes no bit, so each row's
 * sums are those of the few-rows loop over its own keys. G4C: the weights' row stride G4
 * known when compiled (4: up to four heads a kv head), so that the loop's shared-memory
 * addresses are offsets of one register (0: read at run time; the same sums). */
template <int D, int G4C>
__device__ __forceinline__ void att_values_tiled(const attn_args &a, const float *Vs,
                                                 const float *S, const att_row *rows, int nr,
                                                 int kvh, int span) {
    constexpr int DP = D + 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = a.G;
    const int G4 = G4C ? G4C : (G + 3) & ~3;
    constexpr int DB = (D + 63) / 64;
    for (int task = warp; task < (nr + 1) / 2 * DB; task += ATT_THREADS / 32) {
        const int r0 = task / DB * 2, d0 = task % DB * 64 + lane, d1 = d0 + 32;
        const att_row ra = rows[r0], rb = r0 + 1 < nr ? rows[r0 + 1] : att_row{0, 0, 0};
        const bool ha = ra.j1 > 0, hb = rb.j1 > 0;
        if (!ha && !hb) continue;
        const int jlo = min(ha ? ra.j0 : ATT_SPAN, hb ? rb.j0 : ATT_SPAN);
        const int jhi = max(ra.j1, rb.j1);
        const float *ea = S + (size_t)r0 * ATT_SPAN * G4, *eb = ea + (hb ? ATT_SPAN * G4 : 0);
        for (int g0 = 0; g0 < G; g0 += 4) {
            float o[2][2][4];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) o[r][0][i] = o[r][1][i] = 0.f;
            const float *vp = Vs + jlo * DP, *pa = ea + jlo * G4 + g0, *pb = eb + jlo * G4 + g0;
#pragma unroll 4
            for (int j = jlo; j < jhi; j++, vp += DP, pa += G4, pb += G4) {
                const float v0 = d0 < D ? vp[d0] : 0.f;
                const float v1 = d1 < D ? vp[d1] : 0.f;
                const float4 wa = *(const float4 *)pa;
                const float4 wb = *(const float4 *)pb;
                o[0][0][0] = fmaf(wa.x, v0, o[0][0][0]), o[0][0][1] = fmaf(wa.y, v0, o[0][0][1]);
                o[0][0][2] = fmaf(wa.z, v0, o[0][0][2]), o[0][0][3] = fmaf(wa.w, v0, o[0][0][3]);
                o[0][1][0] = fmaf(wa.x, v1, o[0][1][0]), o[0][1][1] = fmaf(wa.y, v1, o[0][1][1]);
                o[0][1][2] = fmaf(wa.z, v1, o[0][1][2]), o[0][1][3] = fmaf(wa.w, v1, o[0][1][3]);
                o[1][0][0] = fmaf(wb.x, v0, o[1][0][0]), o[1][0][1] = fmaf(wb.y, v0, o[1][0][1]);
                o[1][0][2] = fmaf(wb.z, v0, o[1][0][2]), o[1][0][3] = fmaf(wb.w, v0, o[1][0][3]);
                o[1][1][0] = fmaf(wb.x, v1, o[1][1][0]), o[1][1][1] = fmaf(wb.y, v1, o[1][1][1]);
                o[1][1][2] = fmaf(wb.z, v1, o[1][1][2]), o[1][1][3] = fmaf(wb.w, v1, o[1][1][3]);
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const att_row rr = r ? rb : ra;
                if (!rr.j1) continue;
                const size_t slot = ((size_t)(rr.t - a.r0) * a.nh + kvh * G) * a.spans + span;
#pragma unroll
                for (int gi = 0; gi < 4; gi++) {
                    if (g0 + gi >= G) break;
                    float *out = a.acc + (slot + (size_t)(g0 + gi) * a.spans) * D;
                    if (d0 < D) out[d0] = o[r][0][gi];
                    if (d1 < D) out[d1] = o[r][1][gi];
                }
            }
        }
    }
}

/* what a block needs of its work item once the item's tiles are in shared memory */
struct att_item {
    int ok; /* 0: no row of the item sees the span (nothing loaded) */
    int kvh, span, nr;
};

/* NB tile buffers: with two, a block loads the next item's K, V and queries while it works
 * on this one (same sums; an SM then holds one block). With one, an item's keys and queries
 * land before its values, so the scores are computed while the values load, and (early_kv)
 * once the scores are done the next item's keys and queries load during this item's softmax
 * and values. With pre_kv a block requests its first item's keys and values of positions
 * before the pass (rows no kernel of the pass writes) before its wait on the previous kernel. */
template <int D, int NB, bool KV16>
__global__ void __launch_bounds__(ATT_THREADS, 2) k_attn(attn_args a) {
    constexpr int DP = D + 4, D4 = D / 4, QP = att_qp(D);
    extern __shared__ __align__(16) float sm[];
    /* per buffer: K and V tiles [ATT_SPAN][DP] and the rows' queries [ATT_ROWS][G][QP]; then
     * the scores, then weights, of an item [ATT_ROWS][ATT_SPAN][G4] (the heads of a key side
     * by side, padded to four) */
    const int G = a.G, G4 = (G + 3) & ~3, BUF = 2 * ATT_SPAN * DP + ATT_ROWS * G * QP;
    float *S = sm + NB * BUF;
    __shared__ att_seq seqs[GPU_SEQS];
    __shared__ att_row rows_of[2][ATT_ROWS]; /* per buffer (one buffer: per item in turn) */
    __shared__ int info[3]; /* items, first sequence, sequences */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    /* the pass's parameters and the keys and values of positions before it are there before
     * the previous kernel ends: with pre_kv the first item's are requested before the wait */
    if (!a.pre_kv) {
        pdl_wait();
        pdl_launch();
    }
    const step_params *sp = a.sp;
    if (warp == 0) att_seq_table(a, seqs, info, lane, ATT_ROWS);
    __syncthreads();
    const int n_items = info[0], s_first = info[1], ns = info[2];
    /* An item's K, V and queries go into buffer b by asynchronous copies (the caller commits;
     * with one buffer the keys and queries are a group of their own before the values), its
     * rows into rows_of[rb]. geom() finds the item's keys and rows, copy_kv() requests keys
     * [ja, jb) of the tile, copy_q() the queries. */
    struct att_geo {
        int k0, klo, k1, si, ua, nr, kvh, old; /* old: the first position this pass writes */
        size_t hh;
    };
    auto geom = [&](int item, int rb, att_geo &geo) {
        att_item it = {};
        geo = att_geo{0, 0, 0, 0, 0, 0, 0, 0, 0};
        if (item >= n_items) return it;
        const att_span_item w = att_item_at(a, seqs, ns, s_first, item, ATT_ROWS);
        if (!w.ok) return it; /* no row of this unit sees the span */
        geo = att_geo{w.k0, w.klo, w.k1, w.si, w.ua, w.nr, w.kvh, w.P->pos0,
                      (size_t)a.layer * a.nkv + w.kvh};
        if (tid < w.nr) rows_of[rb][tid] = att_item_row(a, w, w.ua + tid);
        it.ok = 1, it.kvh = w.kvh, it.span = w.span, it.nr = w.nr;
        return it;
    };
    auto copy_kv = [&](const att_geo &geo, int b, int ja, int jb, bool k, bool v) {
        if (jb <= ja) return;
        const seq_params &P = sp->seq[geo.si];
        float *Ks = sm + b * BUF, *Vs = Ks + ATT_SPAN * DP;
        if (k)
            att_copy_rows<D, ATT_THREADS, KV16>(Ks, geo.k0, att_lines_of<KV16>(P, geo.hh, D, true),
                                                ja, jb, tid);
        if (v)
            att_copy_rows<D, ATT_THREADS, KV16>(Vs, geo.k0, att_lines_of<KV16>(P, geo.hh, D, false),
                                                ja, jb, tid);
    };
    auto copy_q = [&](const att_geo &geo, int b) {
        if (geo.k1 <= geo.klo) return;
        float *Qs = sm + b * BUF + 2 * ATT_SPAN * DP;
        for (int x = tid; x < geo.nr * G * D4; x += ATT_THREADS) {
            const int p = x / D4, c = (x % D4) * 4; /* pair p: row p / G, head p % G */
            cp_async16(Qs + p * QP + c, a.q + ((size_t)(geo.ua + p / G) * a.nh + geo.kvh * G +
                                               p % G) * D + c);
        }
    };
    /* keys from ja on (and with two buffers values), the queries; with one buffer a commit,
     * then the values from ja on */
    auto fetch_from = [&](const att_geo &geo, int b, int ja) {
        copy_kv(geo, b, max(ja, geo.klo), geo.k1, true, NB == 2);
        copy_q(geo, b);
        if (NB == 1) {
            cp_async_commit();
            copy_kv(geo, b, max(ja, geo.klo), geo.k1, false, true);
        }
    };
    auto fetch = [&](int item, int b, int rb) {
        att_geo geo;
        att_item it = geom(item, rb, geo);
        fetch_from(geo, b, 0);
        return it;
    };
    auto fetch_v = [&](const att_geo &geo) { /* one buffer: the values of geom's item */
        copy_kv(geo, 0, geo.klo, geo.k1, false, true);
    };
    int buf = 0, rb = 0; /* rb: rows_of of the current item */
    att_item cur;
    if (a.pre_kv) { /* keys and values of earlier positions, a group of their own */
        att_geo geo;
        cur = geom(blockIdx.x, 0, geo);
        const int split = min(max(geo.old, geo.klo), geo.k1);
        copy_kv(geo, 0, geo.klo, split, true, true);
        cp_async_commit();
        pdl_wait();
        pdl_launch();
        fetch_from(geo, 0, split);
    } else {
        cur = fetch(blockIdx.x, 0, 0);
    }
    cp_async_commit();
    for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
        att_item next = {};
        att_geo geo_next = {0, 0, 0, 0, 0, 0, 0, 0, 0};
        bool early = false; /* the next item's keys and queries are on their way */
        if (NB == 2) { /* one group committed per item, possibly empty: wait for all but it */
            next = fetch(item + gridDim.x, buf ^ 1, buf ^ 1);
            cp_async_commit();
            cp_async_wait1();
        } else { /* the keys and queries (the values may still be on their way) */
            cp_async_wait1();
        }
        __syncthreads();
        if (KV16 && cur.ok) { /* bf16 tiles landed: floats (two buffers: the values too) */
            att_expand<D, ATT_THREADS>(sm + buf * BUF, tid);
            if (NB == 2) att_expand<D, ATT_THREADS>(sm + buf * BUF + ATT_SPAN * DP, tid);
        }
        const float *Ks = sm + buf * BUF, *Vs = Ks + ATT_SPAN * DP, *Qs = Vs + ATT_SPAN * DP;
        const att_row *rows = rows_of[rb];
        const int kvh = cur.kvh, span = cur.span, nr = cur.nr;
        const int P2 = nr * G; /* (row, head) pairs */
        if (!cur.ok) {
        } else {
            /* Scores: with a few rows a thread per (row, key), four heads at a time (each key
             * read once per four heads: shared memory bandwidth is what these items wait
             * for); with more, tiles of keys and pairs (att_scores_tiled). The same sums. */
            if (nr > ATT_COOP_ROWS) {
                att_scores_tiled<D>(Ks, Qs, nr, G, a.scale, S);
            } else {
                for (int x = tid; x < nr * ATT_SPAN; x += ATT_THREADS) {
                    int ri = x / ATT_SPAN, j = x % ATT_SPAN;
                    att_row r = rows[ri];
                    if (j < r.j0 || j >= r.j1) continue;
                    for (int g0 = 0; g0 < G; g0 += 4)
                        score4<D>(Qs + (ri * G + g0) * QP, Ks + j * DP, min(G - g0, 4), a.scale,
                                  S + (size_t)x * G4 + g0);
                }
            }
            __syncthreads();
            if (NB == 1 && a.early_kv) { /* keys and queries are free: the next item's load */
                next = geom(item + gridDim.x, rb ^ 1, geo_next);
                copy_kv(geo_next, 0, geo_next.klo, geo_next.k1, true, false);
                copy_q(geo_next, 0);
                cp_async_commit();
                early = true;
            }
            /* softmax of the span per (row, head) pair: a warp per pair, two keys a lane */
            for (int pr = warp; pr < P2; pr += ATT_THREADS / 32) {
                att_row r = rows[pr / G];
                if (!r.j1) continue;
                float *sr = S + (size_t)(pr / G) * ATT_SPAN * G4 + pr % G; /* key j: sr[j G4] */
                const size_t slot =
                    ((size_t)(r.t - a.r0) * a.nh + kvh * G + pr % G) * a.spans + span;
                att_softmax(sr, G4, r, a.ml + slot * 2, lane);
            }
            if (NB == 1) { /* the values (and not the next item's keys) */
                if (early)
                    cp_async_wait1();
                else
                    cp_async_wait0();
            }
            __syncthreads();
            if (NB == 1 && KV16) att_expand<D, ATT_THREADS>(sm + ATT_SPAN * DP, tid);
            /* values: with more rows att_values_tiled; with a few a thread per (row, dim),
             * four heads at a time, keys in order */
            if (nr > ATT_COOP_ROWS) {
                if (G4 == 4)
                    att_values_tiled<D, 4>(a, Vs, S, rows, nr, kvh, span);
                else
                    att_values_tiled<D, 0>(a, Vs, S, rows, nr, kvh, span);
            }
            for (int x = tid; x < (nr > ATT_COOP_ROWS ? 0 : nr * D); x += ATT_THREADS) {
                int ri = x / D, d = x % D;
                att_row r = rows[ri];
                if (!r.j1) continue;
                const size_t slot = ((size_t)(r.t - a.r0) * a.nh + kvh * G) * a.spans + span;
                att_values_row<D>(Vs, S + (size_t)ri * ATT_SPAN * G4, r, G, d,
                                  a.acc + slot * D + d, (size_t)a.spans * D);
            }
        }
        __syncthreads(); /* this buffer is refilled two items on (S, rows: the next item) */
        if (NB == 1 && early) {
            fetch_v(geo_next);
            cp_async_commit();
            cur = next, rb ^= 1;
        } else if (NB == 1) {
            cur = fetch(item + gridDim.x, 0, rb);
            cp_async_commit();
        } else {
            cur = next, buf ^= 1, rb ^= 1;
        }
    }
}

/* Passes whose rows are each their sequence's only row (decode steps), with more items than
 * the two-buffer kernel takes: a block of ATT1_THREADS per item and one tile, the values
 * landing in the keys' tile once the scores are done, so that an SM holds several blocks and
 * their items' loads overlap each other's arithmetic. The sums are k_attn's few-rows path's:
 * score4 per key, att_softmax per head, att_values_row per dim. */
#define ATT1_THREADS 128
static_assert(ATT1_THREADS >= ATT_SPAN, "a thread per key");
/* An item of such a pass (a unit of one row): the row, its keys [klo, k1) of the tile at k0 */
struct geo1 {
    int k0, klo, k1, kvh, span, old;
    att_row r;
    const seq_params *P;
    size_t hh;
};
/* work item `item` of att_seq_table's numbering into g; false: no key of the span is the row's */
__device__ __forceinline__ bool att1_geom(const attn_args &a, const att_seq *seqs, int ns,
                                          int s_first, int item, geo1 &g) {
    const att_at w = att_locate(seqs, ns, item, a.nkv); /* unit 0: one row */
    const att_seq q = seqs[w.i];
    const seq_params &P = a.sp->seq[s_first + w.i];
    const int p = P.pos0 + q.a - P.row0, lo = att_lo(p, a.window);
    g.kvh = w.kvh, g.span = w.span;
    g.k0 = g.span * ATT_SPAN, g.k1 = min(g.k0 + ATT_SPAN, p + 1), g.klo = max(g.k0, lo);
    g.r = att_row{q.a, g.klo - g.k0, g.k1 - g.k0};
    g.P = &P, g.old = P.pos0, g.hh = (size_t)a.layer * a.nkv + g.kvh;
    return g.k1 > g.klo;
}
/* the item's row's queries of the kv head's G heads into Qs (head h at h QP) */
template <int D>
__device__ __forceinline__ void att1_copy_q(const attn_args &a, float *Qs, const geo1 &g, int tid) {
    constexpr int D4 = D / 4, QP = att_qp(D);
    for (int x = tid; x < a.G * D4; x += ATT1_THREADS) {
        const int h = x / D4, c = (x % D4) * 4;
        cp_async16(Qs + h * QP + c, a.q + ((size_t)g.r.t * a.nh + g.kvh * a.G + h) * D + c);
    }
}
/* bf16 tiles as stored (head dims of 8 or 16 copies a row: 64, 128): a row's 16-byte copy c
 * lies at slot c ^ (row & 7) so that the 8 keys a score load reads fall in different banks.
 * Each score is score4's chain and each value sum att_values_row's, over the same floats (a
 * bf16 as a float is exact), so the bits are those of the float tile's widened rows. */
template <int D>
__device__ __forceinline__ const uint16_t *att_b16(const uint16_t *t, int j, int c) {
    return t + (size_t)j * D + ((c ^ (j & 7)) << 3); /* copy c of row j */
}
template <int D>
__device__ __forceinline__ void score4_b16(const float *q, const uint16_t *K, int j, int ng,
                                           float scale, float *out) {
    constexpr int QP = att_qp(D);
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
    for (int c = 0; c < D / 8; c++) {
        const uint4 w = *(const uint4 *)att_b16<D>(K, j, c);
        const float k[8] = {att_lo16(w.x), att_hi16(w.x), att_lo16(w.y), att_hi16(w.y),
                            att_lo16(w.z), att_hi16(w.z), att_lo16(w.w), att_hi16(w.w)};
#pragma unroll
        for (int gi = 0; gi < 4; gi++) {
            if (gi < ng) {
                const float4 qa = *(const float4 *)(q + gi * QP + 8 * c),
                             qb = *(const float4 *)(q + gi * QP + 8 * c + 4);
                s[gi] = fmaf(qa.x, k[0], s[gi]), s[gi] = fmaf(qa.y, k[1], s[gi]);
                s[gi] = fmaf(qa.z, k[2], s[gi]), s[gi] = fmaf(qa.w, k[3], s[gi]);
                s[gi] = fmaf(qb.x, k[4], s[gi]), s[gi] = fmaf(qb.y, k[5], s[gi]);
                s[gi] = fmaf(qb.z, k[6], s[gi]), s[gi] = fmaf(qb.w, k[7], s[gi]);
            }
        }
    }
#pragma unroll
    for (int gi = 0; gi < 4; gi++)
        if (gi < ng) out[gi] = s[gi] * scale;
}
template <int D>
__device__ __forceinline__ void att_values_b16(const uint16_t *V, const float *e, att_row r, int G,
                                               int d, float *out, size_t hstride) {
    att_values_by(
        [=](int j) { return __uint_as_float((uint32_t)att_b16<D>(V, j, d >> 3)[d & 7] << 16); }, e,
        r, G, out, hstride);
}
/* How k_attn1's item reaches shared memory and is read, by cache type. att1_tile: one float
 * tile, the keys and then the values in their place (bf16 caches widened in place). */
template <int D, bool KV16> struct att1_tile {
    static constexpr size_t floats = (size_t)ATT_SPAN * (D + 4); /* the tile's size */
    float *KV;
    __device__ explicit att1_tile(float *sm) : KV(sm) {}
    __device__ void request(const geo1 &g, int ja, int jb, int tid) { /* keys [ja, jb) */
        att_copy_rows<D, ATT1_THREADS, KV16>(KV, g.k0, att_lines_of<KV16>(*g.P, g.hh, D, true),
                                             ja, jb, tid);
    }
    __device__ void landed(int tid) {
        if (KV16) att_expand<D, ATT1_THREADS>(KV, tid);
    }
    __device__ void score(const float *q, int j, int ng, float scale, float *out) const {
        score4<D>(q, KV + j * (D + 4), ng, scale, out);
    }
    __device__ void values_request(const geo1 &g, int tid) { /* the keys are done with */
        att_copy_rows<D, ATT1_THREADS, KV16>(KV, g.k0, att_lines_of<KV16>(*g.P, g.hh, D, false),
                                             g.klo, g.k1, tid);
        cp_async_commit();
    }
    __device__ void values_landed(int tid) {
        cp_async_wait0();
        __syncthreads();
        landed(tid);
    }
    __device__ void value(const float *S, att_row r, int G, int d, float *out, size_t hs) const {
        att_values_row<D>(KV, S, r, G, d, out, hs);
    }
};
/* att1_tile_b16: bf16 caches of head dims 64 and 128, the keys and the values in tiles of
 * their own as stored (att_b16), both requested at the item's start */
template <int D> struct att1_tile_b16 {
    static_assert(D / 8 == 8 || D / 8 == 16, "a row's copies swizzled by row & 7");
    static constexpr size_t floats = (size_t)ATT_SPAN * D; /* two bf16 tiles */
    uint16_t *Kb, *Vb;
    __device__ explicit att1_tile_b16(float *sm) : Kb((uint16_t *)sm), Vb(Kb + ATT_SPAN * D) {}
    __device__ void request(const geo1 &g, int ja, int jb, int tid) { /* keys, values [ja, jb) */
        constexpr int C8 = D / 8;
        const att_lines<true> LK = att_lines_of<true>(*g.P, g.hh, D, true),
                              LV = att_lines_of<true>(*g.P, g.hh, D, false);
        for (int x = tid; x < (jb - ja) * C8; x += ATT1_THREADS) {
            const int j = ja + x / C8, c = x % C8, t = j - g.k0;
            cp_async16((void *)att_b16<D>(Kb, t, c), LK.row(j, D) + 8 * c);
            cp_async16((void *)att_b16<D>(Vb, t, c), LV.row(j, D) + 8 * c);
        }
    }
    __device__ void landed(int) {}
    __device__ void score(const float *q, int j, int ng, float scale, float *out) const {
        score4_b16<D>(q, Kb, j, ng, scale, out);
    }
    __device__ void values_request(const geo1 &, int) {}
    __device__ void values_landed(int) { __syncthreads(); }
    __device__ void value(const float *S, att_row r, int G, int d, float *out, size_t hs) const {
        att_values_b16<D>(Vb, S, r, G, d, out, hs);
    }
};
template <int D, class Tile>
__global__ void __launch_bounds__(ATT1_THREADS) k_attn1(attn_args a) {
    constexpr int QP = att_qp(D);
    extern __shared__ __align__(16) float sm[];
    const int G = a.G, G4 = (G + 3) & ~3;
    Tile T(sm);
    float *Qs = sm + Tile::floats, *S = Qs + G * QP; /* S: [ATT_SPAN][G4] */
    __shared__ att_seq seqs[GPU_SEQS];
    __shared__ int info[3];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    /* the pass's parameters, written before the pass: readable before the wait */
    if (warp == 0) att_seq_table(a, seqs, info, lane, ATT_ROWS);
    __syncthreads();
    const int n_items = info[0], s_first = info[1], ns = info[2];
    auto geom = [&](int item, geo1 &g) { return att1_geom(a, seqs, ns, s_first, item, g); };
    auto copy_q = [&](const geo1 &g) { att1_copy_q<D>(a, Qs, g, tid); };
    int item = blockIdx.x, from = 0; /* rows [klo, from) of the item are requested */
    geo1 g;
    bool ok = item < n_items && geom(item, g);
    if (ok) { /* with pre_kv, rows of positions before the pass before the wait */
        from = a.pre_kv ? min(max(g.old, g.klo), g.k1) : g.klo;
        T.request(g, g.klo, from, tid);
        cp_async_commit();
    }
    pdl_wait();
    pdl_launch();
    for (; item < n_items; item += gridDim.x) {
        if (ok) {
            T.request(g, from, g.k1, tid);
            if (item == (int)blockIdx.x) copy_q(g); /* later items': with their rows, below */
            cp_async_commit();
            cp_async_wait0();
        }
        __syncthreads();
        if (ok) {
            T.landed(tid);
            if (tid >= g.r.j0 && tid < g.r.j1)
                for (int g0 = 0; g0 < G; g0 += 4)
                    T.score(Qs + g0 * QP, tid, min(G - g0, 4), a.scale, S + (size_t)tid * G4 + g0);
            __syncthreads();
            T.values_request(g, tid);
            const size_t slot = ((size_t)(g.r.t - a.r0) * a.nh + g.kvh * G) * a.spans + g.span;
            for (int h = warp; h < G; h += ATT1_THREADS / 32)
                att_softmax(S + h, G4, g.r, a.ml + (slot + (size_t)h * a.spans) * 2, lane);
            T.values_landed(tid);
            for (int d = tid; d < D; d += ATT1_THREADS)
                T.value(S, g.r, G, d, a.acc + slot * D + d, (size_t)a.spans * D);
            __syncthreads(); /* the tiles, S and Qs are the next item's */
        }
        if (item + (int)gridDim.x < n_items) { /* the next item's rows and queries */
            ok = geom(item + gridDim.x, g);
            if (ok) {
                T.request(g, g.klo, g.k1, tid);
                copy_q(g);
                cp_async_commit();
                from = g.k1;
            }
        }
    }
}

static size_t attn_smem(int G, int D, int nb) {
    const size_t buf = 2 * (size_t)ATT_SPAN * (D + 4) + (size_t)ATT_ROWS * G * att_qp(D);
    return sizeof(float) * (nb * buf + (size_t)ATT_ROWS * ((G + 3) & ~3) * ATT_SPAN);
}

/* [bf16 caches][head dim / 16][buffers - 1] */
#define K16(n, c)  k_attn<16 * (n), 1, c>, k_attn<16 * (n), 2, c>
#define K16S(n, c) k_attn<16 * (n), 1, c>, NULL /* two buffers of a wider head hardly ever fit */
#define KROW(c)                                                                                    \
    {{NULL, NULL},    {K16(1, c)},   {K16(2, c)},   {K16(3, c)},   {K16(4, c)},   {K16(5, c)},     \
     {K16(6, c)},     {K16(7, c)},   {K16(8, c)},   {K16S(9, c)},  {K16S(10, c)}, {K16S(11, c)},   \
     {K16S(12, c)},   {K16S(13, c)}, {K16S(14, c)}, {K16S(15, c)}, {K16S(16, c)}}
static const attn_kernel attn_kernels_kv[2][17][2] = {KROW(false), KROW(true)};

/* k_attn1's shared memory: its tile (att1_tile_b16: two of bf16), the row's queries and its
 * scores */
static size_t attn1_smem(int G, int D, int kv16) {
    const size_t tiles = kv16 && (D == 64 || D == 128) ? (size_t)2 * ATT_SPAN * D * 2 /* K, V */
                                                        : sizeof(float) * ATT_SPAN * (D + 4);
    return tiles + sizeof(float) * ((size_t)G * att_qp(D) + (size_t)ATT_SPAN * ((G + 3) & ~3));
}

#define K1(n, c) k_attn1<16 * (n), att1_tile<16 * (n), c>>
#define K1B(n)   k_attn1<16 * (n), att1_tile_b16<16 * (n)>>
#define K1ROW(c)                                                                                   \
    {NULL,      K1(1, c),  K1(2, c),  K1(3, c),  K1(4, c),  K1(5, c),  K1(6, c),  K1(7, c),        \
     K1(8, c),  K1(9, c),  K1(10, c), K1(11, c), K1(12, c), K1(13, c), K1(14, c), K1(15, c),       \
     K1(16, c)}
static const attn_kernel attn1_kernels_kv[2][17] = {
    K1ROW(false),
    {NULL, K1(1, true), K1(2, true), K1(3, true), K1B(4), K1(5, true), K1(6, true), K1(7, true),
     K1B(8), K1(9, true), K1(10, true), K1(11, true), K1(12, true), K1(13, true), K1(14, true),
     K1(15, true), K1(16, true)}};

/* Work items of the pass in g->hsp (as k_attn numbers them): with at most one per SM, each
 * of at most ATT_COOP_ROWS rows (decode steps), one block a SM with two buffers measured
 * faster; with more, or with items of more rows (verify, blocks), two blocks a SM with one
 * buffer each. Same sums either way. (Decode steps of many sequences on a third kernel, one
 * buffer sized for their items of one or two rows at three blocks a SM, measured no faster
 * in a whole pass.) Passes of decode steps (a row a sequence) past that take k_attn1, six
 * blocks a SM (DSPARK_GPU_ATT1=n: n, 0: never): 16 sequences at context 4096 measured 10%
 * faster, one 2.5% (docs/perf.md). Passes with a sequence of at least g->attp_min rows (a
 * prompt's chunk) whose rows reach position g->attp_pos take k_attnp, whose items hold up to
 * 128 (row, head) pairs: 10% faster prompts of 4,096 tokens, 19% of 16,384, and no faster at
 * 512 (docs/perf.md, "Prompt attention in larger items"). */
void attn_choose(gpu_model *g) {
    const step_params *sp = g->hsp;
    long items = 0;
    int one = 1, far = -1; /* every sequence has one row; the last position a row of a
                            * sequence of attp_min rows or more sees */
    g->att_reach = 0;
    for (int i = 0; i < sp->n_seq; i++) {
        const seq_params &P = sp->seq[i];
        if (P.n > ATT_COOP_ROWS) items += g->att_few_items + 1;
        one &= P.n == 1;
        if (P.n >= g->attp_min && P.pos0 + P.n - 1 > far) far = P.pos0 + P.n - 1;
        int hi = P.pos0 + P.n - 1, lo = P.noncausal ? hi : P.pos0;
        g->att_reach = hi > g->att_reach ? hi : g->att_reach;
        int span0 = att_lo(lo, g->d.window) / ATT_SPAN;
        items += (long)(P.n + ATT_ROWS - 1) / ATT_ROWS * (hi / ATT_SPAN - span0 + 1) *
                 g->d.n_kv_heads;
    }
    if (g->attp_grid && g->attp_min > 0 && far >= 0 && far >= g->attp_pos)
        g->att_kind = ATT_PROMPT;
    else if (items <= g->att_few_items) /* without two buffers (att_nb 1), k_attn as before */
        g->att_kind = g->att_nb == 2 ? ATT_FEW : ATT_ONEBUF;
    else
        g->att_kind = one && g->att_one ? ATT_ONE : ATT_ONEBUF;
}

/* rows [row0, row0 + n) of a chunk of T rows, their partials `spans` apart (n spans at most
 * g->att_rows g->att_spans) */
static cudaError_t attn_part(gpu_model *g, int layer, int T, int row0, int n, int spans) {
    const gpu_model_desc *d = &g->d;
    attn_args a;
    a.q = g->q, a.sp = g->dsp, a.xb_out = g->xo, a.acc = g->att_acc, a.ml = g->att_ml;
    a.terms = g->terms;
    a.T = T, a.r0 = row0, a.nr = n;
    a.nh = d->n_heads, a.nkv = d->n_kv_heads, a.G = g->G;
    a.KT_out = g->KT_QD, a.layer = layer, a.window = d->window, a.spans = spans;
    a.scale = 1.0f / sqrtf((float)g->D);
    a.early = g->early_merge;
    a.early_kv = g->att_early_kv;
    a.pre_kv = g->att_pre_kv;
    const int nb = g->att_kind == ATT_FEW ? 2 : 1;
    cudaError_t e;
    if (g->att_kind == ATT_PROMPT)
        e = attnp_launch(g, &a);
    else if (g->att_kind == ATT_ONE)
        e = launch(attn1_kernels_kv[g->kv16][g->D / 16], dim3(g->att_one), dim3(ATT1_THREADS),
                   attn1_smem(g->G, g->D, g->kv16), g->stream, a);
    else
        e = launch(attn_kernels_kv[g->kv16][g->D / 16][nb - 1],
                   dim3(nb == 2 ? g->sms : g->att_grid), dim3(ATT_THREADS),
                   attn_smem(g->G, g->D, nb), g->stream, a);
    if (e != cudaSuccess) return e;
#ifdef DSPARK_LAB_NOMERGE /* measuring build, results wrong: what the merge kernel costs */
    return e;
#endif
    return merge_launch(g, a, n);
}

/* All T rows of a chunk, as many a launch as the partials' scratch holds. Captured passes (up
 * to GPU_GROUP rows) space a row's partials by the spans of the longest cache, so that one
 * graph serves every context; longer passes by the spans their own rows reach, so that a
 * prompt's rows share fewer, larger launches where the caches are long. */
cudaError_t attn_launch(gpu_model *g, int layer, int T) {
    int spans = g->att_spans, rows = g->att_rows;
    if (T > GPU_GROUP) {
        const int reach = g->att_reach / ATT_SPAN + 1;
        spans = reach < spans ? reach : spans;
        rows = (int)((long)g->att_rows * g->att_spans / spans / GPU_GROUP * GPU_GROUP);
    }
    for (int r = 0; r < T; r += rows) {
        cudaError_t e = attn_part(g, layer, T, r, T - r < rows ? T - r : rows, spans);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* The kernels' dynamic shared memory limit, for the whole process: raised to what each model
 * loaded needs, never lowered (a drafter's smaller heads must not cut its target's limit). */
int raise_smem(const void *k, size_t bytes) {
    static const void *seen[64];
    static size_t most[64];
    int i = 0;
    while (i < 64 && seen[i] && seen[i] != k) i++;
    if (i == 64) return ERR_UNSUPPORTED;
    if (seen[i] && most[i] >= bytes) return OK;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    seen[i] = k, most[i] = bytes;
    return OK;
}

/* The kernels' shared memory for the model's heads, and g->att_nb: two tile buffers where
 * they fit (and g->att_nb asked for two), else one. */
int attn_init(gpu_model *g, int spans) {
    const int G = g->G, D = g->D;
    if (D % 16 || D > 256 || G > ATT_GMAX) return ERR_UNSUPPORTED;
    size_t most = 227 << 10;
    if (g->att_nb != 1 && attn_kernels_kv[g->kv16][D / 16][1] && attn_smem(G, D, 2) <= most) {
        g->att_nb = 2;
        if (raise_smem((const void *)attn_kernels_kv[g->kv16][D / 16][1], attn_smem(G, D, 2)))
            return ERR_UNSUPPORTED;
    } else {
        g->att_nb = 1;
    }
    size_t need = attn_smem(G, D, 1), merge = merge_smem(spans);
    if (need > most || merge > most) {
        log_error("GPU attention needs %zu KB of shared memory for head_dim %d, %d query heads per "
                  "kv head and %d positions; the GPU has %zu KB a block",
                  (need > merge ? need : merge) >> 10, D, G, spans * ATT_SPAN, most >> 10);
        log_hint("run on the CPU (without --gpu)");
        return ERR_UNSUPPORTED;
    }
    if (raise_smem((const void *)attn_kernels_kv[g->kv16][D / 16][0], attn_smem(G, D, 1)) ||
        raise_smem((const void *)attn1_kernels_kv[g->kv16][D / 16], attn1_smem(G, D, g->kv16)) ||
        merge_init(g, spans, most) || attnp_init(g))
        return ERR_UNSUPPORTED;
    /* k_attn1's grid: g->att_one blocks a SM as asked (0: off), at most as many as fit */
    int per_sm = g->att_one, fit = 0;
    const attn_kernel k1 = attn1_kernels_kv[g->kv16][D / 16];
    if (per_sm > 0 && cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                          &fit, k1, ATT1_THREADS, attn1_smem(G, D, g->kv16)) != cudaSuccess)
        fit = 0, cudaGetLastError();
    g->att_one = per_sm > 0 ? (per_sm < fit ? per_sm : fit) * g->sms : 0;
    return OK;
}
