/* store: the broker's durable state, one SQLite file (schema: docs/SCHEMA.md).
 *
 * Owns the sqlite3 handle and its prepared statements.  Only the broker
 * writes; readers (llmq-stats, scripts) open their own connections, which WAL
 * lets run alongside the writer.
 *
 * Durability: WAL with synchronous=FULL by default, so a transaction that
 * store_commit() returned 0 for has been fsync'ed and survives power loss,
 * not only a crash of the broker.  The broker wraps everything it receives in
 * one poll-loop iteration in one transaction (store_begin .. store_commit) and
 * acknowledges only after the commit: group commit, one fsync per iteration.
 * STORE_SYNC_NORMAL (synchronous=NORMAL) skips the fsync at commit: it only
 * survives a crash of the process, and is there for benchmarks and scratch
 * runs.
 *
 * Job life: queued -> running -> done | failed | cancelled; running -> queued
 * when its worker is lost, fails it, or hands it back; queued -> cancelled.
 * Every transition goes through this module, which therefore keeps exact
 * counts of the jobs in each state without querying (store_counts_all).
 * A job fails once `max_attempts` of its attempts have ended in a fault
 * (worker lost, worker failure), or at once on a permanent failure;
 * hand-backs (worker shutting down, broker restart) are not faults.
 *
 * Results: the first result recorded wins.  A result (or failure) counts only
 * if the job is still running on that worker session and attempt; anything
 * else (job requeued after its worker was presumed dead, cancelled, already
 * done) is a no-op reported as STORE_STALE.
 *
 * Times are milliseconds since the Unix epoch (UTC), passed in by the caller
 * so that the clock stays an input (tests drive it).  Strings handed to
 * callbacks point into SQLite's memory and are valid only during the call. */
#ifndef LLMQ_BROKER_STORE_H
#define LLMQ_BROKER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/job_params.h"
#include "proto/wire.h"

typedef struct store store;

/* The schema version this build creates and understands. */
#define STORE_SCHEMA_VERSION 6

typedef enum store_sync {
    STORE_SYNC_FULL = 0, /* default: survives power loss */
    STORE_SYNC_NORMAL,   /* survives a broker crash only */
} store_sync;

typedef struct store_opts {
    int max_attempts; /* faulted attempts before a job fails; >= 1 */
    store_sync sync;
    /* An existing file without llmq's schema (empty, or a SQLite file
     * with no tables) is given one only when init is set: a database
     * truncated to 0 bytes must not come back as an empty queue. */
    bool init;
    bool skip_check; /* no PRAGMA quick_check at open */
} store_opts;

typedef enum store_state {
    STORE_QUEUED,
    STORE_RUNNING,
    STORE_DONE,
    STORE_FAILED,
    STORE_CANCELLED,
    STORE_N_STATES /* how many there are: arrays indexed by store_state */
} store_state;

/* "queued", "running", ... as written in jobs.state. */
const char *store_state_name(store_state s);

/* A job as submitted (input of store_submit) or as stored (handed to the
 * callbacks).  Exactly one of prompt / prompt_ids / messages is set.
 * Optional strings are NULL when absent. */
typedef struct store_job {
    int64_t id;               /* output */
    const char *client_key;   /* idempotency key, unique over all jobs */
    const char *owner;        /* Z85 key of the client that submitted it, or
                                 NULL (no CURVE) */
    const char *batch_id;
    const char *model;        /* only workers serving this model run it */
    int64_t submit_id;        /* store_submit_meta's id, 0 when none */
    int32_t priority;         /* higher first */
    const char *prompt;
    const uint32_t *prompt_ids;
    size_t n_prompt_ids;
    const wire_message *messages; /* a chat job's, stored as JSON */
    size_t n_messages;
    job_params params; /* one column each (proto/job_params.h); stop as JSON */
    /* Filled when read back: */
    store_state state;
    int32_t attempts;
    int64_t submitted_at;
} store_job;

/* Callbacks get pointers valid for the call only, and must not call back
 * into the store. */
