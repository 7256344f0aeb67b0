/* cuda_backend: the CUDA backend's lifetime, memory, weights, activations,
 * KV cache and ops table; the kernels live in one file per family.
 *
 * Weights are uploaded once at load.  q6_K and q8_0 are repacked on the host
 * first (q6_repack, q8_repack) so that every kernel reads them in 16-byte
 * pieces: ggml's 210- and 34-byte blocks are not 16-byte aligned.  The
 * repacked q6_K quarter c (64 values) of a block keeps the low nibbles as
 * q4_K does (byte 32c + l: value 64c + l low, 64c + 32 + l high) and the
 * two high bits per value in 8-byte groups, one per 16-byte nibble chunk,
 * so a thread holding one chunk of nibbles finds its high bits in one
 * 8-byte load.
 *
 * Ops never block except download and sync; small uploads go through a
 * pinned ring so they do not wait for the stream either. */
#include "kernels/cuda/cuda_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_BYTES (4u << 20)
#define STAGE_MAX_UPLOAD (256u << 10)

static cuda_backend *cb_of(backend *be) { return (cuda_backend *)be->impl; }

void cuda_fail(cuda_backend *cb, const char *fmt, ...)
{
    if (cb->failed)
        return;
    cb->failed = true;
    va_list ap;
    va_start(ap, fmt);
    char msg[LLMQ_ERR_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    llmq_errf(&cb->first_err, "cuda backend: %s", msg);
}

bool cuda_env_allows(const char *name)
{
    const char *v = getenv(name);
    return !(v && strcmp(v, "0") == 0);
}

void cuda_check_launch(cuda_backend *cb, const char *op)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        cuda_fail(cb, "%s: %s", op, cudaGetErrorString(e));
}

/* Ops run one after another on the stream, so one scratch serves the GEMM's
 * split-k sums and attention's split-KV partials; growing it drains the
 * stream first (it happens while the first batches of a new size run). */
float *cuda_scratch(cuda_backend *cb, const char *op, size_t bytes)
{
    if (bytes <= cb->part_bytes)
        return cb->part;
    if (cb->recording) { /* no allocation while recording: graph_end reruns the step */
        cb->record_broken = true;
        return NULL;
    }
    cuda_graphs_drop(cb); /* recorded steps point into the old buffer */
    cudaStreamSynchronize(cb->stream);
    cudaFree(cb->part);
    cb->part_bytes = 0;
    if (cudaMalloc((void **)&cb->part, bytes) != cudaSuccess) {
        cb->part = NULL;
        cuda_fail(cb, "%s: cannot allocate %zu bytes of scratch", op, bytes);
        return NULL;
    }
    cb->part_bytes = bytes;
    return cb->part;
}

/* The first error so far into err (and -1), or 0. */
static int report(cuda_backend *cb, llmq_err *err)
{
    if (!cb->failed)
        return 0;
    *err = cb->first_err;
    return -1;
}

static int check_call(cuda_backend *cb, cudaError_t e, const char *what, llmq_err *err)
{
    if (e != cudaSuccess)
        cuda_fail(cb, "%s: %s", what, cudaGetErrorString(e));
    return report(cb, err);
}

/* ---- memory ---- */

