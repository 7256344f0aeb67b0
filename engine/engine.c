#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/grow.h"
#include "common/topk.h"
#include "engine/kvpool.h"
#include "engine/tokenmask.h"

typedef enum seq_state { SEQ_WAITING, SEQ_RUNNING, SEQ_DONE } seq_state;

typedef struct seq {
    uint64_t id;
    seq_state state;
    int32_t *tokens; /* prompt, then generated */
    int32_t n_tokens, n_prompt;
    size_t cap;         /* of tokens */
    int32_t n_computed; /* tokens whose keys and values are in the cache */
    int32_t *blocks;
    int32_t n_blocks;
    kvpool_chain chain; /* how much of blocks[] is in the prefix cache */
    uint64_t admitted;  /* admission order: the largest is the youngest */
    sampler_params sp;
    int32_t max_tokens;
    bool ignore_eos;
    bool logprobs;
    int32_t n_top;      /* alternatives reported per step */
    engine_logprob *lp; /* logprobs: one per generated token, then n_top each in top */
    engine_logprob *top;
    int32_t lp_cap; /* generated tokens lp and top have room for */
    bool cancel;
    char **stop;
    int32_t n_stop;
    size_t max_stop_len;
    tok_stream *stream;
    char *text; /* generated text */
    size_t text_len, text_cap, emitted;
    /* With a constraint: its grammar, the masks this sequence shares with
     * the others of that grammar, and where the output is in the grammar. */
    const grammar *grammar;
    tokenmask_cache *masks;
    grammar_stack gstate;
    engine_finish finish;
    engine_timing timing;
} seq;

/* The mask cache of one grammar, and how many live sequences use it. */
typedef struct constraint_use {
    const grammar *g;
    tokenmask_cache *masks;
    int32_t users;
} constraint_use;

/* Where a sequence's next token comes from.  The backend's argmax for a
 * greedy one, its best logits for a top-k one (sampler_top_needed of them),
 * the backend's own draw (backend_ops.sample) for the rest and for one under
 * a grammar (whose mask it is given), the whole row where the backend has
 * no such op or the top_k is past what it takes -- and always while an
 * observer wants to see the logits.
 * Log-probabilities come from the backend's normalizer and candidates
 * beside any of the first three.  A step copies back ids, candidates and draws, not n_vocab floats
 * per row, wherever it can. */
typedef enum row_source { FROM_GREEDY, FROM_TOP, FROM_DRAW, FROM_LOGITS } row_source;

struct engine {
    engine_config cfg;
    model *m;
    const tok_vocab *vocab;
    int32_t n_vocab;
    kvpool *pool;
    be_kv *kv;
    model_state *st;
    sampler *smp;
    seq **live; /* waiting (in queue order) and running (in admission order) */
    int32_t n_live, max_live;
    seq **done; /* finished last step: freed at the next */
    int32_t n_done;
    uint64_t next_admission;
    engine_stats stats;
    engine_logits_fn observer;
    void *observer_ctx;
    tokenmask_vocab *trie;       /* the vocabulary as a trie: built by the first constraint */
    constraint_use *constraints; /* max_live: one per distinct live grammar at most */
    int32_t n_constraints;
    /* per-step buffers */
    int32_t *b_tokens, *b_pos, *b_slot, *b_row_seq, *b_table, *b_seq_len, *b_logit_rows;
    int32_t *b_first_gen; /* per batch sequence: its prompt length (decode rows from there) */
    seq **b_seqs;
    int32_t *b_chunk;
    /* What sampling each logit row li reads, and the step's copies of it. */
    uint8_t *b_source;  /* row_source */
    int32_t *b_greedy;  /* FROM_GREEDY: the backend's argmax */
    int32_t b_top_k;    /* FROM_TOP: candidates per row this step */
    int32_t *b_top_ids; /* max_seqs x BE_TOP_K_MAX */
    float *b_top_vals;
    seq **b_lseq;           /* the sequence of each logit row */
    be_sample_row *b_draw;  /* FROM_DRAW: the rows the backend samples, */
    int32_t *b_pen;         /* their penalty pairs (max_seqs x MODEL_SAMPLE_PEN_MAX), */
    uint64_t *b_mask;       /* their grammars' masks (max_seqs x model_mask_words), */
    be_sample_out *b_drawn; /* its choices, */
    int32_t *b_draw_at;     /* and where each logit row's is in them */
    double *b_norm;         /* logprobs: log_norm's two doubles per logit row */
    float *logits;          /* host copies of the logit rows that need them */
    float *lp_row;          /* a row's raw logits, kept from the sampler's penalties for logprobs */
    topk_entry lp_best[ENGINE_MAX_TOP_LOGPROBS];
    engine_event *events;
    int32_t n_events;
};

int32_t engine_default_blocks(int32_t wanted, size_t block_bytes, size_t available)
{
    const double fit = (double)available * ENGINE_KV_MEMORY_SHARE / (double)block_bytes;
    return fit < (double)wanted ? (int32_t)fit : wanted;
}

/* cfg->n_blocks when it is 0 (see engine_default_blocks). */
static int size_pool(engine_config *cfg, const model_config *mc, backend *be, int32_t per_seq,
                     llmq_err *err)
{
    size_t available, block_bytes;
    if (be->ops->mem_available(be, &available, err) != 0 ||
        be->ops->kv_block_bytes(be, mc->n_layers, cfg->block_size, mc->n_head_kv * mc->head_dim,
                                cfg->kv_type, &block_bytes, err) != 0)
        return llmq_err_prefix(err, "engine: sizing the KV cache");
    cfg->n_blocks = engine_default_blocks(per_seq * cfg->max_seqs, block_bytes, available);
    if (cfg->n_blocks < per_seq)
        return llmq_errf(err,
                         "engine: the %.1f GB the %s backend has left hold %d KV blocks of %d "
                         "tokens, fewer than one sequence of %d tokens needs",
                         available / 1e9, be->name, cfg->n_blocks, cfg->block_size, cfg->n_ctx);
    return 0;
}

engine_config engine_default_config(void)
{
    return (engine_config){.block_size = 16,
                           .n_blocks = 0,
                           .max_seqs = 16,
                           .max_batch_tokens = 512,
                           .n_ctx = 0,
                           .kv_type = BE_KV_Q8_0,
                           .prefix_cache = true};
}

be_kv_type engine_kv_type(be_kv_type asked, int32_t kv_dim)
{
    return be_kv_row_bytes(asked, kv_dim) == 0 ? BE_KV_F16 : asked;
}

const char *engine_finish_name(engine_finish f)
{
    switch (f) {
    case ENGINE_RUNNING: return "running";
    case ENGINE_FINISH_EOG: return "eog";
    case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_LENGTH: return "length";
    case ENGINE_FINISH_CONTEXT: return "context";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    }
    return "unknown";
}

/* ---- sequences ---- */

