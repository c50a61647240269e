/* backend/cuda/gemm.cu: the matmuls of passes longer than GPU_GROUP rows (prompt chunks,
 * prompt chunks beside decodes). gemv.cu reads every weight once per 32 rows and does 12 mma
 * per weight fragment it loads into registers; here a block computes a tile of one strip
 * group (128 outputs) by MG_ROWS rows over the whole K, with weights and inputs staged
 * through shared memory: a ring of MG_ST stages that thread 0 fills by bulk copies (each
 * stage's weights are one run of memory, and so is each row group's input), full and empty
 * mbarriers per slot instead of block barriers, so the tensor cores, not the loads, set the
 * pace.
 *
 * Exactness: a row's result is the same bits as gemv.cu gives it. Each (row, output) adds
 * the same bf16 products k-tile after k-tile from zero within each piece of the matrix's
 * decode partition (mm_partition, via mm_start/mm_block_of), takes the piece's value as the
 * sum of its term columns ((hi + mid) + lo, xb_terms_sum), and adds the pieces in order. A
 * whole row group's columns go by term (n-tile TERMS j + s holds term s of rows 8j..8j+7,
 * xb_col), so the terms of a row land in the same lane and each piece folds in registers; a
 * column's result does not depend on its place in the mma.
 *
 * Two paths, the same bits (a wgmma k-tile adds its products as mma.sync does:
 * bench/wgmma_bits.cu):
 * - Tiles of whole row groups, built for sm_90a (MG_WGMMA): two warpgroups of 4 strips each;
 *   per k-tile a warp's strip fragment from shared memory into registers and one
 *   wgmma.m64n(8 NT)k16 per row group, whose B is the staged inputs' core matrices as they
 *   are (xb_core). Each thread holds 2 x 4 NT sums and the running sums of the pieces (32).
 * - Other tiles (a chunk's last, partial group) and other builds: mma.sync, 4 strip pairs x 2
 *   row groups of 32 rows; each warp holds a 2-strip x 12-n-tile tile of sums (96 floats;
 *   fewer with fewer terms) and the running sums of the pieces so far (32). */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <string.h>

#include "backend/cuda/mm.cuh"
#include "backend/cuda/ring.cuh"
#include "backend/cuda/wgmma.cuh"

#define MG_ROWS  64                      /* rows per block tile (two xb groups) */
#ifndef MG_KS
#define MG_KS 4 /* k-tiles per stage */
#endif
#ifndef MG_ST
#define MG_ST 5 /* stages in the ring */
#endif
#define MG_A     (MG_KS * 256)           /* uint4 of weights per stage (8 strips x 32 lanes) */
/* uint4 of one row group's input per k-tile, per stage; uint4 per stage; bytes (200 KB with
 * three terms) */
__host__ __device__ constexpr int mg_bk(int terms) {
    return xb_ntiles(GPU_GROUP, terms) * 16;
}
__host__ __device__ constexpr int mg_b(int terms) {
    return MG_KS * mg_bk(terms);
}
__host__ __device__ constexpr int mg_stage(int terms) {
    return MG_A + 2 * mg_b(terms);
}
__host__ __device__ constexpr int mg_smem(int terms) {
    return MG_ST * mg_stage(terms) * 16;
}

/* the end (k-tile within group g) of the decode piece that holds k-tile kt of g */
__device__ __forceinline__ int mg_piece_end(const mm_args &a, int g, int kt) {
    int b = mm_block_of(a, g * a.KT + kt);
    return min(mm_start(a, b + 1), (g + 1) * a.KT) - g * a.KT;
}

