/* on_worker: the worker side of docs/PROTOCOL.md §7: sessions (hello, bye,
 * presumed death), credits, jobs out, results and failures in. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "broker/broker_priv.h"

/* ---- sessions ------------------------------------------------------------------- */

static int failed_for_good(void *ctx, int64_t job_id, llmq_err *err)
{
    return broker_job_final(ctx, job_id, err);
}

int on_worker_end(broker *b, pool_worker *w, session_end how,
                  const char *reason, llmq_err *err)
{
    uint32_t busy = w->busy;
    int rc = how == SESSION_LOST
                 ? store_fault_worker(b->st, w->id, reason, b->wall,
                                      failed_for_good, b, err)
                 : store_hand_back_worker(b->st, w->id, reason, b->wall, err);
    if (rc == 0)
        rc = store_worker_set(b->st, w->id, how == SESSION_LOST ? "lost" : "gone",
                              b->wall, err);
    if (rc)
        return -1;
    broker_log("worker %s (session %" PRId64 ") %s: %s; its %u running jobs go"
               " back to the queue",
               w->name, w->id, how == SESSION_LOST ? "lost" : "left", reason,
               busy);
    pool_remove(&b->pool, w);
    return 0;
}

static store_worker worker_row(const wire_hello *h, const net_peer *from)
{
    return (store_worker){.name = h->worker,
                          .host = h->host,
                          .pid = h->pid,
                          .gpu_name = h->gpu_name,
                          .gpu_index = h->gpu_index,
                          .gpu_uuid = h->gpu_uuid,
                          .model = h->model,
                          .engine = h->engine,
                          .slots = (int32_t)h->slots,
                          .public_key = from->key[0] ? from->key : NULL};
}

static int welcome(broker *b, pool_worker *w, llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WELCOME);
    m.welcome.heartbeat_ms = b->cfg.heartbeat_ms;
    m.welcome.dead_after_ms = b->cfg.dead_after_ms;
    w->last_sent = b->now;
    return broker_reply(b, b->workers, &w->peer, &m, err);
}

/* A refused hello changes nothing: no session, no job touched.  Logged,
 * since the operator has a worker to fix. */
static int refuse_hello(broker *b, const net_peer *from, const wire_hello *h,
                        wire_code code, const char *why)
{
    broker_log("refused the hello of host %s pid %u: worker id '%s' %s",
               h->host, h->pid, h->worker, why);
    return broker_refuse(b, b->workers, from, 0, code, "worker", "'%s' %s",
                         h->worker, why);
}

/* Under CURVE a worker id is bound to the key it first connected with, so
 * that another admitted key cannot take its name (and its place in the
 * accounting).  A binding to a key the allow-list no longer admits is
 * stale: the operator rotated that host's key.  *bind: the hello's key is
 * to be bound once it is admitted. */
static int check_key(broker *b, const net_peer *from, const wire_hello *h,
                     bool *refused, bool *bind, llmq_err *err)
{
    char bound[CURVE_Z85_LEN + 1], why[256];
    bool found;
    *refused = *bind = false;
    if (!b->curve)
        return 0;
    if (store_worker_key(b->st, h->worker, bound, &found, err))
        return -1;
    *bind = !found || strcmp(bound, from->key) != 0;
    if (!found || !*bind)
        return 0;
    if (!zap_list_admits(&b->allow_workers, bound)) {
        broker_log("worker id '%s' was bound to key %s, which is no longer"
                   " admitted: it is bound to %s now",
                   h->worker, bound, from->key);
        return 0;
    }
    *refused = true;
    snprintf(why, sizeof why,
             "is bound to another CURVE key (%s); this connection's key is"
             " %s",
             bound, from->key);
    return refuse_hello(b, from, h, WIRE_E_FORBIDDEN, why);
}

/* The same process: a worker that reconnected, or a restart that got the
 * same pid (a container's).  Any other is a second worker under one id. */
static bool same_process(const pool_worker *w, const wire_hello *h)
{
    return w->pid == h->pid && strcmp(w->host, h->host) == 0;
}