/* live[] keeps waiting sequences first (queue order), then running ones
 * (admission order); assert_invariants says what else holds between calls. */
static int32_t n_waiting(const engine *e)
{
    int32_t n = 0;
    while (n < e->n_live && e->live[n]->state == SEQ_WAITING)
        n++;
    return n;
}

/* What holds between calls besides that order: only running sequences
 * hold KV blocks, each enough for the tokens it has computed and no more
 * than a context; their tables are all the pool's references (a block
 * dropped twice, or lost, breaks the sum), and the pool's own counts add up
 * (kvpool_assert_consistent). */
static void assert_invariants(const engine *e)
{
    const int32_t waiting = n_waiting(e), ctx_blocks = kvpool_blocks_for(e->pool, e->cfg.n_ctx);
    LLMQ_ASSERT(e->n_live <= e->max_live && e->n_live - waiting <= e->cfg.max_seqs,
                "%d sequences live (at most %d), %d running (at most %d)", e->n_live, e->max_live,
                e->n_live - waiting, e->cfg.max_seqs);
    int64_t held = 0;
    for (int32_t i = 0; i < e->n_live; i++) {
        const seq *s = e->live[i];
        const unsigned long long id = (unsigned long long)s->id;
        held += s->n_blocks;
        if (i < waiting) {
            LLMQ_ASSERT(s->n_blocks == 0 && s->n_computed == 0,
                        "job %llu waits holding %d blocks, %d tokens computed", id, s->n_blocks,
                        s->n_computed);
            continue;
        }
        LLMQ_ASSERT(s->state == SEQ_RUNNING,
                    "job %llu at live[%d], behind the waiting, in state %d", id, i, (int)s->state);
        LLMQ_ASSERT(i == waiting || e->live[i - 1]->admitted < s->admitted,
                    "job %llu at live[%d] was admitted before the one ahead of it", id, i);
        LLMQ_ASSERT(kvpool_blocks_for(e->pool, s->n_computed) <= s->n_blocks &&
                        s->n_blocks <= ctx_blocks,
                    "job %llu holds %d blocks for %d computed tokens (a context is %d blocks)", id,
                    s->n_blocks, s->n_computed, ctx_blocks);
    }
    LLMQ_ASSERT(held == kvpool_n_refs(e->pool), "sequences hold %lld blocks, the pool counts %lld",
                (long long)held, (long long)kvpool_n_refs(e->pool));
    kvpool_assert_consistent(e->pool);
}

static void seq_free(seq *s)
{
    if (!s)
        return;
    free(s->tokens);
    free(s->blocks);
    for (int32_t i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->stop);
    free(s->lp);
    free(s->top);
    tok_stream_free(s->stream);
    free(s->text);
    free(s);
}

static int seq_push_token(seq *s, int32_t tok)
{
    if (grow_reserve(&s->tokens, &s->cap, (size_t)s->n_tokens + 1, sizeof *s->tokens))
        return -1;
    s->tokens[s->n_tokens++] = tok;
    return 0;
}

static int seq_append_text(seq *s, const char *p, size_t n)
{
    if (grow_reserve(&s->text, &s->text_cap, s->text_len + n + 1, 1))
        return -1;
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = '\0';
    return 0;
}

/* Every refusal is the request's fault: LLMQ_ERR_INVALID. */
static int check_request(const engine *e, const engine_request *r, llmq_err *err)
{
    const unsigned long long id = (unsigned long long)r->id;
    if (r->n_prompt < 1)
        return llmq_errc(err, LLMQ_ERR_INVALID, "job %llu: prompt: empty (need at least one token)",
                         id);
    if (r->max_tokens < 1)
        return llmq_errc(err, LLMQ_ERR_INVALID, "job %llu: max_tokens: %d (need >= 1)", id,
                         r->max_tokens);
    if (r->n_prompt >= e->cfg.n_ctx)
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "job %llu: prompt: %d tokens do not fit the context of %d", id,
                         r->n_prompt, e->cfg.n_ctx);
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->n_vocab)
            return llmq_errc(err, LLMQ_ERR_INVALID,
                             "job %llu: prompt token %d: id %d out of range [0, %d)", id, i,
                             r->prompt[i], e->n_vocab);
    if (r->n_stop < 0 || r->n_stop > ENGINE_MAX_STOPS)
        return llmq_errc(err, LLMQ_ERR_INVALID, "job %llu: stop: %d strings (at most %d)", id,
                         r->n_stop, ENGINE_MAX_STOPS);
    for (int32_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return llmq_errc(err, LLMQ_ERR_INVALID, "job %llu: stop[%d]: empty string", id, i);
    if (r->top_logprobs < 0 || r->top_logprobs > ENGINE_MAX_TOP_LOGPROBS ||
        (r->top_logprobs > 0 && !r->logprobs))
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "job %llu: top_logprobs: %d (0..%d, and only with logprobs)", id,
                         r->top_logprobs, ENGINE_MAX_TOP_LOGPROBS);
    for (int32_t i = 0; i < e->n_live; i++)
        if (e->live[i]->id == r->id)
            return llmq_errc(err, LLMQ_ERR_INVALID, "job %llu: already in the engine", id);
    if (sampler_check_params(&r->sampling, err) != 0)
        return llmq_err_prefix(err, "job %llu", id);
    if (r->constraint && r->ignore_eos)
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "job %llu: ignore_eos: not with a grammar constraint (the grammar "
                         "decides where the output ends)",
                         (unsigned long long)r->id);
    return 0;
}

/* ---- constraints ---- */

static void detach_constraint(engine *e, seq *s)
{
    for (int32_t i = 0; s->grammar && i < e->n_constraints; i++) {
        constraint_use *u = &e->constraints[i];
        if (u->g != s->grammar)
            continue;
        if (--u->users == 0) {
            tokenmask_cache_free(u->masks);
            *u = e->constraints[--e->n_constraints];
        }
        break;
    }
    s->grammar = NULL;
    s->masks = NULL;
}

/* The mask of the sequence's grammar state. */
static int current_mask(const seq *s, tokenmask *m, llmq_err *err)
{
    return tokenmask_get(s->masks, &s->gstate, m, err) != 0
               ? llmq_err_prefix(err, "job %llu", (unsigned long long)s->id)
               : 0;
}

/* Puts s under g, whose mask cache the sequences of g share (the
 * vocabulary's trie is built for the first one); refuses a grammar no
 * token can begin. */
