/* backend: the seam between the forward pass and the hardware.
 *
 * The forward pass (model/model.c) is written once against these ops;
 * kernels/cpu implements them in C (the numerical oracle), kernels/cuda on
 * the GPU.  A backend is a plain struct of function pointers plus its own
 * state behind `impl`.  All pointers named *_dev are backend memory (host
 * memory for the CPU backend, device memory for CUDA), allocated with
 * ops->alloc; ops are enqueued in order and may run asynchronously until
 * ops->sync or ops->download.  An op returns nothing: a backend that can
 * fail inside one (CUDA) keeps the first failure and returns it from the
 * next sync, download or upload.
 *
 * Batch invariance contract: the bits of every row an op produces are a
 * function of that row's inputs alone, never of how many rows share the
 * call, where the row sits, or what the other rows hold.  So:
 * - every reduction over k has an order fixed by k (split sizes set by k,
 *   never by the number of rows or sequences), and the activation format is
 *   the same at 1 row and at 512;
 * - attention computes a row over its sequence's keys in an order fixed by
 *   the row's own position (splits of the keys at fixed positions), and a
 *   prompt row (prefilled alone, with others, or in chunks) and a generated
 *   row (be_attn_batch: decode rows) each always the same way;
 * - argmax and top_k choose by the row's values alone.
 * Then a prompt gives the same KV cache however it was prefilled, and a
 * job's logits are the same alone, in any batch, and after a requeue, on
 * the same GPU kind and build.  Each backend states how it keeps the rule
 * (kernels/cuda/numerics.cuh; the CPU backend's ops).
 *
 * Matmul inputs travel as a be_act: the f32 rows plus a quantized copy the
 * backend makes at most once per write (q_valid), so the three projections
 * reading one normalized activation quantize it once. */
#ifndef LLMQ_KERNELS_BACKEND_H
#define LLMQ_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/quant.h"

typedef struct backend backend;
typedef struct be_weight be_weight; /* a weight matrix in the backend's layout */
typedef struct be_kv be_kv;         /* the paged KV cache of all layers */

/* Matmul input: rows x cols f32 in x; q is the backend's quantized copy. */
typedef struct be_act {
    float *x;
    void *q;
    int32_t rows;
    int32_t cols;
    int32_t max_rows;
    int32_t max_cols;
    bool q_valid;
} be_act;

/* Shape of the attention for one step (all arrays in backend memory).
 * Rows of one sequence are contiguous and in position order. */
typedef struct be_attn_batch {
    int32_t n_rows;
    int32_t n_seqs;
    const int32_t *row_seq_dev;     /* [n_rows] index of the row's sequence in this batch */
    const int32_t *row_pos_dev;     /* [n_rows] position of the row's token */
    const int32_t *block_table_dev; /* [n_seqs * max_blocks] KV block ids of each sequence */
    const int32_t *seq_len_dev;     /* [n_seqs] tokens in the cache after this step's writes */
    int32_t max_blocks;             /* row stride of block_table_dev */
    int32_t max_seq_len;            /* max of seq_len (host copy, for launch shapes) */
    /* Which rows are generated tokens (decode rows): row r is one when
     * row_pos[r] >= first_generated[row_seq[r]].  The engine decides it from
     * the job alone (a token is a prompt token or a sampled one whatever it
     * is batched with), so a backend that computes the two kinds with
     * different kernels still computes each row the same way in every batch
     * (the invariance rule above).  decode_rows lists them, ascending.
     * first_generated NULL (n_decode 0): every row is a prompt row. */
    const int32_t *first_generated_dev; /* [n_seqs] */
    const int32_t *decode_rows_dev;     /* [n_decode] */
    int32_t n_decode;
} be_attn_batch;

/* Writes the decode rows of a batch (host arrays; first_generated per
 * sequence, may be NULL) into out; returns how many. */
static inline int32_t be_attn_decode_rows(const int32_t *row_seq, const int32_t *row_pos,
                                          const int32_t *first_generated, int32_t n_rows,
                                          int32_t *out)
{
    int32_t n = 0;
    for (int32_t r = 0; first_generated && r < n_rows; r++)
        if (row_pos[r] >= first_generated[row_seq[r]])
            out[n++] = r;
    return n;
}

typedef struct be_attn_shape {
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
} be_attn_shape;

