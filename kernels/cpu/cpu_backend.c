/* The CPU backend: the numerical oracle for every other backend, and the
 * engine on machines without a GPU.  Ops run synchronously on the caller's
 * thread plus a persistent pool; each op splits its work into fixed tasks
 * (rows, heads, tiles) whose results do not depend on the split.
 *
 * The inner loops come from the fastest dot kernel set the CPU runs; the
 * environment variable LLMQ_CPU_KERNELS (generic, avx2, avx512) picks one
 * instead, to compare them: every set gives the same bits. */
#include "kernels/backend.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/topk.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/threadpool.h"

/* At most this many freed blocks, of this many bytes together, wait for reuse. */
#define CACHE_BLOCKS 64
#define CACHE_BYTES ((size_t)1 << 30)

typedef struct cpu_backend {
    backend base;
    pool *pool;
    const dot_kernels *k; /* picked once for this CPU */
    float *scratch;       /* attention's, pool_threads slices; grown on demand */
    size_t scratch_floats;
    /* Freed blocks kept for reuse: see cpu_alloc. */
    uint8_t *cache[CACHE_BLOCKS];
    int n_cached;
    size_t cached_bytes;
} cpu_backend;

struct be_weight {
    quant_type type;
    int64_t rows, cols;
    size_t row_bytes;
    const uint8_t *data; /* caller's memory (the mapped GGUF): never written */
    uint8_t *pack;       /* owned: dot_pack's layout, when the kernels have one */
    size_t group_bytes;  /* of one packed group of DOT_GROUP rows */
};

/* Rows of row_bytes per token, [layer][block * block_size + offset]; a q8_0
 * row is kv_dim / 32 block_q8_0s. */
struct be_kv {
    int32_t n_layers, n_blocks, block_size, kv_dim;
    be_kv_type type;
    size_t row_bytes;
    uint8_t *k, *v;
};

/* The quantized copy of a be_act (be_act.q), in the format of the weight
 * type that asked for it last. */
typedef struct cpu_actq {
    dot_act kind;
    dot_q8_act act;
} cpu_actq;

typedef struct quantize_job {
    const cpu_backend *cb;
    const be_act *a;
} quantize_job;

static pool *pool_of(backend *be) { return ((cpu_backend *)be)->pool; }

/* ---- memory ---- */

/* Blocks carry their size in a 64-byte header.  A freed block is kept for
 * the next allocation it fits (at most twice its need): an engine made
 * again with the same shapes (a benchmark's repetitions, a worker's
 * restart) then finds its buffers already mapped, where fresh ones cost a
 * page fault per 4 KiB on first touch (tens of milliseconds per engine on a
 * virtual machine). */
#define BLOCK_HEADER 64

static size_t block_bytes(const uint8_t *p) { return *(const size_t *)(p - BLOCK_HEADER); }