static int attach_constraint(engine *e, seq *s, const grammar *g, llmq_err *err)
{
    if (!e->trie && tokenmask_vocab_new(&e->trie, e->vocab, err) != 0)
        return llmq_err_prefix(err, "job %llu", (unsigned long long)s->id);
    int32_t i = 0;
    while (i < e->n_constraints && e->constraints[i].g != g)
        i++;
    if (i == e->n_constraints) {
        constraint_use *u = &e->constraints[i];
        *u = (constraint_use){.g = g};
        if (tokenmask_cache_new(&u->masks, g, e->trie, err) != 0)
            return llmq_err_prefix(err, "job %llu", (unsigned long long)s->id);
        e->n_constraints++;
    }
    e->constraints[i].users++;
    s->grammar = g;
    s->masks = e->constraints[i].masks;
    grammar_start(g, &s->gstate);
    tokenmask m;
    const int rc = current_mask(s, &m, err);
    if (rc == 0 && m.n_allowed > 0)
        return 0;
    detach_constraint(e, s);
    return rc != 0 ? -1
                   : llmq_errf(err,
                               "job %llu: constraint: no token of the vocabulary can "
                               "begin the output the grammar asks for",
                               (unsigned long long)s->id);
}

static seq *seq_new(const engine *e, const engine_request *r)
{
    seq *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->id = r->id;
    s->state = SEQ_WAITING;
    kvpool_chain_reset(&s->chain);
    s->cap = (size_t)r->n_prompt + 64;
    s->tokens = malloc(s->cap * sizeof *s->tokens);
    s->blocks = malloc((size_t)kvpool_blocks_for(e->pool, e->cfg.n_ctx) * sizeof *s->blocks);
    s->stop = calloc((size_t)r->n_stop + 1, sizeof *s->stop);
    if (!s->tokens || !s->blocks || !s->stop ||
        tok_stream_new(&s->stream, e->vocab, 0, NULL) != 0) {
        seq_free(s);
        return NULL;
    }
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
    s->n_tokens = s->n_prompt = r->n_prompt;
    s->sp = r->sampling;
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->logprobs = r->logprobs;
    s->n_top = r->top_logprobs < e->n_vocab ? r->top_logprobs : e->n_vocab;
    for (int32_t i = 0; i < r->n_stop; i++) {
        if (!(s->stop[i] = strdup(r->stop[i]))) {
            seq_free(s);
            return NULL;
        }
        s->n_stop++;
        size_t len = strlen(r->stop[i]);
        s->max_stop_len = len > s->max_stop_len ? len : s->max_stop_len;
    }
    s->timing.added_ms = clock_mono_ms_f();
    s->timing.n_prompt = r->n_prompt;
    return s;
}

int engine_add(engine *e, const engine_request *r, llmq_err *err)
{
    if (check_request(e, r, err) != 0)
        return -1;
    if (e->n_live >= e->max_live)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: engine full (%d sequences live)",
                         (unsigned long long)r->id, e->n_live);
    seq *s = seq_new(e, r);
    if (!s)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: out of memory",
                         (unsigned long long)r->id);
    if (r->constraint && attach_constraint(e, s, r->constraint, err) != 0) {
        seq_free(s);
        return -1;
    }
    /* New sequences queue behind the waiting ones, before the running ones. */
    int32_t at = n_waiting(e);
    memmove(&e->live[at + 1], &e->live[at], (size_t)(e->n_live - at) * sizeof *e->live);
    e->live[at] = s;
    e->n_live++;
    if (LLMQ_ASSERTS_ON)
        assert_invariants(e);
    return 0;
}

bool engine_cancel(engine *e, uint64_t id)
{
    for (int32_t i = 0; i < e->n_live; i++)
        if (e->live[i]->id == id) {
            e->live[i]->cancel = true;
            return true;
        }
    return false;
}

int32_t engine_n_live(const engine *e)
{
    return e->n_live;
}
bool engine_has_work(const engine *e)
{
    return e->n_live > 0;
}
int32_t engine_free_slots(const engine *e)
{
    return e->max_live - e->n_live;
}
engine_stats engine_get_stats(const engine *e)
{
    return e->stats;
}

bool engine_ctx_warning(const engine *e, char *out, size_t size)
{
    const int32_t train = model_get_config(e->m)->n_ctx_train;
    out[0] = '\0';
    if (e->cfg.n_ctx <= train)
        return false;
    snprintf(out, size,
             "a context of %d tokens per sequence is more than the %d the model was trained on"
             " (its context_length): past them, its output may degrade",
             e->cfg.n_ctx, train);
    return true;
}

const engine_config *engine_get_config(const engine *e)
{
    return &e->cfg;
}

void engine_set_logits_observer(engine *e, engine_logits_fn fn, void *ctx)
{
    e->observer = fn;
    e->observer_ctx = ctx;
}

/* ---- queue order ---- */

static void remove_live(engine *e, int32_t i)
{
    memmove(&e->live[i], &e->live[i + 1], (size_t)(e->n_live - i - 1) * sizeof *e->live);
    e->n_live--;
}

static void retire(engine *e, int32_t i, engine_finish why)
{
    seq *s = e->live[i];
    s->finish = why;
    s->state = SEQ_DONE;
    s->timing.finished_ms = clock_mono_ms_f();
    kvpool_release(e->pool, s->blocks, &s->n_blocks);
    detach_constraint(e, s);
    remove_live(e, i);
    e->done[e->n_done++] = s;
}

/* The youngest running sequence gives its blocks back and waits at the head
 * of the queue; it will be recomputed from its tokens so far. */
static void preempt_youngest(engine *e)
{
    int32_t i = e->n_live - 1;
    seq *s = e->live[i];
    kvpool_release(e->pool, s->blocks, &s->n_blocks);
    kvpool_chain_reset(&s->chain);
    s->n_computed = 0;
    s->state = SEQ_WAITING;
    s->timing.n_preempted++;
    e->stats.preemptions++;
    remove_live(e, i);
    memmove(&e->live[1], &e->live[0], (size_t)e->n_live * sizeof *e->live);
    e->live[0] = s;
    e->n_live++;
}

/* The prompt blocks of s that the prefix cache holds go into its table as
 * computed.  Only prompt blocks are shared (a generated position's rows are
 * computed another way: backend.h), and never the last token, whose logits
 * the sequence needs. */
static void take_cached_prefix(engine *e, seq *s)
{
    if (!e->cfg.prefix_cache)
        return;
    const int32_t usable = s->n_prompt < s->n_tokens - 1 ? s->n_prompt : s->n_tokens - 1;
    const int32_t n = kvpool_match(e->pool, s->tokens, usable, s->blocks, &s->n_blocks, &s->chain);
    s->n_computed = n * kvpool_block_size(e->pool);
}

/* Whether a running sequence is still to compute a prompt block that s
 * shares past the blocks the cache gave it (siblings of one prompt, n > 1,
 * or jobs behind one long instruction, added together): then s waits for
 * that block rather than computing it a second time.  A sequence that will
 * not publish (its chain broken) is not waited for. */
static bool shares_pending_prefix(const engine *e, const seq *s)
{
    const int32_t bs = kvpool_block_size(e->pool);
    const int32_t next_block_end = s->n_computed + bs;
    if (!e->cfg.prefix_cache || next_block_end > s->n_prompt || next_block_end >= s->n_tokens)
        return false;
    for (int32_t i = n_waiting(e); i < e->n_live; i++) {
        const seq *r = e->live[i];
        if (r->chain.broken || r->n_computed >= next_block_end || r->n_prompt < next_block_end)
            continue;
        if (memcmp(r->tokens, s->tokens, (size_t)next_block_end * sizeof *s->tokens) == 0)
            return true;
    }
    return false;
}