/* How rope turns each head of q and k (llama.cpp's ggml_rope_ext without
 * YaRN: freq_scale 1, ext_factor 0, attn_factor 1).  Its first n_dims values
 * form n_dims/2 pairs; pair i turns by theta_i = pos * freq_base^(-2i/n_dims)
 * / factors[i], theta taken by repeated products of freq_base^(-2/n_dims) as
 * ggml does; the values past n_dims are left as they are. */
typedef enum be_rope_mode {
    BE_ROPE_PAIRS = 0,  /* pair i is (x[2i], x[2i+1]): LLAMA_ROPE_TYPE_NORM (llama) */
    BE_ROPE_HALVES = 1, /* pair i is (x[i], x[i + n_dims/2]): LLAMA_ROPE_TYPE_NEOX (qwen2, phi3) */
} be_rope_mode;

typedef struct be_rope {
    be_rope_mode mode;
    int32_t n_dims;
    float freq_base;
    const float *factors_dev; /* [n_dims/2] frequency divisors (Llama 3's rope_freqs), or NULL */
} be_rope;

/* How the KV cache stores a value.  BE_KV_Q8_0 cuts each token's row of
 * kv_dim values (kv_dim a multiple of 32) into blocks of 32 consecutive
 * values, each kept as 32 int8 q and an f16 scale d (34 bytes; value q * d),
 * quantized as llama.cpp's q8_0 (d = amax / 127, q = roundf(x / d)), where a
 * block holding a NaN or an infinity reads back as NaN.  The layout of the
 * blocks in memory is the backend's.  kv_write quantizes and attention reads
 * every key and value from the cache, those of the rows written in the same
 * step too: so a prompt's attention is the same prefilled alone, with
 * others or in chunks, and a shared prefix block serves every sequence. */
typedef enum be_kv_type { BE_KV_F32 = 0, BE_KV_F16 = 1, BE_KV_Q8_0 = 2 } be_kv_type;

static inline const char *be_kv_type_name(be_kv_type type)
{
    return type == BE_KV_Q8_0 ? "q8_0" : type == BE_KV_F16 ? "f16" : "f32";
}

/* Bytes of one token's keys (or values) in one layer: 0 for a row that
 * type cannot hold (q8_0 blocks need kv_dim % 32 == 0). */
static inline size_t be_kv_row_bytes(be_kv_type type, int32_t kv_dim)
{
    switch (type) {
    case BE_KV_F32: return (size_t)kv_dim * sizeof(float);
    case BE_KV_F16: return (size_t)kv_dim * sizeof(quant_f16);
    case BE_KV_Q8_0: return kv_dim % QK8_0 ? 0 : (size_t)kv_dim / QK8_0 * sizeof(block_q8_0);
    }
    return 0;
}

/* What a decode step's kernels depend on besides the contents of the batch
 * arrays (which stay at fixed addresses): steps of one key launch the same
 * kernels with the same arguments.  owner names the buffers the step uses
 * (the model's scratch); a backend also forgets its recordings whenever it
 * frees memory, so a reused address never replays a stale step. */
typedef struct be_graph_key {
    uint64_t owner;
    int32_t n_rows, n_logits, max_seq_len, head_dim;
} be_graph_key;

enum { BE_GRAPH_DONE = 0, BE_GRAPH_REDO = 1 };

#define BE_TOP_K_MAX 256 /* the most candidates backend_ops.top_k returns per row */
#define BE_SAMPLE_TOP_K_MAX 2048 /* the largest top_k backend_ops.sample takes */

/* One row of backend_ops.sample: engine/sampler.h's chain (penalties,
 * top-k up to BE_SAMPLE_TOP_K_MAX, top-p, min-p, temperature, the draw) for
 * logit row `row`. */
typedef struct be_sample_row {
    int32_t row;       /* of x (rows x n); the rows of one call are distinct */
    int32_t pen_first; /* its penalty pairs: pen[pen_first .. pen_first + n_pen) */
    int32_t n_pen;
    float temperature; /* <= 0: the first maximum after the penalties */
    float top_p;       /* >= 1: off */
    float log_min_p;   /* logf(min_p) as the host computes it; -INFINITY: off */
    float repeat_penalty, presence_penalty, frequency_penalty;
    int32_t mask;  /* its grammar's allowed tokens: row `mask` of mask_dev; -1: none */
    int32_t top_k; /* <= 0 or >= n: off; else at most BE_SAMPLE_TOP_K_MAX */
    double u;      /* sampler_uniform(seed, step) */
} be_sample_row;

