/* The engine's scheduling rules, on stories260K (real weights, CPU backend).
 *
 * Pins:
 *  - preemption: with a KV pool too small for all sequences at once, the
 *    engine preempts and recomputes instead of failing, and every sequence's
 *    output (greedy and seeded sampling) equals its output alone;
 *  - stop strings are matched across token boundaries and cut from the text;
 *    the streamed text pieces add up to the final text;
 *  - max_tokens, context length and cancel finish a sequence with the right
 *    reason; a cancelled sequence frees its slot;
 *  - bad requests are refused with an error naming the field, and the
 *    engine keeps serving the others;
 *  - the default KV pool is a full context per sequence, capped to 90% of
 *    the memory the backend has left;
 *  - prefill_first runs every prompt before any decode row, then all the
 *    sequences decode together, and generates what the default order does;
 *  - the prefix cache: prompts behind a shared instruction take its whole
 *    blocks from the cache once it is computed, compute that many fewer
 *    prompt rows, and generate the same tokens from bit-identical logits
 *    as without the cache (greedy and sampled), with the engine's default
 *    KV cache, q8_0 (its 8-bit blocks are shared as f16 ones are); preemption with the cache
 *    on (the default) still gives every sequence its output alone; samples
 *    of one prompt added together compute it once;
 *  - greedy sequences take the backend's argmax (no logits copied) and get
 *    the tokens the host sampler picks from the logits, also when batched
 *    with sampled sequences; the argmax follows the sampler's rule on ties,
 *    NaN and -inf. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"
#include "common/topk.h"
#include "kernels/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define N_SEQ 8
#define MAX_OUT 4096

typedef struct outcome {
    char text[MAX_OUT];     /* final full_text */
    char streamed[MAX_OUT]; /* concatenated text events */
    size_t streamed_len;
    int32_t tokens[256];
    int32_t n_tokens;
    engine_finish finish;
    bool done;
} outcome;

typedef model_fixture fixture;

static const char *prompts[N_SEQ] = {
    "Once upon a time", "The little dog", "Lily and Ben went to the park",
    "One day, a big bear", "Tom had a red ball", "The sun was hot and",
    "Mom said", "There was a tiny bird",
};

static int request(const fixture *fx, uint64_t id, const char *prompt, int32_t max_tokens,
                   float temp, const char *stop, engine_request *req, int32_t **ids)
{
    size_t n;
    llmq_err err;
    if (tok_encode(fx->vocab, prompt, strlen(prompt), true, true, ids, &n, &err) != 0)
        return -1;
    *req = (engine_request){.id = id, .prompt = *ids, .n_prompt = (int32_t)n,
                            .sampling = sampler_default_params(), .max_tokens = max_tokens};
    req->sampling.temperature = temp;
    req->sampling.top_k = 40;
    req->sampling.seed = 1000 + id;
    static const char *stops[1];
    if (stop) {
        stops[0] = stop;
        req->stop = stops;
        req->n_stop = 1;
    }
    return 0;
}

static void record(outcome *out, const engine_event *ev)
{
    outcome *o = &out[ev->id];
    if (o->streamed_len + ev->text_len < MAX_OUT) {
        memcpy(o->streamed + o->streamed_len, ev->text, ev->text_len);
        o->streamed_len += ev->text_len;
    }
    if (ev->finish == ENGINE_RUNNING)
        return;
    o->done = true;
    o->finish = ev->finish;
    snprintf(o->text, sizeof o->text, "%.*s", (int)ev->full_text_len, ev->full_text);
    o->n_tokens = ev->n_tokens < 256 ? ev->n_tokens : 256;
    memcpy(o->tokens, ev->tokens, (size_t)o->n_tokens * sizeof(int32_t));
}

static int drain(engine *e, outcome *out)
{
    llmq_err err;
    while (engine_has_work(e)) {
        const engine_event *ev;
        int32_t n;
        if (engine_step(e, &ev, &n, &err) != 0) {
            printf("# engine_step: %s\n", err.msg);
            return -1;
        }
        for (int32_t i = 0; i < n; i++)
            record(out, &ev[i]);
    }
    return 0;
}

/* The engine of cfg on the fixture's model, or NULL (the reason printed). */
static engine *engine_of(const fixture *fx, const engine_config *cfg)
{
    engine *e;
    llmq_err err;
    if (engine_create(&e, fx->m, fx->vocab, cfg, &err) != 0) {
        printf("# engine_create: %s\n", err.msg);
        return NULL;
    }
    return e;
}

static engine *make_engine(const fixture *fx, int32_t max_seqs, int32_t n_blocks, int32_t n_ctx)
{
    engine_config cfg = engine_default_config();
    cfg.max_seqs = max_seqs;
    cfg.n_blocks = n_blocks;
    cfg.n_ctx = n_ctx;
    cfg.max_batch_tokens = 32;
    return engine_of(fx, &cfg);
}

