/* bench/bench_matmul.c: cpu_matmul alone over every matmul weight of a model folder, in
 * forward order (q, k, v, o, gate, up, down per layer, then lm_head), from the file's map as
 * the model uses it. Prints the time of one pass and its effective weight bandwidth for
 * n = 1, 2, 4, 8, 16 token rows, at 1 and 2 threads. Isolates the kernel from the rest of the
 * forward pass.
 *
 * With --huge the weights are first copied into anonymous memory backed by transparent huge
 * pages, to show what the loader's choice of pages costs.
 *
 *   bench_matmul MODEL_DIR [reps] [--huge]
 */
#include "backend/cpu/cpu.h"
#include "bench.h"
#include "format/hf_config.h"
#include "format/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct mat {
    const void *data;
    enum dtype dt;
    int m, k;
};

static int collect(const struct st_set *st, const struct hf_config *c, struct mat *out) {
    static const char *names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                  "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                  "mlp.down_proj"};
    int n = 0;
    char nm[128];
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < 7; i++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, names[i]);
            const struct st_tensor *t = st_find(st, nm);
            if (!t || !t->dtype_known) return -1;
            out[n++] = (struct mat){t->data, t->dtype, (int)t->shape[0], (int)t->shape[1]};
        }
    const struct st_tensor *t = st_find(st, "lm_head.weight");
    if (!t) t = st_find(st, "model.embed_tokens.weight");
    if (!t) return -1;
    out[n++] = (struct mat){t->data, t->dtype, (int)t->shape[0], (int)t->shape[1]};
    return n;
}

struct pass {
    struct pool *pool;
    const struct mat *mats;
    int n_mats, n;
    const float *x;
    float *y;
};

static int run_pass(void *arg) {
    const struct pass *p = arg;
    for (int i = 0; i < p->n_mats; i++)
        cpu_matmul(p->pool, p->y, p->x, p->mats[i].data, p->mats[i].dt, NULL, p->n, p->mats[i].k,
                   p->mats[i].m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [reps]\n", argv[0]);
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    struct hf_config cfg;
    struct st_set *st;
    if (hf_config_load(argv[1], &cfg) || st_open_dir(argv[1], &st)) return 1;
    struct mat *mats = calloc((size_t)cfg.n_layers * 7 + 1, sizeof *mats);
    int nm = collect(st, &cfg, mats);
    if (nm < 0) {
        fprintf(stderr, "%s: missing weights\n", argv[1]);
        return 1;
    }
    size_t bytes = 0;
    int maxk = 0, maxm = 0;
    for (int i = 0; i < nm; i++) {
        bytes += (size_t)mats[i].m * mats[i].k * dtype_size(mats[i].dt);
        if (mats[i].k > maxk) maxk = mats[i].k;
        if (mats[i].m > maxm) maxm = mats[i].m;
    }
    int huge = argc > 3 && !strcmp(argv[3], "--huge");
    if (huge) { /* one 2 MiB-aligned anonymous copy of every matrix, in pass order */
        size_t align = (size_t)2 << 20;
        char *base =
            mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) return 1;
        char *p = (char *)(((uintptr_t)base + align - 1) & ~(uintptr_t)(align - 1));
        madvise(p, bytes, MADV_HUGEPAGE);
        for (int i = 0; i < nm; i++) {
            size_t b = (size_t)mats[i].m * mats[i].k * dtype_size(mats[i].dt);
            memcpy(p, mats[i].data, b);
            mats[i].data = p;
            p += b;
        }
    }
    const int ns[] = {1, 2, 4, 8, 16};
    float *x = malloc(sizeof(float) * 16 * (size_t)maxk);
    float *y = malloc(sizeof(float) * 16 * (size_t)maxm);
    for (size_t i = 0; i < 16 * (size_t)maxk; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f;
    printf("matmul-only pass: %d matrices, %.3f GB, %s\n", nm, bytes / 1e9,
           huge ? "copied to huge pages" : "in the file's map");
    printf("threads  n   ms/pass   GB/s  ratio-to-n=1\n");
    for (int th = 1; th <= 2; th++) {
        struct pool *pool = pool_new(th);
        double t1 = 0;
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            int n = ns[ni];
            struct pass ps = {pool, mats, nm, n, x, y};
            if (ni == 0) run_pass(&ps); /* warm the page cache */
            int clean;
            double best = bench_min(NULL, run_pass, &ps, reps, &clean);
            if (n == 1) t1 = best;
            printf("%7d %3d %9.2f %6.1f %8.2f%s\n", th, n, best * 1e3, bytes / best / 1e9,
                   best / t1, clean ? "" : "  (disturbed by other processes)");
        }
        pool_free(pool);
        bench_quiesce();
    }
    free(x);
    free(y);
    free(mats);
    st_close(st);
    return 0;
}