static void *cpu_alloc(backend *be, size_t bytes, llmq_err *err)
{
    cpu_backend *cb = (cpu_backend *)be;
    bytes = (bytes + 63) / 64 * 64;
    int best = -1;
    for (int i = 0; i < cb->n_cached; i++) {
        const size_t have = block_bytes(cb->cache[i]);
        if (have >= bytes && have / 2 <= bytes && (best < 0 || have < block_bytes(cb->cache[best])))
            best = i;
    }
    if (best >= 0) {
        uint8_t *p = cb->cache[best];
        cb->cached_bytes -= block_bytes(p);
        cb->cache[best] = cb->cache[--cb->n_cached];
        return p;
    }
    void *raw = NULL;
    if (posix_memalign(&raw, 64, BLOCK_HEADER + bytes) != 0) {
        llmq_errf(err, "cpu backend: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    *(size_t *)raw = bytes;
    return (uint8_t *)raw + BLOCK_HEADER;
}

static void cpu_free(backend *be, void *p)
{
    cpu_backend *cb = (cpu_backend *)be;
    if (!p)
        return;
    const size_t bytes = block_bytes(p);
    if (cb->n_cached < CACHE_BLOCKS && cb->cached_bytes + bytes <= CACHE_BYTES) {
        cb->cache[cb->n_cached++] = p;
        cb->cached_bytes += bytes;
        return;
    }
    free((uint8_t *)p - BLOCK_HEADER);
}

static int cpu_copy(backend *be, void *dst, const void *src, size_t bytes, llmq_err *err)
{
    (void)be;
    (void)err;
    memmove(dst, src, bytes);
    return 0;
}

static int cpu_sync(backend *be, llmq_err *err)
{
    (void)be;
    (void)err;
    return 0;
}

/* MemAvailable of /proc/meminfo (what can be allocated without swapping
 * others out), else the free physical pages. */
static int cpu_mem_available(backend *be, size_t *bytes, llmq_err *err)
{
    (void)be;
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    bool found = false;
    char line[128];
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    if (f)
        fclose(f);
    if (found) {
        *bytes = (size_t)kb * 1024;
        return 0;
    }
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages < 0 || page < 0)
        return llmq_errf(err, "cpu backend: cannot tell how much memory is available");
    *bytes = (size_t)pages * (size_t)page;
    return 0;
}

/* ---- weights ---- */

static int cpu_weight_load(backend *be, quant_type type, int64_t rows, int64_t cols,
                           const void *data, be_weight **out, llmq_err *err)
{
    const cpu_backend *cb = (const cpu_backend *)be;
    uint64_t row_bytes;
    if (quant_row_bytes(type, (uint64_t)cols, &row_bytes, err) != 0)
        return -1;
    if (dot_act_for(type) == DOT_ACT_F32 && type != QUANT_F32 && type != QUANT_F16 &&
        type != QUANT_BF16)
        return llmq_errf(err, "cpu backend: no matmul for type %s", quant_type_name(type));
    be_weight *w = calloc(1, sizeof *w);
    if (!w)
        return llmq_errf(err, "cpu backend: out of memory");
    *w = (be_weight){.type = type, .rows = rows, .cols = cols, .row_bytes = row_bytes, .data = data};
    if (dot_kernels_q8_tile(cb->k, type)) {
        w->pack = cpu_alloc(be, dot_pack_bytes(type, rows, cols), err);
        if (!w->pack) {
            free(w);
            return llmq_err_prefix(err, "packing a %s matrix of %lld x %lld", quant_type_name(type),
                                   (long long)rows, (long long)cols);
        }
        dot_pack(type, data, row_bytes, rows, cols, w->pack);
        w->group_bytes = dot_pack_group_bytes(type, cols);
    }
    *out = w;
    return 0;
}

static void cpu_weight_free(backend *be, be_weight *w)
{
    if (w)
        cpu_free(be, w->pack);
    free(w);
}

/* ---- activations ---- */

static void cpu_act_destroy(backend *be, be_act *a)
{
    cpu_actq *aq = a->q;
    if (aq) {
        cpu_free(be, aq->act.q);
        cpu_free(be, aq->act.d);
        cpu_free(be, aq->act.s16);
        cpu_free(be, aq->act.s32);
        free(aq);
    }
    cpu_free(be, a->x);
    memset(a, 0, sizeof *a);
}

static int cpu_act_create(backend *be, int32_t max_rows, int32_t max_cols, be_act *out,
                          llmq_err *err)
{
    memset(out, 0, sizeof *out);
    size_t n = (size_t)max_rows * (size_t)max_cols;
    size_t nb = (size_t)max_rows * (size_t)((max_cols + 15) / 16);
    cpu_actq *aq = calloc(1, sizeof *aq);
    out->x = cpu_alloc(be, n * sizeof(float), err);
    out->q = aq;
    if (aq) {
        aq->act.q = cpu_alloc(be, n, err);
        aq->act.d = cpu_alloc(be, nb * sizeof(float), err); /* per 16: room for either */
        aq->act.s16 = cpu_alloc(be, nb * sizeof(int16_t), err);
        aq->act.s32 = cpu_alloc(be, nb * sizeof(int16_t), err);
    }
    if (!out->x || !aq || !aq->act.q || !aq->act.d || !aq->act.s16 || !aq->act.s32) {
        cpu_act_destroy(be, out);
        return llmq_errf(err, "cpu backend: cannot allocate activations %d x %d", max_rows,
                         max_cols);
    }
    out->max_rows = max_rows;
    out->max_cols = max_cols;
    return 0;
}

/* ---- KV cache ---- */

static void cpu_kv_destroy(backend *be, be_kv *kv)
{
    if (!kv)
        return;
    cpu_free(be, kv->k);
    cpu_free(be, kv->v);
    free(kv);
}

/* One of the cache's two planes (keys, or values). */
static size_t kv_plane_bytes(int32_t n_layers, int32_t n_blocks, int32_t block_size,
                             size_t row_bytes)
{
    return (size_t)n_layers * n_blocks * block_size * row_bytes;
}

static int kv_row_bytes(int32_t kv_dim, be_kv_type type, size_t *row_bytes, llmq_err *err)
{
    *row_bytes = be_kv_row_bytes(type, kv_dim);
    if (*row_bytes == 0)
        return llmq_errf(err, "cpu backend: a %s KV cache cannot hold rows of %d values",
                         be_kv_type_name(type), kv_dim);
    return 0;
}

static int cpu_kv_block_bytes(backend *be, int32_t n_layers, int32_t block_size, int32_t kv_dim,
                              be_kv_type type, size_t *bytes, llmq_err *err)
{
    (void)be;
    size_t row_bytes;
    if (kv_row_bytes(kv_dim, type, &row_bytes, err) != 0)
        return -1;
    *bytes = 2 * kv_plane_bytes(n_layers, 1, block_size, row_bytes);
    return 0;
}

static int cpu_kv_create(backend *be, int32_t n_layers, int32_t n_blocks, int32_t block_size,
                         int32_t kv_dim, be_kv_type type, be_kv **out, llmq_err *err)
{
    size_t row_bytes;
    if (kv_row_bytes(kv_dim, type, &row_bytes, err) != 0)
        return -1;
    be_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return llmq_errf(err, "cpu backend: out of memory");
    *kv = (be_kv){.n_layers = n_layers,
                  .n_blocks = n_blocks,
                  .block_size = block_size,
                  .kv_dim = kv_dim,
                  .type = type,
                  .row_bytes = row_bytes};
    size_t bytes = kv_plane_bytes(n_layers, n_blocks, block_size, row_bytes);
    kv->k = cpu_alloc(be, bytes, err);
    kv->v = cpu_alloc(be, bytes, err);
    if (!kv->k || !kv->v) {
        cpu_kv_destroy(be, kv);
        return llmq_errf(err, "cpu backend: cannot allocate a KV cache of 2 x %zu bytes", bytes);
    }
    *out = kv;
    return 0;
}

/* The bytes of a layer's token slot in either plane. */
static size_t kv_offset(const be_kv *kv, int32_t layer, int64_t slot)
{
    return (((size_t)layer * kv->n_blocks * kv->block_size) + (size_t)slot) * kv->row_bytes;
}

static void kv_put(const be_kv *kv, uint8_t *dst, const float *src)
{
    switch (kv->type) {
    case BE_KV_Q8_0: quant_quantize_kv_q8_0(src, (block_q8_0 *)dst, kv->kv_dim); break;
    case BE_KV_F16:
        for (int32_t i = 0; i < kv->kv_dim; i++)
            ((quant_f16 *)dst)[i] = quant_f32_to_f16(src[i]);
        break;
    case BE_KV_F32: memcpy(dst, src, (size_t)kv->kv_dim * sizeof(float)); break;
    }
}

/* ---- embed, gather ---- */

typedef struct rows_job {
    const be_weight *w;
    const int32_t *ids;
    const float *x;
    int32_t dim;
    float *out;
} rows_job;

static void embed_task(void *ctx, int64_t r, int thread)
{
    const rows_job *j = ctx;
    const be_weight *w = j->w;
    quant_dequantize_row(w->type, w->data + (size_t)j->ids[r] * w->row_bytes,
                         j->out + r * w->cols, w->cols);
}

static void cpu_embed(backend *be, const be_weight *table, const int32_t *ids, int32_t n,
                      float *out)
{
    rows_job j = {.w = table, .ids = ids, .out = out};
    pool_run(pool_of(be), embed_task, &j, n, (int64_t)n * table->cols / 2);
}

static void cpu_gather_rows(backend *be, const float *x, const int32_t *idx, int32_t n,
                            int32_t dim, float *out)
{
    (void)be;
    for (int32_t r = 0; r < n; r++)
        memcpy(out + (size_t)r * dim, x + (size_t)idx[r] * dim, (size_t)dim * sizeof(float));
}

/* ---- rmsnorm: as llama.cpp, the sum of squares in double ---- */

typedef struct norm_job {
    const dot_kernels *k;
    const float *x, *w;
    float eps;
    int32_t dim;
    float *out;
} norm_job;

static void rmsnorm_task(void *ctx, int64_t r, int thread)
{
    const norm_job *j = ctx;
    const float *x = j->x + r * j->dim;
    float *y = j->out + r * j->dim;
    const double sum = j->k->sumsq(x, j->dim);
    const float scale = 1.0f / sqrtf((float)(sum / j->dim) + j->eps);
    for (int32_t i = 0; i < j->dim; i++)
        y[i] = (x[i] * scale) * j->w[i];
}

static void cpu_rmsnorm(backend *be, const float *x, const float *w, float eps, int32_t rows,
                        int32_t dim, be_act *out)
{
    norm_job j = {.k = ((cpu_backend *)be)->k, .x = x, .w = w, .eps = eps, .dim = dim,
                  .out = out->x};
    pool_run(pool_of(be), rmsnorm_task, &j, rows, (int64_t)rows * dim / 2);
    out->rows = rows;
    out->cols = dim;
    out->q_valid = false;
}

/* ---- matmul ---- */

/* A task is a block of weight units (packed groups of DOT_GROUP rows, or
 * F_ROWS float rows) x a block of up to TILE_X activation rows; the tiling
 * changes which thread computes a pair, never how the pair is summed. */
#define TILE_X 64
#define F_ROWS 4
#define TASKS_PER_THREAD 4

typedef struct matmul_job {
    const dot_kernels *k;
    const be_weight *w;
    const be_act *in;
    float *out;
    bool accumulate;
    int64_t unit_rows;      /* weight rows per unit */
    int64_t units_per_task; /* weight units per task */
    int64_t tasks_w;
} matmul_job;

static void quantize_task(void *ctx, int64_t r, int thread)
{
    const cpu_backend *cb = ((const quantize_job *)ctx)->cb;
    const be_act *a = ((const quantize_job *)ctx)->a;
    cpu_actq *aq = a->q;
    dot_q8_act *q = &aq->act;
    if (aq->kind == DOT_ACT_Q8_0)
        dot_quantize_q8_0(a->x + r * a->cols, a->cols, q->q + r * a->cols,
                          q->d + r * (a->cols / QK8_0), q->s32 + r * (a->cols / 32));
    else
        cb->k->quantize_q8_K(a->x + r * a->cols, a->cols, q->q + r * a->cols,
                             q->d + r * (a->cols / QK_K), q->s16 + r * (a->cols / 16),
                             q->s32 + r * (a->cols / 32));
}

/* out[t][n0 + r] (+)= tile[t - t0][r] for the nn rows of a partial group. */
static void store_tile(const matmul_job *j, const float *tile, int64_t n0, int64_t nn, int64_t t0,
                       int64_t nt)
{
    for (int64_t t = 0; t < nt; t++) {
        float *o = j->out + (t0 + t) * j->w->rows + n0;
        const float *v = tile + t * DOT_GROUP;
        for (int64_t r = 0; r < nn; r++)
            o[r] = j->accumulate ? o[r] + v[r] : v[r];
    }
}

/* The reference, pair by pair, for types without a kernel. */
static void matmul_reference(const matmul_job *j, int64_t n0, int64_t nn, int64_t t0, int64_t nt)
{
    const be_weight *w = j->w;
    const be_act *a = j->in;
    const dot_act kind = dot_act_for(w->type);
    for (int64_t t = t0; t < t0 + nt; t++) {
        const dot_q8_row xr = kind != DOT_ACT_F32
                                  ? dot_act_row(&((const cpu_actq *)a->q)->act, kind, t)
                                  : (dot_q8_row){0};
        float *o = j->out + t * w->rows;
        for (int64_t n = n0; n < n0 + nn; n++) {
            const void *wr = w->data + (size_t)n * w->row_bytes;
            const float v = kind != DOT_ACT_F32 ? dot_row_q8(w->type, wr, &xr, w->cols)
                                                : dot_row_f32(w->type, wr, a->x + t * a->cols, w->cols);
            o[n] = j->accumulate ? o[n] + v : v;
        }
    }
}

/* Kernels write straight into the output; only a group cut short by the end
 * of the matrix goes through a tile, since its kernel writes all 16 rows. */
static void matmul_task(void *ctx, int64_t task, int thread)
{
    const matmul_job *j = ctx;
    const be_weight *w = j->w;
    const be_act *a = j->in;
    const int64_t t0 = (task / j->tasks_w) * TILE_X;
    const int64_t nt = a->rows - t0 < TILE_X ? a->rows - t0 : TILE_X;
    const int64_t u0 = (task % j->tasks_w) * j->units_per_task;
    for (int64_t u = u0; u < u0 + j->units_per_task; u++) {
        const int64_t n0 = u * j->unit_rows;
        if (n0 >= w->rows)
            break;
        const int64_t nn = w->rows - n0 < j->unit_rows ? w->rows - n0 : j->unit_rows;
        float *o = j->out + t0 * w->rows + n0;
        if (w->pack) {
            const dot_q8_tile_fn fn = dot_kernels_q8_tile(j->k, w->type);
            const void *group = w->pack + (size_t)u * w->group_bytes;
            const dot_q8_act *act = &((const cpu_actq *)a->q)->act;
            if (nn == DOT_GROUP) {
                fn(group, act, t0, (int)nt, o, w->rows, j->accumulate);
            } else {
                float tile[TILE_X * DOT_GROUP];
                fn(group, act, t0, (int)nt, tile, DOT_GROUP, 0);
                store_tile(j, tile, n0, nn, t0, nt);
            }
        } else if (dot_kernels_f_tile(j->k, w->type)) {
            dot_kernels_f_tile(j->k, w->type)(w->data + (size_t)n0 * w->row_bytes, w->row_bytes,
                                              (int)nn, a->x + t0 * a->cols, a->cols, (int)nt,
                                              w->cols, o, w->rows, j->accumulate);
        } else {
            matmul_reference(j, n0, nn, t0, nt);
        }
    }
}

/* Rough single-thread nanoseconds of a matmul, for the pool's inline cutoff:
 * the packed kernels run at about 130 multiply-adds per ns on this EPYC,
 * the float ones 16, the reference 2. */
static int64_t matmul_cost(const be_weight *w, int64_t rows, bool fast)
{
    const int64_t macs = rows * w->rows * w->cols;
    return w->pack ? macs / 128 : fast ? macs / 16 : macs / 2;
}

static void cpu_matmul(backend *be, const be_weight *w, be_act *in, float *out, bool accumulate)
{
    cpu_backend *cb = (cpu_backend *)be;
    const dot_act kind = dot_act_for(w->type);
    cpu_actq *aq = in->q;
    if (kind != DOT_ACT_F32 && (!in->q_valid || aq->kind != kind)) {
        aq->kind = kind;
        aq->act.cols = in->cols;
        quantize_job qj = {.cb = cb, .a = in};
        pool_run(cb->pool, quantize_task, &qj, in->rows, (int64_t)in->rows * in->cols * 2);
        in->q_valid = true;
    }
    const bool fast = w->pack || dot_kernels_f_tile(cb->k, w->type);
    const int64_t unit_rows = w->pack ? DOT_GROUP : (fast ? F_ROWS : TILE_X);
    const int64_t units = (w->rows + unit_rows - 1) / unit_rows;
    const int64_t tiles_x = (in->rows + TILE_X - 1) / TILE_X;
    /* Enough tasks to balance the threads, each as large as that allows. */
    const int64_t want = (int64_t)pool_threads(cb->pool) * TASKS_PER_THREAD;
    const int64_t split_w = tiles_x >= want ? 1 : (want + tiles_x - 1) / tiles_x;
    const int64_t per_task = (units + split_w - 1) / split_w;
    matmul_job j = {.k = cb->k, .w = w, .in = in, .out = out, .accumulate = accumulate,
                    .unit_rows = unit_rows, .units_per_task = per_task,
                    .tasks_w = (units + per_task - 1) / per_task};
    pool_run(cb->pool, matmul_task, &j, j.tasks_w * tiles_x, matmul_cost(w, in->rows, fast));
}

/* ---- rope: as ggml's CPU rope, theta advanced by repeated products ---- */

typedef struct rope_job {
    float *q, *k;
    const int32_t *pos;
    const be_attn_shape *shape;
    const be_rope *rope;
    float theta_scale;
} rope_job;

/* Where pair i of a head lies: values step*i and step*i + offset (ggml's
 * rotate_pairs: step 2, offset 1 for adjacent pairs; 1, n_dims/2 for halves). */
typedef struct rope_layout {
    int32_t step, offset;
} rope_layout;

static rope_layout rope_layout_of(const be_rope *r)
{
    return r->mode == BE_ROPE_HALVES ? (rope_layout){1, r->n_dims / 2} : (rope_layout){2, 1};
}

/* Rotate pairs [i0, i0 + n) of n_heads heads by the angles' cos c and sin s. */
static void rope_heads(float *x, int32_t n_heads, int32_t head_dim, rope_layout lay, int32_t i0,
                       int32_t n, const float *c, const float *s)
{
    for (int32_t h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < n; i++) {
            float *a = xh + (int64_t)lay.step * (i0 + i), *b = a + lay.offset;
            const float x0 = *a, x1 = *b;
            *a = x0 * c[i] - x1 * s[i];
            *b = x0 * s[i] + x1 * c[i];
        }
    }
}