static void *cu_alloc(backend *, size_t bytes, llmq_err *err)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        llmq_errf(err, "cuda backend: cannot allocate %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

/* Work still queued may use p: the stream drains first. */
/* Every free goes through here: recorded steps may point into the memory,
 * so they are dropped (graphs.cu). */
static void cu_free(backend *be, void *p)
{
    if (!p)
        return;
    cuda_backend *cb = cb_of(be);
    cuda_graphs_drop(cb);
    cudaStreamSynchronize(cb->stream);
    cudaFree(p);
}

/* The caller may reuse src at once: small copies are staged in the pinned
 * ring (waiting for the stream only when the ring wraps), large ones are
 * synchronous. */
static int cu_upload(backend *be, void *dst, const void *src, size_t bytes, llmq_err *err)
{
    cuda_backend *cb = cb_of(be);
    if (bytes == 0)
        return report(cb, err);
    if (bytes > STAGE_MAX_UPLOAD) {
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(cb->stream);
        return check_call(cb, e, "upload", err);
    }
    const size_t need = (bytes + 255) & ~(size_t)255;
    if (cb->stage_off + need > cb->stage_size) {
        cudaError_t e = cudaStreamSynchronize(cb->stream);
        if (e != cudaSuccess)
            return check_call(cb, e, "upload", err);
        cb->stage_off = 0;
    }
    uint8_t *s = cb->stage + cb->stage_off;
    memcpy(s, src, bytes);
    cb->stage_off += need;
    return check_call(cb, cudaMemcpyAsync(dst, s, bytes, cudaMemcpyHostToDevice, cb->stream),
                      "upload", err);
}

static int cu_download(backend *be, void *dst, const void *src, size_t bytes, llmq_err *err)
{
    cuda_backend *cb = cb_of(be);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cb->stream);
    return check_call(cb, e, "download", err);
}

static int cu_sync(backend *be, llmq_err *err)
{
    cuda_backend *cb = cb_of(be);
    return check_call(cb, cudaStreamSynchronize(cb->stream), "sync", err);
}

static int cu_mem_available(backend *be, size_t *bytes, llmq_err *err)
{
    cuda_backend *cb = cb_of(be);
    size_t total = 0;
    return check_call(cb, cudaMemGetInfo(bytes, &total), "mem_available", err);
}

/* ---- weights ---- */

/* Native q6_K block -> planes (see the file comment). */
static void q6_repack(const block_q6_K *x, uint8_t *ql4, uint8_t *qh, int8_t *sc, quant_f16 *d)
{
    uint8_t v[QK_K];
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *ql = x->ql + 64 * h, *qhi = x->qh + 32 * h;
            v[128 * h + l] = (uint8_t)((ql[l] & 15) | ((qhi[l] & 3) << 4));
            v[128 * h + 32 + l] = (uint8_t)((ql[l + 32] & 15) | (((qhi[l] >> 2) & 3) << 4));
            v[128 * h + 64 + l] = (uint8_t)((ql[l] >> 4) | (((qhi[l] >> 4) & 3) << 4));
            v[128 * h + 96 + l] = (uint8_t)((ql[l + 32] >> 4) | (((qhi[l] >> 6) & 3) << 4));
        }
    memset(qh, 0, 64);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            ql4[32 * c + l] = (uint8_t)((v[64 * c + l] & 15) | ((v[64 * c + 32 + l] & 15) << 4));
            for (int hi = 0; hi < 2; hi++) {
                const int k = l % 16, chunk = 2 * c + l / 16;
                const int bits = (v[64 * c + 32 * hi + l] >> 4) & 3;
                qh[8 * chunk + 4 * hi + k % 4] |= (uint8_t)(bits << (2 * (k / 4)));
            }
        }
    memcpy(sc, x->scales, 16);
    *d = x->d;
}

typedef struct plane_plan {
    size_t q, qh, sc, d, total; /* byte offsets of the planes in the allocation */
} plane_plan;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static plane_plan plan_planes(quant_type t, int64_t rows, int64_t cols, size_t row_bytes)
{
    plane_plan p = {0, 0, 0, 0, 0};
    const size_t nblk = (size_t)rows * (size_t)(t == QUANT_Q8_0 ? cols / 32 : cols / QK_K);
    switch (t) {
    case QUANT_Q6_K:
        p.qh = align256(nblk * 128);
        p.sc = p.qh + align256(nblk * 64);
        p.d = p.sc + align256(nblk * 16);
        p.total = p.d + align256(nblk * 2);
        break;
    case QUANT_Q8_0:
        p.d = align256(nblk * 32);
        p.total = p.d + align256(nblk * 2);
        break;
    default: p.total = align256((size_t)rows * row_bytes); break;
    }
    return p;
}