static int refuse_in_use(broker *b, const net_peer *from, const wire_hello *h,
                         const pool_worker *live)
{
    char why[1024];
    snprintf(why, sizeof why,
             "is in use by live session %" PRId64 " (host %s, pid %u, connected"
             " %" PRId64 " ms ago, last heard %" PRId64 " ms ago): another"
             " worker runs under this id, or this worker's previous process"
             " is not presumed dead yet (after %u ms of silence); retry later",
             live->id, live->host, live->pid, b->now - live->since,
             b->now - live->last_heard, b->cfg.dead_after_ms);
    return refuse_hello(b, from, h, WIRE_E_WORKER_IN_USE, why);
}

static int open_session(broker *b, const net_peer *from, const wire_hello *h,
                        bool bind, llmq_err *err)
{
    store_worker row = worker_row(h, from);
    row.aliases = h->aliases;
    row.n_aliases = h->n_aliases;
    int64_t id;
    pool_worker *w;
    if ((bind &&
         store_worker_key_bind(b->st, h->worker, from->key, b->wall, err)) ||
        store_worker_add(b->st, &row, b->wall, &id, err) ||
        pool_add(&b->pool, h, from, id, b->now, &w, err))
        return -1;
    broker_log("worker %s (session %" PRId64 ") connected: host %s pid %u, %s"
               " engine, gpu %d%s%s, model %s, %u slots%s%s",
               h->worker, id, h->host, h->pid, h->engine, h->gpu_index,
               h->gpu_name ? " " : "", h->gpu_name ? h->gpu_name : "", h->model,
               h->slots, from->key[0] ? ", key " : "", from->key);
    return welcome(b, w, err);
}

/* A hello on a connection that already had a session ends that session
 * first: the worker restarted it, and what it was running is lost with
 * it.  A hello under a name in use is the same worker's new session when
 * it comes from the same process, and is refused otherwise: a second
 * process under one --id (an operator's mistake) must not end the live
 * session and cost its jobs an attempt.  The refused worker retries; a
 * restarted worker whose crashed predecessor is not yet presumed dead gets
 * in once it is. */
static int on_hello(broker *b, const net_peer *from, const wire_hello *h,
                    llmq_err *err)
{
    if (b->draining)
        return broker_refuse(b, b->workers, from, 0, WIRE_E_SHUTTING_DOWN,
                             NULL, "the broker is stopping");
    pool_worker *old = pool_by_peer(&b->pool, from);
    if (old && on_worker_end(b, old, SESSION_LOST, "said hello again", err))
        return -1;
    bool refused, bind;
    int rc = check_key(b, from, h, &refused, &bind, err);
    if (rc || refused)
        return rc;
    old = pool_by_name(&b->pool, h->worker);
    if (old && !same_process(old, h))
        return refuse_in_use(b, from, h, old);
    if (old &&
        on_worker_end(b, old, SESSION_LOST,
                      "replaced by a new session of the same process", err))
        return -1;
    return open_session(b, from, h, bind, err);
}

static void on_credit(broker *b, pool_worker *w, uint32_t n)
{
    uint32_t dropped = pool_credit(w, n);
    if (dropped)
        broker_log("worker %s granted %u credits beyond its %u slots (%u busy):"
                   " ignored",
                   w->name, dropped, w->slots, w->busy);
    (void)b;
}

/* ---- jobs out ---------------------------------------------------------------------- */

int on_worker_send_job(void *ctx, const store_job *job, llmq_err *err)
{
    dispatch_ctx *d = ctx;
    wire_msg m;
    wire_msg_init(&m, WIRE_T_JOB);
    m.job.id = (uint64_t)job->id;
    m.job.attempt = (uint32_t)job->attempts;
    m.job.prompt = job->prompt;
    m.job.tokens = job->prompt_ids;
    m.job.n_tokens = (uint32_t)job->n_prompt_ids;
    m.job.messages = job->messages;
    m.job.n_messages = (uint32_t)job->n_messages;
    m.job.model = job->model;
    m.job.params = job->params;
    d->w->last_sent = d->b->now;
    if (d->b->cfg.verbose)
        broker_log("job %" PRId64 " attempt %d -> worker %s", job->id,
                   job->attempts, d->w->name);
    return broker_reply(d->b, d->b->workers, &d->w->peer, &m, err);
}