template <int TERMS> __global__ void __launch_bounds__(256, 1) k_mmg(mm_args a, int R) {
    constexpr int MG_BK = mg_bk(TERMS), MG_B = mg_b(TERMS), MG_STAGE = mg_stage(TERMS);
    extern __shared__ __align__(16) uint4 sm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    const int g = blockIdx.x / R, t0 = (blockIdx.x % R) * MG_ROWS, KT = a.KT;
    const int rows = min(MG_ROWS, a.T - t0);
    const int sp = warp & 3, rg = warp >> 2;
    /* the tile's two xb groups: a.xb is the group of a.row0 */
    const int grp0 = (a.row0 + t0) / GPU_GROUP;
    int nr[2], nt[2], all[2];
    const uint4 *xg[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        all[r] = min(GPU_GROUP, a.T_chunk - (grp0 + r) * GPU_GROUP); /* the group's layout */
        nr[r] = min(all[r], rows - r * GPU_GROUP);
        nt[r] = all[r] > 0 ? xb_ntiles(all[r], TERMS) : 0;
        xg[r] = (const uint4 *)(a.xb + (size_t)(t0 / GPU_GROUP + r) * xb_group_stride(KT));
    }
    const uint4 *wg = a.w + (size_t)g * KT * 256;
    const int nst = (KT + MG_KS - 1) / MG_KS;

    /* the ring: full[i] completes when slot i's bytes have landed, empty[i] when the 8 warps
     * are done with it; thread 0 issues every copy */
    __shared__ __align__(8) unsigned long long full[MG_ST], empty[MG_ST];
    if (tid == 0) {
        ring_init(full, empty, MG_ST, 8);
    }
    __syncthreads();
    auto stage_bytes = [&](int s) {
        int n = min(MG_KS, KT - s * MG_KS);
        return (unsigned)(n * 4096 + (nr[0] > 0 ? n * nt[0] * 256 : 0) +
                          (nr[1] > 0 ? n * nt[1] * 256 : 0));
    };
    auto copy_a = [&](int s) {
        int kt0 = s * MG_KS, n = min(MG_KS, KT - kt0);
        bulk_copy(sm + (s % MG_ST) * MG_STAGE, wg + (size_t)kt0 * 256, n * 4096u,
                  &full[s % MG_ST]);
    };
    auto copy_b = [&](int s) {
        int kt0 = s * MG_KS, n = min(MG_KS, KT - kt0);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (nr[r] <= 0) continue;
            const int per = nt[r] * 16;
            uint4 *dst = sm + (s % MG_ST) * MG_STAGE + MG_A + r * MG_B;
            const uint4 *src = xg[r] + (size_t)kt0 * per;
            if (per == MG_BK)
                bulk_copy(dst, src, n * per * 16u, &full[s % MG_ST]);
            else
                for (int kk = 0; kk < n; kk++)
                    bulk_copy(dst + kk * MG_BK, src + kk * per, per * 16u, &full[s % MG_ST]);
        }
    };
    /* weights never change: the first stages' before the wait on the previous kernel */
    if (tid == 0)
        for (int s = 0; s < MG_ST && s < nst; s++) mbar_expect(&full[s], stage_bytes(s)), copy_a(s);
    pdl_wait();
    pdl_launch();
    if (tid == 0)
        for (int s = 0; s < MG_ST && s < nst; s++) copy_b(s);

    /* lane (q4 = lane / 4, lane % 4) of term s, row block j reads the B fragment words of
     * column c = xb_col(row 8 j + q4, term s) of its row group's layout: n-tile TERMS j + c0 / 8
     * with c0 = xb_col(q4, s); in a whole group's core matrices words 4 (c0 % 8) + lane % 4
     * and 32 more, otherwise the word pair of lane 4 (c0 % 8) + lane % 4 (xb_core) */
    const bool core = xb_core(nt[rg], TERMS);
    const int bw1 = core ? 32 : 1;
    int boff[TERMS];
#pragma unroll
    for (int s = 0; s < TERMS; s++) {
        int c = xb_col(all[rg], lane >> 2, s, TERMS), l = (c & 7) * 4 + (lane & 3);
        boff[s] = (c >> 3) * 64 + (core ? l : 2 * l);
    }
    const bool active = (rg ? nr[1] : nr[0]) > 0;
    float run[2][4][4] = {}; /* mma.sync: [strip of the pair][j][e]; wgmma: [row group][j][e] */
    /* the ring as both paths take it: at stage s, thread 0 refills stage s - 1's slot (with
     * stage s - 1 + MG_ST) once every warp has released it, and all wait for stage s to land */
    auto ring_enter = [&](int s) {
        if (tid == 0 && s > 0 && s - 1 + MG_ST < nst) {
            const int r = s - 1 + MG_ST;
            mbar_wait(&empty[r % MG_ST], ((s - 1) / MG_ST) & 1);
            mbar_expect(&full[r % MG_ST], stage_bytes(r));
            copy_a(r);
            copy_b(r);
        }
        mbar_wait(&full[s % MG_ST], (s / MG_ST) & 1);
    };
    auto ring_release = [&](int s) { /* the warp is done with stage s's slot */
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s % MG_ST]);
    };
    /* the decode pieces: pend, the end (k-tile within g) of the one being summed; first, no
     * piece's value added to run yet */
    int pend = mg_piece_end(a, g, 0);
    bool first = true;
    auto piece_next = [&]() {
        first = false;
        if (pend < KT) pend = mg_piece_end(a, g, pend);
    };
    /* a tile whose row groups are whole (or absent) takes the warpgroups' path */
    bool wgp = false;