/* Admits waiting sequences in queue order while sequence slots and blocks
 * for their whole known tokens last (the cached prefix needs none of its
 * own), and while the head of the queue is not waiting for a running
 * sequence to compute the prefix it shares; a sequence that cannot go in
 * blocks the ones behind it, so none starves. */
static void admit(engine *e)
{
    int32_t waiting = n_waiting(e);
    int32_t running = e->n_live - waiting;
    while (waiting > 0 && running < e->cfg.max_seqs) {
        seq *s = e->live[0];
        take_cached_prefix(e, s);
        if (shares_pending_prefix(e, s) ||
            !kvpool_reserve(e->pool, s->blocks, &s->n_blocks, s->n_tokens)) {
            kvpool_release(e->pool, s->blocks, &s->n_blocks);
            kvpool_chain_reset(&s->chain);
            s->n_computed = 0;
            break;
        }
        s->timing.n_cached = s->n_computed;
        e->stats.prefix_hit_tokens += (uint64_t)s->n_computed;
        e->stats.prefix_lookup_tokens += (uint64_t)s->n_prompt;
        s->state = SEQ_RUNNING;
        s->admitted = e->next_admission++;
        memmove(&e->live[0], &e->live[1], (size_t)(e->n_live - 1) * sizeof *e->live);
        e->live[e->n_live - 1] = s;
        waiting--;
        running++;
    }
}

static void handle_cancels(engine *e)
{
    for (int32_t i = 0; i < e->n_live;)
        if (e->live[i]->cancel)
            retire(e, i, ENGINE_FINISH_CANCELLED);
        else
            i++;
}

/* ---- batch assembly ---- */