/* The prefix-cache tests' engine: 256 tokens of context, the cache on or
 * off; NULL (a failed check) when it cannot be made. */
static engine *prefix_engine(const fixture *fx, int32_t max_seqs, int32_t max_batch_tokens,
                             bool cache)
{
    engine_config cfg = engine_default_config();
    cfg.max_seqs = max_seqs;
    cfg.n_ctx = 256;
    cfg.max_batch_tokens = max_batch_tokens;
    cfg.prefix_cache = cache;
    engine *e = engine_of(fx, &cfg);
    if (!e)
        CHECK(false, "engine_create");
    return e;
}

static void add_all(const fixture *fx, engine *e, float temp, int32_t max_tokens)
{
    for (int i = 0; i < N_SEQ; i++) {
        engine_request req;
        int32_t *ids;
        llmq_err err;
        if (request(fx, (uint64_t)i, prompts[i], max_tokens, temp, NULL, &req, &ids) != 0 ||
            engine_add(e, &req, &err) != 0)
            printf("# add %d failed\n", i);
        free(ids);
    }
}

static void run_all(const fixture *fx, engine *e, outcome *out, float temp, int32_t max_tokens)
{
    add_all(fx, e, temp, max_tokens);
    drain(e, out);
}

static void check_preemption(const fixture *fx, float temp)
{
    static outcome alone[N_SEQ], crowded[N_SEQ];
    memset(alone, 0, sizeof alone);
    memset(crowded, 0, sizeof crowded);
    for (int i = 0; i < N_SEQ; i++) {
        engine *e = make_engine(fx, 1, 0, 256);
        engine_request req;
        int32_t *ids;
        llmq_err err;
        request(fx, (uint64_t)i, prompts[i], 100, temp, NULL, &req, &ids);
        engine_add(e, &req, &err);
        free(ids);
        drain(e, alone);
        engine_free(e);
    }
    /* 16 blocks of 16 tokens: one sequence's full context, far less than
     * 8 sequences of ~110 tokens need at once. */
    engine *e = make_engine(fx, N_SEQ, 16, 256);
    run_all(fx, e, crowded, temp, 100);
    engine_stats st = engine_get_stats(e);
    engine_free(e);
    int same = 0;
    for (int i = 0; i < N_SEQ; i++)
        same += crowded[i].done && crowded[i].n_tokens == alone[i].n_tokens &&
                memcmp(crowded[i].tokens, alone[i].tokens,
                       (size_t)alone[i].n_tokens * sizeof(int32_t)) == 0;
    CHECK(st.preemptions > 0, "temp %.1f: a pool of 16 blocks for 8 sequences preempts (%llu times)",
          temp, (unsigned long long)st.preemptions);
    CHECK(same == N_SEQ, "temp %.1f: %d of %d preempted sequences generate exactly what they do alone",
          temp, same, N_SEQ);
    int streamed_ok = 0;
    for (int i = 0; i < N_SEQ; i++)
        streamed_ok += crowded[i].streamed_len == strlen(crowded[i].text) &&
                       memcmp(crowded[i].streamed, crowded[i].text, crowded[i].streamed_len) == 0;
    CHECK(streamed_ok == N_SEQ, "streamed text pieces add up to the final text (%d of %d)",
          streamed_ok, N_SEQ);
}

/* The default KV pool: a full context per sequence unless the memory left
 * cannot hold it.  7B numbers: 32 layers x 4096 x f16 x K and V, 16-token
 * blocks of 8 MiB; 64 sequences of 4,096 tokens want 16,384 of them. */
static void check_default_pool(const fixture *fx)
{
    const size_t block = (size_t)8 << 20;
    CHECK(engine_default_blocks(16384, block, (size_t)200 << 30) == 16384,
          "a pool that fits in 90%% of 200 GiB is a full context per sequence");
    const size_t left = (size_t)130 << 30;
    const int32_t capped = engine_default_blocks(16384, block, left);
    const double share = 0.9 * (double)left;
    CHECK(capped < 16384 && (double)capped * block <= share && (double)(capped + 1) * block > share,
          "with 130 GiB left it is the most blocks that fit in 90%% of them (%d)", capped);
    engine *e = make_engine(fx, N_SEQ, 0, 256);
    const engine_config *c = e ? engine_get_config(e) : NULL;
    CHECK(c && c->n_blocks == N_SEQ * 256 / 16,
          "on the CPU, with memory to spare, n_blocks 0 gives every sequence its context (%d)",
          c ? c->n_blocks : -1);
    engine_free(e);
}