#if MG_WGMMA
    wgp = (nr[0] <= 0 || all[0] == GPU_GROUP) && (nr[1] <= 0 || all[1] == GPU_GROUP);
    if (wgp) {
        /* warpgroup w (warps 4w..4w+3) takes strips 4w..4w+3, a warp its own, over both row
         * groups: per k-tile one wgmma per row group, whose N = 8 NT columns hold term s of
         * rows 8 j..8 j+7 in n-tile TERMS j + s (xb_col), so a lane has a row's terms */
        constexpr int N = 8 * xb_ntiles(GPU_GROUP, TERMS);
        const int strip = warp;
        float d[2][N / 2];
        auto wclear = [&]() {
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int i = 0; i < N / 2; i++) d[r][i] = 0.f;
        };
        auto wfold = [&](bool first) { /* the end of a piece: its value, added in order */
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float *x = d[r] + 4 * TERMS * j + e;
                        float v = xb_terms_sum(TERMS, x[0], x[4 * (TERMS > 1)],
                                               x[4 * (TERMS > 2 ? 2 : 0)]);
                        run[r][j][e] = first ? v : run[r][j][e] + v;
                    }
        };
        wclear();
        for (int s = 0; s < nst; s++) {
            ring_enter(s);
            const uint4 *as = sm + (s % MG_ST) * MG_STAGE;
            const uint4 *b0 = as + MG_A, *b1 = as + MG_A + MG_B;
            const int kt0 = s * MG_KS, n = min(MG_KS, KT - kt0);
            uint4 af[MG_KS]; /* held until the wgmma reading them is waited for */
#pragma unroll
            for (int kk = 0; kk < MG_KS; kk++)
                af[kk] = kk < n ? as[kk * 256 + strip * 32 + lane] : make_uint4(0, 0, 0, 0);
            auto wait = [&]() {
                wg_commit();
                wg_wait0();
                wg_keep(d[0]), wg_keep(d[1]);
            };
            auto piece_end = [&]() {
                wfold(first);
                wclear();
                piece_next();
            };
            if (n == MG_KS && !(pend > kt0 && pend < kt0 + MG_KS)) {
                /* no piece ends inside the stage: its k-tiles back to back (a row group past
                 * the tile's rows multiplies stale inputs into sums that are never stored) */
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < MG_KS; kk++) {
                    wgmma<N>(d[0], af[kk], wg_desc(b0 + kk * MG_BK));
                    wgmma<N>(d[1], af[kk], wg_desc(b1 + kk * MG_BK));
                }
                wait();
                if (kt0 + MG_KS == pend) piece_end();
            } else {
                for (int kk = 0; kk < n; kk++) {
                    wg_fence();
                    wgmma<N>(d[0], af[kk], wg_desc(b0 + kk * MG_BK));
                    wgmma<N>(d[1], af[kk], wg_desc(b1 + kk * MG_BK));
                    wait();
                    if (kt0 + kk + 1 == pend) piece_end();
                }
            }
#pragma unroll
            for (int kk = 0; kk < MG_KS; kk++) wg_keep(af[kk]);
            ring_release(s);
        }
    }
#endif
    if (!wgp) {
        float acc[2][4][TERMS][4];
        auto clear = [&]() { /* the sums of a new piece */
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int t = 0; t < TERMS; t++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[i][j][t][e] = 0.f;
        };
        clear();
        for (int s = 0; s < nst; s++) {
            ring_enter(s);
            if (!active) {
                ring_release(s);
                continue;
            }

            const uint4 *as = sm + (s % MG_ST) * MG_STAGE;
            const uint2 *bs = (const uint2 *)(as + MG_A + rg * MG_B);
            const int kt0 = s * MG_KS, n = min(MG_KS, KT - kt0);
            auto step = [&](int kk) { /* k-tile kt0 + kk into the sums */
                const uint4 a0 = as[kk * 256 + (2 * sp) * 32 + lane];
                const uint4 a1 = as[kk * 256 + (2 * sp + 1) * 32 + lane];
                const uint32_t *b = (const uint32_t *)(bs + kk * MG_BK * 2);
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int t = 0; t < TERMS; t++) {
                        const uint32_t *bj = b + j * TERMS * 64 + boff[t];
                        const uint2 bv = make_uint2(bj[0], bj[bw1]);
                        mma_bf16(acc[0][j][t], a0, bv);
                        mma_bf16(acc[1][j][t], a1, bv);
                    }
            };
            auto fold = [&]() { /* the end of a piece: its value, added in order */
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float v = xb_terms_sum(TERMS, acc[i][j][0][e], acc[i][j][TERMS > 1][e],
                                                   acc[i][j][TERMS > 2 ? 2 : 0][e]);
                            run[i][j][e] = first ? v : run[i][j][e] + v;
                        }
                clear();
                piece_next();
            };
            if (n == MG_KS && !(pend > kt0 && pend < kt0 + MG_KS)) {
                /* no piece ends inside the stage: its k-tiles back to back */
#pragma unroll
                for (int kk = 0; kk < MG_KS; kk++) step(kk);
                if (kt0 + MG_KS == pend) fold();
            } else {
                for (int kk = 0; kk < n; kk++) {
                    step(kk);
                    if (kt0 + kk + 1 == pend) fold();
                }
            }
            ring_release(s);
        }
    }
    __syncthreads(); /* every copy has landed and been used: the ring becomes the tile of values */

    float *val = (float *)sm; /* [MG_ROWS][128]: row t, output g * 128 + i */
    if (wgp) {
        const int q4 = lane >> 2, q = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int t = r * GPU_GROUP + 8 * j + 2 * q + (e & 1);
                    val[t * 128 + warp * 16 + q4 + 8 * (e >> 1)] = run[r][j][e];
                }
    } else if (active) {
        const int q4 = lane >> 2, q = lane & 3;
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int t = rg * GPU_GROUP + 8 * j + 2 * q + (e & 1);
                    int o = (2 * sp + i) * 16 + q4 + 8 * (e >> 1);
                    val[t * 128 + o] = run[i][j][e];
                }
    }
    __syncthreads();
    mm_args e = a;
    e.T = rows, e.row0 = a.row0 + t0;
    __shared__ float inv[MG_ROWS];
    float *pre = val + MG_ROWS * 128; /* [rows][128] residual rows, [128] norm weights */
    mm_epi_gather(e, g, 128 * rows, inv, pre);
    mm_epilogue<TERMS>(e, g, val, 128 * rows, inv, pre, a.qe);
}