/* The device image of a tensor: ggml's bytes, the repacked planes, or
 * bf16 widened to f32 (row_bytes: the stored row's). */
static void fill_image(quant_type t, int64_t rows, int64_t cols, size_t row_bytes,
                       const plane_plan *p, const uint8_t *src, uint8_t *img)
{
    const size_t nblk = (size_t)rows * (size_t)(t == QUANT_Q8_0 ? cols / 32 : cols / QK_K);
    if (t == QUANT_Q6_K) {
        const block_q6_K *b = (const block_q6_K *)src;
        for (size_t i = 0; i < nblk; i++)
            q6_repack(&b[i], img + i * 128, img + p->qh + i * 64, (int8_t *)(img + p->sc) + i * 16,
                      (quant_f16 *)(img + p->d) + i);
    } else if (t == QUANT_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)src;
        for (size_t i = 0; i < nblk; i++) {
            memcpy(img + i * 32, b[i].qs, 32);
            ((quant_f16 *)(img + p->d))[i] = b[i].d;
        }
    } else if (t == QUANT_BF16) {
        for (int64_t r = 0; r < rows; r++)
            quant_dequantize_row(t, src + (size_t)r * row_bytes, (float *)img + r * cols, cols);
    } else {
        memcpy(img, src, (size_t)rows * row_bytes);
    }
}

/* bf16 has no kernels of its own: its values widen to f32 exactly. */
static quant_type kept_type(quant_type t)
{
    return t == QUANT_BF16 ? QUANT_F32 : t;
}

/* "q4_K, q5_K, ..., bf16": the types with kernels (CUDA_WEIGHT_TYPES). */
static void name_weight_types(char *out, size_t size)
{
    size_t n = 0;
    for_each_weight_type([&](auto t) {
        if (n < size)
            n += (size_t)snprintf(out + n, size - n, "%s, ", quant_type_name((quant_type)t.value));
    });
    if (n < size)
        snprintf(out + n, size - n, "%s", quant_type_name(QUANT_BF16));
}

/* Row lengths every kernel can take in whole 16-byte pieces: whole blocks,
 * and float rows of a multiple of 16 bytes. */
static int check_weight_shape(quant_type t, int64_t cols, llmq_err *err)
{
    const quant_type kept = kept_type(t);
    if (!with_weight_type(kept, [](auto) {})) {
        char names[128];
        name_weight_types(names, sizeof names);
        return llmq_errf(err, "cuda backend: no kernels for type %s (supported: %s)",
                         quant_type_name(t), names);
    }
    const int64_t elems = (int64_t)quant_block_elems(kept);
    const int64_t mult = elems > 1 ? elems : 16 / (int64_t)quant_block_bytes(kept);
    if (cols % mult != 0)
        return llmq_errf(err, "cuda backend: %s rows of %lld values (need a multiple of %lld)",
                         quant_type_name(t), (long long)cols, (long long)mult);
    return 0;
}

