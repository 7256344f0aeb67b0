/* engine: continuous batching over one model.
 *
 * Sequences (prompt tokens + sampling parameters + stop rules) are added and
 * cancelled at any time.  Each engine_step() runs ONE forward pass over a
 * batch that mixes single decode tokens of running sequences with chunks of
 * prompt prefill, within a token budget, then samples the next token of every
 * sequence that produced logits.  KV memory is a paged pool fixed at start-up
 * (kvpool): a sequence is admitted when blocks for its whole prompt are free
 * (the blocks of a prefix it shares with a prompt seen before are taken
 * from the prefix cache, already computed: engine_config.prefix_cache);
 * when a growing sequence finds the pool empty, the youngest sequence is
 * preempted (blocks freed, re-prefilled later from its prompt plus what it
 * had generated) instead of anything failing.
 *
 * A sequence's output depends only on the sequence: rows are computed
 * independently of their batch (backend contract) and the sampler's random
 * stream is a function of (seed, step).
 *
 * A sequence may be constrained by a grammar (engine_request.constraint,
 * engine/grammar.h): before each draw, the tokens the grammar does not
 * allow next get -inf (engine/tokenmask.h: masks cached per automaton
 * state, shared by the sequences of one grammar), the end-of-generation
 * tokens only while the document is complete; after it, the grammar's
 * state advances by the token's bytes, and once the grammar allows no
 * further token the sequence finishes with ENGINE_FINISH_STOP (as it does,
 * its document unfinished, if every allowed logit of a row is NaN).  Rows of
 * constrained and free sequences, and of different grammars, mix in one
 * step.  A constrained row always copies its whole logits back (the masks
 * are applied on the host), so it is exact on every backend; a GPU mask
 * kernel is later work.
 *
 * Events returned by engine_step (new text, finished sequences) stay valid
 * until the next call.  The engine owns its KV cache, scratch, sampler and
 * sequences; the model and vocab are borrowed and must outlive it.
 * Single-threaded: one caller drives it (the backend parallelizes inside). */
#ifndef LLMQ_ENGINE_ENGINE_H
#define LLMQ_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/backend.h"
#include "engine/grammar.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "model/tokenizer.h"

typedef struct engine_config {
    int32_t block_size;       /* tokens per KV block (default 16) */
    int32_t n_blocks;         /* KV pool size; 0: engine_default_blocks */
    int32_t max_seqs;         /* sequences running at once (default 16) */
    int32_t max_batch_tokens; /* rows per forward pass (default 512) */
    int32_t n_ctx;            /* tokens per sequence (default: the model's training context) */
    /* default BE_KV_Q8_0 (half the bytes of f16, perplexity within 0.2%:
     * docs/perf/08-kv8.md); engine_kv_type says what a model gets */
    be_kv_type kv_type;
    /* false (default): decode rows ride in the steps that run prompt chunks,
     * so a sequence starts generating as soon as its prompt is in.  true: a
     * step with prompt work carries no decode rows (llama-batched-bench's
     * order: every prompt, then every sequence decoding together). */
    bool prefill_first;
    /* true (default): prompts that begin with the same tokens share the KV
     * blocks of that prefix, computed once (engine/kvpool.h); a sequence's
     * output is the same with or without it. */
    bool prefix_cache;
} engine_config;

engine_config engine_default_config(void);

/* The cache a model with KV rows of kv_dim values gets when `asked` is
 * wanted: asked, except q8_0 for rows that are no whole number of its
 * 32-value blocks, which get f16. */
be_kv_type engine_kv_type(be_kv_type asked, int32_t kv_dim);

/* The KV pool an engine takes when engine_config.n_blocks is 0: `wanted`
 * blocks (a full context per sequence), or as many blocks of block_bytes as
 * fit in ENGINE_KV_MEMORY_SHARE of `available`, the bytes the backend can
 * still allocate once the weights are in, if fewer. */
#define ENGINE_KV_MEMORY_SHARE 0.9
int32_t engine_default_blocks(int32_t wanted, size_t block_bytes, size_t available);

typedef enum engine_finish {
    ENGINE_RUNNING = 0,
    ENGINE_FINISH_EOG,       /* the model produced an end-of-generation token */
    ENGINE_FINISH_STOP,      /* a stop string matched (cut from the text), or the grammar
                                allows nothing more */
    ENGINE_FINISH_LENGTH,    /* max_tokens reached */
    ENGINE_FINISH_CONTEXT,   /* the sequence filled its context */
    ENGINE_FINISH_CANCELLED, /* engine_cancel */
} engine_finish;

const char *engine_finish_name(engine_finish f); /* "eog", "stop", "length", ... */

#define ENGINE_MAX_STOPS 16
#define ENGINE_MAX_TOP_LOGPROBS 20

typedef struct engine_request {
    uint64_t id; /* the caller's; unique among live sequences */
    const int32_t *prompt;
    int32_t n_prompt;
    sampler_params sampling;
    int32_t max_tokens;      /* >= 1 */
    const char *const *stop; /* stop strings (copied) */
    int32_t n_stop;
    bool ignore_eos;      /* keep going past end-of-generation tokens */
    bool logprobs;        /* report each generated token's log-probability */
    int32_t top_logprobs; /* and the n most likely tokens' at each step,
                             0..ENGINE_MAX_TOP_LOGPROBS (needs logprobs) */
    /* NULL: free text.  Else the output follows this grammar.  Borrowed:
     * the caller owns it and keeps it until the sequence's finishing event
     * has been returned (or engine_free).  Not with ignore_eos: the grammar
     * decides where the output ends. */
    const grammar *constraint;
} engine_request;