/* ---- Tiles of 128 rows (bf16 inputs, sm_90a): four whole row groups under one wgmma ----
 * k_mmg's tiles of 64 rows read each weight stage once per 64 rows, and its wgmmas are
 * m64n32k16, one per row group. Here a block's tile is one strip group by 128 rows (four
 * whole groups): per k-tile each warpgroup issues one m64n128k16 whose B spans the four
 * groups. The stage's inputs land k-tile by k-tile and group by group (one tensor copy, or
 * 16 bulk copies where no tensor map can be made) so that the 16 n-tiles of a k-tile lie 256
 * bytes apart (wg_desc), as the four groups' 4 n-tiles each would if the groups were one. A
 * column is a row and its sums never meet another column's, so the bits are k_mmg's (and
 * gemv.cu's): per decode piece, k-tiles summed from zero in order, pieces added in order.
 * Only whole 128-row tiles come here; mmg_launch gives the rest of a chunk to k_mmg. */
#define M4_ROWS 128
#define M4_SLOTS 24                /* k-tiles of weights and inputs in the ring (8 KB each) */
/* the ring; after the loop, the tile of values and the epilogue's inputs */
#define M4_SMEM (M4_SLOTS * 8192)
/* k_mmg4s: where, after its loop, a block receives the other rank's sums (64 KB) */
#define M4_RECV (M4_SMEM - 65536)
/* measuring builds, results wrong (LAB_BUILDS g1 g2 g3 of bench/gpu_pack.sh): k_mmg4<0> with
 * no refills past the ring's first fill (1: the products and the shared-memory reads alone),
 * without its wgmmas (2: the copies alone), or without its epilogue (3) */
#ifndef DSPARK_LAB_MMG4
#define DSPARK_LAB_MMG4 0
#endif

/* MG_KS k-tiles a stage (8 measured slower), 24 / MG_KS stages in the ring. Thread 0 refills
 * a slot once every warp has released it (an mbarrier it waits on).
 * TMA: a stage's inputs (MG_KS k-tiles of four row groups) arrive in one tensor copy through
 * the tensor map tm (mmg4_map), in place of a bulk copy per k-tile and group; the bytes land
 * where they did, so the bits do not change. */
/* A tile split between the two blocks of a cluster (SPLIT, k_mmg4s): the tile's last one or
 * two decode pieces (mmg4_split) go to rank 1, the others to rank 0, each streaming only its
 * own k-tiles. Rank 0 ends with the sum of its pieces in order (run); rank 1 with its first
 * piece in run and its second, unadded, in d. Through distributed shared memory each rank
 * gives the other what it lacks for its own 64 rows, and each adds them in the decode order,
 * ((rank 0's run + piece) + piece), so the bits are the unsplit tile's. Each rank then runs
 * the epilogue of its 64 rows. */
