/* llmq: client library for the llmq job broker (link with `pkg-config --libs llmq`).
 *
 * Submit batches of LLM generation jobs, wait for their results as they
 * complete, query their state, cancel them, read broker statistics.  The
 * wire protocol is described in docs/PROTOCOL.md; this library is one
 * client of it (any language with ZeroMQ and msgpack can be another).
 *
 * Conventions: every function that can fail returns 0 on success and -1 on
 * failure, after filling the caller's llmq_error (code, field, message); no
 * function prints or exits.  A client is one connection used from one thread
 * at a time.  Strings and arrays handed out by the library stay valid for
 * the documented span (until the next call on the same object, or until the
 * reply is freed); copy what you keep. */
#ifndef LLMQ_H
#define LLMQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the broker's (docs/PROTOCOL.md §3, same order), then the
 * library's own. */
/* clang-format off */
typedef enum llmq_code {
    LLMQ_OK = 0,
    LLMQ_E_MALFORMED, LLMQ_E_VERSION, LLMQ_E_UNKNOWN_TYPE, LLMQ_E_MISSING_FIELD,
    LLMQ_E_UNKNOWN_FIELD, LLMQ_E_BAD_TYPE, LLMQ_E_BAD_VALUE, LLMQ_E_TOO_LARGE,
    LLMQ_E_UNKNOWN_JOB, LLMQ_E_UNKNOWN_BATCH, LLMQ_E_QUEUE_FULL, LLMQ_E_UNKNOWN_WORKER,
    LLMQ_E_SHUTTING_DOWN, LLMQ_E_INTERNAL, LLMQ_E_UNAVAILABLE, LLMQ_E_WORKER_IN_USE,
    LLMQ_E_FORBIDDEN, LLMQ_E_BAD_RESULT,
    LLMQ_E_TIMEOUT = 100,   /* no reply from the broker in time */
    LLMQ_E_TRANSPORT,       /* ZeroMQ failed (bad endpoint, ...) */
    LLMQ_E_PROTOCOL,        /* the broker sent something this library cannot read */
    LLMQ_E_USAGE            /* a bad argument to this library */
} llmq_code;
/* clang-format on */

typedef struct llmq_error {
    llmq_code code;
    char field[128];     /* the request field at fault ("jobs[3].temperature"), or "" */
    char message[512];   /* what went wrong, starting with the field when there is one */
} llmq_error;

/* "bad_value", "timeout", ...; never NULL. */
const char *llmq_code_name(llmq_code code);

typedef enum llmq_state {
    LLMQ_STATE_QUEUED = 1, LLMQ_STATE_RUNNING, LLMQ_STATE_DONE, LLMQ_STATE_FAILED,
    LLMQ_STATE_CANCELLED
} llmq_state;

/* "queued", "running", "done", "failed", "cancelled"; "?" otherwise. */
const char *llmq_state_name(llmq_state state);

/* ---- connection ---------------------------------------------------------------- */
typedef struct llmq_client llmq_client;

/* Connects to the broker's client endpoint (e.g. "tcp://127.0.0.1:5555").
 * ZeroMQ connects lazily: an unreachable broker shows up as LLMQ_E_TIMEOUT
 * on the first request. */
int llmq_connect(llmq_client **out, const char *endpoint, llmq_error *err);

/* ZeroMQ CURVE keys, for a broker that requires them (docs/PROTOCOL.md,
 * "Security"): Z85 text, 40 characters each. */
typedef struct llmq_curve {
    char broker_public[41]; /* the broker's public key */
    char public_key[41];    /* this client's, derived from secret_key */
    char secret_key[41];
} llmq_curve;

/* Reads the broker's public key file and this client's secret key file
 * (as written by llmq-keygen) into *keys. */
int llmq_curve_load(llmq_curve *keys, const char *broker_key_file,
                    const char *secret_file, llmq_error *err);

/* llmq_connect over CURVE with keys (NULL: as llmq_connect).  A broker that
 * refuses the keys never answers: requests end with LLMQ_E_TIMEOUT. */
int llmq_connect_curve(llmq_client **out, const char *endpoint,
                       const llmq_curve *keys, llmq_error *err);

/* How long a request waits for its reply (default LLMQ_DEFAULT_TIMEOUT_MS;
 * < 0: forever). */
#define LLMQ_DEFAULT_TIMEOUT_MS 30000
void llmq_set_timeout(llmq_client *c, int timeout_ms);

