#include "worker/jobconv.h"

#include <stdlib.h>
#include <string.h>

#include "worker/text.h"

/* A job parameter goes to the engine_request field or the sampler_params
 * field of its name (proto/job_params.h says which): one the engine lacks
 * fails the build.  The output format becomes the request's grammar
 * (worker/formats.h) instead. */
#define TO_SAMPLER(name) req->sampling.name = p->name;
#define TO_REQUEST(name) req->name = p->name;
#define TO_CONSTRAINT(name)
#define TO_ENGINE(name, kind, lo, hi, lo_open, dflt, engine) TO_##engine(name)

static void engine_params(engine_request *req, const job_params *p)
{
    req->sampling = sampler_default_params();
    JOB_PARAMS(TO_ENGINE)
    req->stop = p->stop;
    req->n_stop = (int32_t)p->n_stop;
}

/* A failure to render is the job's (its messages, or a template that
 * cannot serve them), not the worker's: unless it is said to be a lack of
 * room, it fails the job for good. */
static int chat_failed(llmq_err *err, unsigned long long id)
{
    if (err->code != LLMQ_ERR_NO_ROOM)
        err->code = LLMQ_ERR_INVALID;
    return llmq_err_prefix(err, "job %llu: messages", id);
}

static int chat_ids(jobconv_request *r, const wire_job *j, const jobconv_model *m, size_t *n,
                    llmq_err *err)
{
    const unsigned long long id = (unsigned long long)j->id;
    if (!m->chat)
        return llmq_errc(err, LLMQ_ERR_INVALID, "job %llu: messages: %s", id, m->no_chat);
    chat_message *msgs = malloc((j->n_messages ? j->n_messages : 1) * sizeof *msgs);
    if (!msgs)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: messages: out of memory", id);
    for (uint32_t i = 0; i < j->n_messages; i++)
        msgs[i] = (chat_message){j->messages[i].role, strlen(j->messages[i].role),
                                 j->messages[i].content, strlen(j->messages[i].content)};
    chat_prompt p;
    int rc = chat_render_for(m->chat, m->vocab, msgs, j->n_messages, &p, err);
    free(msgs);
    if (rc == 0)
        rc = chat_tokenize(&p, m->vocab, &r->ids, n, err);
    chat_prompt_free(&p);
    return rc < 0 ? chat_failed(err, id) : 0;
}

static int prompt_ids(jobconv_request *r, const wire_job *j, const jobconv_model *m, size_t *n,
                      llmq_err *err)
{
    const tok_vocab *v = m->vocab;
    if (j->messages)
        return chat_ids(r, j, m, n, err);
    if (j->prompt) {
        if (tok_encode(v, j->prompt, strlen(j->prompt), tok_add_bos(v), true, &r->ids, n,
                       err) != 0)
            return llmq_err_prefix(err, "job %llu: prompt", (unsigned long long)j->id);
        return 0;
    }
    /* The wire bounds ids to 0..2^31-1 and their count to 262144, so they
     * fit the engine's int32. */
    r->ids = malloc((j->n_tokens ? j->n_tokens : 1) * sizeof *r->ids);
    if (!r->ids)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: tokens: out of memory",
                         (unsigned long long)j->id);
    for (uint32_t i = 0; i < j->n_tokens; i++)
        r->ids[i] = (int32_t)j->tokens[i];
    *n = j->n_tokens;
    return 0;
}

int jobconv_request_make(jobconv_request *r, const wire_job *j, const jobconv_model *m,
                         formats *fmt, llmq_err *err)
{
    memset(r, 0, sizeof *r);
    size_t n = 0;
    if (prompt_ids(r, j, m, &n, err) != 0) {
        jobconv_request_free(r);
        return -1;
    }
    r->req = (engine_request){.id = j->id, .prompt = r->ids, .n_prompt = (int32_t)n};
    engine_params(&r->req, &j->params);
    if (formats_acquire(fmt, &j->params, &r->req.constraint, err) != 0) {
        jobconv_request_free(r);
        return llmq_err_prefix(err, "job %llu", (unsigned long long)j->id);
    }
    return 0;
}

void jobconv_request_free(jobconv_request *r)
{
    free(r->ids);
    memset(r, 0, sizeof *r);
}

