/* perplexity: llama-perplexity's measure, so figures compare with llama.cpp's.
 *
 * The text is tokenized once (BOS first, as the model asks) and cut into
 * whole chunks of n_ctx tokens; each chunk is evaluated in a fresh context
 * with its first token replaced by BOS where the model asks for BOS (a
 * Qwen2 vocabulary does not), and only its second half is scored:
 * the logits at positions n_ctx/2 .. n_ctx-2 predict the tokens after them.
 * PPL = exp(mean negative log-likelihood), reported after every chunk.
 * The KV cache is of kv_type (as engine_kv_type resolves it). */
#ifndef LLMQ_ENGINE_PERPLEXITY_H
#define LLMQ_ENGINE_PERPLEXITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/tokenizer.h"

/* Called after each chunk with the running estimate. */
typedef void (*ppl_progress_fn)(void *ctx, int32_t chunk, int32_t n_chunks, double ppl);

typedef struct ppl_result {
    double ppl;
    int32_t n_chunks;
    int64_t n_scored; /* tokens scored */
    int64_t n_tokens; /* tokens in the text */
} ppl_result;

int ppl_compute(model *m, const tok_vocab *vocab, const char *text, size_t len, int32_t n_ctx,
                be_kv_type kv_type, ppl_progress_fn progress, void *progress_ctx, ppl_result *out,
                llmq_err *err);

#endif