/* llama-batched-bench's order, which llmq-run --bench measures decode in. */
static void check_prefill_first(const fixture *fx)
{
    static outcome mixed[N_SEQ], ordered[N_SEQ];
    memset(mixed, 0, sizeof mixed);
    memset(ordered, 0, sizeof ordered);
    engine *e = make_engine(fx, N_SEQ, 0, 256);
    run_all(fx, e, mixed, 0.0f, 20);
    engine_stats st = engine_get_stats(e);
    engine_free(e);
    CHECK(st.prefill_rows > 32, "the prompts take more than one 32-row step (%llu rows)",
          (unsigned long long)st.prefill_rows);

    engine_config cfg = engine_default_config();
    cfg.max_seqs = N_SEQ;
    cfg.n_ctx = 256;
    cfg.max_batch_tokens = 32;
    cfg.prefill_first = true;
    llmq_err err;
    if (!(e = engine_of(fx, &cfg))) {
        CHECK(false, "engine_create with prefill_first");
        return;
    }
    add_all(fx, e, 0.0f, 20);
    int mixed_steps = 0, prompt_after_decode = 0, decode_steps = 0, full_decode_steps = 0;
    engine_stats before = engine_get_stats(e);
    while (engine_has_work(e)) {
        const engine_event *ev;
        int32_t n;
        if (engine_step(e, &ev, &n, &err) != 0) {
            CHECK(false, "engine_step with prefill_first: %s", err.msg);
            break;
        }
        for (int32_t i = 0; i < n; i++)
            record(ordered, &ev[i]);
        const engine_stats now = engine_get_stats(e);
        const uint64_t pre = now.prefill_rows - before.prefill_rows,
                       dec = now.decode_rows - before.decode_rows;
        mixed_steps += pre > 0 && dec > 0;
        prompt_after_decode += pre > 0 && decode_steps > 0;
        decode_steps += dec > 0;
        full_decode_steps += dec == N_SEQ;
        before = now;
    }
    engine_free(e);
    CHECK(mixed_steps == 0 && prompt_after_decode == 0,
          "prefill_first: no step mixes prompt and decode rows (%d), no prompt row after a "
          "decode (%d)", mixed_steps, prompt_after_decode);
    CHECK(full_decode_steps == 19 && decode_steps == 19,
          "prefill_first: 8 sequences of 20 tokens decode together in 19 steps of 8 rows "
          "(%d steps, %d of 8 rows)", decode_steps, full_decode_steps);
    int same = 0;
    for (int i = 0; i < N_SEQ; i++)
        same += ordered[i].done && ordered[i].n_tokens == mixed[i].n_tokens &&
                memcmp(ordered[i].tokens, mixed[i].tokens,
                       (size_t)mixed[i].n_tokens * sizeof(int32_t)) == 0;
    CHECK(same == N_SEQ, "prefill_first: %d of %d sequences generate what the default order does",
          same, N_SEQ);
}

static outcome *run_one(const fixture *fx, int32_t n_ctx, int32_t max_tokens, const char *stop,
                        outcome *out)
{
    memset(out, 0, sizeof *out);
    engine *e = make_engine(fx, 1, 0, n_ctx);
    engine_request req;
    int32_t *ids;
    llmq_err err;
    request(fx, 0, "Once upon a time", max_tokens, 0.0f, stop, &req, &ids);
    if (engine_add(e, &req, &err) != 0)
        printf("# add: %s\n", err.msg);
    free(ids);
    drain(e, out);
    engine_free(e);
    return out;
}

static void check_stops(const fixture *fx)
{
    static outcome o;
    /* Greedy from "Once upon a time": ", there was a little girl named Lily. ..." */
    run_one(fx, 256, 64, "little g", &o);
    CHECK(o.finish == ENGINE_FINISH_STOP && strcmp(o.text, ", there was a ") == 0,
          "a stop string spanning tokens ends the text before it (finish %s, text '%s')",
          engine_finish_name(o.finish), o.text);
    CHECK(o.streamed_len == strlen(o.text) && memcmp(o.streamed, o.text, o.streamed_len) == 0,
          "no part of the stop string was streamed ('%.*s')", (int)o.streamed_len, o.streamed);
    run_one(fx, 256, 5, NULL, &o);
    CHECK(o.finish == ENGINE_FINISH_LENGTH && o.n_tokens == 5, "max_tokens 5 gives 5 tokens (%s, %d)",
          engine_finish_name(o.finish), o.n_tokens);
    run_one(fx, 16, 100, NULL, &o);
    CHECK(o.finish == ENGINE_FINISH_CONTEXT && o.n_tokens == 16 - 5,
          "a context of 16 ends a 5-token prompt after 11 tokens (%s, %d)",
          engine_finish_name(o.finish), o.n_tokens);
}