static int cu_weight_load(backend *be, quant_type type, int64_t rows, int64_t cols,
                          const void *data, be_weight **out, llmq_err *err)
{
    cuda_backend *cb = cb_of(be);
    uint64_t row_bytes;
    if (quant_row_bytes(type, (uint64_t)cols, &row_bytes, err) != 0 ||
        check_weight_shape(type, cols, err) != 0)
        return -1;
    const quant_type kept = kept_type(type);
    const size_t kept_row_bytes = type == QUANT_BF16 ? 2 * row_bytes : row_bytes;
    const plane_plan p = plan_planes(kept, rows, cols, kept_row_bytes);
    be_weight *w = (be_weight *)calloc(1, sizeof *w);
    uint8_t *img = (uint8_t *)malloc(p.total);
    void *mem = NULL;
    int rc = -1;
    cudaError_t e = cudaSuccess;
    if (!w || !img) {
        llmq_errf(err, "cuda backend: out of host memory for a %zu-byte tensor", p.total);
        goto done;
    }
    fill_image(type, rows, cols, row_bytes, &p, (const uint8_t *)data, img);
    /* On the backend's stream: a plain cudaMemcpy from pageable memory may
     * return before its DMA has landed, unordered with this stream. */
    e = cudaMalloc(&mem, p.total);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(mem, img, p.total, cudaMemcpyHostToDevice, cb->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cb->stream);
    if (e != cudaSuccess) {
        llmq_errf(err, "cuda backend: uploading a %zu-byte tensor: %s", p.total,
                  cudaGetErrorString(e));
        goto done;
    }
    w->type = kept;
    w->rows = rows;
    w->cols = cols;
    w->nb = kept == QUANT_Q8_0 ? cols / 32 : quant_block_elems(kept) == QK_K ? cols / QK_K : 0;
    w->mem = mem;
    w->q = (const uint8_t *)mem;
    w->qh = (const uint8_t *)mem + p.qh;
    w->sc = (const int8_t *)((const uint8_t *)mem + p.sc);
    w->d = (const __half *)((const uint8_t *)mem + p.d);
    *out = w;
    w = NULL;
    mem = NULL;
    rc = 0;
done:
    free(img);
    free(w);
    if (mem)
        cudaFree(mem);
    return rc;
}

static void cu_weight_free(backend *be, be_weight *w)
{
    if (!w)
        return;
    cu_free(be, w->mem);
    free(w);
}

/* ---- activations ---- */

static void cu_act_destroy(backend *be, be_act *a)
{
    cuda_actq *aq = (cuda_actq *)a->q;
    if (aq) {
        cu_free(be, aq->h);
        free(aq);
    }
    cu_free(be, a->x);
    memset(a, 0, sizeof *a);
}

static int cu_act_create(backend *be, int32_t max_rows, int32_t max_cols, be_act *out,
                         llmq_err *err)
{
    memset(out, 0, sizeof *out);
    const size_t rows = (size_t)max_rows, cols = (size_t)max_cols;
    cuda_actq *aq = (cuda_actq *)calloc(1, sizeof *aq);
    out->q = aq;
    out->x = (float *)cu_alloc(be, rows * cols * sizeof(float), err);
    if (aq)
        aq->h = (__half *)cu_alloc(be, rows * (size_t)act_f16_stride(max_cols) * sizeof(__half),
                                   err);
    if (!out->x || !aq || !aq->h) {
        cu_act_destroy(be, out);
        return llmq_errf(err, "cuda backend: cannot allocate activations %d x %d", max_rows,
                         max_cols);
    }
    out->max_rows = max_rows;
    out->max_cols = max_cols;
    return 0;
}

/* ---- KV cache ---- */

static void cu_kv_destroy(backend *be, be_kv *kv)
{
    if (!kv)
        return;
    cu_free(be, kv->k);
    cu_free(be, kv->v);
    cu_free(be, kv->ks);
    cu_free(be, kv->vs);
    free(kv);
}

/* Bytes of one token's keys (or values) in one layer: the values, and the
 * scales of a q8_0 row. */
static int kv_row_bytes(be_kv_type type, int32_t kv_dim, size_t *values, size_t *scales,
                        llmq_err *err)
{
    if (type != BE_KV_F16 && type != BE_KV_Q8_0)
        return llmq_errf(err,
                         "cuda backend: the KV cache is f16 or q8_0 (%s was asked; drop "
                         "--kv-f32)",
                         be_kv_type_name(type));
    if (be_kv_row_bytes(type, kv_dim) == 0)
        return llmq_errf(err, "cuda backend: a %s KV cache cannot hold rows of %d values",
                         be_kv_type_name(type), kv_dim);
    *values = (size_t)kv_dim * (type == BE_KV_F16 ? sizeof(__half) : sizeof(int8_t));
    *scales = type == BE_KV_Q8_0 ? (size_t)kv_dim / QK8_0 * sizeof(__half) : 0;
    return 0;
}