typedef int (*store_job_fn)(void *ctx, const store_job *job, llmq_err *err);

/* Opens the database at path, creating it if the file is missing, checks
 * it (PRAGMA quick_check, unless opts->skip_check), migrates it to
 * STORE_SCHEMA_VERSION, and puts jobs left running by a previous broker back
 * in the queue (their attempts end as 'interrupted').  Refused, naming the
 * file and what to do: a 0-byte file or a SQLite file without tables
 * (unless opts->init), a database of another program (tables but no llmq
 * schema version), one the check finds damaged (its first findings), one of
 * a newer schema (both versions). */
int store_open(store **out, const char *path, const store_opts *opts,
               int64_t now_ms, llmq_err *err);

/* What store_open found. */
typedef struct store_open_info {
    bool created;         /* the schema was created: a new file, or opts.init */
    int64_t bytes;        /* the file's size before it was opened */
    double check_ms;      /* the quick_check's time; < 0 when skipped */
    int64_t from_version; /* the file's schema version before its migration
                             (STORE_SCHEMA_VERSION: none was needed) */
    double migrate_ms;    /* the migration's time */
} store_open_info;
store_open_info store_opened(const store *st);
/* For a broker that could not start: when store_open made the file from
 * nothing (none at its path before) its files are removed, while the lock
 * still keeps any other broker off them, and true; otherwise nothing is
 * touched.  The caller must have stored nothing in it. */
bool store_remove_if_new(store *st);

/* Space, for the broker's admission of new jobs: the bytes the database's
 * pages in use hold (free pages excluded), and the bytes free to this
 * process on the file system holding the file. */
int store_space(store *st, int64_t *db_bytes, int64_t *fs_free, llmq_err *err);

/* Holds `bytes` of disk allocated past the end of the WAL (and the
 * shared-memory index it needs), so that commits while the file system is
 * full to the last byte (another program took it) still find room: SQLite
 * writes every transaction there first.  The space is allocated, not
 * written: the files' sizes, and so what SQLite reads, do not change.
 * *held: false when the file system had not that much free, or cannot
 * allocate ahead (the reserve is then only the free space observed). */
int store_reserve(store *st, int64_t bytes, bool *held, llmq_err *err);
/* Rolls back an open transaction, finalizes, closes.  NULL is fine.  With
 * assertions on (common/check.h) it first counts the jobs table's states
 * and asserts that they are the counts kept in memory. */
void store_close(store *st);

int store_begin(store *st, llmq_err *err);
int store_commit(store *st, llmq_err *err);
void store_rollback(store *st);
bool store_in_transaction(const store *st);

/* Savepoints inside the iteration's transaction, so that one message's
 * writes (a batch of jobs) are all-or-nothing without touching the others'. */
int store_mark(store *st, llmq_err *err);
int store_mark_release(store *st, llmq_err *err);
void store_mark_undo(store *st);

int64_t store_queued(const store *st);
int64_t store_running(const store *st);

/* ---- jobs ---------------------------------------------------------------- */

typedef enum store_submit_outcome {
    STORE_NEW,
    STORE_DUPLICATE,   /* client key known, same batch: *job_id is that job */
    STORE_FULL,        /* a new job would exceed max_queued: nothing written */
    STORE_OTHER_BATCH, /* client key known in another batch (or none): *job_id
                          is that job, nothing written */
    /* Known on a job of another owner (store_job.owner), of the same batch
     * or of another: *job_id is that job, nothing written. */
    STORE_OTHER_OWNER,
    STORE_OTHER_OWNER_BATCH,
} store_submit_outcome;

/* Records a submit message's batch metadata once for all its jobs; the
 * jobs then carry *submit_id. */
int store_submit_meta(store *st, const char *batch_id, const char *meta,
                      int64_t now_ms, int64_t *submit_id, llmq_err *err);

/* Inserts a queued job unless a job with its client_key exists already.
 * max_queued <= 0 means no limit.  A key names one job of one batch: the
 * same key under another batch_id (NULL included) is STORE_OTHER_BATCH;
 * a key of another owner's job (NULL included) is STORE_OTHER_OWNER or
 * STORE_OTHER_OWNER_BATCH. */