static void add_rows(engine *e, seq *s, int32_t n, int32_t *n_rows, int32_t *n_seqs,
                     int32_t *n_logits)
{
    const int32_t bs = kvpool_block_size(e->pool);
    const int32_t max_blocks = kvpool_blocks_for(e->pool, e->cfg.n_ctx);
    const int32_t b = (*n_seqs)++;
    LLMQ_ASSERT(kvpool_blocks_for(e->pool, s->n_computed + n) <= s->n_blocks,
                "job %llu: rows up to position %d, blocks for %d tokens", (unsigned long long)s->id,
                s->n_computed + n - 1, s->n_blocks * bs);
    for (int32_t k = 0; k < n; k++) {
        const int32_t r = (*n_rows)++, pos = s->n_computed + k;
        e->b_tokens[r] = s->tokens[pos];
        e->b_pos[r] = pos;
        e->b_slot[r] = s->blocks[pos / bs] * bs + pos % bs;
        e->b_row_seq[r] = b;
    }
    memcpy(e->b_table + (size_t)b * max_blocks, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
    e->b_seq_len[b] = s->n_computed + n;
    e->b_first_gen[b] = s->n_prompt;
    e->b_seqs[b] = s;
    e->b_chunk[b] = n;
    /* A decode row computes the one generated token not yet in the cache;
     * everything else (prompts, recomputation after preemption) is prefill. */
    if (n == 1 && s->n_tokens > s->n_prompt && s->n_computed + 1 == s->n_tokens)
        e->stats.decode_rows++;
    else
        e->stats.prefill_rows += (uint64_t)n;
    if (s->n_computed + n == s->n_tokens)
        e->b_logit_rows[(*n_logits)++] = *n_rows - 1;
    if (s->timing.first_sched_ms == 0)
        s->timing.first_sched_ms = clock_mono_ms_f();
}

/* Every running sequence with one token left needs a cache slot for it;
 * when the pool cannot give one, the youngest sequence is preempted and the
 * search starts over (each round removes one sequence, so it ends). */
static void make_room_for_decodes(engine *e)
{
    for (;;) {
        bool short_of_blocks = false;
        for (int32_t i = n_waiting(e); i < e->n_live; i++) {
            seq *s = e->live[i];
            if (s->n_tokens - s->n_computed == 1 &&
                !kvpool_reserve(e->pool, s->blocks, &s->n_blocks, s->n_tokens)) {
                short_of_blocks = true;
                break;
            }
        }
        if (!short_of_blocks)
            return;
        preempt_youngest(e);
    }
}

/* Whether a running sequence still has more than one prompt (or
 * recomputation) token to run: the work prefill_first puts before decodes. */
static bool prompt_work_left(const engine *e)
{
    for (int32_t i = n_waiting(e); i < e->n_live; i++)
        if (e->live[i]->n_tokens - e->live[i]->n_computed > 1)
            return true;
    return false;
}

/* Decode rows first (each running sequence with one token left; none while
 * prompt work is left under prefill_first), then prompt chunks in admission
 * order until the budget is spent. */
static void schedule(engine *e, int32_t *n_rows, int32_t *n_seqs, int32_t *n_logits)
{
    *n_rows = *n_seqs = *n_logits = 0;
    make_room_for_decodes(e);
    int32_t budget = e->cfg.max_batch_tokens;
    const int32_t first_running = n_waiting(e);
    const bool hold_decodes = e->cfg.prefill_first && prompt_work_left(e);
    for (int32_t i = first_running; i < e->n_live && budget > 0 && !hold_decodes; i++) {
        seq *s = e->live[i];
        if (s->n_tokens - s->n_computed == 1) {
            add_rows(e, s, 1, n_rows, n_seqs, n_logits);
            budget--;
        }
    }
    for (int32_t i = first_running; i < e->n_live && budget > 0; i++) {
        seq *s = e->live[i];
        int32_t left = s->n_tokens - s->n_computed;
        if (left <= 1)
            continue;
        int32_t n = left < budget ? left : budget;
        add_rows(e, s, n, n_rows, n_seqs, n_logits);
        budget -= n;
    }
}

/* ---- after the forward pass ---- */

static size_t utf8_safe_end(const char *t, size_t end, size_t floor)
{
    while (end > floor && ((unsigned char)t[end] & 0xC0) == 0x80)
        end--;
    return end;
}

/* Looks for a stop string that ends in the text added since `from`. */
static bool find_stop(const seq *s, size_t from, size_t *at)
{
    bool found = false;
    for (int32_t i = 0; i < s->n_stop; i++) {
        size_t len = strlen(s->stop[i]);
        size_t start = from + 1 > len ? from + 1 - len : 0;
        for (size_t p = start; p + len <= s->text_len; p++)
            if (memcmp(s->text + p, s->stop[i], len) == 0) {
                if (!found || p < *at)
                    *at = p;
                found = true;
                break;
            }
    }
    return found;
}

/* ---- log-probabilities ---- */

static float logprob_of(float logit, double log_sum)
{
    const double v = (double)logit - log_sum;
    return v >= ENGINE_LOGPROB_FLOOR ? (float)v : ENGINE_LOGPROB_FLOOR;
}

static int grow_logprobs(seq *s, int32_t need)
{
    if (need <= s->lp_cap)
        return 0;
    const int32_t cap = s->lp_cap ? s->lp_cap * 2 : 64;
    engine_logprob *lp = realloc(s->lp, (size_t)cap * sizeof *lp);
    if (lp)
        s->lp = lp;
    engine_logprob *top = s->n_top ? realloc(s->top, (size_t)cap * s->n_top * sizeof *top) : NULL;
    if (top)
        s->top = top;
    if (!lp || (s->n_top && !top))
        return -1;
    s->lp_cap = cap;
    return 0;
}

/* Stores the log-probabilities of the token just generated (tok, its raw
 * logit tok_logit) and of the n_top best in e->lp_best (raw logits, best
 * first), against the row's log_sum (max + log(sum exp(x - max))). */
static int store_logprobs(engine *e, seq *s, int32_t tok, float tok_logit, double log_sum)
{
    const int32_t at = s->n_tokens - s->n_prompt - 1;
    if (grow_logprobs(s, at + 1) != 0)
        return -1;
    s->lp[at] = (engine_logprob){.token = tok, .logprob = logprob_of(tok_logit, log_sum)};
    for (int32_t k = 0; k < s->n_top; k++)
        s->top[(size_t)at * s->n_top + k] = (engine_logprob){
            .token = e->lp_best[k].id, .logprob = logprob_of(e->lp_best[k].value, log_sum)};
    return 0;
}

/* The log-softmax of the raw row kept in e->lp_row, for the token just
 * generated and the n_top best (common/topk's order: ties to the lower id).
 * A NaN logit counts as -inf: it has no probability. */
static int logprobs_from_row(engine *e, seq *s, int32_t tok)
{
    float *x = e->lp_row, max = -INFINITY;
    for (int32_t i = 0; i < e->n_vocab; i++) {
        if (isnan(x[i]))
            x[i] = -INFINITY;
        max = x[i] > max ? x[i] : max;
    }
    double sum = 0.0;
    for (int32_t i = 0; max > -INFINITY && i < e->n_vocab; i++)
        sum += exp((double)x[i] - max);
    const double log_sum = max > -INFINITY ? max + log(sum) : INFINITY;
    if (s->n_top > 0)
        topk_select(e->lp_best, x, NULL, e->n_vocab, s->n_top);
    return store_logprobs(e, s, tok, x[tok], log_sum);
}

/* The raw logit of tok among logit row li's candidates (it is one: the
 * sampler picks among them). */
static float candidate_logit(const engine *e, int32_t li, int32_t tok)
{
    const size_t at = (size_t)li * e->b_top_k;
    for (int32_t k = 0; k < e->b_top_k; k++)
        if (e->b_top_ids[at + k] == tok)
            return e->b_top_vals[at + k];
    LLMQ_ASSERT(false, "token %d is not among the %d candidates of logit row %d", tok, e->b_top_k,
                li);
    return -INFINITY;
}

/* The same from what the backend gave for logit row li: its normalizer
 * (backend_ops.log_norm, NaN as -inf as above), its best candidates
 * (top_k's order is topk_select's) and the chosen token's raw logit. */
static int logprobs_from_device(engine *e, seq *s, int32_t li, int32_t tok)
{
    const size_t at = (size_t)li * e->b_top_k;
    for (int32_t k = 0; k < s->n_top; k++)
        e->lp_best[k] = (topk_entry){e->b_top_vals[at + k], e->b_top_ids[at + k]};
    const row_source src = (row_source)e->b_source[li];
    const float logit = src == FROM_GREEDY ? (float)e->b_norm[2 * li]
                        : src == FROM_TOP  ? candidate_logit(e, li, tok)
                                           : e->b_drawn[e->b_draw_at[li]].logit;
    return store_logprobs(e, s, tok, logit, e->b_norm[2 * li + 1]);
}

static int record_logprobs(engine *e, seq *s, int32_t li, int32_t tok)
{
    return e->b_source[li] == FROM_LOGITS ? logprobs_from_row(e, s, tok)
                                          : logprobs_from_device(e, s, li, tok);
}

static engine_event *new_event(engine *e, seq *s)
{
    LLMQ_ASSERT(e->n_events < e->max_live, "event %d of a step, past the %d its sequences make",
                e->n_events + 1, e->max_live);
    engine_event *ev = &e->events[e->n_events++];
    memset(ev, 0, sizeof *ev);
    ev->id = s->id;
    ev->token = -1;
    return ev;
}

/* Emits the text that can no longer become part of a stop string. */
static void emit_text(seq *s, engine_event *ev, bool final)
{
    size_t end = s->text_len;
    if (!final && s->max_stop_len > 1)
        end = s->text_len > s->max_stop_len - 1 ? s->text_len - (s->max_stop_len - 1) : 0;
    if (end < s->emitted)
        end = s->emitted;
    if (!final)
        end = utf8_safe_end(s->text, end, s->emitted);
    ev->text = s->text + s->emitted;
    ev->text_len = end - s->emitted;
    s->emitted = end;
}

static void fill_final(seq *s, engine_event *ev)
{
    ev->finish = s->finish;
    ev->tokens = s->tokens + s->n_prompt;
    ev->n_tokens = s->n_tokens - s->n_prompt;
    ev->full_text = s->text ? s->text : "";
    ev->full_text_len = s->text_len;
    if (s->logprobs) {
        /* A sequence that generated nothing has no arrays yet. */
        static const engine_logprob none[1];
        ev->logprobs = s->lp ? s->lp : none;
        ev->top_logprobs = s->top ? s->top : none;
        ev->n_top = s->n_top;
    }
    ev->timing = s->timing;
    ev->timing.n_generated = ev->n_tokens;
}

/* The token of s from what read_outputs brought back for its logit row li.
 * A constrained row gets its mask first (after the observer, which sees
 * the model's logits).  -1 only on memory exhaustion. */
static int32_t pick_token(engine *e, seq *s, int32_t li, int32_t step, llmq_err *err)
{
    if (e->b_source[li] == FROM_GREEDY)
        return e->b_greedy[li];
    if (e->b_source[li] == FROM_TOP) {
        const size_t at = (size_t)li * e->b_top_k;
        return sampler_sample_top(e->smp, &s->sp, e->b_top_ids + at, e->b_top_vals + at, e->b_top_k,
                                  s->tokens, s->n_tokens, (uint64_t)step);
    }
    if (e->b_source[li] == FROM_DRAW)
        return e->b_drawn[e->b_draw_at[li]].token;
    float *logits = e->logits + (size_t)li * e->n_vocab;
    if (e->observer)
        e->observer(e->observer_ctx, s->id, step, logits, e->n_vocab);
    if (s->logprobs) /* the model's row, before the grammar and the sampler touch it */
        memcpy(e->lp_row, logits, (size_t)e->n_vocab * sizeof *logits);
    if (s->grammar) {
        tokenmask m;
        if (current_mask(s, &m, err) != 0)
            return -1;
        tokenmask_apply(s->masks, &m, &s->gstate, logits);
    }
    return sampler_sample(e->smp, &s->sp, logits, s->tokens, s->n_tokens, (uint64_t)step);
}

/* Ends the text with the bytes the stream still holds back. */
static int flush_text(seq *s, llmq_err *err)
{
    const char *rest;
    size_t n;
    tok_stream_flush(s->stream, &rest, &n);
    return seq_append_text(s, rest, n) != 0
               ? llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: out of memory",
                           (unsigned long long)s->id)
               : 0;
}

