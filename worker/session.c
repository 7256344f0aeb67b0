#include "worker/session.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/jobconv.h"
#include "worker/jobs.h"

/* After a refused hello (the broker is stopping, or another session holds
 * this worker id), wait this long, twice as long after each refusal in a
 * row, up to HELLO_RETRY_MAX_MS: a restarted worker whose predecessor is
 * not yet presumed dead gets in soon after, and a duplicate logs a line
 * every few seconds rather than many a second. */
#define HELLO_RETRY_MS 1000
#define HELLO_RETRY_MAX_MS 8000

typedef enum phase {
    PHASE_HELLO_DUE,  /* say hello when no stale job is left in the engine */
    PHASE_HELLO_SENT, /* waiting for welcome */
    PHASE_LIVE,
    PHASE_DONE,
} phase;

struct session {
    session_config cfg;
    link_conn *link;
    engine *eng;
    jobconv_model model;
    formats *formats; /* the grammars of the jobs held (json_schema, json_object) */
    jobs jobs;
    phase phase;
    int64_t hello_at;       /* PHASE_HELLO_DUE: not before */
    uint32_t hello_retry_ms; /* the wait after the next refused hello */
    uint32_t dead_after_ms; /* from welcome: when silence is worth a log line */
    bool silent;            /* the broker's silence was logged */
    bool draining;
    bool broker_drain; /* the broker sent shutdown: failures hand jobs back */
    bool distrusted;   /* the broker refused a result: this session is over */
    int64_t drain_deadline;
    uint64_t n_done, n_failed;
};

static void say(const session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A log line under this worker's id. */
static void say(const session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline("llmq-worker", s->cfg.hello.worker, fmt, ap);
    va_end(ap);
}

int session_create(session **out, const session_config *cfg, link_conn *link, engine *e,
                   const jobconv_model *m, llmq_err *err)
{
    *out = NULL;
    session *s = calloc(1, sizeof *s);
    if (!s)
        return llmq_errf(err, "out of memory");
    if (jobs_init(&s->jobs, cfg->hello.slots, err) != 0) {
        free(s);
        return -1;
    }
    if (formats_new(&s->formats, err) != 0) {
        jobs_free(&s->jobs);
        free(s);
        return -1;
    }
    s->cfg = *cfg;
    s->link = link;
    s->eng = e;
    s->model = *m;
    s->phase = PHASE_HELLO_DUE;
    s->hello_retry_ms = HELLO_RETRY_MS;
    s->dead_after_ms = WIRE_DEAD_AFTER_MS;
    *out = s;
    return 0;
}

void session_free(session *s)
{
    if (!s)
        return;
    jobs_free(&s->jobs);
    formats_free(s->formats);
    free(s);
}

uint32_t session_slots(const session *s)
{
    return s->cfg.hello.slots;
}

bool session_done(const session *s)
{
    return s->phase == PHASE_DONE;
}

bool session_failed(const session *s)
{
    return s->distrusted;
}

/* ---- messages out -------------------------------------------------------------- */

static int send_simple(session *s, wire_type t, llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, t);
    return link_send(s->link, &m, err);
}

static int send_job_failure(session *s, uint64_t id, uint32_t attempt, const char *reason,
                            bool retryable, llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_JOB_FAILURE);
    m.failure = (wire_job_failure){.id = id, .attempt = attempt, .reason = reason,
                                   .retryable = retryable};
    if (s->cfg.verbose || !retryable)
        say(s, "job %" PRIu64 " attempt %u %s: %s", id, attempt,
            retryable ? "returned" : "failed", reason);
    s->n_failed += !retryable;
    return link_send(s->link, &m, err);
}

/* A job that cannot go on here: whether it may run again is its error's
 * code's to say (wire_retryable). */
static int fail_job(session *s, uint64_t id, uint32_t attempt, const llmq_err *why, llmq_err *err)
{
    return send_job_failure(s, id, attempt, why->msg, wire_retryable(why->code), err);
}

static int send_hello(session *s, llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_HELLO);
    m.hello = s->cfg.hello;
    s->phase = PHASE_HELLO_SENT;
    return link_send(s->link, &m, err);
}

