/* bench-cuda-ops: the time of each CUDA backend op on the shapes of a real
 * model file (the 7B Q4_K_M that llmq-mkmodel writes), against the
 * roofline: bytes over the 4.24 TB/s copy bandwidth measured on the H200,
 * FLOPs as TFLOP/s.
 *
 * usage: bench-cuda-ops MODEL.gguf
 *
 * Each figure is the median over 7 rounds of the mean time of a burst of
 * back-to-back calls (host clock around the burst and one sync), so short
 * kernels include the host's launch gaps; and again with the burst recorded
 * as one CUDA graph and replayed, as decode steps run (graphs.cu), where
 * kernels follow each other with the device's own gaps and, with PDL,
 * start during their predecessor's tail (the figure to read for decode).  Matmuls
 * rotate over the same matrix of up to 8 layers (more bytes than the
 * 60 MB L2 holds) so that weights come from DRAM, as in a forward pass.
 * Inputs are random, never zeros.  The matmul rows at 64 and 512 rows are
 * timed twice: "matmul" with the backend's choice (the wgmma GEMM,
 * gemm_sm90.cu, on sm_90a builds) and "matmul (mma.sync)" on a second
 * backend made with LLMQ_GEMM_SM90=0 (gemm.cu).  Output: a markdown table. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "kernels/backend.h"
#include "model/gguf.h"

#define COPY_BW 4.24e12
#define ROUNDS 7
#define BURST 40
#define MAX_LAYERS 8

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*op_fn)(backend *be, void *arg, int call);

typedef struct op_time {
    double burst; /* seconds per call, calls issued one by one */
    double graph; /* seconds per call, the burst replayed as one CUDA graph */
} op_time;

/* One burst of calls: issued, or recorded and replayed under *key
 * (graph_begin's protocol: eager the first time, recorded the second,
 * replayed after).  -1 on a backend error. */