/* Whether the grammar of s allows no token after the ones so far (its
 * document is complete and cannot go on): 1 or 0, -1 on memory exhaustion. */
static int grammar_done(const seq *s, llmq_err *err)
{
    tokenmask m;
    return current_mask(s, &m, err) != 0 ? -1 : m.n_allowed == 0;
}

/* Samples, appends and checks the stop rules of one sequence; returns the
 * finish reason (ENGINE_RUNNING to go on) or -1 on memory exhaustion. */
static int advance(engine *e, seq *s, int32_t li, engine_event *ev, llmq_err *err)
{
    const int32_t step = s->n_tokens - s->n_prompt;
    const int32_t tok = pick_token(e, s, li, step, err);
    if (tok < 0)
        return -1;
    ev->token = tok;
    if (step == 0)
        s->timing.first_token_ms = clock_mono_ms_f();
    /* The draw leaves the mask only when every allowed logit is NaN: the
     * output ends where it still follows the grammar. */
    if (s->grammar && !tokenmask_accept(s->masks, &s->gstate, tok)) {
        ev->token = -1;
        return flush_text(s, err) != 0 ? -1 : ENGINE_FINISH_STOP;
    }
    if (!s->ignore_eos && tok_is_eog(e->vocab, tok))
        return flush_text(s, err) != 0 ? -1 : ENGINE_FINISH_EOG;
    const char *piece;
    size_t n;
    size_t before = s->text_len;
    if (seq_push_token(s, tok) != 0 || tok_stream_push(s->stream, tok, &piece, &n, err) != 0 ||
        seq_append_text(s, piece, n) != 0)
        return llmq_errf(err, "job %llu: cannot append token %d", (unsigned long long)s->id, tok);
    if (s->logprobs && record_logprobs(e, s, li, tok) != 0)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: out of memory for logprobs",
                         (unsigned long long)s->id);
    size_t at = 0;
    if (s->n_stop > 0 && find_stop(s, before, &at)) {
        s->text_len = at;
        s->text[at] = '\0';
        return ENGINE_FINISH_STOP;
    }
    const int done = s->grammar ? grammar_done(s, err) : 0;
    if (done != 0)
        return done < 0 || flush_text(s, err) != 0 ? -1 : ENGINE_FINISH_STOP;
    if (s->n_tokens - s->n_prompt >= s->max_tokens || s->n_tokens >= e->cfg.n_ctx) {
        if (flush_text(s, err) != 0)
            return -1;
        return s->n_tokens - s->n_prompt >= s->max_tokens ? ENGINE_FINISH_LENGTH
                                                          : ENGINE_FINISH_CONTEXT;
    }
    return ENGINE_RUNNING;
}

static int find_live(const engine *e, const seq *s)
{
    for (int32_t i = 0; i < e->n_live; i++)
        if (e->live[i] == s)
            return i;
    return -1;
}

/* (See row_source.)  FROM_DRAW serves any sampler with a top_k the device
 * takes (or none), and greedy after penalties whatever top_k says (it
 * cannot change the max); a grammar's rows, with their masks, take it
 * before the others (the argmax and the candidates know no mask). */
static row_source source_of(const engine *e, const seq *s, int32_t *top_needed)
{
    *top_needed = 0;
    const bool lp_on_device = model_can_sample(e->m) && (s->n_top == 0 || model_can_read_top(e->m));
    const bool drawable = model_can_sample(e->m) &&
                          (!(s->sp.temperature > 0.0f) || s->sp.top_k <= BE_SAMPLE_TOP_K_MAX ||
                           s->sp.top_k >= e->n_vocab);
    if (e->observer || (s->logprobs && !lp_on_device))
        return FROM_LOGITS;
    if (s->grammar)
        return drawable ? FROM_DRAW : FROM_LOGITS;
    if (sampler_is_greedy(&s->sp))
        return FROM_GREEDY;
    if (model_can_read_top(e->m) &&
        (*top_needed = sampler_top_needed(&s->sp, s->n_tokens, e->n_vocab, BE_TOP_K_MAX)) > 0)
        return FROM_TOP;
    return drawable ? FROM_DRAW : FROM_LOGITS;
}

be_sample_row engine_sample_row(const sampler_params *p, int32_t row, int32_t pen_first,
                                int32_t n_pen, uint64_t step)
{
    return (be_sample_row){
        .row = row,
        .pen_first = pen_first,
        .n_pen = n_pen,
        .temperature = p->temperature,
        .top_p = p->top_p,
        .log_min_p = p->min_p > 0.0f ? logf(p->min_p) : -INFINITY,
        .repeat_penalty = p->repeat_penalty,
        .presence_penalty = p->presence_penalty,
        .frequency_penalty = p->frequency_penalty,
        .mask = -1,
        .top_k = p->top_k,
        .u = sampler_uniform(p->seed, step),
    };
}

/* The counts of the rows handed to the backend to sample this step. */
typedef struct draw_counts {
    int32_t rows, pen, masks;
} draw_counts;

/* Adds logit row li of s to the rows the backend samples, with its penalty
 * pairs after those already there and, under a grammar, its mask: 1, or 0
 * (nothing added) when its window has more distinct tokens than the pairs
 * have room for; -1 on memory exhaustion. */
static int add_draw(engine *e, const seq *s, int32_t li, draw_counts *dc, llmq_err *err)
{
    const sampler_params *p = &s->sp;
    const int32_t n = sampler_penalty_window(e->smp, p, s->tokens, s->n_tokens,
                                             e->b_pen + (size_t)dc->pen * 2, MODEL_SAMPLE_PEN_MAX);
    if (n < 0)
        return 0;
    be_sample_row r = engine_sample_row(p, li, dc->pen, n, (uint64_t)(s->n_tokens - s->n_prompt));
    if (s->grammar) {
        tokenmask m;
        if (current_mask(s, &m, err) != 0)
            return -1;
        tokenmask_allowed_bits(s->masks, &m, &s->gstate,
                               e->b_mask + (size_t)dc->masks * model_mask_words(e->m));
        r.mask = dc->masks++;
    }
    e->b_draw_at[li] = dc->rows;
    e->b_draw[dc->rows++] = r;
    dc->pen += n;
    return 1;
}