static int grant_credits(session *s, llmq_err *err)
{
    uint32_t n = jobs_grantable(&s->jobs);
    if (n == 0)
        return 0;
    wire_msg m;
    wire_msg_init(&m, WIRE_T_CREDIT);
    m.credit = n;
    jobs_granted(&s->jobs, n);
    return link_send(s->link, &m, err);
}

/* ---- jobs in ---------------------------------------------------------------------- */

/* The model this worker announced, or one of its aliases. */
static bool serves(const wire_hello *h, const char *name)
{
    if (strcmp(name, h->model) == 0)
        return true;
    for (uint32_t i = 0; i < h->n_aliases; i++)
        if (strcmp(name, h->aliases[i]) == 0)
            return true;
    return false;
}

/* Checks that need the session rather than the job: -1 (why filled) when
 * this worker cannot take it now, though another may. */
static int cannot_take(session *s, const wire_job *j, llmq_err *why)
{
    const jobs_entry *e = jobs_find(&s->jobs, j->id);
    if (e)
        return llmq_errc(why, LLMQ_ERR_UNAVAILABLE,
                         "job %" PRIu64 ": attempt %u arrived while attempt %u still runs here",
                         j->id, j->attempt, e->attempt);
    if (s->jobs.n == s->jobs.cap)
        return llmq_errc(why, LLMQ_ERR_NO_ROOM,
                         "job %" PRIu64 ": sent without a credit: all %u slots are busy", j->id,
                         s->jobs.cap);
    if (j->model && !serves(&s->cfg.hello, j->model))
        return llmq_errc(why, LLMQ_ERR_UNAVAILABLE,
                         "job %" PRIu64 ": model: '%s' asked for, this worker serves '%s'", j->id,
                         j->model, s->cfg.hello.model);
    return 0;
}

static int on_job(session *s, const wire_job *j, llmq_err *err)
{
    if (s->draining || s->phase != PHASE_LIVE) {
        /* After SIGTERM the bye hands it back; outside a session it is not ours. */
        say(s, "job %" PRIu64 " not started: this worker is %s", j->id,
            s->draining ? "stopping" : "between sessions");
        return 0;
    }
    jobs_arrived(&s->jobs);
    jobconv_request r;
    llmq_err bad;
    if (cannot_take(s, j, &bad) != 0 ||
        jobconv_request_make(&r, j, &s->model, s->formats, &bad) != 0)
        return fail_job(s, j->id, j->attempt, &bad, err);
    const grammar *format = r.req.constraint;
    int rc = engine_add(s->eng, &r.req, &bad);
    jobconv_request_free(&r);
    if (rc != 0) {
        formats_release(s->formats, format);
        /* Room the engine lacks comes back as its jobs leave: no credit for
         * it until then, or the broker would send this job straight back. */
        if (bad.code == LLMQ_ERR_NO_ROOM)
            jobs_withhold(&s->jobs);
        return fail_job(s, j->id, j->attempt, &bad, err);
    }
    jobs_add(&s->jobs, j->id, j->attempt)->format = format;
    if (s->cfg.verbose)
        say(s, "job %" PRIu64 " attempt %u started", j->id, j->attempt);
    return 0;
}

static void on_cancel(session *s, uint64_t id)
{
    jobs_entry *e = jobs_find(&s->jobs, id);
    /* Not here: it finished and its result crossed the cancel; the broker
     * keeps whichever outcome it recorded first. */
    if (!e || e->stale)
        return;
    e->cancelled = true;
    engine_cancel(s->eng, id);
    if (s->cfg.verbose)
        say(s, "job %" PRIu64 " cancelled by the broker", id);
}

/* ---- sessions ----------------------------------------------------------------------- */

static void on_welcome(session *s, const wire_welcome *w)
{
    if (s->phase != PHASE_HELLO_SENT)
        return;
    s->phase = PHASE_LIVE;
    s->hello_retry_ms = HELLO_RETRY_MS;
    s->dead_after_ms = w->dead_after_ms;
    link_set_heartbeat(s->link, w->heartbeat_ms);
    jobs_new_session(&s->jobs);
    say(s, "connected: %u slots, model %s, heartbeat %u ms", s->cfg.hello.slots,
        s->cfg.hello.model, w->heartbeat_ms);
}

/* The broker does not know this connection.  Errors answering what was sent
 * before the last hello say nothing about the session that hello opens. */