__device__ __forceinline__ unsigned cluster_rank(void) {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync_all(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* shared address p of this block as the same offset in the cluster's block `rank` */
__device__ __forceinline__ unsigned cluster_addr(const void *p, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
    return r;
}
__device__ __forceinline__ void st_cluster4(unsigned addr, float x, float y, float z, float w) {
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(x), "f"(y),
                 "f"(z), "f"(w)
                 : "memory");
}
/* where rank 1's k-tiles of group g start: the last piece, or the last two where the group
 * has four or more; *two: rank 1 holds two pieces */
__device__ __forceinline__ int mmg4_split(const mm_args &a, int g, bool *two) {
    int last = 0, before = 0, n = 0;
    for (int e = 0; e < a.KT; n++) before = last, last = e, e = mg_piece_end(a, g, e);
    *two = n >= 4;
    return *two ? before : last;
}

template <int TMA, int SPLIT>
__device__ __forceinline__ void mmg4_tile(const mm_args &a, int R, const CUtensorMap &tm,
                                          unsigned tile, bool after = false) {
#if MG_WGMMA
    constexpr int KS = MG_KS, ST = M4_SLOTS / KS, SA = KS * 256, STAGE = 2 * SA; /* uint4 */
    extern __shared__ __align__(128) uint4 sm4[]; /* a tensor copy's destination: 128 bytes */
    uint4 *sm = sm4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    const int g = tile / R, t0 = (tile % R) * M4_ROWS, KT = a.KT;
    /* SPLIT: this rank's k-tiles [k_lo, k_hi), in stages of KS from S0 (KT % KS == 0) */
    const unsigned rank = SPLIT ? cluster_rank() : 0;
    bool two = false;
    int k_lo = 0, k_hi = KT;
    if (SPLIT) {
        const int kmid = mmg4_split(a, g, &two);
        (rank ? k_lo : k_hi) = kmid;
    }
    const int S0 = SPLIT ? k_lo / KS * KS : 0;
    /* a whole group's input for one k-tile: 4 n-tiles of 256 bytes (64 uint4); a.xb is the
     * group of a.row0 */
    const uint4 *xg = (const uint4 *)(a.xb + (size_t)(t0 / GPU_GROUP) * xb_group_stride(KT));
    const size_t gstride = xb_group_stride(KT) / 2; /* uint4 */
    const uint4 *wg = a.w + (size_t)g * KT * 256;
    const int nst = SPLIT ? (k_hi - S0 + KS - 1) / KS : (KT + KS - 1) / KS;

    __shared__ __align__(8) unsigned long long full[ST], empty[ST];
    if (tid == 0) {
        ring_init(full, empty, ST, 8);
        if (TMA) tma_prefetch(&tm);
    }
    __syncthreads();
    auto nkt = [&](int s) { return min(KS, KT - S0 - s * KS); };
    auto copy_a = [&](int s) {
        bulk_copy(sm + (s % ST) * STAGE, wg + (size_t)(S0 + s * KS) * 256, nkt(s) * 4096u,
                  &full[s % ST]);
    };
    auto copy_b = [&](int s) { /* [k-tile][group][n-tile] */
        const int kt0 = S0 + s * KS, n = nkt(s);
        uint4 *dst = sm + (s % ST) * STAGE + SA;
        if constexpr (TMA) {
            tma_load_4d(dst, &tm, 0, 0, t0 / GPU_GROUP, kt0, &full[s % ST]);
        } else {
            for (int kk = 0; kk < n; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    bulk_copy(dst + (kk * 4 + r) * 64,
                              xg + r * gstride + (size_t)(kt0 + kk) * 64, 1024u, &full[s % ST]);
        }
    };
    if (tid == 0) /* weights never change: the first stages' before the wait */
        for (int s = 0; s < ST && s < nst; s++) mbar_expect(&full[s], nkt(s) * 8192u), copy_a(s);
    /* after: launched right after the unsplit tiles' launch, whose blocks all waited for the
     * kernel before it (what this one reads) before letting it start; this one then waits
     * for them at its end, so that what waits for it waits for both */
    if (!after) pdl_wait();
    pdl_launch();
    if (tid == 0)
        for (int s = 0; s < ST && s < nst; s++) copy_b(s);

    float d[64], run[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.f, run[i] = 0.f;
    int pend = mg_piece_end(a, g, k_lo);
    bool first = true;
    auto piece_end = [&]() { /* its value, added in order; a new piece from zero */
        if (SPLIT && !first && pend == KT) return; /* rank 1's second piece stays in d */
#pragma unroll
        for (int i = 0; i < 64; i++) run[i] = first ? d[i] : run[i] + d[i], d[i] = 0.f;
        first = false;
        if (pend < KT) pend = mg_piece_end(a, g, pend);
    };
    auto wait = [&]() {
        wg_commit();
        wg_wait0();
        wg_keep(d);
    };
    for (int s = 0; s < nst; s++) {
        if (tid == 0 && s > 0 && s - 1 + ST < nst && DSPARK_LAB_MMG4 != 1) {
            /* stage s - 1's slot, once released */
            const int r = s - 1 + ST;
            mbar_wait(&empty[r % ST], ((s - 1) / ST) & 1);
            mbar_expect(&full[r % ST], nkt(r) * 8192u);
            copy_a(r);
            copy_b(r);
        }
        if (DSPARK_LAB_MMG4 != 1 || s < ST) mbar_wait(&full[s % ST], (s / ST) & 1);
        const uint4 *as = sm + (s % ST) * STAGE, *bs = as + SA;
        const int kt0 = S0 + s * KS, n = nkt(s);
        /* SPLIT: the stage's k-tiles of this rank, [ka, kb) */
        const int ka = SPLIT ? max(0, k_lo - kt0) : 0, kb = SPLIT ? min(n, k_hi - kt0) : n;
        uint4 af[KS]; /* held until the wgmma reading them is waited for */
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
            af[kk] = kk < n ? as[kk * 256 + warp * 32 + lane] : make_uint4(0, 0, 0, 0);
        if (n == KS && (!SPLIT || (ka == 0 && kb == KS)) &&
            !(pend > kt0 && pend < kt0 + KS)) { /* no piece ends inside */
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                if (DSPARK_LAB_MMG4 != 2) wgmma<128>(d, af[kk], wg_desc(bs + kk * 256));
            wait();
            if (kt0 + KS == pend) piece_end();
        } else if (SPLIT) { /* unrolled, so that af stays in registers */
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                if (kk < ka || kk >= kb) continue;
                wg_fence();
                wgmma<128>(d, af[kk], wg_desc(bs + kk * 256));
                wait();
                if (kt0 + kk + 1 == pend) piece_end();
            }
        } else {
            for (int kk = 0; kk < n; kk++) {
                wg_fence();
                wgmma<128>(d, af[kk], wg_desc(bs + kk * 256));
                wait();
                if (kt0 + kk + 1 == pend) piece_end();
            }
        }
#pragma unroll
        for (int kk = 0; kk < KS; kk++) wg_keep(af[kk]);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s % ST]);
    }
    if (SPLIT)
        cluster_sync_all(); /* both ranks' rings are done with: each may write the other's */
    else
        __syncthreads(); /* every copy has landed and been used: the ring becomes the tile */

    float *val = (float *)sm; /* [M4_ROWS][128]: row t, output g * 128 + i */
    float *pre = val + M4_ROWS * 128; /* [64][128] residual rows, [128] norm weights */
    /* the tile's rows' group sums of squares (a.in_ss), staged after pre by coalesced copies
     * (a row a warp, all in flight while the sums below are stored), a row's sums 8 bytes
     * further apart than its width so that a thread a row reads them without bank conflicts;
     * SPLIT: this rank's 64 rows, below what the other rank writes (M4_RECV) */
    double *sst = (double *)(pre + MG_ROWS * 128 + 128);
    const int sstr = a.n_ssg + 1;
    constexpr int SR = SPLIT ? MG_ROWS : M4_ROWS;
    const int r0 = SPLIT ? (int)rank * MG_ROWS : 0; /* the first of them in the tile */
    const bool ss_st = a.in_ss && DSPARK_LAB_QKV != 4 &&
                       (size_t)((char *)(sst + SR * sstr) - (char *)sm) <=
                           (SPLIT ? M4_RECV : M4_SMEM);
    if (ss_st) {
        const double *ss = a.in_ss + (size_t)(a.row0 + t0 + r0) * a.n_ssg;
        for (int t = warp; t < SR; t += 8)
            for (int c = lane; c < a.n_ssg; c += 32)
                cp_async8(sst + t * sstr + c, ss + (size_t)t * a.n_ssg + c);
        cp_async_commit();
    }
    if (SPLIT) { /* a thread's sums of the other rank's rows into that rank's M4_RECV, as
                  * [float4 q][thread]; rank 0 holds j < 8 (rows 0..63), rank 1 j >= 8 */
        float4 *rv = (float4 *)((char *)sm + M4_RECV);
        const unsigned to = cluster_addr(rv + tid, rank ^ 1u);
#pragma unroll
        for (int q = 0; q < 8; q++) {
            if (rank == 0) {
                const float *r = run + 32 + 4 * q;
                st_cluster4(to + q * 4096u, r[0], r[1], r[2], r[3]);
            } else {
                const float *r = run + 4 * q, *x = d + 4 * q;
                st_cluster4(to + q * 4096u, r[0], r[1], r[2], r[3]);
                if (two) st_cluster4(to + (8 + q) * 4096u, x[0], x[1], x[2], x[3]);
            }
        }
        cluster_sync_all();
#pragma unroll
        for (int q = 0; q < 8; q++) { /* the decode order: ((rank 0's run + piece) + piece) */
            const float4 x = rv[q * 256 + tid];
            const float xv[4] = {x.x, x.y, x.z, x.w};
            if (rank == 0) {
                float *r = run + 4 * q;
                const float4 y = two ? rv[(8 + q) * 256 + tid] : make_float4(0.f, 0.f, 0.f, 0.f);
                const float yv[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    r[e] = r[e] + xv[e];
                    if (two) r[e] = r[e] + yv[e];
                }
            } else {
                float *r = run + 32 + 4 * q;
                const float *y = d + 32 + 4 * q;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    r[e] = xv[e] + r[e];
                    if (two) r[e] = r[e] + y[e];
                }
            }
        }
    }
    {
        const int q4 = lane >> 2, q = lane & 3;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (!SPLIT || (unsigned)(j >> 3) == rank)
                    val[(8 * j + 2 * q + (e & 1)) * 128 + warp * 16 + q4 + 8 * (e >> 1)] =
                        run[4 * j + e];
    }
    if (ss_st) cp_async_wait0();
    __syncthreads();
    /* 1 / rms of the tile's rows, a thread a row: ss_inv_thread's adds in its order (the same
     * bits), from shared memory (before, each half's 64 threads loaded their rows' sums from
     * L2, 32 scattered loads a thread, while the other warps waited) */
    __shared__ float inv[M4_ROWS];
    if (ss_st && tid < SR)
        inv[r0 + tid] = ss_inv_seq(sst + tid * sstr, a.n_ssg, a.H_norm, a.eps);
    const int h_end = SPLIT ? (int)rank + 1 : M4_ROWS / MG_ROWS;
    for (int h = SPLIT ? (int)rank : 0; h < h_end && DSPARK_LAB_MMG4 != 3; h++) {
        /* the epilogue's buffers hold 64 rows */
        mm_args e = a;
        e.T = MG_ROWS, e.row0 = a.row0 + t0 + h * MG_ROWS;
        if (h) __syncthreads(); /* the last half is done with pre */
        float *ih = inv + h * MG_ROWS;
        mm_epi_gather(e, g, 128 * MG_ROWS, ih, pre, ss_st);
        mm_epilogue<1>(e, g, val + h * MG_ROWS * 128, 128 * MG_ROWS, ih, pre, a.qe);
    }
    if (after) pdl_wait();