static void check_cancel(const fixture *fx)
{
    engine *e = make_engine(fx, 2, 0, 256);
    static outcome out[N_SEQ];
    memset(out, 0, sizeof out);
    llmq_err err;
    for (int i = 0; i < 2; i++) {
        engine_request req;
        int32_t *ids;
        request(fx, (uint64_t)i, prompts[i], 200, 0.0f, NULL, &req, &ids);
        engine_add(e, &req, &err);
        free(ids);
    }
    for (int s = 0; s < 5; s++) {
        const engine_event *ev;
        int32_t n;
        engine_step(e, &ev, &n, &err);
        for (int32_t i = 0; i < n; i++)
            record(out, &ev[i]);
    }
    int32_t live = engine_n_live(e);
    CHECK(engine_cancel(e, 1), "cancel finds a running sequence");
    CHECK(!engine_cancel(e, 77), "cancel of an unknown id is refused");
    drain(e, out);
    CHECK(out[1].finish == ENGINE_FINISH_CANCELLED && out[0].finish == ENGINE_FINISH_LENGTH,
          "the cancelled one ends 'cancelled', the other runs to its length (%s, %s)",
          engine_finish_name(out[1].finish), engine_finish_name(out[0].finish));
    CHECK(live == 2 && engine_n_live(e) == 0, "its slot is free again");
    engine_free(e);
}

static void check_bad_requests(const fixture *fx)
{
    engine *e = make_engine(fx, 2, 0, 64);
    llmq_err err;
    int32_t ok_ids[] = {1, 403, 407}, bad_ids[] = {1, 99999};
    engine_request req = {.id = 1, .prompt = ok_ids, .n_prompt = 3,
                          .sampling = sampler_default_params(), .max_tokens = 4};
    CHECK(engine_add(e, &req, &err) == 0, "a good request is taken");
    engine_request dup = req;
    CHECK(engine_add(e, &dup, &err) != 0 && strstr(err.msg, "already"),
          "a live id is refused: %s", err.msg);
    engine_request bad = req;
    bad.id = 2;
    bad.prompt = bad_ids;
    bad.n_prompt = 2;
    CHECK(engine_add(e, &bad, &err) != 0 && strstr(err.msg, "out of range"),
          "a token id past the vocabulary is refused: %s", err.msg);
    CHECK(err.code == LLMQ_ERR_INVALID, "... as a bad request (%s)", llmq_err_code_name(err.code));
    bad = req;
    bad.id = 3;
    bad.n_prompt = 0;
    CHECK(engine_add(e, &bad, &err) != 0 && strstr(err.msg, "prompt"),
          "an empty prompt is refused: %s", err.msg);
    bad = req;
    bad.id = 4;
    bad.max_tokens = 0;
    CHECK(engine_add(e, &bad, &err) != 0 && strstr(err.msg, "max_tokens"),
          "max_tokens 0 is refused: %s", err.msg);
    bad = req;
    bad.id = 5;
    bad.sampling.top_p = 0.0f;
    CHECK(engine_add(e, &bad, &err) != 0 && strstr(err.msg, "top_p"),
          "top_p 0 is refused: %s", err.msg);
    CHECK(err.code == LLMQ_ERR_INVALID, "... as a bad request, through the sampler's check (%s)",
          llmq_err_code_name(err.code));
    int32_t long_prompt[64] = {1};
    bad = req;
    bad.id = 6;
    bad.prompt = long_prompt;
    bad.n_prompt = 64;
    CHECK(engine_add(e, &bad, &err) != 0 && strstr(err.msg, "context"),
          "a prompt as long as the context is refused: %s", err.msg);
    static outcome out[N_SEQ];
    memset(out, 0, sizeof out);
    drain(e, out);
    CHECK(out[1].done && out[1].n_tokens == 4, "the good request still completes (%d tokens)",
          out[1].n_tokens);
    engine_free(e);
}

/* ---- log-probabilities ---- */

#define LP_STEPS 24
#define LP_TOP 5

/* The raw logits sequence 0 had at each step, as the observer saw them. */
typedef struct seen_rows {
    float *rows; /* LP_STEPS x n_vocab */
    int32_t n_vocab, n_steps;
} seen_rows;

static void keep_row(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
    seen_rows *r = ctx;
    if (id != 0 || step >= LP_STEPS)
        return;
    memcpy(r->rows + (size_t)step * n_vocab, logits, (size_t)n_vocab * sizeof *logits);
    r->n_steps = step + 1 > r->n_steps ? step + 1 : r->n_steps;
}

/* ln softmax(row)[id], computed here the plain way. */
static double direct_logprob(const float *row, int32_t n, int32_t id)
{
    double max = row[0], sum = 0.0;
    for (int32_t i = 1; i < n; i++)
        max = row[i] > max ? row[i] : max;
    for (int32_t i = 0; i < n; i++)
        sum += exp(row[i] - max);
    return row[id] - max - log(sum);
}