static int cu_kv_block_bytes(backend *, int32_t n_layers, int32_t block_size, int32_t kv_dim,
                             be_kv_type type, size_t *bytes, llmq_err *err)
{
    size_t values = 0, scales = 0;
    if (kv_row_bytes(type, kv_dim, &values, &scales, err) != 0)
        return -1;
    *bytes = 2 * (size_t)n_layers * block_size * (values + scales);
    return 0;
}

/* A zeroed plane (on the stream, before any kv_write) so that no kernel
 * can ever read an unwritten, possibly non-finite value; NULL for 0 bytes. */
static void *kv_plane(backend *be, size_t bytes, bool *ok, llmq_err *err)
{
    if (bytes == 0 || !*ok)
        return NULL;
    void *p = cu_alloc(be, bytes, err);
    *ok = p && cudaMemsetAsync(p, 0, bytes, cb_of(be)->stream) == cudaSuccess;
    return p;
}

static int cu_kv_create(backend *be, int32_t n_layers, int32_t n_blocks, int32_t block_size,
                        int32_t kv_dim, be_kv_type type, be_kv **out, llmq_err *err)
{
    size_t values = 0, scales = 0;
    if (kv_row_bytes(type, kv_dim, &values, &scales, err) != 0)
        return -1;
    be_kv *kv = (be_kv *)calloc(1, sizeof *kv);
    if (!kv)
        return llmq_errf(err, "cuda backend: out of memory");
    *kv = (be_kv){n_layers, n_blocks, block_size, kv_dim, type, NULL, NULL, NULL, NULL};
    const size_t slots = (size_t)n_layers * n_blocks * block_size;
    bool ok = true;
    kv->k = kv_plane(be, slots * values, &ok, err);
    kv->v = kv_plane(be, slots * values, &ok, err);
    kv->ks = (__half *)kv_plane(be, slots * scales, &ok, err);
    kv->vs = (__half *)kv_plane(be, slots * scales, &ok, err);
    if (!ok) {
        cu_kv_destroy(be, kv);
        return llmq_errf(err, "cuda backend: cannot allocate a %s KV cache of 2 x %zu bytes",
                         be_kv_type_name(type), slots * (values + scales));
    }
    *out = kv;
    return 0;
}

/* ---- ops ---- */

static void cu_embed(backend *be, const be_weight *table, const int32_t *ids, int32_t n,
                     float *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && n > 0)
        launch_embed(cb, table, ids, n, out);
}

static void cu_gather_rows(backend *be, const float *x, const int32_t *idx, int32_t n,
                           int32_t dim, float *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && n > 0)
        launch_gather_rows(cb, x, idx, n, dim, out);
}

static bool act_fits(cuda_backend *cb, const char *op, const be_act *a, int32_t rows,
                     int32_t cols)
{
    if (rows <= a->max_rows && cols <= a->max_cols)
        return true;
    cuda_fail(cb, "%s: %d x %d into activations of %d x %d", op, rows, cols, a->max_rows,
              a->max_cols);
    return false;
}

static void cu_rmsnorm(backend *be, const float *x, const float *w, float eps, int32_t rows,
                       int32_t dim, be_act *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && rows > 0 && act_fits(cb, "rmsnorm", out, rows, dim))
        launch_rmsnorm(cb, x, w, eps, rows, dim, out);
}

static void cu_swiglu(backend *be, const float *g, const float *u, int32_t rows, int32_t n,
                      be_act *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && rows > 0 && act_fits(cb, "swiglu", out, rows, n))
        launch_swiglu(cb, g, u, rows, n, out);
}