#else
    __trap(); /* launched only where the sm_90a code runs (mmg_init) */
#endif
}

template <int TMA>
__global__ void __launch_bounds__(256, 1)
    k_mmg4(mm_args a, int R, const __grid_constant__ CUtensorMap tm) {
    mmg4_tile<TMA, 0>(a, R, tm, blockIdx.x);
}
/* tiles tile0.. of a launch, each split between the two blocks of a cluster (inputs by tensor
 * copies, KT % MG_KS == 0); tiles 0..tile0 - 1 are k_mmg4's launch just before */
__global__ void __launch_bounds__(256, 1)
    k_mmg4s(mm_args a, int R, const __grid_constant__ CUtensorMap tm, int tile0) {
    mmg4_tile<1, 1>(a, R, tm, (unsigned)tile0 + (blockIdx.x >> 1), tile0 > 0);
}

static int mmg_ok; /* the device gives a block mg_smem(3) of shared memory */
static int mmg4_ok; /* and k_mmg4's sm_90a code runs on it */
static int mmg4s_pairs; /* clusters of k_mmg4s that fit on the device at once (0: none) */
static long mmg4s_tiles; /* tiles launched split (gpu_split_tiles) */

extern "C" long gpu_split_tiles(void) {
    return mmg4s_tiles;
}
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled; /* NULL: inputs by bulk copies */