/* What backend_ops.sample chose for a row: the token and its logit before
 * the penalties (for its log-probability); token -1 where the device left
 * the row to the host (a NaN in it: the host's sampler defines what a NaN
 * does). */
typedef struct be_sample_out {
    int32_t token;
    float logit;
} be_sample_out;

typedef struct backend_ops {
    void (*destroy)(backend *be);

    /* ---- memory ---- */
    void *(*alloc)(backend *be, size_t bytes, llmq_err *err);
    void (*free)(backend *be, void *p);
    int (*upload)(backend *be, void *dst_dev, const void *src, size_t bytes, llmq_err *err);
    int (*download)(backend *be, void *dst, const void *src_dev, size_t bytes, llmq_err *err);
    int (*sync)(backend *be, llmq_err *err);
    /* Bytes the backend could still allocate: free device memory on a GPU,
     * the system's available memory on the CPU. */
    int (*mem_available)(backend *be, size_t *bytes, llmq_err *err);

    /* ---- weights: rows x cols, row-major in ggml's block layout ---- */
    int (*weight_load)(backend *be, quant_type type, int64_t rows, int64_t cols,
                       const void *data, be_weight **out, llmq_err *err);
    void (*weight_free)(backend *be, be_weight *w);

    /* ---- activations ---- */
    int (*act_create)(backend *be, int32_t max_rows, int32_t max_cols, be_act *out, llmq_err *err);
    void (*act_destroy)(backend *be, be_act *a);

    /* ---- KV cache: n_layers x n_blocks blocks of block_size tokens x kv_dim ---- */
    int (*kv_create)(backend *be, int32_t n_layers, int32_t n_blocks, int32_t block_size,
                     int32_t kv_dim, be_kv_type type, be_kv **out, llmq_err *err);
    void (*kv_destroy)(backend *be, be_kv *kv);
    /* The backend memory one block of such a cache takes (keys and values
     * of block_size tokens in every layer), so that a caller can size a
     * pool to the memory left; fails for a type kv_create refuses. */
    int (*kv_block_bytes)(backend *be, int32_t n_layers, int32_t block_size, int32_t kv_dim,
                          be_kv_type type, size_t *bytes, llmq_err *err);

    /* ---- ops ---- */
    /* out[r] = dequantized row ids[r] of the embedding table (rows x cols). */
    void (*embed)(backend *be, const be_weight *table, const int32_t *ids_dev, int32_t n,
                  float *out_dev);
    /* out[r] = x[idx[r]] (dim floats each). */
    void (*gather_rows)(backend *be, const float *x_dev, const int32_t *idx_dev, int32_t n,
                        int32_t dim, float *out_dev);
    /* out = x / rms(x) * w, per row; out->rows = rows. */
    void (*rmsnorm)(backend *be, const float *x_dev, const float *w_dev, float eps, int32_t rows,
                    int32_t dim, be_act *out);
    /* out (rows x w.rows) = in . w^T, or += when accumulate (the residual add). */
    void (*matmul)(backend *be, const be_weight *w, be_act *in, float *out_dev, bool accumulate);
    /* Rotate q (rows x n_head*head_dim) and k (rows x n_head_kv*head_dim) in
     * place, each head as `rope` says (see be_rope). */
    void (*rope)(backend *be, float *q_dev, float *k_dev, const int32_t *pos_dev, int32_t rows,
                 const be_attn_shape *shape, const be_rope *rope);
    /* Store k, v rows (rows x kv_dim) of `layer` at flat slots (block*block_size + offset). */
    void (*kv_write)(backend *be, be_kv *kv, int32_t layer, const float *k_dev, const float *v_dev,
                     const int32_t *slot_dev, int32_t rows);
    /* Causal attention of each row over its sequence's cache, positions 0..pos. */
    void (*attention)(backend *be, const be_kv *kv, int32_t layer, const float *q_dev,
                      const be_attn_batch *batch, const be_attn_shape *shape, be_act *out);
    /* out = silu(gate) * up, per element (rows x n). */
    void (*swiglu)(backend *be, const float *gate_dev, const float *up_dev, int32_t rows,
                   int32_t n, be_act *out);
    /* out[r] = the lowest index holding the maximum of row r (rows x n), NaNs
     * never the maximum, 0 for a row of NaNs: the greedy token, so that a
     * decode step copies back ids instead of logits. */
    void (*argmax)(backend *be, const float *x_dev, int32_t rows, int32_t n, int32_t *out_dev);
    /* Each row's k best values (rows x n) -- larger first, ties to the lower
     * index, as common/topk.h orders them -- into ids and vals (rows x k,
     * best first), so that a sampled row copies back k candidates instead of
     * n logits; a row holding a NaN gets ids[r * k] = -1 (it has no such
     * order).  1 <= k <= min(n, BE_TOP_K_MAX).  NULL where a backend lacks it. */
    void (*top_k)(backend *be, const float *x_dev, int32_t rows, int32_t n, int32_t k,
                  int32_t *ids_dev, float *vals_dev);
    /* For each of n_rows rows (rows_dev): the token sampler_sample
     * (engine/sampler.h) draws from logit row rows_dev[i].row of x (rows of
     * n floats), into out_dev[i].  pen_dev holds (token,
     * count) pairs (sampler_penalty_window); a row's are applied in place
     * with the sampler's formula, bit for bit, their logits kept in save_dev
     * (one float per pair) and put back before the op ends: x is unchanged
     * after it.  A row with a mask (mask_dev: rows of ceil(n / 64) words,
     * bit t of word t / 64 set for an allowed token) sees -inf for every
     * token it does not allow, as the host's tokenmask_apply leaves it.
     * The truncation and the draw follow the sampler's rules; a sum of the
     * softmax is a parallel one, in an order fixed by n alone, so a row's
     * token is a function of its logits, parameters and u alone
     * (kernels/cuda/sampling.cu states how far from the CPU's it can be).
     * NULL where a backend lacks it. */
    void (*sample)(backend *be, float *x_dev, int32_t n, const be_sample_row *rows_dev,
                   int32_t n_rows, const int32_t *pen_dev, float *save_dev,
                   const uint64_t *mask_dev, be_sample_out *out_dev);
    /* The log-softmax normalizer of each row of x (rows x n), a NaN taken as
     * -inf: out[2r] = the row's max, out[2r + 1] = max + log(sum exp(x - max))
     * (the sum in double, in an order fixed by n; +inf for a row of -inf and
     * NaN alone), so that logprob(i) = x[i] - out[2r + 1] needs no copy of
     * the row.  NULL where a backend lacks it. */
    void (*log_norm)(backend *be, const float *x_dev, int32_t rows, int32_t n, double *out_dev);
    /* out[i] = in . w[i]^T for the n projections that read one activation
     * (q, k, v; gate, up), each exactly as matmul computes it, then
     * out[i][r][j] += bias[i][j] where bias_dev (NULL: none) has an entry for
     * weight i (qwen2's q, k, v biases): one float add after the product, so
     * that a backend may add it in the matmul's epilogue.  A backend may run
     * several projections in one launch. */
    void (*matmul_many)(backend *be, int n, const be_weight *const *w, be_act *in,
                        float *const *out_dev, const float *const *bias_dev);

    /* ---- recorded steps (NULL where a backend has none) ---- */
    /* Brackets the kernels of a decode step: 1 when the step recorded under
     * key ran (the caller issues none of its ops and skips graph_end), else
     * 0: the caller issues them, then calls graph_end, which may record
     * them and returns BE_GRAPH_DONE, or BE_GRAPH_REDO when none of them
     * ran and the caller must issue them again. */
    int (*graph_begin)(backend *be, const be_graph_key *key);
    int (*graph_end)(backend *be);
} backend_ops;

struct backend {
    const backend_ops *ops;
    const char *name; /* "cpu", "cuda" */
    void *impl;
};

/* The CPU backend with a persistent pool of n_threads threads (>= 1). */
int backend_cpu_create(backend **out, int n_threads, llmq_err *err);

#ifdef LLMQ_HAVE_CUDA
/* The CUDA backend on device `gpu` (one context and stream per backend). */
int backend_cuda_create(backend **out, int gpu, llmq_err *err);
#endif

static inline void backend_destroy(backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#endif