/* Every head of a row turns by the same angles: each cos and sin is taken
 * once per row, a chunk of pairs at a time. */
#define ROPE_CHUNK 64

static void rope_task(void *ctx, int64_t r, int thread)
{
    const rope_job *j = ctx;
    const be_attn_shape *sh = j->shape;
    const be_rope *rp = j->rope;
    const rope_layout lay = rope_layout_of(rp);
    float theta = (float)j->pos[r];
    for (int32_t i0 = 0; i0 < rp->n_dims / 2; i0 += ROPE_CHUNK) {
        const int32_t n = rp->n_dims / 2 - i0 < ROPE_CHUNK ? rp->n_dims / 2 - i0 : ROPE_CHUNK;
        float c[ROPE_CHUNK], s[ROPE_CHUNK];
        for (int32_t i = 0; i < n; i++) {
            const float t = rp->factors_dev ? theta / rp->factors_dev[i0 + i] : theta;
            c[i] = cosf(t);
            s[i] = sinf(t);
            theta *= j->theta_scale;
        }
        rope_heads(j->q + r * sh->n_head * sh->head_dim, sh->n_head, sh->head_dim, lay, i0, n, c,
                   s);
        rope_heads(j->k + r * sh->n_head_kv * sh->head_dim, sh->n_head_kv, sh->head_dim, lay, i0, n,
                   c, s);
    }
}