/* The lease of this client's waits (see llmq_wait_begin): the broker is
 * asked for a heartbeat every heartbeat_ms (default 1000; 100..3600000), and
 * a wait that hears nothing for dead_after_ms (default 5000; more than
 * heartbeat_ms) presumes its broker gone and sends itself again.
 * heartbeat_ms 0: no lease, a wait lost with its broker stays silent.
 * For waits begun after the call. */
int llmq_set_wait_lease(llmq_client *c, int heartbeat_ms, int dead_after_ms, llmq_error *err);

void llmq_close(llmq_client *c);

/* ---- submit ----------------------------------------------------------------------- */

/* One message of a chat job: the worker renders a chat job's messages with
 * its model's chat template (docs/PROTOCOL.md, "Chat jobs"). */
typedef struct llmq_message {
    const char *role;    /* "system", "user", "assistant", or a role the template knows */
    const char *content; /* UTF-8 text */
} llmq_message;

/* A job's prompt is exactly one of prompt, tokens and messages. */
typedef struct llmq_job {
    const char *key;            /* optional client key: resubmitting the same key is a no-op */
    const char *prompt;         /* UTF-8 text, or NULL */
    const uint32_t *tokens;     /* prompt token ids, or NULL */
    size_t n_tokens;
    const llmq_message *messages; /* a chat job's messages (1..4096), or NULL */
    size_t n_messages;
    uint32_t max_tokens;        /* default 256 */
    float temperature;          /* default 0: greedy */
    int32_t top_k;              /* default 0: off */
    float top_p;                /* default 1: off */
    float min_p;                /* default 0: off */
    float repeat_penalty;       /* default 1: off */
    int32_t repeat_last_n;      /* default 64; -1: whole history */
    float presence_penalty;     /* default 0 */
    float frequency_penalty;    /* default 0 */
    uint64_t seed;              /* default 0 */
    bool ignore_eos;            /* default false */
    bool logprobs;              /* default false: each generated token's log-probability */
    int32_t top_logprobs;       /* 0..20, default 0: and the n likeliest tokens' (needs logprobs) */
    const char *json_schema;    /* default NULL; or a JSON schema (JSON text, OpenAI's strict
                                   subset) the output follows */
    bool json_object;           /* default false: the output is a JSON object (not with a schema) */
    const char *const *stop;    /* stop strings */
    size_t n_stop;
    int32_t priority;           /* -1000..1000, default 0, higher first */
    const char *model;          /* optional model name */
} llmq_job;

/* Sets every field to its default (docs/PROTOCOL.md §4). */
void llmq_job_init(llmq_job *job);

/* Checks a job as the broker will (types, ranges, lengths, UTF-8, one of
 * prompt, tokens and messages) without sending anything; err->field names
 * the job field ("temperature", "stop[2]", "messages[1].role"). */
int llmq_job_check(const llmq_job *job, llmq_error *err);

/* Submits n jobs as one batch (batch and meta may be NULL).  On success
 * ids[i] is job i's id and, when existing is not NULL, existing[i] says the
 * key already named a job.  The jobs are durable in the broker when this
 * returns.  Large batches travel as several submit messages (each atomic);
 * if one fails, the earlier ones stay submitted, with their ids[i] (and
 * existing[i]) set and the rest of ids left as they were: resubmit the
 * rest, or all of them with keys. */
int llmq_submit(llmq_client *c, const char *batch, const char *meta, const llmq_job *jobs,
                size_t n, uint64_t *ids, bool *existing, llmq_error *err);

/* ---- which jobs ---------------------------------------------------------------------- */
typedef struct llmq_select {
    const uint64_t *ids;        /* job ids, or NULL */
    size_t n_ids;
    const char *batch;          /* a batch id, used when ids is NULL */
} llmq_select;

/* ---- results ------------------------------------------------------------------------ */

/* A token and its log-probability: ln of its softmax probability under the
 * model's raw logits, before penalties, temperature and truncation
 * (docs/PROTOCOL.md); -9999 for "as good as impossible". */
typedef struct llmq_logprob {
    uint32_t token;
    float logprob;
    const uint8_t *bytes; /* what the token stands for: possibly part of a UTF-8
                             character; a control token's name (e.g. "</s>") */
    size_t n_bytes;
} llmq_logprob;

/* One generated token's: its own, and the job's top_logprobs likeliest. */
typedef struct llmq_token_logprobs {
    llmq_logprob chosen;
    const llmq_logprob *top; /* most likely first */
    size_t n_top;
} llmq_token_logprobs;

