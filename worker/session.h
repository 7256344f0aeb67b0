/* session: the worker's side of docs/PROTOCOL.md §7, between the broker
 * link and the engine.
 *
 * Life: hello -> welcome -> credits for every free slot -> jobs in (each
 * tokenized and added to the engine, or answered at once with a failure
 * naming the job and field, retryable or not as its error's code says:
 * wire_retryable) -> each finished sequence out as job_result the moment
 * the engine reports it, and its slot granted again as a credit.  A job
 * the engine has no room for also keeps its slot from being granted until
 * a job leaves (jobs_withhold).
 * job_cancel stops a job in the engine; it is answered with job_failure
 * "cancelled" once the engine lets it go.
 *
 * A refused hello (the broker is stopping; another live session holds this
 * worker id: `worker_in_use`; the id is bound to another CURVE key:
 * `forbidden`) is logged with the broker's reason and said again after 1,
 * 2, 4, then every 8 seconds.  A result the broker refuses as contradicting
 * its job (`bad_result`) means this worker's results cannot be trusted:
 * it stops, failing (session_failed).
 *
 * Losing the broker: the link keeps heartbeating and ZeroMQ reconnects.  A
 * broker that answers `unknown_worker` (it restarted, or presumed this
 * worker dead) has already put this worker's jobs back in its queue under
 * new attempts, so their results would be ignored: they are stopped, and
 * once they have left the engine the worker says hello again with all its
 * slots.  Silence alone does not end a session (a broker stalled on a slow
 * disk comes back with the session intact), it is only logged.
 *
 * Stopping: the broker's `shutdown` gives running jobs its grace period,
 * then returns the rest with retryable failures and says `bye`.  SIGTERM
 * (session_stop) stops granting credits, lets running jobs finish within
 * the configured grace period, then says `bye`, which makes the broker put
 * back, without counting a fault, whatever is still assigned here (jobs
 * that arrive after SIGTERM are not started).  A second session_stop ends
 * at once.
 *
 * The session borrows the link, engine, vocabulary and chat template; it
 * owns its job table.  Functions return -1 only when the link fails or memory runs out:
 * the caller should then exit. */
#ifndef LLMQ_WORKER_SESSION_H
#define LLMQ_WORKER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/wire.h"
#include "engine/engine.h"
#include "worker/jobconv.h"
#include "worker/link.h"

typedef struct session_config {
    wire_hello hello;  /* what the worker announces; slots is its capacity */
    uint32_t grace_ms; /* after SIGTERM, how long running jobs may finish */
    bool verbose;      /* a log line per job */
} session_config;

typedef struct session session;

/* m: what jobs' prompts are made with (worker/jobconv.h), borrowed. */
int session_create(session **out, const session_config *cfg, link_conn *link, engine *e,
                   const jobconv_model *m, llmq_err *err);
void session_free(session *s);

/* One message from the broker. */
int session_on_message(session *s, const wire_msg *m, llmq_err *err);
/* The events of one engine_step. */
int session_on_events(session *s, const engine_event *ev, int32_t n, llmq_err *err);
/* Timers and pending sends (hello, credits, the end of a drain); call after
 * each batch of messages and each step. */
int session_tick(session *s, llmq_err *err);
/* SIGTERM or SIGINT. */
void session_stop(session *s);
/* The engine failed: every job goes back with a retryable failure naming
 * reason, then bye; the session is done. */
int session_abort(session *s, const char *reason, llmq_err *err);
/* The capacity announced in hello. */
uint32_t session_slots(const session *s);
/* bye was said (or the broker no longer knows us while stopping): exit. */
bool session_done(const session *s);
/* It stopped because the broker refused a result of it: exit failing. */
bool session_failed(const session *s);

#endif