/* ---- results and failures in -------------------------------------------------------- */

static void job_left(pool_worker *w)
{
    if (w->busy)
        w->busy--;
}

static void log_stale(broker *b, const pool_worker *w, const char *what,
                      uint64_t id, uint32_t attempt, store_change ch)
{
    if (b->cfg.verbose)
        broker_log("ignored %s for job %" PRIu64 " attempt %u from worker %s:"
                   " %s",
                   what, id, attempt, w->name,
                   ch == STORE_UNKNOWN ? "no such job"
                                       : "not running there any more");
}

/* A tokenizer makes at most one token per byte of a fragment of text,
 * plus the space SentencePiece may put before each fragment, and a
 * fragment is at least a one-byte special token away from the next; one
 * more for BOS.  Loose, but no real count of a text prompt exceeds it,
 * and a forged count that would skew prefill tok/s does. */
static int64_t text_prompt_max_tokens(int64_t bytes)
{
    return 2 * bytes + 2;
}

/* Where a result contradicts its job, and how. */
typedef struct verdict {
    char field[64];
    char why[512];
} verdict;

static bool refuse_at(verdict *v, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool refuse_at(verdict *v, const char *field, const char *fmt, ...)
{
    snprintf(v->field, sizeof v->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, sizeof v->why, fmt, ap);
    va_end(ap);
    return true;
}

static bool counts_contradict(const store_job_facts *f, const pool_worker *w,
                              const wire_result *r, verdict *v)
{
    const uint64_t prompt = r->prompt_tokens, gen = r->gen_tokens;
    const int64_t most = text_prompt_max_tokens(f->prompt_len);
    if (gen != r->n_tokens)
        return refuse_at(v, "gen_tokens", "%" PRIu64 " where tokens has %u ids",
                         gen, r->n_tokens);
    if (gen > (uint64_t)f->max_tokens)
        return refuse_at(v, "gen_tokens",
                         "%" PRIu64
                         " generated, the job allows %d (max_tokens)",
                         gen, f->max_tokens);
    if (w->n_ctx && prompt + gen > w->n_ctx)
        return refuse_at(v, "gen_tokens",
                         "%" PRIu64 " prompt + %" PRIu64 " generated tokens,"
                         " the worker's context holds %u",
                         prompt, gen, w->n_ctx);
    if (r->cached_prompt_tokens > prompt)
        return refuse_at(v, "cached_prompt_tokens",
                         "%" PRIu32 " of a prompt of %" PRIu64 " tokens",
                         r->cached_prompt_tokens, prompt);
    if (f->token_prompt && prompt != (uint64_t)f->prompt_len)
        return refuse_at(v, "prompt_tokens",
                         "%" PRIu64 " where the job's prompt has %" PRId64
                         " tokens",
                         prompt, f->prompt_len);
    /* A chat job's prompt is what its worker's template makes of the
     * messages, and the template is the worker's (--chat-template FILE may
     * add any text, a system prompt of thousands of tokens): no bound made
     * from the messages' bytes holds for every template, so the worker's
     * context bounds it, as above, and it has at least one token. */
    if (f->chat_prompt && prompt < 1)
        return refuse_at(v, "prompt_tokens",
                         "0 for a chat job's rendered prompt");
    if (!f->token_prompt && !f->chat_prompt &&
        (prompt < 1 || (int64_t)prompt > most))
        return refuse_at(v, "prompt_tokens",
                         "%" PRIu64 " for a prompt of %" PRId64 " bytes (1.."
                         "%" PRId64 " possible)",
                         prompt, f->prompt_len, most);
    return false;
}

static bool logprobs_contradict(const store_job_facts *f, const wire_result *r,
                                verdict *v)
{
    const uint32_t n = r->logprobs ? r->n_logprobs : 0;
    if (r->n_tokens > 0 && f->logprobs != (n > 0))
        return refuse_at(v, "logprobs", "%s",
                         n ? "given, the job asked for none"
                           : "missing, the job asked for them");
    for (uint32_t i = 0; i < n; i++) {
        if (r->logprobs[i].n_top <= (uint32_t)f->top_logprobs)
            continue;
        char field[48];
        snprintf(field, sizeof field, "logprobs[%u].top_logprobs", i);
        return refuse_at(v, field, "%u alternatives, the job asked for %d",
                         r->logprobs[i].n_top, f->top_logprobs);
    }
    return false;
}

/* A worker's result is checked, not believed: it becomes the job's result
 * and the throughput accounting. */
static bool contradicts(const store_job_facts *f, const pool_worker *w,
                        const wire_result *r, verdict *v)
{
    return counts_contradict(f, w, r, v) || logprobs_contradict(f, r, v);
}

/* The result is not recorded: the attempt ends with a fault, so that the
 * job runs again (or fails once out of attempts, every reason kept), and
 * the session gets no more jobs, so that it runs elsewhere.  Only an
 * attempt running on this session is touched (id and attempt 0: the
 * result named none that could be read): a session cannot end another's.
 * why: what is wrong at field, for the worker; reason: for the attempt. */
static int refuse_result(broker *b, pool_worker *w, uint64_t id,
                         uint32_t attempt, const char *field, const char *why,
                         const char *reason, llmq_err *err)
{
    store_change ch = STORE_UNKNOWN;
    bool failed = false;
    if (id && attempt &&
        store_fault(b->st, (int64_t)id, w->id, (int32_t)attempt, reason, false,
                    b->wall, &ch, &failed, err))
        return -1;
    bool ended = ch == STORE_APPLIED;
    if (ended)
        job_left(w);
    w->distrusted = true;
    char job[64] = "a result naming no job attempt";
    if (id && attempt)
        snprintf(job, sizeof job, "job %" PRIu64 " attempt %u", id, attempt);
    broker_log("worker %s (session %" PRId64 "): %s: %s; %s; this session gets"
               " no more jobs",
               w->name, w->id, job, reason,
               !ended   ? "no job changed (none of this session's was named)"
               : failed ? "the job failed (out of attempts)"
                        : "the job goes back to the queue");
    if (broker_refuse(b, b->workers, &w->peer, 0, WIRE_E_BAD_RESULT,
                      field && field[0] ? field : NULL,
                      "%s: %s: refused%s; this session gets no more jobs", job,
                      why, ended ? ", the job runs elsewhere" : ""))
        return -1;
    return failed ? broker_job_final(b, (int64_t)id, err) : 0;
}

/* A job's result or failure that does not decode is refused as a result
 * that contradicts its job, the attempt it names ended: it would otherwise
 * stay running on a session that believes it over, for as long as that
 * session lives. */
static int on_undecoded_result(broker *b, pool_worker *w, const wire_error *we,
                               llmq_err *err)
{
    char reason[WIRE_MAX_MESSAGE_BYTES];
    snprintf(reason, sizeof reason, "%s did not decode: %s",
             we->type == WIRE_T_JOB_RESULT ? "result" : "failure", we->err.msg);
    /* The message starts with the field, which the reply carries apart. */
    size_t skip = strlen(we->field);
    const char *why = we->err.msg;
    if (skip && strncmp(why, we->field, skip) == 0 &&
        strncmp(why + skip, ": ", 2) == 0)
        why += skip + 2;
    return refuse_result(b, w, we->id, we->attempt, we->field, why, reason,
                         err);
}

static int on_result(broker *b, pool_worker *w, const wire_result *r,
                     llmq_err *err)
{
    store_job_facts facts;
    verdict v;
    if (store_job_facts_get(b->st, (int64_t)r->id, w->id, (int32_t)r->attempt,
                            &facts, err))
        return -1;
    if (facts.current && contradicts(&facts, w, r, &v)) {
        char reason[WIRE_MAX_MESSAGE_BYTES];
        snprintf(reason, sizeof reason, "result refused: %s: %s", v.field,
                 v.why);
        return refuse_result(b, w, r->id, r->attempt, v.field, v.why, reason,
                             err);
    }
    store_result sr = {.text = r->text,
                       .token_ids = r->tokens,
                       .n_token_ids = r->n_tokens,
                       .logprobs = r->logprobs,
                       .n_logprobs = r->n_logprobs,
                       .finish_reason = wire_finish_name(r->finish),
                       .prompt_tokens = (int32_t)r->prompt_tokens,
                       .cached_prompt_tokens = (int32_t)r->cached_prompt_tokens,
                       .generated_tokens = (int32_t)r->gen_tokens,
                       .prefill_ms = r->timings.prefill_ms,
                       .decode_ms = r->timings.decode_ms};
    store_change ch;
    if (store_result_put(b->st, (int64_t)r->id, w->id, (int32_t)r->attempt, &sr,
                         b->wall, &ch, err))
        return -1;
    if (ch != STORE_APPLIED) {
        log_stale(b, w, "result", r->id, r->attempt, ch);
        return 0;
    }
    job_left(w);
    w->jobs_done++;
    w->tokens_done += r->gen_tokens;
    if (b->cfg.verbose)
        broker_log("job %" PRIu64 " done on worker %s: %u tokens", r->id,
                   w->name, r->gen_tokens);
    return broker_job_final(b, (int64_t)r->id, err);
}

/* A retryable failure while shutting down is a hand-back; any other counts
 * against the job's attempts, so a job that keeps failing ends. */
static int on_failure(broker *b, pool_worker *w, const wire_job_failure *f,
                      llmq_err *err)
{
    store_change ch;
    bool failed = false;
    int rc = f->retryable && (w->draining || b->draining)
                 ? store_hand_back(b->st, (int64_t)f->id, w->id,
                                   (int32_t)f->attempt, f->reason, b->wall, &ch,
                                   err)
                 : store_fault(b->st, (int64_t)f->id, w->id, (int32_t)f->attempt,
                               f->reason, !f->retryable, b->wall, &ch, &failed,
                               err);
    if (rc)
        return -1;
    if (ch != STORE_APPLIED) {
        log_stale(b, w, "failure", f->id, f->attempt, ch);
        return 0;
    }
    job_left(w);
    if (b->cfg.verbose)
        broker_log("job %" PRIu64 " attempt %u failed on worker %s (%s): %s",
                   f->id, f->attempt, w->name, failed ? "final" : "requeued",
                   f->reason);
    return failed ? broker_job_final(b, (int64_t)f->id, err) : 0;
}

/* ---- entry --------------------------------------------------------------------------- */

static int handle(broker *b, const net_peer *from, pool_worker *w,
                  const wire_msg *m, llmq_err *err)
{
    switch (m->type) {
    case WIRE_T_HELLO: return on_hello(b, from, &m->hello, err);
    case WIRE_T_CREDIT: on_credit(b, w, m->credit); return 0;
    case WIRE_T_JOB_RESULT: return on_result(b, w, &m->result, err);
    case WIRE_T_JOB_FAILURE: return on_failure(b, w, &m->failure, err);
    case WIRE_T_HEARTBEAT: return 0;
    case WIRE_T_BYE: return on_worker_end(b, w, SESSION_GONE, "said bye", err);
    default:
        return broker_refuse(b, b->workers, from, 0, WIRE_E_UNKNOWN_TYPE, "type",
                             "'%s' is not a worker message",
                             wire_type_name(m->type));
    }
}

int on_worker(broker *b, const net_peer *from, const void *body, size_t len,
              llmq_err *err)
{
    pool_worker *w = pool_by_peer(&b->pool, from);
    if (w)
        w->last_heard = b->now; /* any message, even a bad one, is a sign of life */
    wire_msg m;
    wire_error we;
    if (!broker_decode(b, b->workers, body, len, &m, &we))
        return w && (we.type == WIRE_T_JOB_RESULT ||
                     we.type == WIRE_T_JOB_FAILURE)
                   ? on_undecoded_result(b, w, &we, err)
                   : broker_undecoded(b, b->workers, from, &we, err);
    int rc = !w && m.type != WIRE_T_HELLO
                 ? broker_refuse(b, b->workers, from, 0, WIRE_E_UNKNOWN_WORKER,
                                 NULL,
                                 "this connection has no session (no hello,"
                                 " or presumed dead): send hello again")
                 : handle(b, from, w, &m, err);
    wire_msg_free(&m);
    return rc;
}