/* The row's tokens by a full sort in common/topk.h's order (larger first,
 * ties to the lower id): out[k] is the rank-k token. */
static void direct_order(const float *row, int32_t n, topk_entry *out)
{
    for (int32_t i = 0; i < n; i++)
        out[i] = (topk_entry){.value = row[i], .id = i};
    qsort(out, (size_t)n, sizeof *out, topk_cmp);
}

typedef struct lp_run {
    int32_t tokens[LP_STEPS], n_tokens;
    engine_logprob lp[LP_STEPS], top[LP_STEPS * LP_TOP];
    int32_t n_top;
    bool has_logprobs;
} lp_run;

/* One sampled sequence (temperature, top-k, a repeat penalty) beside a greedy
 * one without logprobs, in one batch. */
static int run_logprobs(const fixture *fx, bool logprobs, seen_rows *seen, lp_run *out)
{
    engine *e = make_engine(fx, 2, 0, 128);
    if (!e)
        return -1;
    if (seen)
        engine_set_logits_observer(e, keep_row, seen);
    engine_request req[2];
    int32_t *ids[2];
    int rc = request(fx, 0, prompts[0], LP_STEPS, 0.9f, NULL, &req[0], &ids[0]) |
             request(fx, 1, prompts[1], LP_STEPS, 0.0f, NULL, &req[1], &ids[1]);
    req[0].sampling.repeat_penalty = 1.3f;
    req[0].logprobs = logprobs;
    req[0].top_logprobs = logprobs ? LP_TOP : 0;
    req[0].ignore_eos = true;
    llmq_err err;
    for (int i = 0; rc == 0 && i < 2; i++)
        rc = engine_add(e, &req[i], &err);
    memset(out, 0, sizeof *out);
    while (rc == 0 && engine_has_work(e)) {
        const engine_event *ev;
        int32_t n;
        rc = engine_step(e, &ev, &n, &err);
        for (int32_t i = 0; rc == 0 && i < n; i++) {
            if (ev[i].finish == ENGINE_RUNNING || ev[i].id != 0)
                continue;
            out->n_tokens = ev[i].n_tokens;
            memcpy(out->tokens, ev[i].tokens, (size_t)ev[i].n_tokens * sizeof(int32_t));
            out->has_logprobs = ev[i].logprobs != NULL;
            if (ev[i].logprobs) {
                out->n_top = ev[i].n_top;
                memcpy(out->lp, ev[i].logprobs, (size_t)ev[i].n_tokens * sizeof *out->lp);
                memcpy(out->top, ev[i].top_logprobs,
                       (size_t)ev[i].n_tokens * ev[i].n_top * sizeof *out->top);
            }
        }
    }
    free(ids[0]);
    free(ids[1]);
    engine_free(e);
    return rc;
}

static void check_logprobs(const fixture *fx)
{
    seen_rows seen = {.n_vocab = (int32_t)tok_n_vocab(fx->vocab)};
    seen.rows = calloc((size_t)LP_STEPS * seen.n_vocab, sizeof *seen.rows);
    static lp_run with, without;
    int rc = seen.rows ? run_logprobs(fx, true, &seen, &with) : -1;
    rc |= run_logprobs(fx, false, NULL, &without);
    CHECK(rc == 0 && with.has_logprobs && !without.has_logprobs && with.n_top == LP_TOP &&
              with.n_tokens == LP_STEPS && seen.n_steps == LP_STEPS,
          "a sequence that asks gets %d logprobs with %d alternatives each; one that does not,"
          " none",
          with.n_tokens, with.n_top);
    CHECK(rc == 0 && with.n_tokens == without.n_tokens &&
              memcmp(with.tokens, without.tokens, (size_t)with.n_tokens * sizeof(int32_t)) == 0,
          "asking for logprobs does not change what is generated");
    double worst = 0.0;
    int ordered = 0, chosen = 0;
    topk_entry *order = malloc((size_t)seen.n_vocab * sizeof *order);
    rc |= order ? 0 : -1;
    for (int32_t t = 0; rc == 0 && t < with.n_tokens; t++) {
        const float *row = seen.rows + (size_t)t * seen.n_vocab;
        direct_order(row, seen.n_vocab, order);
        chosen += with.lp[t].token == with.tokens[t];
        double d = fabs(with.lp[t].logprob - direct_logprob(row, seen.n_vocab, with.tokens[t]));
        worst = d > worst ? d : worst;
        for (int32_t k = 0; k < LP_TOP; k++) {
            const engine_logprob *alt = &with.top[t * LP_TOP + k];
            ordered += alt->token == order[k].id;
            d = fabs(alt->logprob - direct_logprob(row, seen.n_vocab, alt->token));
            worst = d > worst ? d : worst;
        }
    }
    CHECK(rc == 0 && chosen == with.n_tokens && ordered == with.n_tokens * LP_TOP,
          "each step's alternatives are the row's %d best, in order (%d of %d)", LP_TOP, ordered,
          with.n_tokens * LP_TOP);
    CHECK(rc == 0 && worst < 1e-5,
          "every logprob is the log-softmax of the raw logits, before penalties and temperature"
          " (largest difference %.2g)",
          worst);
    free(order);
    free(seen.rows);
}