static void cpu_rope(backend *be, float *q, float *k, const int32_t *pos, int32_t rows,
                     const be_attn_shape *shape, const be_rope *rope)
{
    rope_job j = {.q = q,
                  .k = k,
                  .pos = pos,
                  .shape = shape,
                  .rope = rope,
                  .theta_scale = powf(rope->freq_base, -2.0f / (float)rope->n_dims)};
    pool_run(pool_of(be), rope_task, &j, rows,
             (int64_t)rows * (shape->n_head + shape->n_head_kv + 16) * rope->n_dims);
}

/* ---- bias ---- */

static void add_bias(float *x, const float *bias, int32_t rows, int32_t n)
{
    for (int32_t r = 0; r < rows; r++)
        for (int32_t i = 0; i < n; i++)
            x[(size_t)r * n + i] += bias[i];
}

/* ---- KV write ---- */

static void cpu_kv_write(backend *be, be_kv *kv, int32_t layer, const float *k, const float *v,
                         const int32_t *slot, int32_t rows)
{
    (void)be;
    for (int32_t r = 0; r < rows; r++) {
        const size_t off = kv_offset(kv, layer, slot[r]);
        kv_put(kv, kv->k + off, k + (size_t)r * kv->kv_dim);
        kv_put(kv, kv->v + off, v + (size_t)r * kv->kv_dim);
    }
}