/* The backend's draws for the FROM_DRAW rows; one it left (-1) falls back
 * to its logits. */
static int read_draws(engine *e, int32_t n_logits, llmq_err *err)
{
    draw_counts dc = {0, 0, 0};
    for (int32_t li = 0; li < n_logits; li++) {
        if (e->b_source[li] != FROM_DRAW)
            continue;
        const int added = add_draw(e, e->b_lseq[li], li, &dc, err);
        if (added < 0)
            return -1;
        if (added == 0)
            e->b_source[li] = FROM_LOGITS;
    }
    if (dc.rows == 0)
        return 0;
    if (model_read_sampled(e->m, e->st, e->b_draw, dc.rows, e->b_pen, dc.pen, e->b_mask, dc.masks,
                           e->b_drawn, err) != 0)
        return -1;
    for (int32_t li = 0; li < n_logits; li++)
        if (e->b_source[li] == FROM_DRAW && e->b_drawn[e->b_draw_at[li]].token < 0)
            e->b_source[li] = FROM_LOGITS;
    return 0;
}

/* The candidates (as many per row as the neediest row wants, for its
 * sampler or its top_logprobs); a row holding a NaN falls back to its
 * logits. */
static int read_top(engine *e, int32_t n_logits, llmq_err *err)
{
    if (e->b_top_k == 0)
        return 0;
    if (model_read_top(e->m, e->st, e->b_top_k, e->b_top_ids, e->b_top_vals, err) != 0)
        return -1;
    for (int32_t li = 0; li < n_logits; li++) {
        const bool uses = e->b_source[li] == FROM_TOP ||
                          (e->b_source[li] != FROM_LOGITS && e->b_lseq[li]->n_top > 0);
        if (uses && e->b_top_ids[(size_t)li * e->b_top_k] < 0)
            e->b_source[li] = FROM_LOGITS;
    }
    return 0;
}

/* Brings back what sampling the batch's logit rows reads: the greedy
 * tokens, the candidates, the backend's draws, the log-softmax normalizers
 * of rows with logprobs, and the logits of the rest, in one copy of the
 * span of rows from the first to the last that needs them. */
static int read_outputs(engine *e, int32_t n_seqs, llmq_err *err)
{
    int32_t n_logits = 0, n_greedy = 0, top_k = 0, n_lp = 0;
    for (int32_t b = 0; b < n_seqs; b++) {
        seq *s = e->b_seqs[b];
        if (s->n_computed + e->b_chunk[b] < s->n_tokens)
            continue;
        int32_t need;
        const row_source src = source_of(e, s, &need);
        if (src != FROM_LOGITS && s->logprobs) {
            n_lp++;
            need = s->n_top > need ? s->n_top : need;
        }
        e->b_lseq[n_logits] = s;
        e->b_source[n_logits++] = (uint8_t)src;
        n_greedy += src == FROM_GREEDY;
        top_k = need > top_k ? need : top_k;
    }
    e->b_top_k = top_k;
    if ((n_greedy > 0 && model_read_greedy(e->m, e->st, e->b_greedy, err) != 0) ||
        read_top(e, n_logits, err) != 0 || read_draws(e, n_logits, err) != 0 ||
        (n_lp > 0 && model_read_log_norm(e->m, e->st, e->b_norm, err) != 0))
        return -1;
    int32_t first = n_logits, last = -1;
    for (int32_t li = 0; li < n_logits; li++)
        if (e->b_source[li] == FROM_LOGITS) {
            first = li < first ? li : first;
            last = li;
            e->stats.logit_rows_copied++;
        }
    if (last < 0)
        return 0;
    return model_read_logits(e->m, e->st, first, last - first + 1,
                             e->logits + (size_t)first * e->n_vocab, err);
}

static int after_forward(engine *e, int32_t n_seqs, llmq_err *err)
{
    int32_t li = 0;
    for (int32_t b = 0; b < n_seqs; b++) {
        seq *s = e->b_seqs[b];
        s->n_computed += e->b_chunk[b];
        if (e->cfg.prefix_cache) {
            const int32_t in_prompt = s->n_computed < s->n_prompt ? s->n_computed : s->n_prompt;
            kvpool_publish(e->pool, s->blocks, s->tokens, in_prompt / kvpool_block_size(e->pool),
                           &s->chain);
        }
        if (s->n_computed < s->n_tokens)
            continue; /* a prompt chunk that is not the last */
        engine_event *ev = new_event(e, s);
        int fin = advance(e, s, li++, ev, err);
        if (fin < 0)
            return -1;
        emit_text(s, ev, fin != ENGINE_RUNNING);
        if (fin != ENGINE_RUNNING) {
            retire(e, find_live(e, s), (engine_finish)fin);
            fill_final(s, ev);
        }
    }
    return 0;
}

static void report_cancelled(engine *e)
{
    for (int32_t i = 0; i < e->n_done; i++) {
        seq *s = e->done[i];
        engine_event *ev = new_event(e, s);
        emit_text(s, ev, true);
        fill_final(s, ev);
    }
}

int engine_step(engine *e, const engine_event **events, int32_t *n_events, llmq_err *err)
{
    const double t_start = clock_mono_ms_f();
    for (int32_t i = 0; i < e->n_done; i++)
        seq_free(e->done[i]);
    e->n_done = 0;
    e->n_events = 0;
    *events = e->events;
    *n_events = 0;

    handle_cancels(e);
    report_cancelled(e);
    admit(e);
    int32_t n_rows, n_seqs, n_logits;
    schedule(e, &n_rows, &n_seqs, &n_logits);
    if (n_rows > 0) {
        const model_batch batch = {.n_rows = n_rows,
                                   .tokens = e->b_tokens,
                                   .pos = e->b_pos,
                                   .slot = e->b_slot,
                                   .row_seq = e->b_row_seq,
                                   .n_seqs = n_seqs,
                                   .block_table = e->b_table,
                                   .seq_len = e->b_seq_len,
                                   .max_blocks = kvpool_blocks_for(e->pool, e->cfg.n_ctx),
                                   .n_logits = n_logits,
                                   .logit_rows = e->b_logit_rows,
                                   .first_generated = e->b_first_gen};
        const double t_issue = clock_mono_ms_f();
        if (model_forward(e->m, e->st, e->kv, &batch, NULL, err) != 0)
            return -1;
        const double t_read = clock_mono_ms_f();
        if (read_outputs(e, n_seqs, err) != 0)
            return -1;
        const double t_host = clock_mono_ms_f();
        e->stats.steps++;
        e->stats.issue_ms += t_read - t_issue;
        e->stats.read_ms += t_host - t_read;
        e->stats.host_ms += t_issue - t_start;
        if (after_forward(e, n_seqs, err) != 0)
            return -1;
        e->stats.host_ms += clock_mono_ms_f() - t_host;
    }
    *n_events = e->n_events;
    if (LLMQ_ASSERTS_ON)
        assert_invariants(e);
    return 0;
}