static wire_finish finish(engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_EOG:
    case ENGINE_FINISH_STOP: return WIRE_FINISH_STOP;
    case ENGINE_FINISH_LENGTH: return WIRE_FINISH_LENGTH;
    case ENGINE_FINISH_CONTEXT: return WIRE_FINISH_CONTEXT;
    default: return WIRE_FINISH_NONE;
    }
}

static double span_ms(double from, double to)
{
    return to > from ? to - from : 0.0;
}

static wire_logprob wire_logprob_of(engine_logprob lp, const tok_vocab *v)
{
    size_t n = 0;
    const char *piece = tok_piece(v, lp.token, true, &n);
    if (n > WIRE_MAX_TOKEN_BYTES) /* not in any vocabulary seen; cut, not failed */
        n = WIRE_MAX_TOKEN_BYTES;
    return (wire_logprob){.token = (uint32_t)lp.token,
                          .logprob = lp.logprob,
                          .bytes = (const uint8_t *)piece,
                          .n_bytes = (uint32_t)n};
}

/* r->logprobs from ev's, when the job asked for them. */
static int make_logprobs(jobconv_result *r, const engine_event *ev, const tok_vocab *v)
{
    if (!ev->logprobs)
        return 0;
    const size_t n = (size_t)ev->n_tokens, k = (size_t)ev->n_top;
    r->logprobs = malloc((n ? n : 1) * sizeof *r->logprobs);
    r->top = malloc((n * k > 0 ? n * k : 1) * sizeof *r->top);
    if (!r->logprobs || !r->top)
        return -1;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < k; j++)
            r->top[i * k + j] = wire_logprob_of(ev->top_logprobs[i * k + j], v);
        r->logprobs[i] = (wire_token_logprobs){.chosen = wire_logprob_of(ev->logprobs[i], v),
                                               .top = r->top + i * k,
                                               .n_top = (uint32_t)k};
    }
    return 0;
}

int jobconv_result_make(jobconv_result *r, uint32_t attempt, const engine_event *ev,
                        const tok_vocab *v, llmq_err *err)
{
    memset(r, 0, sizeof *r);
    const unsigned long long id = (unsigned long long)ev->id;
    r->text = text_clean(ev->full_text, ev->full_text_len, SIZE_MAX - 1);
    r->tokens = malloc((ev->n_tokens ? (size_t)ev->n_tokens : 1) * sizeof *r->tokens);
    if (!r->text || !r->tokens || make_logprobs(r, ev, v) != 0) {
        jobconv_result_free(r);
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "job %llu: out of memory for the result", id);
    }
    size_t len = strlen(r->text);
    if (len > WIRE_MAX_TEXT_BYTES) {
        jobconv_result_free(r);
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "job %llu: text: %zu bytes generated, a result carries at most %u", id,
                         len, WIRE_MAX_TEXT_BYTES);
    }
    for (int32_t i = 0; i < ev->n_tokens; i++)
        r->tokens[i] = (uint32_t)ev->tokens[i];
    const engine_timing *t = &ev->timing;
    wire_msg_init(&r->msg, WIRE_T_JOB_RESULT);
    wire_result *w = &r->msg.result;
    w->id = ev->id;
    w->attempt = attempt;
    w->text = r->text;
    w->tokens = r->tokens;
    w->n_tokens = (uint32_t)ev->n_tokens;
    w->logprobs = r->logprobs;
    w->n_logprobs = r->logprobs ? (uint32_t)ev->n_tokens : 0;
    w->finish = finish(ev->finish);
    w->prompt_tokens = (uint32_t)t->n_prompt;
    w->cached_prompt_tokens = (uint32_t)t->n_cached;
    w->gen_tokens = (uint32_t)t->n_generated;
    w->timings.prefill_ms = span_ms(t->first_sched_ms, t->first_token_ms);
    w->timings.decode_ms = span_ms(t->first_token_ms, t->finished_ms);
    return 0;
}

void jobconv_result_free(jobconv_result *r)
{
    free(r->text);
    free(r->tokens);
    free(r->logprobs);
    free(r->top);
    memset(r, 0, sizeof *r);
}