/* ---- attention: one task per block of up to ATTN_ROWS rows and a kv head,
 * covering the kv head's group of query heads; rows of one sequence in a
 * block share each cached K and V row they all see.  Per (row, head): q.k
 * as dot_row_f32 of the cached type, softmax, V summed in position order
 * with fmaf: nothing depends on the block ---- */

#define ATTN_ROWS 4

typedef struct attn_job {
    const dot_kernels *k;
    const be_kv *kv;
    int32_t layer;
    const float *q;
    const be_attn_batch *b;
    const be_attn_shape *sh;
    float *out;
    float *scratch; /* per thread: scratch_stride floats */
    size_t scratch_stride;
} attn_job;

/* One thread's scratch: scores, sums and queries of a block's heads, and
 * one KV block's rows of a head dequantized (a q8_0 cache). */
static size_t attn_scratch_floats(const be_attn_shape *sh, int32_t max_seq_len, int32_t block_size)
{
    const size_t heads = (size_t)ATTN_ROWS * (size_t)(sh->n_head / sh->n_head_kv);
    return heads * ((size_t)max_seq_len + 2 * (size_t)sh->head_dim) +
           (size_t)block_size * (size_t)sh->head_dim;
}

/* Cached rows [p0, p1) of one kv head lie in blocks: calls fn for each run
 * of consecutive slots. */