/* ---- lifetime ---- */

int engine_create(engine **out, model *m, const tok_vocab *vocab, const engine_config *cfg_in,
                  llmq_err *err)
{
    *out = NULL;
    const model_config *mc = model_get_config(m);
    engine_config cfg = *cfg_in;
    if (cfg.n_ctx <= 0)
        cfg.n_ctx = mc->n_ctx_train;
    if (cfg.block_size <= 0 || cfg.max_seqs <= 0 || cfg.max_batch_tokens <= 0 ||
        cfg.max_seqs > cfg.max_batch_tokens)
        return llmq_errf(err, "engine: bad configuration (block %d, sequences %d, batch %d)",
                         cfg.block_size, cfg.max_seqs, cfg.max_batch_tokens);
    cfg.kv_type = engine_kv_type(cfg.kv_type, mc->n_head_kv * mc->head_dim);
    const int32_t per_seq = (cfg.n_ctx + cfg.block_size - 1) / cfg.block_size;
    if (cfg.n_blocks <= 0 && size_pool(&cfg, mc, model_backend(m), per_seq, err) != 0)
        return -1;
    if (cfg.n_blocks < per_seq)
        return llmq_errf(err, "engine: %d KV blocks cannot hold one sequence of %d tokens",
                         cfg.n_blocks, cfg.n_ctx);
    if ((uint32_t)mc->n_vocab != tok_n_vocab(vocab))
        return llmq_errf(err, "engine: the model has %d embeddings but the vocabulary %u tokens",
                         mc->n_vocab, tok_n_vocab(vocab));
    engine *e = calloc(1, sizeof *e);
    if (!e)
        return llmq_errf(err, "engine: out of memory");
    e->cfg = cfg;
    e->m = m;
    e->vocab = vocab;
    e->n_vocab = mc->n_vocab;
    e->max_live = cfg.max_seqs * 2;
    backend *be = model_backend(m);
    const size_t rows = (size_t)cfg.max_batch_tokens, seqs = (size_t)cfg.max_seqs;
    if (kvpool_create(&e->pool, cfg.n_blocks, cfg.block_size, err) ||
        be->ops->kv_create(be, mc->n_layers, cfg.n_blocks, cfg.block_size,
                           mc->n_head_kv * mc->head_dim, cfg.kv_type, &e->kv, err) ||
        model_state_create(&e->st, m, cfg.max_batch_tokens, cfg.max_seqs, per_seq, cfg.max_seqs,
                           err) ||
        sampler_create(&e->smp, mc->n_vocab, err))
        goto fail;
    e->live = calloc((size_t)e->max_live, sizeof *e->live);
    e->constraints = calloc((size_t)e->max_live, sizeof *e->constraints);
    e->done = calloc((size_t)e->max_live, sizeof *e->done);
    e->events = calloc((size_t)e->max_live, sizeof *e->events);
    e->b_tokens = malloc(rows * sizeof(int32_t));
    e->b_pos = malloc(rows * sizeof(int32_t));
    e->b_slot = malloc(rows * sizeof(int32_t));
    e->b_row_seq = malloc(rows * sizeof(int32_t));
    e->b_table = calloc(seqs * (size_t)per_seq, sizeof(int32_t));
    e->b_seq_len = malloc(seqs * sizeof(int32_t));
    e->b_first_gen = malloc(seqs * sizeof(int32_t));
    e->b_logit_rows = malloc(seqs * sizeof(int32_t));
    e->b_seqs = malloc(seqs * sizeof *e->b_seqs);
    e->b_chunk = malloc(seqs * sizeof(int32_t));
    e->b_source = malloc(seqs);
    e->b_greedy = malloc(seqs * sizeof(int32_t));
    e->b_top_ids = malloc(seqs * BE_TOP_K_MAX * sizeof(int32_t));
    e->b_top_vals = malloc(seqs * BE_TOP_K_MAX * sizeof(float));
    e->b_lseq = malloc(seqs * sizeof *e->b_lseq);
    e->b_draw = malloc(seqs * sizeof *e->b_draw);
    e->b_pen = malloc(seqs * MODEL_SAMPLE_PEN_MAX * 2 * sizeof(int32_t));
    e->b_drawn = malloc(seqs * sizeof *e->b_drawn);
    e->b_mask = malloc(seqs * (size_t)model_mask_words(m) * sizeof *e->b_mask);
    e->b_draw_at = malloc(seqs * sizeof(int32_t));
    e->b_norm = malloc(seqs * 2 * sizeof(double));
    e->logits = malloc(seqs * (size_t)mc->n_vocab * sizeof(float));
    e->lp_row = malloc((size_t)mc->n_vocab * sizeof(float));
    if (!e->live || !e->constraints || !e->done || !e->events || !e->b_tokens || !e->b_pos ||
        !e->b_slot || !e->b_row_seq || !e->b_table || !e->b_seq_len || !e->b_first_gen ||
        !e->b_logit_rows || !e->b_seqs || !e->b_chunk || !e->b_source || !e->b_greedy ||
        !e->b_top_ids || !e->b_top_vals || !e->b_lseq || !e->b_draw || !e->b_pen || !e->b_drawn ||
        !e->b_draw_at || !e->b_norm || !e->b_mask || !e->logits || !e->lp_row) {
        llmq_errf(err, "engine: out of memory");
        goto fail;
    }
    *out = e;
    return 0;
fail:
    engine_free(e);
    return -1;
}

void engine_free(engine *e)
{
    if (!e)
        return;
    for (int32_t i = 0; i < e->n_live; i++)
        seq_free(e->live[i]);
    for (int32_t i = 0; i < e->n_done; i++)
        seq_free(e->done[i]);
    backend *be = model_backend(e->m);
    if (e->kv)
        be->ops->kv_destroy(be, e->kv);
    model_state_free(e->st);
    sampler_free(e->smp);
    for (int32_t i = 0; i < e->n_constraints; i++)
        tokenmask_cache_free(e->constraints[i].masks);
    free(e->constraints);
    tokenmask_vocab_free(e->trie);
    kvpool_free(e->pool);
    free(e->live);
    free(e->done);
    free(e->events);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_slot);
    free(e->b_row_seq);
    free(e->b_table);
    free(e->b_seq_len);
    free(e->b_first_gen);
    free(e->b_logit_rows);
    free(e->b_seqs);
    free(e->b_chunk);
    free(e->b_source);
    free(e->b_greedy);
    free(e->b_top_ids);
    free(e->b_top_vals);
    free(e->b_lseq);
    free(e->b_draw);
    free(e->b_pen);
    free(e->b_drawn);
    free(e->b_mask);
    free(e->b_draw_at);
    free(e->b_norm);
    free(e->logits);
    free(e->lp_row);
    free(e);
}