static void on_unknown(session *s)
{
    if (s->phase == PHASE_HELLO_SENT || s->phase == PHASE_HELLO_DUE)
        return;
    if (s->draining) {
        say(s, "the broker no longer knows this worker: it has requeued its jobs; stopping");
        s->phase = PHASE_DONE;
        return;
    }
    uint32_t n = jobs_mark_stale(&s->jobs);
    for (uint32_t i = 0; i < s->jobs.n; i++)
        engine_cancel(s->eng, s->jobs.v[i].id);
    say(s, "the broker does not know this worker (it restarted, or presumed this worker dead)"
           " and has requeued its %u running jobs: stopping them, then saying hello again", n);
    s->phase = PHASE_HELLO_DUE;
    s->hello_at = 0;
}

static void hello_refused(session *s, const wire_error_msg *e)
{
    say(s, "the broker refused this worker's hello (%s): %s; saying hello again in %u ms",
        wire_code_name(e->code), e->message, s->hello_retry_ms);
    s->phase = PHASE_HELLO_DUE;
    s->hello_at = clock_mono_ms() + s->hello_retry_ms;
    s->hello_retry_ms = s->hello_retry_ms * 2 < HELLO_RETRY_MAX_MS ? s->hello_retry_ms * 2
                                                                   : HELLO_RETRY_MAX_MS;
}

static void start_drain(session *s, bool by_broker, uint32_t grace_ms);

/* The broker sends a session whose result contradicted its job no more
 * jobs: this worker's results cannot be trusted until it is fixed, so it
 * finishes what it holds and stops, failing (a supervisor restarts it as a
 * new session). */
static void on_distrusted(session *s, const wire_error_msg *e)
{
    say(s,
        "the broker refused a result of this worker: %s; it sends this session no more"
        " jobs: stopping",
        e->message);
    s->distrusted = true;
    start_drain(s, false, s->cfg.grace_ms);
}

static void on_error(session *s, const wire_error_msg *e)
{
    if (e->code == WIRE_E_UNKNOWN_WORKER) {
        on_unknown(s);
        return;
    }
    if (s->phase == PHASE_HELLO_SENT) {
        hello_refused(s, e);
        return;
    }
    if (e->code == WIRE_E_BAD_RESULT && !s->distrusted) {
        on_distrusted(s, e);
        return;
    }
    say(s, "the broker answered %s: %s", wire_code_name(e->code), e->message);
}

static void start_drain(session *s, bool by_broker, uint32_t grace_ms)
{
    int64_t deadline = clock_mono_ms() + grace_ms;
    if (!s->draining || deadline < s->drain_deadline)
        s->drain_deadline = deadline;
    if (!s->draining)
        say(s, "stopping (%s): %u running jobs get %u ms to finish",
            by_broker ? "the broker asked" : "signal", s->jobs.n, grace_ms);
    s->draining = true;
    s->broker_drain |= by_broker;
}

int session_on_message(session *s, const wire_msg *m, llmq_err *err)
{
    switch (m->type) {
    case WIRE_T_WELCOME: on_welcome(s, &m->welcome); return 0;
    case WIRE_T_JOB: return on_job(s, &m->job, err);
    case WIRE_T_JOB_CANCEL: on_cancel(s, m->cancel_id); return 0;
    case WIRE_T_SHUTDOWN: start_drain(s, true, m->grace_ms); return 0;
    case WIRE_T_ERROR: on_error(s, &m->error); return 0;
    default: return 0; /* heartbeat: the link noted the sign of life */
    }
}

void session_stop(session *s)
{
    if (s->draining)
        s->drain_deadline = 0;
    else
        start_drain(s, false, s->cfg.grace_ms);
}

/* ---- results out ----------------------------------------------------------------------- */

static int send_result(session *s, const jobs_entry *e, const engine_event *ev, llmq_err *err)
{
    jobconv_result r;
    llmq_err bad;
    if (jobconv_result_make(&r, e->attempt, ev, s->model.vocab, &bad) != 0)
        return fail_job(s, e->id, e->attempt, &bad, err);
    int rc = link_send(s->link, &r.msg, &bad);
    jobconv_result_free(&r);
    if (rc != 0) /* the result did not encode: the job must still end */
        return fail_job(s, e->id, e->attempt, &bad, err);
    s->n_done++;
    if (s->cfg.verbose) {
        const engine_timing *t = &ev->timing;
        say(s, "job %" PRIu64 " done (%s): %d prompt + %d generated tokens in %.1f ms",
            e->id, engine_finish_name(ev->finish), t->n_prompt, t->n_generated,
            t->finished_ms - t->added_ms);
    }
    return 0;
}