typedef void (*attn_span_fn)(const attn_job *j, int32_t p, int32_t np, size_t off, void *arg);

static void attn_spans(const attn_job *j, const int32_t *blocks, int32_t p0, int32_t p1,
                       attn_span_fn fn, void *arg)
{
    const int32_t bs = j->kv->block_size;
    for (int32_t p = p0; p < p1;) {
        const int32_t np = p1 - p < bs - p % bs ? p1 - p : bs - p % bs;
        fn(j, p, np, kv_offset(j->kv, j->layer, (int64_t)blocks[p / bs] * bs + p % bs), arg);
        p += np;
    }
}

typedef struct attn_heads {
    int32_t hkv, nh; /* kv head; query heads (rows x group) in the block */
    const float *q;  /* nh x head_dim */
    float *s;        /* nh x stride scores */
    size_t stride;
    float *acc;      /* nh x head_dim sums */
    float *rows;     /* block_size x head_dim: kv_head_rows' */
} attn_heads;

/* np cached rows of a kv head as the dot kernels read them. */
typedef struct kv_rows {
    const uint8_t *p;
    size_t row_bytes;
    quant_type t;
} kv_rows;

/* The rows at byte off of a plane: the cache itself when it holds f32 or
 * f16, else dequantized into buf (np x head_dim).  q * d is exact in f32
 * (8 bits times an f16's 11), so attention over a q8_0 cache computes what
 * it would over an f32 cache holding the dequantized values, with the same
 * kernels. */
static kv_rows kv_head_rows(const attn_job *j, const uint8_t *plane, size_t off, int32_t hkv,
                            int32_t np, float *buf)
{
    const be_kv *kv = j->kv;
    const int32_t hd = j->sh->head_dim, e0 = hkv * hd;
    if (kv->type != BE_KV_Q8_0) {
        const size_t elem = kv->row_bytes / (size_t)kv->kv_dim;
        return (kv_rows){plane + off + (size_t)e0 * elem, kv->row_bytes,
                         kv->type == BE_KV_F16 ? QUANT_F16 : QUANT_F32};
    }
    for (int32_t r = 0; r < np; r++) {
        const block_q8_0 *row = (const block_q8_0 *)(plane + off + (size_t)r * kv->row_bytes);
        float *dst = buf + (size_t)r * hd - e0;
        for (int32_t e = e0; e < e0 + hd;) {
            const block_q8_0 *blk = row + e / QK8_0;
            const float d = quant_f16_to_f32(blk->d);
            const int32_t end = (e / QK8_0 + 1) * QK8_0 < e0 + hd ? (e / QK8_0 + 1) * QK8_0
                                                                  : e0 + hd;
            for (; e < end; e++)
                dst[e] = (float)blk->qs[e % QK8_0] * d;
        }
    }
    return (kv_rows){(const uint8_t *)buf, (size_t)hd * sizeof(float), QUANT_F32};
}

