/* on_worker: the worker side of docs/PROTOCOL.md §7: sessions (hello, bye,
 * presumed death), credits, jobs out, results and failures in. */
#include <inttypes.h>
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

static store_worker worker_row(const wire_hello *h)
{
    return (store_worker){.name = h->worker, .host = h->host, .pid = h->pid,
                          .gpu_name = h->gpu_name, .gpu_index = h->gpu_index,
                          .gpu_uuid = h->gpu_uuid, .model = h->model,
                          .engine = h->engine, .slots = (int32_t)h->slots};
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

/* A hello on a connection that already had a session, or under a name in
 * use, ends the old session first: that worker restarted, and what it was
 * running is lost with it. */
static int on_hello(broker *b, const net_peer *from, const wire_hello *h,
                    llmq_err *err)
{
    if (b->draining)
        return broker_refuse(b, b->workers, from, 0, WIRE_E_SHUTTING_DOWN,
                             NULL, "the broker is stopping");
    pool_worker *old = pool_by_peer(&b->pool, from);
    if (old && on_worker_end(b, old, SESSION_LOST, "said hello again", err))
        return -1;
    old = pool_by_name(&b->pool, h->worker);
    if (old && on_worker_end(b, old, SESSION_LOST,
                             "replaced by a new hello under its name", err))
        return -1;
    store_worker row = worker_row(h);
    int64_t id;
    pool_worker *w;
    if (store_worker_add(b->st, &row, b->wall, &id, err) ||
        pool_add(&b->pool, h, from, id, b->now, &w, err))
        return -1;
    broker_log("worker %s (session %" PRId64 ") connected: host %s pid %u, %s"
               " engine, gpu %d%s%s, model %s, %u slots",
               h->worker, id, h->host, h->pid, h->engine, h->gpu_index,
               h->gpu_name ? " " : "", h->gpu_name ? h->gpu_name : "", h->model,
               h->slots);
    return welcome(b, w, err);
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

static int on_result(broker *b, pool_worker *w, const wire_result *r,
                     llmq_err *err)
{
    store_result sr = {.text = r->text,
                       .token_ids = r->tokens,
                       .n_token_ids = r->n_tokens,
                       .logprobs = r->logprobs,
                       .n_logprobs = r->n_logprobs,
                       .finish_reason = wire_finish_name(r->finish),
                       .prompt_tokens = (int32_t)r->prompt_tokens,
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
    bool ok;
    int rc = broker_decode(b, b->workers, from, body, len, &m, &ok, err);
    if (rc || !ok)
        return rc;
    rc = !w && m.type != WIRE_T_HELLO
                 ? broker_refuse(b, b->workers, from, 0, WIRE_E_UNKNOWN_WORKER,
                                 NULL, "this connection has no session (no hello,"
                                 " or presumed dead): send hello again")
                 : handle(b, from, w, &m, err);
    wire_msg_free(&m);
    return rc;
}