/* An engine that holds all it can refuses the next sequence as lack of room,
 * which the same request may find later or elsewhere. */
static void check_no_room(const fixture *fx)
{
    engine *e = make_engine(fx, 1, 0, 64);
    int32_t ids[] = {1, 403, 407};
    engine_request req = {
        .prompt = ids, .n_prompt = 3, .sampling = sampler_default_params(), .max_tokens = 4};
    llmq_err err;
    int taken = 0;
    for (req.id = 1; engine_free_slots(e) > 0; req.id++)
        taken += engine_add(e, &req, &err) == 0;
    CHECK(engine_add(e, &req, &err) != 0 && err.code == LLMQ_ERR_NO_ROOM &&
              strstr(err.msg, "engine full"),
          "after %d sequences, the next is refused for lack of room (%s): %s", taken,
          llmq_err_code_name(err.code), err.msg);
    engine_free(e);
}

/* The backend's argmax is the sampler's greedy choice on rows built to
 * split them: ties, NaNs before and among the values, -inf only, NaN only. */
static void check_argmax_rule(backend *be)
{
    enum { N = 6 };
    const float nan = NAN, inf = INFINITY;
    static const char *what[] = {"a tie (lower id)", "NaN first", "NaN only", "-inf only",
                                 "NaN then -inf", "+inf after a NaN"};
    const float rows[][N] = {{1, 3, 2, 3, 0, 3}, {nan, 1, 5, nan, 5, 2}, {nan, nan, nan, nan, nan, nan},
                             {-inf, -inf, -inf, -inf, -inf, -inf}, {nan, -inf, nan, -inf, nan, nan},
                             {0, nan, inf, 1, inf, 2}};
    const int32_t n_rows = (int32_t)(sizeof rows / sizeof rows[0]);
    int32_t got[sizeof rows / sizeof rows[0]];
    be->ops->argmax(be, &rows[0][0], n_rows, N, got);
    sampler *smp;
    llmq_err err;
    if (sampler_create(&smp, N, &err) != 0)
        return;
    sampler_params greedy = sampler_default_params();
    for (int32_t r = 0; r < n_rows; r++) {
        float copy[N];
        memcpy(copy, rows[r], sizeof copy);
        int32_t want = sampler_sample(smp, &greedy, copy, NULL, 0, 0);
        CHECK(got[r] == want, "argmax of %s is the sampler's greedy token (%d, sampler %d)",
              what[r], got[r], want);
    }
    sampler_free(smp);
}

/* The backend's top_k gives each row's best entries by (value, lower id),
 * best first, as the sampler's own selection would; a row with a NaN is
 * flagged with id -1. */
static void check_top_k_rule(backend *be)
{
    enum { N = 300, K = 20, ROWS = 3 };
    float x[ROWS * N];
    for (int32_t i = 0; i < ROWS * N; i++)
        x[i] = (float)((i * 7919) % 61) - 30.0f; /* many ties */
    x[2 * N + 150] = NAN;
    int32_t ids[ROWS * K];
    float vals[ROWS * K];
    be->ops->top_k(be, x, ROWS, N, K, ids, vals);
    int same = 0;
    for (int r = 0; r < 2; r++) {
        topk_entry want[K];
        topk_select(want, x + r * N, NULL, N, K);
        for (int i = 0; i < K; i++)
            same += ids[r * K + i] == want[i].id && vals[r * K + i] == want[i].value;
    }
    CHECK(same == 2 * K, "top_k: rows full of ties give the best %d by value then lower id, best "
          "first (%d/%d)", K, same, 2 * K);
    CHECK(ids[2 * K] == -1, "top_k: a row holding a NaN is flagged (id %d)", ids[2 * K]);
}

static void count_rows(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n)
{
    (void)id, (void)step, (void)logits, (void)n;
    (*(int *)ctx)++;
}

/* Even sequences greedy, odd ones sampled (top-k 40, half of them with
 * penalties), all in one batch: once as the worker runs them (greedy rows
 * by the backend's argmax, sampled ones from its top_k candidates), once
 * with an observer that makes every row's logits come back. */