/* s[h][p] = q_h . k_p for the block's heads over one run of slots. */
static void scores_span(const attn_job *j, int32_t p, int32_t np, size_t off, void *arg)
{
    const attn_heads *a = arg;
    const int32_t hd = j->sh->head_dim;
    const kv_rows k = kv_head_rows(j, j->kv->k, off, a->hkv, np, a->rows);
    const dot_f_tile_fn tile_fn = dot_kernels_f_tile(j->k, k.t);
    for (int32_t c = 0; c < np; c += 4) {
        const int nw = np - c < 4 ? (int)(np - c) : 4;
        if (tile_fn)
            tile_fn(k.p + c * k.row_bytes, k.row_bytes, nw, a->q, hd, a->nh, hd, a->s + p + c,
                    (int64_t)a->stride, 0);
        else
            for (int32_t h = 0; h < a->nh; h++)
                for (int r = 0; r < nw; r++)
                    a->s[h * a->stride + p + c + r] = dot_row_f32(k.t, k.p + (c + r) * k.row_bytes,
                                                                  a->q + h * hd, hd);
    }
}

/* acc[h] += sum over the run of s[h][p] * v_p. */
static void values_span(const attn_job *j, int32_t p, int32_t np, size_t off, void *arg)
{
    const attn_heads *a = arg;
    const kv_rows v = kv_head_rows(j, j->kv->v, off, a->hkv, np, a->rows);
    j->k->wsum(a->nh, a->s + p, a->stride, v.p, v.row_bytes, np, v.t, j->sh->head_dim, a->acc);
}

/* Rows r0 .. r0 + nr - 1, all of one sequence (so in position order). */
static void attn_rows(const attn_job *j, int64_t r0, int32_t nr, int32_t hkv, float *scratch)
{
    const be_attn_shape *sh = j->sh;
    const int32_t group = sh->n_head / sh->n_head_kv, hd = sh->head_dim;
    const size_t stride = (size_t)j->b->max_seq_len;
    const int32_t *pos = j->b->row_pos_dev + r0;
    const int32_t *blocks = j->b->block_table_dev + (size_t)j->b->row_seq_dev[r0] * j->b->max_blocks;
    attn_heads a = {.hkv = hkv, .nh = nr * group, .s = scratch, .stride = stride};
    a.acc = a.s + (size_t)a.nh * stride;
    float *q = a.acc + (size_t)a.nh * hd;
    a.q = q;
    a.rows = q + (size_t)a.nh * hd;
    for (int32_t i = 0; i < nr; i++)
        memcpy(q + (size_t)i * group * hd, j->q + ((r0 + i) * sh->n_head + (int64_t)hkv * group) * hd,
               (size_t)group * hd * sizeof *q);
    attn_spans(j, blocks, 0, pos[nr - 1] + 1, scores_span, &a);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int32_t h = 0; h < a.nh; h++)
        j->k->softmax(a.s + h * stride, pos[h / group] + 1, scale);
    memset(a.acc, 0, (size_t)a.nh * hd * sizeof *a.acc);
    /* positions every row sees, for all heads at once; then each row's own */
    attn_spans(j, blocks, 0, pos[0] + 1, values_span, &a);
    for (int32_t i = 1; i < nr; i++) {
        attn_heads row = a;
        row.nh = group;
        row.s = a.s + (size_t)i * group * stride;
        row.acc = a.acc + (size_t)i * group * hd;
        attn_spans(j, blocks, pos[0] + 1, pos[i] + 1, values_span, &row);
    }
    for (int32_t i = 0; i < nr; i++)
        memcpy(j->out + ((r0 + i) * sh->n_head + (int64_t)hkv * group) * hd,
               a.acc + (size_t)i * group * hd, (size_t)group * hd * sizeof *a.acc);
}

static void attn_task(void *ctx, int64_t task, int thread)
{
    const attn_job *j = ctx;
    const int64_t r1 = (task / j->sh->n_head_kv + 1) * ATTN_ROWS;
    const int64_t end = r1 < j->b->n_rows ? r1 : j->b->n_rows;
    const int32_t hkv = (int32_t)(task % j->sh->n_head_kv);
    float *scratch = j->scratch + (size_t)thread * j->scratch_stride;
    for (int64_t r = r1 - ATTN_ROWS; r < end;) {
        int32_t nr = 1;
        while (r + nr < end && j->b->row_seq_dev[r + nr] == j->b->row_seq_dev[r])
            nr++;
        attn_rows(j, r, nr, hkv, scratch);
        r += nr;
    }
}

static void cpu_attention(backend *be, const be_kv *kv, int32_t layer, const float *q,
                          const be_attn_batch *b, const be_attn_shape *sh, be_act *out)
{
    cpu_backend *cb = (cpu_backend *)be;
    const int64_t tasks = (b->n_rows + ATTN_ROWS - 1) / ATTN_ROWS * sh->n_head_kv;
    const size_t stride = attn_scratch_floats(sh, b->max_seq_len, kv->block_size);
    const size_t need = stride * (size_t)pool_threads(cb->pool);
    if (need > cb->scratch_floats) {
        free(cb->scratch);
        cb->scratch = malloc(need * sizeof(float));
        cb->scratch_floats = cb->scratch ? need : 0;
    }
    if (!cb->scratch) {
        /* Allocation failure of scratch this small means the process is out of
         * memory; poison the output so the caller's NaN check reports it. */
        for (int64_t i = 0; i < (int64_t)b->n_rows * sh->n_head * sh->head_dim; i++)
            out->x[i] = NAN;
    } else {
        attn_job j = {.k = cb->k, .kv = kv, .layer = layer, .q = q, .b = b, .sh = sh,
                      .out = out->x, .scratch = cb->scratch, .scratch_stride = stride};
        pool_run(cb->pool, attn_task, &j, tasks,
                 (int64_t)b->n_rows * sh->n_head * b->max_seq_len * (sh->head_dim + 32) / 16);
    }
    out->rows = b->n_rows;
    out->cols = sh->n_head * sh->head_dim;
    out->q_valid = false;
}