/* k_mmg4's map of a launch's inputs: from a->xb, k-tile kt of row group r at 1 KB x kt +
 * r x the group stride, as 4 dimensions of 2-byte units (256, the two halves of a k-tile's
 * 1 KB, the R4 x 4 groups, the KT k-tiles), a box of a stage's four k-tiles of four groups,
 * which lands as [k-tile][group][1 KB] (gemm.cu's layout of a stage's inputs). 0: made;
 * 1: no encoder, or K not in whole boxes (bulk copies); -1: the driver refused it */
static int mmg4_map(CUtensorMap *tm, const mm_args *a, int groups) {
    /* whole boxes only: a box past KT would land zeros, and count their bytes */
    if (!encode_tiled || a->KT % MG_KS) return 1;
    const cuuint64_t dim[4] = {256, 2, (cuuint64_t)groups, (cuuint64_t)a->KT};
    const cuuint64_t stride[3] = {512, xb_group_stride(a->KT) * 8, 1024}; /* bytes, dims 1-3 */
    const cuuint32_t box[4] = {256, 2, 4, MG_KS}, one[4] = {1, 1, 1, 1};
    return encode_tiled(tm, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, (void *)a->xb, dim, stride, box,
                        one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? 0
               : -1;
}

int mmg_init(void) {
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    mmg_ok = optin >= mg_smem(3) + 4096 &&
             cudaFuncSetAttribute(k_mmg<3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  mg_smem(3)) == cudaSuccess &&
             cudaFuncSetAttribute(k_mmg<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  mg_smem(1)) == cudaSuccess;
    cudaFuncAttributes fa;
    mmg4_ok = mmg_ok && optin >= M4_SMEM + 4096 &&
              cudaFuncGetAttributes(&fa, k_mmg4<0>) == cudaSuccess && fa.binaryVersion == 90 &&
              cudaFuncSetAttribute(k_mmg4<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   M4_SMEM) == cudaSuccess &&
              cudaFuncSetAttribute(k_mmg4<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   M4_SMEM) == cudaSuccess;
    if (!mmg4_ok) cudaGetLastError(); /* k_mmg4 unavailable: k_mmg takes every tile */
    if (mmg4_ok) { /* how many split tiles (clusters of two) can run at once */
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 2, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(2), cfg.blockDim = dim3(256), cfg.dynamicSmemBytes = M4_SMEM;
        cfg.attrs = at, cfg.numAttrs = 1;
        if (cudaFuncSetAttribute(k_mmg4s, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 M4_SMEM) != cudaSuccess ||
            cudaOccupancyMaxActiveClusters(&mmg4s_pairs, k_mmg4s, &cfg) != cudaSuccess)
            mmg4s_pairs = 0;
        cudaGetLastError();
    }
    if (mmg4_ok) { /* the driver's tensor-map encoder, for k_mmg4's input copies */
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled,
                                             12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            encode_tiled = NULL;
        cudaGetLastError();
    }
    if (!mmg_ok) {
        cudaGetLastError();
        log_info("GPU: %d KB of shared memory a block; long passes run a launch per %d rows",
                 optin >> 10, GPU_GROUP);
    }
    return OK;
}

/* Whether one launch over all rows beats a launch per row group: every SM needs a tile
 * (mode 1), or always for more than GPU_GROUP rows (mode 2, for tests); never (0). */
int mmg_wanted(const gpu_model *g, const dmat *w, int T) {
    if (!mmg_ok || !w->mma || T <= GPU_GROUP || !g->gemm || w->nb <= 0) return 0;
    if (g->gemm == 2) return 1;
    return (long)cdiv(w->MS, 8) * cdiv(T, MG_ROWS) >= (long)g->sms * 3 / 4;
}

/* How many of a chunk's T rows (from a row group's start) go in k_mmg4's 128-row tiles: with
 * bf16 inputs, always (g->gemm4 2, for tests) or where its waves of tiles are estimated to
 * take less time than k_mmg's alone (1). A 128-row tile moves 32 KB a stage against a 64-row
 * tile's 24 KB, so it is taken to cost 4/3 as much; a wave is one tile per SM, and the rest of
 * the chunk is a launch of its own after them. */
static int mmg4_rows(const gpu_model *g, const mm_args *a, int G) {
    const int R4 = a->T / M4_ROWS;
    if (!mmg4_ok || g->terms != 1 || !g->gemm4 || R4 == 0 || a->row0 % GPU_GROUP) return 0;
    if (g->gemm4 == 1) {
        const long sms = g->sms, w64 = cdiv((size_t)G * cdiv(a->T, MG_ROWS), sms),
                   w4 = cdiv((size_t)G * R4, sms),
                   wrest = cdiv((size_t)G * cdiv(a->T - R4 * M4_ROWS, MG_ROWS), sms);
        if (4 * w4 + 3 * wrest >= 3 * w64) return 0;
    }
    return R4 * M4_ROWS;
}

/* How many of a launch's W tiles (the last ones) k_mmg4s splits between two blocks each:
 * the tiles of a last wave that fills at most half the SMs, whose blocks then each stream
 * about half a tile (g->gemm4_split 1); as many as fit at once (2, for tests); none (0). A
 * group must have two or more decode pieces (ks >= 2: the same pieces in every group). */
static int mmg4_split_tiles(const gpu_model *g, const mm_args *a, int W) {
    if (!g->gemm4_split || mmg4s_pairs <= 0 || a->ks < 2 || a->KT % MG_KS) return 0;
    if (g->gemm4_split == 2) return W < mmg4s_pairs ? W : mmg4s_pairs;
    const int m = W % g->sms;
    return W > g->sms && 2 * m <= g->sms && m <= mmg4s_pairs ? m : 0;
}

cudaError_t mmg_launch(gpu_model *g, const mm_args *a) {
    int G = (int)cdiv(a->MS, 8), T4 = mmg4_rows(g, a, G);
    if (T4 > 0) {
        const int R4 = T4 / M4_ROWS;
        CUtensorMap tm;
        memset(&tm, 0, sizeof tm);
        cudaError_t e;
        static int map_warned; /* once a process */
        const int map = g->gemm4_tma ? mmg4_map(&tm, a, R4 * 4) : 1;
        if (map < 0 && !map_warned++)
            log_info("GPU: the driver made no tensor map for the prompt kernel's inputs; they "
                     "come by bulk copies");
        const int W = G * R4, m = map == 0 ? mmg4_split_tiles(g, a, W) : 0;
        if (map == 0) {
            e = W > m ? launch(k_mmg4<1>, dim3(W - m), dim3(256), M4_SMEM, g->stream, *a, R4, tm)
                      : cudaSuccess;
            if (e == cudaSuccess && m > 0) {
                e = launch_clusters(k_mmg4s, dim3(2 * m), dim3(256), M4_SMEM, g->stream, 2u, *a,
                                    R4, tm, W - m);
                mmg4s_tiles += m;
            }
        } else
            e = launch(k_mmg4<0>, dim3(G * R4), dim3(256), M4_SMEM, g->stream, *a, R4, tm);
        if (e != cudaSuccess || T4 == a->T) return e;
        mm_args t = *a; /* the rest of the chunk */
        t.T -= T4, t.row0 += T4, t.xb += (size_t)(T4 / GPU_GROUP) * xb_group_stride(a->KT);
        return mmg_launch(g, &t);
    }
    int R = (int)cdiv(a->T, MG_ROWS);
    if (g->terms == 1)
        return launch(k_mmg<1>, dim3(G * R), dim3(256), mg_smem(1), g->stream, *a, R);
    return launch(k_mmg<3>, dim3(G * R), dim3(256), mg_smem(3), g->stream, *a, R);
}