/* Every matmul reads the f16 step-ordered copy (made here unless its
 * producer left it valid); up to MMV_MAX_ROWS rows of k-quant and q8_0
 * weights take mmv, the rest the GEMM: the same bits either way
 * (numerics.cuh), so the split is by speed alone. */
static bool matmul_prepare(cuda_backend *cb, const be_weight *w, be_act *in)
{
    if (cb->failed || in->rows <= 0)
        return false;
    if (in->cols != w->cols) {
        cuda_fail(cb, "matmul: activations of %d columns against a %lld x %lld weight", in->cols,
                  (long long)w->rows, (long long)w->cols);
        return false;
    }
    if (!in->q_valid)
        launch_act_quantize(cb, in);
    return true;
}

static void cu_matmul(backend *be, const be_weight *w, be_act *in, float *out, bool accumulate)
{
    cuda_backend *cb = cb_of(be);
    if (!matmul_prepare(cb, w, in))
        return;
    if (mmv_takes(w, in))
        launch_mmv_group(cb, 1, &w, in, &out, NULL, accumulate);
    else
        launch_gemm(cb, w, in, out, NULL, accumulate);
}

/* Runs of consecutive weights of one type and width that mmv takes go out
 * as one launch each; the rest one by one. */
static void cu_matmul_many(backend *be, int n, const be_weight *const *w, be_act *in,
                           float *const *out, const float *const *bias)
{
    cuda_backend *cb = cb_of(be);
    for (int i = 0, j; i < n; i = j) {
        j = i + 1;
        if (!mmv_takes(w[i], in)) {
            if (matmul_prepare(cb, w[i], in))
                launch_gemm(cb, w[i], in, out[i], bias ? bias[i] : NULL, false);
            continue;
        }
        while (j < n && j - i < MMV_GROUP_MAX && w[j]->type == w[i]->type &&
               w[j]->cols == w[i]->cols)
            j++;
        if (matmul_prepare(cb, w[i], in))
            launch_mmv_group(cb, j - i, w + i, in, out + i, bias ? bias + i : NULL, false);
    }
}

static void cu_rope(backend *be, float *q, float *k, const int32_t *pos, int32_t rows,
                    const be_attn_shape *shape, const be_rope *rope)
{
    cuda_backend *cb = cb_of(be);
    /* The same powf as the CPU backend: theta advances by this factor. */
    const float theta_scale = powf(rope->freq_base, -2.0f / (float)rope->n_dims);
    if (!cb->failed && rows > 0)
        launch_rope(cb, q, k, pos, rows, shape, rope, theta_scale);
}

static void cu_kv_write(backend *be, be_kv *kv, int32_t layer, const float *k, const float *v,
                        const int32_t *slot, int32_t rows)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && rows > 0)
        launch_kv_write(cb, kv, layer, k, v, slot, rows);
}

static void cu_attention(backend *be, const be_kv *kv, int32_t layer, const float *q,
                         const be_attn_batch *b, const be_attn_shape *sh, be_act *out)
{
    cuda_backend *cb = cb_of(be);
    const int32_t cols = sh->n_head * sh->head_dim;
    if (!cb->failed && b->n_rows > 0 && act_fits(cb, "attention", out, b->n_rows, cols))
        launch_attention(cb, kv, layer, q, b, sh, out->x);
    out->rows = b->n_rows;
    out->cols = cols;
    out->q_valid = false;
}

static void cu_argmax(backend *be, const float *x, int32_t rows, int32_t n, int32_t *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && rows > 0)
        launch_argmax(cb, x, rows, n, out);
}

static void cu_top_k(backend *be, const float *x, int32_t rows, int32_t n, int32_t k,
                     int32_t *ids, float *vals)
{
    cuda_backend *cb = cb_of(be);
    if (cb->failed || rows <= 0)
        return;
    if (k < 1 || k > BE_TOP_K_MAX || k > n) {
        cuda_fail(cb, "top_k: %d of %d (1 to %d)", k, n, BE_TOP_K_MAX);
        return;
    }
    launch_top_k(cb, x, rows, n, k, ids, vals);
}