/* ---- swiglu ---- */

typedef struct swiglu_job {
    const dot_kernels *k;
    const float *g, *u;
    int32_t n;
    float *out;
} swiglu_job;

static void swiglu_task(void *ctx, int64_t r, int thread)
{
    const swiglu_job *j = ctx;
    j->k->silu_mul(j->g + r * j->n, j->u + r * j->n, j->out + r * j->n, j->n);
}

static void cpu_swiglu(backend *be, const float *g, const float *u, int32_t rows, int32_t n,
                       be_act *out)
{
    swiglu_job j = {.k = ((cpu_backend *)be)->k, .g = g, .u = u, .n = n, .out = out->x};
    pool_run(pool_of(be), swiglu_task, &j, rows, (int64_t)rows * n);
    out->rows = rows;
    out->cols = n;
    out->q_valid = false;
}

/* ---- lifetime ---- */

static void cpu_destroy(backend *be)
{
    cpu_backend *cb = (cpu_backend *)be;
    pool_free(cb->pool);
    free(cb->scratch);
    for (int i = 0; i < cb->n_cached; i++)
        free(cb->cache[i] - BLOCK_HEADER);
    free(cb);
}

/* ---- matmul_many: one at a time (each already spreads over the pool) ---- */

static void cpu_matmul_many(backend *be, int n, const be_weight *const *w, be_act *in,
                            float *const *out, const float *const *bias)
{
    for (int i = 0; i < n; i++) {
        cpu_matmul(be, w[i], in, out[i], false);
        if (bias && bias[i])
            add_bias(out[i], bias[i], in->rows, (int32_t)w[i]->rows);
    }
}

/* ---- argmax: the greedy token of each row ---- */

static void cpu_argmax(backend *be, const float *x, int32_t rows, int32_t n, int32_t *out)
{
    (void)be;
    for (int32_t r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * n;
        float best = -INFINITY;
        int32_t at = -1;
        /* `>` never holds for a NaN; `at < 0` takes the first -inf of a row
         * that has nothing larger. */
        for (int32_t i = 0; i < n; i++)
            if (row[i] > best || (at < 0 && row[i] == best)) {
                best = row[i];
                at = i;
            }
        out[r] = at < 0 ? 0 : at;
    }
}

/* ---- top_k: a sampled row's candidates ---- */

static void cpu_top_k(backend *be, const float *x, int32_t rows, int32_t n, int32_t k,
                      int32_t *ids, float *vals)
{
    (void)be;
    topk_entry best[BE_TOP_K_MAX];
    for (int32_t r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * n;
        int32_t *out_ids = ids + (size_t)r * k;
        bool nan = false;
        for (int32_t i = 0; i < n && !nan; i++)
            nan = isnan(row[i]);
        if (nan) {
            out_ids[0] = -1;
            continue;
        }
        topk_select(best, row, NULL, n, k);
        for (int32_t i = 0; i < k; i++) {
            out_ids[i] = best[i].id;
            vals[(size_t)r * k + i] = best[i].value;
        }
    }
}

static const backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .mem_available = cpu_mem_available,
    .weight_load = cpu_weight_load,
    .weight_free = cpu_weight_free,
    .act_create = cpu_act_create,
    .act_destroy = cpu_act_destroy,
    .kv_create = cpu_kv_create,
    .kv_destroy = cpu_kv_destroy,
    .kv_block_bytes = cpu_kv_block_bytes,
    .embed = cpu_embed,
    .gather_rows = cpu_gather_rows,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .argmax = cpu_argmax,
    .top_k = cpu_top_k,
    .matmul_many = cpu_matmul_many,
};

int backend_cpu_create(backend **out, int n_threads, llmq_err *err)
{
    *out = NULL;
    const char *name = getenv("LLMQ_CPU_KERNELS");
    const dot_kernels *k = name && *name ? dot_kernels_by_name(name) : dot_kernels_best();
    if (!k)
        return llmq_errf(err, "LLMQ_CPU_KERNELS=%s: not a kernel set this CPU runs "
                              "(generic, avx2, avx512)", name);
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return llmq_errf(err, "cpu backend: out of memory");
    if (pool_create(&cb->pool, n_threads, err) != 0) {
        free(cb);
        return -1;
    }
    cb->k = k;
    cb->base = (backend){.ops = &cpu_ops, .name = "cpu", .impl = cb};
    *out = &cb->base;
    return 0;
}