typedef struct llmq_result {
    uint64_t id;
    llmq_state state;           /* DONE, FAILED or CANCELLED */
    uint32_t attempt;
    const char *key;            /* or NULL */
    const char *batch;          /* or NULL */
    const char *text;           /* DONE: generated text; else NULL */
    const uint32_t *tokens;     /* DONE: generated tokens */
    size_t n_tokens;
    const llmq_token_logprobs *logprobs; /* DONE, if the job asked: one per token; else NULL */
    size_t n_logprobs;
    const char *finish;         /* DONE: "stop", "length" or "context"; else NULL */
    uint32_t prompt_tokens;
    uint32_t gen_tokens;
    double queue_wait_ms, prefill_ms, prefill_tok_s, decode_ms, decode_tok_s, total_ms;
    const char *worker;         /* DONE: the worker that produced it */
    const char *model;          /* DONE: the model it ran (the worker's model name) */
    const char *error;          /* FAILED / CANCELLED: why */
} llmq_result;

typedef struct llmq_wait llmq_wait;

/* Starts waiting for the selected jobs; results are pushed by the broker as
 * jobs complete (already-final jobs at once).  timeout_ms < 0: no limit.
 *
 * A wait outlives its broker: when the broker is killed, restarted or
 * stopped (on the same database), the wait notices the silence of its
 * lease (llmq_set_wait_lease), reconnects (ZeroMQ retries the connection,
 * backing off to once a second) and sends itself again, for the jobs not
 * reported yet, until the broker answers or the timeout passes.  Each job's
 * result is handed out once, even when the broker sends it twice.  A wait
 * on a batch selects the batch's jobs when it is sent: once more each time
 * it is sent again.  With a broker older than leases it waits as before. */
int llmq_wait_begin(llmq_client *c, const llmq_select *sel, int timeout_ms, llmq_wait **out,
                    llmq_error *err);

enum { LLMQ_WAIT_IDLE = 0, LLMQ_WAIT_RESULT = 1, LLMQ_WAIT_END = 2 };

/* The next event, waiting at most step_ms: LLMQ_WAIT_RESULT (*out filled,
 * valid until the next call on w), LLMQ_WAIT_IDLE (nothing arrived in
 * step_ms, or the wait just lost its broker: time to redraw a progress bar),
 * LLMQ_WAIT_END (every selected job was reported, or the wait timed out: see
 * llmq_wait_summary), or -1. */
int llmq_wait_next(llmq_wait *w, int step_ms, llmq_result *out, llmq_error *err);

/* After LLMQ_WAIT_END: jobs final, jobs still pending, whether it timed out. */
void llmq_wait_summary(const llmq_wait *w, size_t *done, size_t *pending, bool *timed_out);

/* How a wait stands with its broker, for progress output. */
typedef struct llmq_wait_health {
    bool broker_lost;     /* silent past the lease, or stopping: the wait was sent
                             again, to whichever broker answers on the endpoint */
    bool broker_stopping; /* lost because it said it was stopping (SIGTERM) */
    double silent_ms;     /* since the broker last said anything about the wait */
    uint32_t rewaits;     /* times the wait was sent again */
} llmq_wait_health;

void llmq_wait_get_health(const llmq_wait *w, llmq_wait_health *out);

void llmq_wait_free(llmq_wait *w);

/* ---- status, cancel, stats ----------------------------------------------------------- */
typedef struct llmq_counts {
    uint64_t queued, running, done, failed, cancelled;
} llmq_counts;

typedef struct llmq_job_status {
    uint64_t id;
    llmq_state state;
    uint32_t attempts;
    const char *worker;         /* or NULL */
} llmq_job_status;

typedef struct llmq_status {
    llmq_counts counts;
    const llmq_job_status *jobs;
    size_t n_jobs;
} llmq_status;

/* Current state of the selected jobs; free the reply with llmq_status_free. */
int llmq_get_status(llmq_client *c, const llmq_select *sel, llmq_status **out, llmq_error *err);

/* Cancels the selected queued or running jobs; the reply lists every
 * selected job's state afterwards. */
int llmq_cancel(llmq_client *c, const llmq_select *sel, llmq_status **out, llmq_error *err);

void llmq_status_free(llmq_status *s);

typedef struct llmq_worker_stat {
    const char *worker, *host, *gpu_name, *engine;
    int32_t gpu_index;          /* -1: CPU */
    uint32_t slots, busy;
    uint64_t jobs_done, tokens_done;
} llmq_worker_stat;

typedef struct llmq_stats {
    llmq_counts counts;
    const llmq_worker_stat *workers;
    size_t n_workers;
} llmq_stats;

int llmq_get_stats(llmq_client *c, llmq_stats **out, llmq_error *err);
void llmq_stats_free(llmq_stats *s);

#ifdef __cplusplus
}
#endif

#endif