static void cu_sample(backend *be, float *x, int32_t n, const be_sample_row *rows, int32_t n_rows,
                      const int32_t *pen, float *save, const uint64_t *mask, be_sample_out *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && n_rows > 0)
        launch_sample(cb, x, n, rows, n_rows, pen, save, mask, out);
}

static void cu_log_norm(backend *be, const float *x, int32_t rows, int32_t n, double *out)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->failed && rows > 0)
        launch_log_norm(cb, x, rows, n, out);
}

/* ---- lifetime ---- */

static void cu_destroy(backend *be)
{
    cuda_backend *cb = cb_of(be);
    cudaSetDevice(cb->gpu);
    if (cb->stream) {
        cudaStreamSynchronize(cb->stream);
        cudaStreamDestroy(cb->stream);
    }
    cuda_graphs_drop(cb);
    if (cb->stage)
        cudaFreeHost(cb->stage);
    cudaFree(cb->part);
    free(cb);
}

/* By name: upload and download share a signature, so a table filled by
 * position would swap them silently if the struct were reordered.  nvcc
 * refuses designators out of the struct's order, so a reordered struct
 * fails to build here instead. */
static const backend_ops cuda_ops = {
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .mem_available = cu_mem_available,
    .weight_load = cu_weight_load,
    .weight_free = cu_weight_free,
    .act_create = cu_act_create,
    .act_destroy = cu_act_destroy,
    .kv_create = cu_kv_create,
    .kv_destroy = cu_kv_destroy,
    .kv_block_bytes = cu_kv_block_bytes,
    .embed = cu_embed,
    .gather_rows = cu_gather_rows,
    .rmsnorm = cu_rmsnorm,
    .matmul = cu_matmul,
    .rope = cu_rope,
    .kv_write = cu_kv_write,
    .attention = cu_attention,
    .swiglu = cu_swiglu,
    .argmax = cu_argmax,
    .top_k = cu_top_k,
    .sample = cu_sample,
    .log_norm = cu_log_norm,
    .matmul_many = cu_matmul_many,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
};

extern "C" int backend_cuda_create(backend **out, int gpu, llmq_err *err)
{
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return llmq_errf(err, "cuda backend: no CUDA device (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    if (gpu < 0 || gpu >= n)
        return llmq_errf(err, "cuda backend: no GPU %d (%d found)", gpu, n);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb)
        return llmq_errf(err, "cuda backend: out of memory");
    cb->base.impl = cb;
    cb->gpu = gpu;
    cb->stage_size = STAGE_BYTES;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(gpu)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, gpu)) != cudaSuccess)
        goto fail;
    if (prop.major < 9) {
        free(cb);
        return llmq_errf(err, "cuda backend: GPU %d (%s) is sm_%d%d; this build needs sm_90", gpu,
                         prop.name, prop.major, prop.minor);
    }
    cb->n_sm = prop.multiProcessorCount;
    cb->gemm_sm90 = gemm_sm90_enabled();
    if ((e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&cb->stage, cb->stage_size)) != cudaSuccess ||
        (e = gemm_configure()) != cudaSuccess || (e = gemm_sm90_configure()) != cudaSuccess ||
        (e = mmv_configure()) != cudaSuccess || (e = attention_configure()) != cudaSuccess)
        goto fail;
    cuda_graphs_init(cb);
    cb->pdl_on = cuda_env_allows("LLMQ_CUDA_PDL");
    cb->base.ops = &cuda_ops;
    cb->base.name = "cuda";
    *out = &cb->base;
    return 0;
fail:
    llmq_errf(err, "cuda backend: GPU %d: %s", gpu, cudaGetErrorString(e));
    cu_destroy(&cb->base);
    return -1;
}