static void check_greedy_on_backend(const fixture *fx)
{
    static outcome by_argmax[N_SEQ], by_logits[N_SEQ];
    outcome *runs[2] = {by_argmax, by_logits};
    int observed = 0;
    for (int pass = 0; pass < 2; pass++) {
        memset(runs[pass], 0, sizeof by_argmax);
        engine *e = make_engine(fx, N_SEQ, 0, 256);
        if (!e)
            return;
        if (pass == 1)
            engine_set_logits_observer(e, count_rows, &observed);
        for (int i = 0; i < N_SEQ; i++) {
            engine_request req;
            int32_t *ids;
            llmq_err err;
            if (request(fx, (uint64_t)i, prompts[i], 40, i % 2 ? 0.9f : 0.0f, NULL, &req, &ids))
                printf("# request %d failed\n", i);
            if (i % 4 == 3) { /* top-k with penalties: top_k + the window's candidates */
                req.sampling.repeat_penalty = 1.3f;
                req.sampling.frequency_penalty = 0.4f;
            }
            if (engine_add(e, &req, &err) != 0)
                printf("# add %d failed\n", i);
            free(ids);
        }
        drain(e, runs[pass]);
        engine_free(e);
    }
    int same = 0;
    for (int i = 0; i < N_SEQ; i++)
        same += by_argmax[i].done && by_argmax[i].n_tokens == by_logits[i].n_tokens &&
                memcmp(by_argmax[i].tokens, by_logits[i].tokens,
                       (size_t)by_logits[i].n_tokens * sizeof(int32_t)) == 0;
    CHECK(observed >= N_SEQ * 40, "the observer saw every row (%d)", observed);
    CHECK(same == N_SEQ, "%d of %d sequences (half greedy by argmax, half sampled from top_k "
          "candidates) generate the same tokens as when every row's logits come back", same, N_SEQ);
}

/* ---- the prefix cache ---- */

/* Every logit row a sequence's sampler saw, bit for bit, folded per id. */
typedef struct logit_digest {
    uint64_t h[N_SEQ];
} logit_digest;

static void digest_logits(void *ctx, uint64_t id, int32_t step, const float *logits,
                          int32_t n_vocab)
{
    logit_digest *d = ctx;
    uint64_t h = d->h[id] ^ (uint64_t)step;
    for (int32_t i = 0; i < n_vocab; i++) {
        uint32_t bits;
        memcpy(&bits, &logits[i], sizeof bits);
        h = (h ^ bits) * 0x100000001b3ull;
    }
    d->h[id] = h;
}