static int burst(backend *be, op_fn fn, void *arg, const be_graph_key *key)
{
    llmq_err err;
    int again = BE_GRAPH_REDO;
    if (key && be->ops->graph_begin && be->ops->graph_begin(be, key) == 1)
        again = BE_GRAPH_DONE;
    while (again == BE_GRAPH_REDO) {
        for (int call = 0; call < BURST; call++)
            fn(be, arg, call);
        again = key && be->ops->graph_end ? be->ops->graph_end(be) : BE_GRAPH_DONE;
        key = NULL; /* a step issued again runs eagerly */
    }
    if (be->ops->sync(be, &err) != 0) {
        fprintf(stderr, "bench-cuda-ops: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Median seconds per call of fn over ROUNDS bursts; -1 on a backend error. */
static double time_bursts(backend *be, op_fn fn, void *arg, const be_graph_key *key)
{
    double t[ROUNDS];
    for (int r = -2; r < ROUNDS; r++) { /* two unmeasured: eager, then recorded */
        const double t0 = clock_mono_ms_f() / 1e3;
        if (burst(be, fn, arg, key) != 0)
            return -1;
        if (r >= 0)
            t[r] = (clock_mono_ms_f() / 1e3 - t0) / BURST;
    }
    qsort(t, ROUNDS, sizeof *t, cmp_double);
    return t[ROUNDS / 2];
}

/* Both timings of fn.  In a graph the host's launch cost is gone and the
 * kernels run back to back (overlapping their predecessor with PDL), as
 * in a decode step.  Each op's recording needs a key no other op has: the
 * monotonic clock in ns after its eager timing, which took milliseconds. */
static op_time time_op(backend *be, op_fn fn, void *arg)
{
    op_time t = {time_bursts(be, fn, arg, NULL), -1};
    const be_graph_key key = {(uint64_t)(clock_mono_ms_f() * 1e6), 1, 0, 0, 128};
    t.graph = time_bursts(be, fn, arg, &key);
    return t;
}

static void fill_random(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const float v = (float)((seed >> 40) * 0x1p-24) * 2.0f - 1.0f;
        x[i] = v != 0.0f ? v : 0.5f;
    }
}

static void *dev_random(backend *be, size_t n, uint64_t seed)
{
    llmq_err err;
    float *h = malloc(n * sizeof *h);
    void *d = h ? be->ops->alloc(be, n * sizeof *h, &err) : NULL;
    if (d) {
        fill_random(h, n, seed);
        if (be->ops->upload(be, d, h, n * sizeof *h, &err) != 0) {
            be->ops->free(be, d);
            d = NULL;
        }
    }
    free(h);
    return d;
}

static void print_row(const char *op, const char *shape, int rows, op_time t, double bytes,
                      double flops)
{
    if (t.burst < 0 || t.graph < 0) {
        printf("| %s | %s | %d | failed | | | | | |\n", op, shape, rows);
        return;
    }
    printf("| %s | %s | %d | %.1f | %.0f | %.0f%% | %.1f | %.1f | %.0f%% |\n", op, shape, rows,
           t.burst * 1e6, bytes / t.burst / 1e9, 100 * bytes / t.burst / COPY_BW,
           flops / t.burst / 1e12, t.graph * 1e6, 100 * bytes / t.graph / COPY_BW);
    fflush(stdout);
}

/* ---- matmul ---- */

typedef struct mm_arg {
    be_weight *w[MAX_LAYERS];
    int n_w;
    be_act *in;
    float *out;
} mm_arg;

static void mm_call(backend *be, void *arg, int call)
{
    mm_arg *a = arg;
    be->ops->matmul(be, a->w[call % a->n_w], a->in, a->out, false);
}

/* The matmul rows of one weight role and type at each of n_rows row counts,
 * under the name op. */
static void bench_role(backend *be, const gguf_file *f, const char *role, quant_type type,
                       int n_layers, const char *op, const int *rows, size_t n_rows)
{
    mm_arg a = {.n_w = 0};
    const gguf_tensor *t = NULL;
    llmq_err err;
    for (int l = 0; l < n_layers && a.n_w < MAX_LAYERS; l++) {
        char name[96];
        if (!strcmp(role, "output"))
            snprintf(name, sizeof name, "output.weight");
        else
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, role);
        const gguf_tensor *c = gguf_find_tensor(f, name);
        if (!c || c->type != type)
            continue;
        if (be->ops->weight_load(be, c->type, (int64_t)c->ne[1], (int64_t)c->ne[0], c->data,
                                 &a.w[a.n_w], &err) != 0) {
            fprintf(stderr, "bench-cuda-ops: %s: %s\n", name, err.msg);
            break;
        }
        a.n_w++;
        t = c;
        if (!strcmp(role, "output"))
            break;
    }
    if (a.n_w == 0 || !t)
        return;
    const int64_t n = (int64_t)t->ne[1], k = (int64_t)t->ne[0];
    for (size_t i = 0; i < n_rows; i++) {
        be_act in;
        const int m = rows[i];
        if (be->ops->act_create(be, m, (int32_t)k, &in, &err) != 0)
            break;
        void *x = dev_random(be, (size_t)m * k, (uint64_t)m * 977 + 1);
        float *out = be->ops->alloc(be, (size_t)m * n * sizeof(float), &err);
        if (x && out) {
            be->ops->free(be, in.x);
            in.x = x;
            in.rows = m;
            in.cols = (int32_t)k;
            in.q_valid = false;
            a.in = &in;
            a.out = out;
            char shape[96];
            snprintf(shape, sizeof shape, "%s %s %lld x %lld (%d layers)", role,
                     quant_type_name(type), (long long)n, (long long)k, a.n_w);
            const double bytes = (double)t->nbytes + (double)m * (k + n) * 4;
            print_row(op, shape, m, time_op(be, mm_call, &a), bytes, 2.0 * m * n * k);
        } else {
            be->ops->free(be, x);
        }
        be->ops->free(be, out);
        be->ops->act_destroy(be, &in);
    }
    for (int i = 0; i < a.n_w; i++)
        be->ops->weight_free(be, a.w[i]);
}

/* ---- attention over a paged cache ---- */

typedef struct att_arg {
    be_kv *kv;
    const float *q;
    be_attn_batch b;
    be_attn_shape sh;
    be_act *out;
} att_arg;

static void att_call(backend *be, void *arg, int call)
{
    att_arg *a = arg;
    (void)call;
    be->ops->attention(be, a->kv, 0, a->q, &a->b, &a->sh, a->out);
}

/* n_seqs sequences of ctx cached tokens in a cache of type kt; each has
 * `rows` query rows at its last positions (1: decode, ctx: a whole
 * prefill). */
static void bench_attention(backend *be, be_kv_type kt, int n_head, int n_head_kv, int hd,
                            int n_seqs, int ctx, int rows)
{
    enum { BS = 16 };
    const int per_seq = (ctx + BS - 1) / BS, n_blocks = per_seq * n_seqs, kv_dim = n_head_kv * hd;
    const int n_rows = n_seqs * rows;
    llmq_err err;
    be_kv *kv = NULL;
    be_act out;
    bool have_out = false;
    int32_t *table = malloc((size_t)n_blocks * 4), *len = malloc((size_t)n_seqs * 4);
    int32_t *rs = malloc((size_t)n_rows * 4), *rp = malloc((size_t)n_rows * 4);
    int32_t *slot = malloc((size_t)BS * 4);
    void *dev[7] = {NULL};
    if (!table || !len || !rs || !rp || !slot ||
        be->ops->kv_create(be, 1, n_blocks, BS, kv_dim, kt, &kv, &err) != 0 ||
        be->ops->act_create(be, n_rows, n_head * hd, &out, &err) != 0)
        goto done;
    have_out = true;
    for (int s = 0; s < n_seqs; s++) {
        len[s] = ctx;
        for (int b = 0; b < per_seq; b++)
            table[s * per_seq + b] = s * per_seq + b;
        for (int r = 0; r < rows; r++) {
            rs[s * rows + r] = s;
            rp[s * rows + r] = ctx - rows + r;
        }
    }
    /* Fill the whole cache, one block of rows at a time. */
    void *k = dev_random(be, (size_t)BS * kv_dim, 11), *v = dev_random(be, (size_t)BS * kv_dim, 13);
    void *ds = be->ops->alloc(be, (size_t)BS * 4, &err);
    for (int b = 0; k && v && ds && b < n_blocks; b++) {
        for (int i = 0; i < BS; i++)
            slot[i] = b * BS + i;
        if (be->ops->upload(be, ds, slot, (size_t)BS * 4, &err) != 0)
            break;
        be->ops->kv_write(be, kv, 0, k, v, ds, BS);
    }
    be->ops->free(be, k);
    be->ops->free(be, v);
    be->ops->free(be, ds);
    dev[0] = dev_random(be, (size_t)n_rows * n_head * hd, 17);
    dev[1] = be->ops->alloc(be, (size_t)n_rows * 4, &err);
    dev[2] = be->ops->alloc(be, (size_t)n_rows * 4, &err);
    dev[3] = be->ops->alloc(be, (size_t)n_blocks * 4, &err);
    dev[4] = be->ops->alloc(be, (size_t)n_seqs * 4, &err);
    if (!dev[0] || !dev[1] || !dev[2] || !dev[3] || !dev[4] ||
        be->ops->upload(be, dev[1], rs, (size_t)n_rows * 4, &err) ||
        be->ops->upload(be, dev[2], rp, (size_t)n_rows * 4, &err) ||
        be->ops->upload(be, dev[3], table, (size_t)n_blocks * 4, &err) ||
        be->ops->upload(be, dev[4], len, (size_t)n_seqs * 4, &err))
        goto done;
    /* Rows of one position a sequence are generated tokens (decode rows);
     * longer runs are prompt chunks. */
    int32_t *first_gen = malloc((size_t)n_seqs * 4), *decode = malloc((size_t)n_rows * 4);
    for (int s = 0; first_gen && s < n_seqs; s++)
        first_gen[s] = rows == 1 ? ctx - 1 : ctx;
    const int32_t n_decode = first_gen && decode
                                 ? be_attn_decode_rows(rs, rp, first_gen, n_rows, decode)
                                 : 0;
    dev[5] = be->ops->alloc(be, (size_t)n_seqs * 4, &err);
    dev[6] = n_decode ? be->ops->alloc(be, (size_t)n_decode * 4, &err) : NULL;
    const bool decode_ok = first_gen && decode && dev[5] &&
                           be->ops->upload(be, dev[5], first_gen, (size_t)n_seqs * 4, &err) == 0 &&
                           (!n_decode ||
                            (dev[6] &&
                             be->ops->upload(be, dev[6], decode, (size_t)n_decode * 4, &err) == 0));
    free(first_gen);
    free(decode);
    if (!decode_ok)
        goto done;
    att_arg a = {
        kv,
        dev[0],
        {n_rows, n_seqs, dev[1], dev[2], dev[3], dev[4], per_seq, ctx, dev[5], dev[6], n_decode},
        {n_head, n_head_kv, hd},
        &out};
    char shape[96];
    snprintf(shape, sizeof shape, "%s KV, %d seqs x %d ctx, %d heads (%d kv) of %d",
             be_kv_type_name(kt), n_seqs, ctx, n_head, n_head_kv, hd);
    /* Bytes: every row reads its keys and values (decode); a prefill reads
     * the cache once per 64-row tile. */
    const double tiles = rows == 1 ? 1.0 : ceil(rows / 64.0);
    const double bytes = (double)n_seqs * tiles * ctx * 2 * (double)be_kv_row_bytes(kt, kv_dim);
    /* query row r (position ctx - rows + r) attends to ctx - rows + r + 1 keys */
    const double flops = 4.0 * n_head * hd * n_seqs *
                         ((double)rows * (ctx - rows) + (double)rows * (rows + 1) / 2);
    print_row("attention", shape, n_rows, time_op(be, att_call, &a), bytes, flops);
done:
    for (int i = 0; i < 7; i++)
        be->ops->free(be, dev[i]);
    if (have_out)
        be->ops->act_destroy(be, &out);
    if (kv)
        be->ops->kv_destroy(be, kv);
    free(table);
    free(len);
    free(rs);
    free(rp);
    free(slot);
}

/* ---- the launch floor: a one-row gather, the smallest op there is ---- */

typedef struct gather_arg {
    const float *x;
    const int32_t *idx;
    float *out;
} gather_arg;

static void gather_call(backend *be, void *arg, int call)
{
    gather_arg *a = arg;
    (void)call;
    be->ops->gather_rows(be, a->x, a->idx, 1, 32, a->out);
}

static void bench_floor(backend *be)
{
    llmq_err err;
    const int32_t zero = 0;
    gather_arg a = {dev_random(be, 32, 3), NULL, be->ops->alloc(be, 32 * sizeof(float), &err)};
    int32_t *idx = be->ops->alloc(be, sizeof zero, &err);
    if (a.x && a.out && idx && be->ops->upload(be, idx, &zero, sizeof zero, &err) == 0) {
        a.idx = idx;
        print_row("gather_rows (launch floor)", "1 row of 32", 1, time_op(be, gather_call, &a),
                  256, 0);
    }
    be->ops->free(be, (void *)a.x);
    be->ops->free(be, a.out);
    be->ops->free(be, idx);
}

/* ---- row ops ---- */

typedef struct row_arg {
    const float *x, *w;
    int rows, dim;
    be_act *out;
} row_arg;

static void norm_call(backend *be, void *arg, int call)
{
    row_arg *a = arg;
    (void)call;
    be->ops->rmsnorm(be, a->x, a->w, 1e-5f, a->rows, a->dim, a->out);
}

static void swiglu_call(backend *be, void *arg, int call)
{
    row_arg *a = arg;
    (void)call;
    be->ops->swiglu(be, a->x, a->w, a->rows, a->dim, a->out);
}

static void bench_rows(backend *be, const char *name, op_fn fn, int rows, int dim, bool per_row_aux)
{
    llmq_err err;
    be_act out;
    if (be->ops->act_create(be, rows, dim, &out, &err) != 0)
        return;
    void *x = dev_random(be, (size_t)rows * dim, 5);
    void *w = dev_random(be, per_row_aux ? (size_t)rows * dim : (size_t)dim, 7);
    if (x && w) {
        row_arg a = {x, w, rows, dim, &out};
        char shape[32];
        snprintf(shape, sizeof shape, "%d wide", dim);
        print_row(name, shape, rows, time_op(be, fn, &a),
                  (double)rows * dim * 4 * (per_row_aux ? 3 : 2), 0);
    }
    be->ops->free(be, x);
    be->ops->free(be, w);
    be->ops->act_destroy(be, &out);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    const cli_spec spec = {.program = "bench-cuda-ops",
                           .usage = "usage: bench-cuda-ops MODEL.gguf\n",
                           .operand = &path,
                           .operand_name = "MODEL.gguf"};
    const int status = cli_read(&spec, argc, argv);
    if (status != CLI_RUN)
        return status;
#ifndef LLMQ_HAVE_CUDA
    fprintf(stderr, "bench-cuda-ops: built without CUDA\n");
    return 77;
#else
    llmq_err err;
    backend *be;
    gguf_file *f;
    if (backend_cuda_create(&be, 0, &err) != 0) {
        printf("bench-cuda-ops: skipped: %s\n", err.msg);
        return 77;
    }
    /* The GEMM rows again on a backend with the wgmma GEMM off (the A/B of
     * gemm_sm90.cu in one run), unless the environment already turned it off. */
    backend *be_mma = NULL;
    const char *sm90 = getenv("LLMQ_GEMM_SM90");
    if (!sm90 || strcmp(sm90, "0") != 0) {
        setenv("LLMQ_GEMM_SM90", "0", 1);
        if (backend_cuda_create(&be_mma, 0, &err) != 0)
            fprintf(stderr, "bench-cuda-ops: second backend: %s\n", err.msg);
        unsetenv("LLMQ_GEMM_SM90");
    }
    if (gguf_open(&f, path, &err) != 0) {
        fprintf(stderr, "bench-cuda-ops: %s\n", err.msg);
        backend_destroy(be_mma);
        backend_destroy(be);
        return 1;
    }
    uint32_t n_layers = 1, heads = 32, heads_kv = 32, dim = 4096;
    gguf_get_u32(f, "llama.block_count", &n_layers, &err);
    gguf_get_u32(f, "llama.attention.head_count", &heads, &err);
    gguf_get_u32(f, "llama.attention.head_count_kv", &heads_kv, &err);
    gguf_get_u32(f, "llama.embedding_length", &dim, &err);
    printf("| op | shape | rows | us (median) | GB/s | of 4.24 TB/s | TFLOP/s | us in a graph | "
           "of 4.24 TB/s in a graph |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    static const char *const roles[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                        "ffn_gate", "ffn_up", "ffn_down", "output"};
    static const quant_type types[] = {QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K, QUANT_Q8_0, QUANT_F16};
    static const int rows[] = {1, 8, 64, 256, 512}, gemm_rows[] = {64, 512};
    for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            bench_role(be, f, roles[r], types[t], (int)n_layers, "matmul", rows,
                       sizeof rows / sizeof rows[0]);
            if (be_mma)
                bench_role(be_mma, f, roles[r], types[t], (int)n_layers, "matmul (mma.sync)",
                           gemm_rows, 2);
        }
    bench_floor(be);
    const int hd = (int)(dim / heads);
    static const be_kv_type kv_types[] = {BE_KV_F16, BE_KV_Q8_0};
    for (size_t t = 0; t < sizeof kv_types / sizeof kv_types[0]; t++) {
        bench_attention(be, kv_types[t], (int)heads, (int)heads_kv, hd, 1, 576, 1);
        bench_attention(be, kv_types[t], (int)heads, (int)heads_kv, hd, 64, 576, 1);
        bench_attention(be, kv_types[t], (int)heads, (int)heads_kv, hd, 256, 576, 1);
        bench_attention(be, kv_types[t], (int)heads, (int)heads_kv, hd, 1, 512, 512);
        /* the last 512-row chunk of an 8,192-token prompt (issue 16's pp8192) */
        bench_attention(be, kv_types[t], (int)heads, (int)heads_kv, hd, 1, 8192, 512);
    }
    bench_rows(be, "rmsnorm", norm_call, 1, (int)dim, false);
    bench_rows(be, "rmsnorm", norm_call, 512, (int)dim, false);
    bench_rows(be, "swiglu", swiglu_call, 1, 11008, true);
    bench_rows(be, "swiglu", swiglu_call, 512, 11008, true);
    gguf_close(f);
    backend_destroy(be_mma);
    backend_destroy(be);
    return 0;
#endif
}