static int on_finished(session *s, jobs_entry *e, const engine_event *ev, llmq_err *err)
{
    int rc = 0;
    if (e->stale)
        rc = 0;
    else if (ev->finish == ENGINE_FINISH_CANCELLED) /* job_cancel's answer (PROTOCOL.md §7) */
        rc = send_job_failure(s, e->id, e->attempt, "cancelled", false, err);
    else
        rc = send_result(s, e, ev, err);
    formats_release(s->formats, e->format); /* the engine is done with it */
    jobs_remove(&s->jobs, e);
    return rc;
}

int session_on_events(session *s, const engine_event *ev, int32_t n, llmq_err *err)
{
    for (int32_t i = 0; i < n; i++) {
        if (ev[i].finish == ENGINE_RUNNING)
            continue;
        jobs_entry *e = jobs_find(&s->jobs, ev[i].id);
        if (!e)
            return llmq_errf(err, "the engine finished sequence %" PRIu64 ", which no job holds",
                             ev[i].id);
        if (on_finished(s, e, &ev[i], err) != 0)
            return -1;
    }
    return 0;
}

/* ---- timers ---------------------------------------------------------------------------------- */

/* Fails every job held in this session with why (stale ones are the
 * broker's already). */
static int fail_held(session *s, const llmq_err *why, llmq_err *err)
{
    for (uint32_t i = 0; i < s->jobs.n; i++) {
        const jobs_entry *e = &s->jobs.v[i];
        if (!e->stale && fail_job(s, e->id, e->attempt, why, err) != 0)
            return -1;
    }
    return 0;
}

/* Retryable failures while the broker drains hand the jobs back (no fault). */
static int end_drain(session *s, llmq_err *err)
{
    llmq_err over;
    llmq_errc(&over, LLMQ_ERR_UNAVAILABLE, "worker stopping: its grace period is over");
    if (s->broker_drain && fail_held(s, &over, err) != 0)
        return -1;
    say(s, "leaving: %" PRIu64 " jobs done, %" PRIu64 " failed here, %u unfinished %s",
        s->n_done, s->n_failed, s->jobs.n,
        s->broker_drain ? "returned to the broker" : "left to the broker to requeue");
    s->phase = PHASE_DONE;
    return send_simple(s, WIRE_T_BYE, err);
}

static void watch_silence(session *s)
{
    int64_t silent = link_silent_ms(s->link);
    if (!s->silent && s->phase == PHASE_LIVE && silent > s->dead_after_ms) {
        say(s, "nothing heard from the broker for %" PRId64 " ms; keeping %u jobs and"
               " waiting for it", silent, s->jobs.n);
        s->silent = true;
    } else if (s->silent && silent <= s->dead_after_ms) {
        say(s, "the broker is heard from again");
        s->silent = false;
    }
}

int session_tick(session *s, llmq_err *err)
{
    if (s->phase == PHASE_DONE)
        return 0;
    watch_silence(s);
    if (s->draining) {
        if (s->jobs.n == 0 || clock_mono_ms() >= s->drain_deadline)
            return end_drain(s, err);
        return 0;
    }
    if (s->phase == PHASE_HELLO_DUE && clock_mono_ms() >= s->hello_at &&
        jobs_n_stale(&s->jobs) == 0)
        return send_hello(s, err);
    if (s->phase == PHASE_LIVE)
        return grant_credits(s, err);
    return 0;
}

int session_abort(session *s, const char *reason, llmq_err *err)
{
    say(s, "the engine failed: %s", reason);
    /* The jobs are not at fault, whatever the engine's error was. */
    llmq_err why;
    llmq_errc(&why, LLMQ_ERR_UNAVAILABLE, "%s", reason);
    if (s->phase == PHASE_LIVE && fail_held(s, &why, err) != 0)
        return -1;
    s->phase = PHASE_DONE;
    return send_simple(s, WIRE_T_BYE, err);
}