/* A token and its log-probability: ln of its softmax probability under the
 * model's raw logits, before penalties, temperature and truncation (what
 * the model predicts, not what the sampler drew from).  On a backend with
 * log_norm and top_k (CUDA) the normalizer and the best tokens come from the
 * device and the row stays there; elsewhere, and for a row whose logits come
 * back anyway (a grammar's), from the whole row on the host: the same values
 * within a float ulp (kernels/cuda/sampling.cu).  Below -9999 (an underflow,
 * a masked or NaN logit) it is -9999, OpenAI's "as good as impossible". */
typedef struct engine_logprob {
    int32_t token;
    float logprob;
} engine_logprob;

#define ENGINE_LOGPROB_FLOOR -9999.0f

/* Wall-clock accounting of one sequence (milliseconds, clock_mono_ms_f). */
typedef struct engine_timing {
    double added_ms;       /* engine_add */
    double first_sched_ms; /* first prefill row scheduled */
    double first_token_ms; /* first token sampled */
    double finished_ms;
    int32_t n_prompt;
    int32_t n_generated;
    int32_t n_preempted; /* times evicted and recomputed */
    int32_t n_cached;    /* prompt tokens the prefix cache held at its (last) admission */
} engine_timing;

typedef struct engine_event {
    uint64_t id;
    const char *text; /* new output text (UTF-8 complete, stop strings held back) */
    size_t text_len;
    int32_t token;        /* token sampled this step, or -1 */
    engine_finish finish; /* ENGINE_RUNNING while going on */
    /* Set when finished: */
    const int32_t *tokens; /* all generated tokens */
    int32_t n_tokens;
    const char *full_text; /* all generated text, stop string cut */
    size_t full_text_len;
    /* Set when finished and the request asked for logprobs (else NULL): */
    const engine_logprob *logprobs;     /* n_tokens: each generated token's */
    const engine_logprob *top_logprobs; /* n_tokens x n_top: at each step, the best first */
    int32_t n_top;
    engine_timing timing;
} engine_event;

typedef struct engine engine;

int engine_create(engine **out, model *m, const tok_vocab *vocab, const engine_config *cfg,
                  llmq_err *err);
void engine_free(engine *e);

const engine_config *engine_get_config(const engine *e);

/* When the context per sequence is longer than the model's own
 * (context_length, which llama.cpp warns of too), a sentence saying so for
 * the programs to log, and true; positions past it are not what the model
 * was trained on.  "" and false otherwise. */
bool engine_ctx_warning(const engine *e, char *out, size_t size);

/* Queues a sequence.  Fails, naming the field, with LLMQ_ERR_INVALID on a
 * bad request (empty or too long prompt, token ids out of range, bad
 * sampling parameters, top_logprobs out of range or without logprobs, an id
 * already live, a constraint with ignore_eos or whose first byte no token of
 * the vocabulary can give), and with LLMQ_ERR_NO_ROOM when the engine holds
 * all the sequences it can (max_seqs * 2 live, waiting + running:
 * engine_free_slots() is 0) or memory runs out: that request may succeed
 * later, or elsewhere. */
int engine_add(engine *e, const engine_request *req, llmq_err *err);

/* Finishes a sequence with ENGINE_FINISH_CANCELLED at the next step; false
 * if no such live sequence. */
bool engine_cancel(engine *e, uint64_t id);

/* Runs one forward pass and sampling.  *events has one entry per sequence
 * that sampled a token (its text may be empty, held back for a stop
 * string or an incomplete character) or finished this step. */
int engine_step(engine *e, const engine_event **events, int32_t *n_events, llmq_err *err);

/* Live sequences (waiting + running), and whether any work is left. */
int32_t engine_n_live(const engine *e);
bool engine_has_work(const engine *e);

/* How many more sequences engine_add takes now (of max_seqs * 2 live). */
int32_t engine_free_slots(const engine *e);

/* Steps run and rows computed so far, and where the steps' wall time went
 * (for benchmarks): issuing the forward pass (uploads and launches; on the
 * CPU, the computation itself), waiting for and copying back what sampling
 * reads (on a GPU: the rest of the computation), and the host's own work
 * (scheduling, sampling, text, stop rules), during which a GPU idles. */
typedef struct engine_stats {
    uint64_t steps;
    uint64_t prefill_rows;
    uint64_t decode_rows;
    uint64_t preemptions;
    /* Prompt tokens of admitted sequences, and those of them the prefix
     * cache held (once per admission: a preempted sequence counts again). */
    uint64_t prefix_lookup_tokens;
    uint64_t prefix_hit_tokens;
    /* Logit rows copied whole to the host to sample (a grammar, an
     * observer, a NaN, or a sampler the backend cannot serve): the rest
     * came back as ids, candidates or device draws. */
    uint64_t logit_rows_copied;
    double issue_ms;
    double read_ms;
    double host_ms;
} engine_stats;

engine_stats engine_get_stats(const engine *e);

/* Called with each sequence's logits (n_vocab floats) before sampling (and
 * before a grammar's mask), for the parity tests and tools that print top
 * tokens; step counts generated tokens.  While one is set every row's
 * logits are copied back (no argmax or top-k on the backend). */
/* What the engine hands backend_ops.sample for a row sampled with p at
 * generated step `step` (its uniform sampler_uniform(p->seed, step), min-p
 * as logf(min_p)) whose penalty pairs are [pen_first, pen_first + n_pen):
 * exposed so that the GPU parity tests send the very same rows. */
be_sample_row engine_sample_row(const sampler_params *p, int32_t row, int32_t pen_first,
                                int32_t n_pen, uint64_t step);

typedef void (*engine_logits_fn)(void *ctx, uint64_t id, int32_t step, const float *logits,
                                 int32_t n_vocab);
void engine_set_logits_observer(engine *e, engine_logits_fn fn, void *ctx);

#endif
