/* model: a decoder-only transformer read from a GGUF file, and its forward
 * pass, written once against the backend ops.  Architectures, as llama.cpp
 * c2b1518 defines them: llama (Llama 1/2/3.x, Mistral, TinyLlama: rope on
 * adjacent pairs, Llama 3.1's rope_freqs.weight), qwen2 (q/k/v biases, rope
 * on halves) and phi3 (fused attn_qkv and gate/up, rope on halves); what
 * differs between them is a row of a table in model.c.
 *
 * model_load refuses at load, naming the key or tensor, what it does not
 * implement rather than silently mis-running it: an {arch}.* metadata key it
 * does not read, rope scaling (linear, YaRN, LongRoPE), experts, other head
 * sizes, and any tensor of the file that no weight takes.  It checks each
 * tensor's shape and type and hands the weights to the backend (which may
 * keep pointers into the mapping, so the model keeps the GGUF file open for
 * its whole life); a fused tensor becomes one weight per part.
 *
 * model_forward runs one batch of rows that may mix prompt chunks and decode
 * tokens of many sequences; the caller (the engine) owns the KV cache and the
 * block tables.  Logits are produced only for the rows the batch names. */
#ifndef LLMQ_MODEL_MODEL_H
#define LLMQ_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/backend.h"
#include "model/gguf.h"

typedef struct model_config {
    char name[128];
    char arch[16]; /* general.architecture: llama, qwen2 or phi3 */
    int32_t n_vocab;
    int32_t dim;
    int32_t n_layers;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t ffn_dim;
    int32_t n_ctx_train;
    int32_t rope_dim;
    float rope_freq_base;
    bool rope_freqs;        /* rope_freqs.weight divides the frequencies (Llama 3.1+) */
    int32_t sliding_window; /* phi3's attention.sliding_window: read and, as llama.cpp
                               c2b1518 does, not applied (0 when absent) */
    float norm_eps;
    bool tied_output;
    quant_type weight_type; /* the type of the largest share of the weights */
    uint64_t weight_bytes;  /* bytes of all tensors */
} model_config;

typedef struct model model;

int model_load(model **out, const char *path, backend *be, llmq_err *err);
void model_free(model *m);

const model_config *model_get_config(const model *m);
const gguf_file *model_gguf(const model *m);
backend *model_backend(const model *m);

/* One step's rows, host side.  Rows of a sequence are contiguous and in
 * position order; slot[r] is the flat KV slot (block * block_size + offset)
 * where row r's keys and values go. */
typedef struct model_batch {
    int32_t n_rows;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *slot;
    const int32_t *row_seq;
    int32_t n_seqs;
    const int32_t *block_table; /* n_seqs x max_blocks */
    const int32_t *seq_len;     /* per sequence: tokens cached after this step */
    int32_t max_blocks;
    int32_t n_logits;
    const int32_t *logit_rows; /* rows whose logits are wanted, ascending */
    /* per sequence: the first position holding a generated token; rows at
     * or past it are decode rows (be_attn_batch).  NULL: all prompt rows. */
    const int32_t *first_generated;
} model_batch;

/* Scratch for forward passes of up to max_rows rows, max_seqs sequences and
 * max_blocks blocks per sequence, with logits for up to max_logits rows. */
typedef struct model_state model_state;

int model_state_create(model_state **out, const model *m, int32_t max_rows, int32_t max_seqs,
                       int32_t max_blocks, int32_t max_logits, llmq_err *err);
void model_state_free(model_state *st);

/* Runs the batch; writes n_logits x n_vocab floats into logits (host), or,
 * with logits NULL, leaves them in the backend for the readers below (valid
 * until the next forward pass on st). */
int model_forward(model *m, model_state *st, be_kv *kv, const model_batch *batch, float *logits,
                  llmq_err *err);

/* Copies logit rows [first, first + n) of the last forward pass to logits
 * (host, n x n_vocab floats). */
int model_read_logits(model *m, model_state *st, int32_t first, int32_t n, float *logits,
                      llmq_err *err);

/* The greedy token of every logit row of the last forward pass (the lowest
 * id of its maximum, as sampler_sample without penalties at temperature 0),
 * chosen by the backend so only the ids are copied: n_logits into tokens. */
int model_read_greedy(model *m, model_state *st, int32_t *tokens, llmq_err *err);

/* Whether the backend can choose candidates (backend_ops.top_k). */
bool model_can_read_top(const model *m);

/* The k best logits of every logit row of the last forward pass (larger
 * first, ties to the lower id), as ids and logits (n_logits x k, best
 * first); a row holding a NaN gets ids[row * k] = -1.  1 <= k <=
 * BE_TOP_K_MAX. */
int model_read_top(model *m, model_state *st, int32_t k, int32_t *ids, float *logits,
                   llmq_err *err);

/* Penalty pairs per logit row that model_read_sampled has room for. */
#define MODEL_SAMPLE_PEN_MAX 1024

/* Whether the backend samples rows and gives log-softmax normalizers
 * itself (backend_ops.sample and log_norm). */
bool model_can_sample(const model *m);

/* Words of a grammar mask over the model's vocabulary: ceil(n_vocab / 64). */
int32_t model_mask_words(const model *m);

/* The token of each of n rows of the last forward pass, drawn by the
 * backend (backend_ops.sample: the sampler's chain without top-k) from
 * rows[i], the penalty pairs pen[0..2 n_pen) (sampler_penalty_window) and
 * the n_masks masks of model_mask_words words each in masks (a row's
 * rows[i].mask, or -1), into out[i]; the logits are left as they were.  A
 * row, pair or mask outside the pass, the pairs, the vocabulary or the
 * masks is refused (LLMQ_ERR_INVALID). */
int model_read_sampled(model *m, model_state *st, const be_sample_row *rows, int32_t n,
                       const int32_t *pen, int32_t n_pen, const uint64_t *masks, int32_t n_masks,
                       be_sample_out *out, llmq_err *err);

/* Every logit row's log-softmax normalizer (backend_ops.log_norm): its max
 * and max + log(sum exp(x - max)), two doubles per row into out. */
int model_read_log_norm(model *m, model_state *st, double *out, llmq_err *err);

#endif