int store_submit(store *st, const store_job *job, int64_t max_queued,
                 int64_t now_ms, int64_t *job_id, store_submit_outcome *out,
                 llmq_err *err);

/* Moves up to max queued jobs, by priority then submission order, to
 * running on worker_id, starting an attempt each, and hands each to fn.
 * Only jobs without a model or for `model` or one of the worker's aliases
 * (model NULL: any) are taken.  *claimed counts them. */
int store_claim(store *st, int64_t worker_id, const char *model, int max,
                int64_t now_ms, store_job_fn fn, void *ctx, int *claimed,
                llmq_err *err);

typedef enum store_change {
    STORE_APPLIED,
    STORE_STALE,   /* job not running on that worker/attempt: nothing done */
    STORE_UNKNOWN, /* no such job */
} store_change;

typedef struct store_result {
    const char *text;
    const uint32_t *token_ids;
    size_t n_token_ids;
    const wire_token_logprobs
        *logprobs; /* NULL unless the job asked for them */
    uint32_t n_logprobs;
    const char *finish_reason;
    int32_t prompt_tokens;
    int32_t cached_prompt_tokens; /* of those, the prefix cache's */
    int32_t generated_tokens;
    double prefill_ms; /* as measured by the worker */
    double decode_ms;
} store_result;

/* Records the result of attempt `attempt` (<= 0: the current one) of job_id
 * on worker_id; the job becomes done.  Derived columns (queue wait, tok/s,
 * total) are computed here so every reader gets the same definitions. */
int store_result_put(store *st, int64_t job_id, int64_t worker_id,
                     int32_t attempt, const store_result *res, int64_t now_ms,
                     store_change *out, llmq_err *err);

/* What a worker's result is checked against before it is recorded. */
typedef struct store_job_facts {
    bool current; /* runs on that worker session and attempt */
    int32_t max_tokens;
    bool logprobs;
    int32_t top_logprobs;
    bool token_prompt;  /* the prompt is token ids, not text */
    bool chat_prompt;   /* a chat job: its prompt is its worker's rendering */
    int64_t prompt_len; /* in ids, or in bytes of text (0 for a chat job) */
} store_job_facts;

/* The facts of job_id; current is false (the rest unset) unless attempt
 * `attempt` of it (<= 0: the current one, as for store_result_put) runs on
 * worker_id: exactly when store_result_put would record a result. */
int store_job_facts_get(store *st, int64_t job_id, int64_t worker_id,
                        int32_t attempt, store_job_facts *out, llmq_err *err);

/* Ends the current attempt of a running job with a fault (reason recorded):
 * the job is requeued, or fails when permanent or out of attempts (its error
 * then lists every attempt's reason).  *failed tells which. */
int store_fault(store *st, int64_t job_id, int64_t worker_id, int32_t attempt,
                const char *reason, bool permanent, int64_t now_ms,
                store_change *out, bool *failed, llmq_err *err);

/* Puts attempt `attempt` (<= 0: the current one) of a running job back in
 * the queue without counting a fault (a worker handing jobs back on
 * shutdown). */
int store_hand_back(store *st, int64_t job_id, int64_t worker_id,
                    int32_t attempt, const char *reason, int64_t now_ms,
                    store_change *out, llmq_err *err);

/* store_hand_back for every job running on worker_id. */
int store_hand_back_worker(store *st, int64_t worker_id, const char *reason,
                           int64_t now_ms, llmq_err *err);

/* Cancels a queued or running job.  *was tells the state it left, and
 * *worker_id the worker running it (0 if it was queued), so the caller can
 * forward the cancel. */
int store_cancel(store *st, int64_t job_id, int64_t now_ms, store_change *out,
                 store_state *was, int64_t *worker_id, llmq_err *err);

/* Ends with a fault (store_fault) every job running on worker_id; fn, when
 * not NULL, is called with each job id that failed for good. */