static const char SHARED[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "sunshine with her friends. One day, her mom gave her a big red ball and said: ";

/* The 8 prompts behind one shared instruction, two running at a time: the
 * first computes the prefix, the others find it. */
static void run_shared(const fixture *fx, bool cache, float temp, outcome *out,
                       logit_digest *digest, engine_stats *st, int32_t *n_cached, int32_t *common)
{
    engine *e = prefix_engine(fx, 2, 32, cache);
    if (!e)
        return;
    llmq_err err;
    engine_set_logits_observer(e, digest_logits, digest);
    int32_t *first = NULL, n_first = 0;
    *common = INT32_MAX;
    int next = 0; /* the engine takes 4 live sequences: the rest join as they finish */
    while (next < N_SEQ || engine_has_work(e)) {
        for (; next < N_SEQ && engine_free_slots(e) > 0; next++) {
            char text[512];
            snprintf(text, sizeof text, "%s%s", SHARED, prompts[next]);
            engine_request req;
            int32_t *ids;
            if (request(fx, (uint64_t)next, text, 12, temp, NULL, &req, &ids) != 0 ||
                engine_add(e, &req, &err) != 0)
                CHECK(false, "add %d", next);
            /* The prompts' common token prefix (the last token never counts). */
            int32_t k = 0;
            while (first && k < n_first && k < req.n_prompt - 1 && ids[k] == first[k])
                k++;
            if (first) {
                *common = k < *common ? k : *common;
                free(ids);
            } else {
                first = ids;
                n_first = req.n_prompt;
            }
        }
        const engine_event *ev;
        int32_t n;
        if (engine_step(e, &ev, &n, &err) != 0) {
            CHECK(false, "engine_step: %s", err.msg);
            break;
        }
        for (int32_t i = 0; i < n; i++) {
            record(out, &ev[i]);
            if (ev[i].finish != ENGINE_RUNNING)
                n_cached[ev[i].id] = ev[i].timing.n_cached;
        }
    }
    free(first);
    *st = engine_get_stats(e);
    engine_free(e);
}

static void check_prefix_cache(const fixture *fx, float temp)
{
    static outcome off[N_SEQ], on[N_SEQ];
    memset(off, 0, sizeof off);
    memset(on, 0, sizeof on);
    logit_digest d_off = {{0}}, d_on = {{0}};
    engine_stats st_off, st_on;
    int32_t cached_off[N_SEQ] = {0}, cached_on[N_SEQ] = {0}, common;
    run_shared(fx, false, temp, off, &d_off, &st_off, cached_off, &common);
    run_shared(fx, true, temp, on, &d_on, &st_on, cached_on, &common);
    int same = 0, same_logits = 0;
    for (int i = 0; i < N_SEQ; i++) {
        same += on[i].done && off[i].done && on[i].n_tokens == off[i].n_tokens &&
                memcmp(on[i].tokens, off[i].tokens, (size_t)on[i].n_tokens * sizeof(int32_t)) == 0;
        same_logits += d_on.h[i] == d_off.h[i];
    }
    CHECK(same == N_SEQ && same_logits == N_SEQ,
          "temp %.1f: with the prefix cache, %d of 8 sequences generate the same tokens and %d "
          "see bit-identical logits at every step",
          temp, same, same_logits);
    const int32_t shared = common / 16 * 16;
    int later = 0;
    for (int i = 1; i < N_SEQ; i++)
        later += cached_on[i] == shared;
    CHECK(shared >= 32 && later == 7 && cached_on[0] == 0 &&
              st_on.prefix_hit_tokens == 7 * (uint64_t)shared,
          "temp %.1f: the 7 sequences after the first (the second added with it, waiting for "
          "its prompt) take %d tokens (whole blocks) of their %d-token common prefix from the "
          "cache (%d did; %llu tokens in all)",
          temp, shared, common, later, (unsigned long long)st_on.prefix_hit_tokens);
    CHECK(st_off.prefill_rows - st_on.prefill_rows == st_on.prefix_hit_tokens &&
              st_off.prefix_hit_tokens == 0,
          "temp %.1f: each cached token is a prompt row not computed (%llu rows without the "
          "cache, %llu with)",
          temp, (unsigned long long)st_off.prefill_rows, (unsigned long long)st_on.prefill_rows);
}

/* n > 1: four samples of one prompt added at once.  Without waiting, all
 * four would be admitted in one step and compute the prompt four times; the
 * later three wait for the first's prompt blocks and take them. */
static void check_siblings(const fixture *fx)
{
    char text[512];
    snprintf(text, sizeof text, "%s%s", SHARED, prompts[0]);
    static outcome out[2][N_SEQ];
    memset(out, 0, sizeof out);
    engine_stats st[2];
    int32_t n_prompt = 0;
    for (int cache = 0; cache < 2; cache++) {
        engine *e = prefix_engine(fx, 4, 64, cache);
        if (!e)
            return;
        llmq_err err;
        for (int i = 0; i < 4; i++) {
            engine_request req;
            int32_t *ids;
            if (request(fx, (uint64_t)i, text, 12, 0.9f, NULL, &req, &ids) != 0 ||
                engine_add(e, &req, &err) != 0)
                CHECK(false, "add sibling %d", i);
            n_prompt = req.n_prompt;
            free(ids);
        }
        drain(e, out[cache]);
        st[cache] = engine_get_stats(e);
        engine_free(e);
    }
    const uint64_t shared = (uint64_t)(n_prompt - 1) / 16 * 16;
    int same = 0;
    for (int i = 0; i < 4; i++)
        same += out[1][i].done && out[1][i].n_tokens == out[0][i].n_tokens &&
                memcmp(out[1][i].tokens, out[0][i].tokens,
                       (size_t)out[0][i].n_tokens * sizeof(int32_t)) == 0;
    CHECK(st[1].prefix_hit_tokens == 3 * shared && same == 4,
          "4 samples of one %d-token prompt added together: 3 wait for the first's prompt and "
          "take %llu tokens each from the cache (%llu in all), and sample what they do without "
          "the cache (%d of 4)",
          n_prompt, (unsigned long long)shared, (unsigned long long)st[1].prefix_hit_tokens, same);
}

int main(void)
{
    fixture fx;
    if (model_fixture_load(&fx) != 0)
        return 1;
    check_preemption(&fx, 0.0f);
    check_preemption(&fx, 0.9f);
    check_stops(&fx);
    check_cancel(&fx);
    check_bad_requests(&fx);
    check_no_room(&fx);
    check_logprobs(&fx);
    check_prefill_first(&fx);
    check_prefix_cache(&fx, 0.0f);
    check_prefix_cache(&fx, 0.9f);
    check_siblings(&fx);
    check_default_pool(&fx);
    check_argmax_rule(fx.be);
    check_top_k_rule(fx.be);
    check_greedy_on_backend(&fx);
    model_fixture_free(&fx);
    return check_done();
}