typedef int (*store_id_fn)(void *ctx, int64_t job_id, llmq_err *err);
int store_fault_worker(store *st, int64_t worker_id, const char *reason,
                       int64_t now_ms, store_id_fn failed_fn, void *ctx,
                       llmq_err *err);

/* ---- reading jobs back ---------------------------------------------------- */

/* Where a job stands (status replies). */
typedef struct store_brief {
    int64_t id;
    store_state state;
    int32_t attempts;
    const char *worker; /* name of the worker running or that ran it */
    const char *owner;  /* store_job's owner */
} store_brief;

typedef int (*store_brief_fn)(void *ctx, const store_brief *b, llmq_err *err);

/* fn once for job_id; *found false (and no call) if there is no such job. */
int store_brief_get(store *st, int64_t job_id, store_brief_fn fn, void *ctx,
                    bool *found, llmq_err *err);
/* fn for each job of batch_id in id order; *n counts them. */
int store_batch_briefs(store *st, const char *batch_id, store_brief_fn fn,
                       void *ctx, int64_t *n, llmq_err *err);

/* A finished job's outcome as a client sees it.  res is NULL unless the
 * state is done; error is set for failed and cancelled. */
typedef struct store_outcome {
    int64_t job_id;
    const char *client_key;
    const char *batch_id;
    store_state state;
    const char *error;
    int32_t attempts;
    const char *worker;
    const char *model; /* the model the worker serves (its hello's) */
    const store_result *res;
    double queue_wait_ms, prefill_tok_s, decode_tok_s, total_ms;
} store_outcome;

typedef int (*store_outcome_fn)(void *ctx, const store_outcome *o,
                                llmq_err *err);

/* fn once for job_id; *found false (and no call) if there is no such job. */
int store_outcome_get(store *st, int64_t job_id, store_outcome_fn fn,
                      void *ctx, bool *found, llmq_err *err);

/* Jobs per state over the whole database, indexed by store_state. */
void store_counts_all(const store *st, int64_t out[STORE_N_STATES]);

/* ---- workers ------------------------------------------------------------- */

typedef struct store_worker {
    const char *name; /* the worker's own id, e.g. host/gpu0 */
    const char *host;
    int64_t pid;
    const char *gpu_name; /* NULL on the CPU engine */
    int32_t gpu_index;    /* -1 on the CPU engine */
    const char *gpu_uuid;
    const char *model;
    const char *const *aliases; /* other names jobs may route to it by */
    size_t n_aliases;
    const char *engine;
    int32_t slots;
    const char *public_key; /* Z85 CURVE key it connected with, or NULL */
} store_worker;

/* One row per worker session (each hello): a worker presumed dead that
 * comes back is a new session, so its old session's results stay stale. */
int store_worker_add(store *st, const store_worker *w, int64_t now_ms,
                     int64_t *worker_id, llmq_err *err);
/* *seen: some worker session serving model (or answering to it as an
 * alias) was last heard from at or
 * after since_ms (sessions still connected count through the pool, not
 * here: their last_seen lags). */
int store_model_seen(store *st, const char *model, int64_t since_ms,
                     bool *seen, llmq_err *err);
/* *heard: some worker session, whatever its model, was last heard from at
 * or after since_ms (connected ones count through the pool, as above). */
int store_worker_heard(store *st, int64_t since_ms, bool *heard, llmq_err *err);
/* state: "alive", "gone" (left cleanly), "lost" (presumed dead). */
int store_worker_set(store *st, int64_t worker_id, const char *state,
                     int64_t now_ms, llmq_err *err);

/* The CURVE key worker id `name` is bound to, into key (CURVE_Z85_LEN + 1
 * bytes); *found false when it is bound to none. */
int store_worker_key(store *st, const char *name, char *key, bool *found,
                     llmq_err *err);
/* Binds name to key (Z85), replacing any earlier binding. */
int store_worker_key_bind(store *st, const char *name, const char *key,
                          int64_t now_ms, llmq_err *err);

#endif
