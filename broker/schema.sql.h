/* schema.sql.h: the migrations of the broker's database, oldest first.
 *
 * Included by store.c, and by test-store, which makes the databases of
 * older versions with it.  Migration i (0-based) takes a database from
 * user_version i to i + 1; a released migration is never edited, a change
 * is a new entry.  docs/SCHEMA.md describes the result. */
#ifndef LLMQ_BROKER_SCHEMA_SQL_H
#define LLMQ_BROKER_SCHEMA_SQL_H

/* SQL laid out by hand, to the end of the migrations. */
/* clang-format off */
/* The columns of jobs as migration 1 makes them, with which the table that
 * migration 5 makes starts. */
#define JOBS_V1_COLUMNS                                                          \
    "  id                INTEGER PRIMARY KEY AUTOINCREMENT,"                     \
    "  client_key        TEXT UNIQUE,"                                           \
    "  batch_id          TEXT,"                                                  \
    "  state             TEXT NOT NULL DEFAULT 'queued' CHECK (state IN"         \
    "                    ('queued', 'running', 'done', 'failed', 'cancelled'))," \
    "  priority          INTEGER NOT NULL DEFAULT 0,"                            \
    "  model             TEXT,"                                                  \
    "  prompt            TEXT,"                                                  \
    "  prompt_ids        TEXT,"                                                  \
    "  max_tokens        INTEGER NOT NULL,"                                      \
    "  temperature       REAL NOT NULL,"                                         \
    "  top_k             INTEGER NOT NULL,"                                      \
    "  top_p             REAL NOT NULL,"                                         \
    "  min_p             REAL NOT NULL,"                                         \
    "  repeat_penalty    REAL NOT NULL,"                                         \
    "  repeat_last_n     INTEGER NOT NULL,"                                      \
    "  presence_penalty  REAL NOT NULL,"                                         \
    "  frequency_penalty REAL NOT NULL,"                                         \
    "  seed              INTEGER NOT NULL,"                                      \
    "  ignore_eos        INTEGER NOT NULL DEFAULT 0,"                            \
    "  stop              TEXT,"                                                  \
    "  submit_id         INTEGER REFERENCES submits (id),"                       \
    "  submitted_at      INTEGER NOT NULL,"                                      \
    "  started_at        INTEGER,"                                               \
    "  finished_at       INTEGER,"                                               \
    "  attempts          INTEGER NOT NULL DEFAULT 0,"                            \
    "  faults            INTEGER NOT NULL DEFAULT 0,"                            \
    "  worker_id         INTEGER REFERENCES workers (id),"                       \
    "  error             TEXT,"

/* The indexes of jobs: made with the table (1), and again when migration 5
 * rebuilds it. */
#define JOBS_INDEXES                                                           \
    "CREATE INDEX jobs_by_batch ON jobs (batch_id, id) WHERE batch_id IS NOT " \
    "NULL;"                                                                    \
    "CREATE INDEX jobs_queue ON jobs (priority DESC, id) WHERE state = "       \
    "'queued';"                                                                \
    "CREATE INDEX jobs_running ON jobs (worker_id) WHERE state = 'running';"

/* The columns of jobs at version 4, which migration 5 copies. */
#define JOBS_V4_COLUMNS                                                         \
    "id, client_key, batch_id, state, priority, model, prompt, prompt_ids,"     \
    " max_tokens, temperature, top_k, top_p, min_p, repeat_penalty,"            \
    " repeat_last_n, presence_penalty, frequency_penalty, seed, ignore_eos,"    \
    " stop, submit_id, submitted_at, started_at, finished_at, attempts,"        \
    " faults, worker_id, error, logprobs, top_logprobs, owner, json_schema,"    \
    " json_object"

/* The accounting views, as migration 1 makes them (more: nothing) and as
 * migration 6 makes them again with columns added at the end (more: ", "
 * and those columns; v_worker_stats's done_more: those its done rows add).
 *
 * Wall time of a batch runs from its first submit to its last finish;
 * tok/s over that wall time is what the batch cost, the per-job means are
 * what one job saw. */
#define V_BATCH_STATS(more)                                                    \
    "CREATE VIEW v_batch_stats AS SELECT"                                      \
    "  j.batch_id,"                                                            \
    "  count(*) AS jobs,"                                                      \
    "  sum(j.state = 'queued') AS queued,"                                     \
    "  sum(j.state = 'running') AS running,"                                   \
    "  sum(j.state = 'done') AS done,"                                         \
    "  sum(j.state = 'failed') AS failed,"                                     \
    "  sum(j.state = 'cancelled') AS cancelled,"                               \
    "  coalesce(sum(r.prompt_tokens), 0) AS prompt_tokens,"                    \
    "  coalesce(sum(r.generated_tokens), 0) AS generated_tokens,"              \
    "  min(j.submitted_at) AS first_submitted_at,"                             \
    "  max(j.finished_at) AS last_finished_at,"                                \
    "  max(j.finished_at) - min(j.submitted_at) AS wall_ms,"                   \
    "  1000.0 * sum(r.generated_tokens)"                                       \
    "    / nullif(max(j.finished_at) - min(j.submitted_at), 0) AS gen_tok_s,"  \
    "  avg(r.queue_wait_ms) AS avg_queue_wait_ms,"                             \
    "  avg(r.prefill_tok_s) AS avg_prefill_tok_s,"                             \
    "  avg(r.decode_tok_s) AS avg_decode_tok_s,"                               \
    "  avg(r.total_ms) AS avg_total_ms" more                                   \
    " FROM jobs j LEFT JOIN results r ON r.job_id = j.id"                      \
    " GROUP BY j.batch_id;"

/* A worker row is one session (one hello).  Jobs overlap inside a
 * continuous-batching engine, so busy time is the span from its first
 * attempt's start to its last result, not a sum of per-job times. */
#define V_WORKER_STATS(done_more, more)                                        \
    "CREATE VIEW v_worker_stats AS"                                            \
    " WITH span AS (SELECT worker_id, min(started_at) AS first_started_at"     \
    "               FROM attempts GROUP BY worker_id),"                        \
    "      done AS (SELECT worker_id, count(*) AS jobs,"                       \
    "               sum(prompt_tokens) AS prompt_tokens,"                      \
    "               sum(generated_tokens) AS generated_tokens,"                \
    "               max(created_at) AS last_result_at,"                        \
    "               avg(prefill_tok_s) AS avg_prefill_tok_s,"                  \
    "               avg(decode_tok_s) AS avg_decode_tok_s" done_more           \
    "               FROM results GROUP BY worker_id)"                          \
    " SELECT w.id AS worker_id, w.name, w.host, w.pid, w.gpu_index,"           \
    "  w.gpu_name, w.gpu_uuid, w.model, w.engine, w.slots, w.state,"           \
    "  w.first_seen, w.last_seen,"                                             \
    "  coalesce(d.jobs, 0) AS jobs_done,"                                      \
    "  coalesce(d.prompt_tokens, 0) AS prompt_tokens,"                         \
    "  coalesce(d.generated_tokens, 0) AS generated_tokens,"                   \
    "  s.first_started_at, d.last_result_at,"                                  \
    "  d.last_result_at - s.first_started_at AS busy_ms,"                      \
    "  1000.0 * d.generated_tokens"                                            \
    "    / nullif(d.last_result_at - s.first_started_at, 0) AS gen_tok_s,"     \
    "  d.avg_prefill_tok_s, d.avg_decode_tok_s" more                           \
    " FROM workers w LEFT JOIN span s ON s.worker_id = w.id"                   \
    " LEFT JOIN done d ON d.worker_id = w.id;"

/* Sessions of the same GPU (a worker restarted on it) add up here. */
#define V_GPU_STATS(more)                                                      \
    "CREATE VIEW v_gpu_stats AS SELECT"                                        \
    "  host, gpu_index, max(gpu_name) AS gpu_name, max(gpu_uuid) AS gpu_uuid," \
    "  count(*) AS sessions,"                                                  \
    "  sum(jobs_done) AS jobs_done,"                                           \
    "  sum(prompt_tokens) AS prompt_tokens,"                                   \
    "  sum(generated_tokens) AS generated_tokens,"                             \
    "  sum(busy_ms) AS busy_ms,"                                               \
    "  1000.0 * sum(generated_tokens) / nullif(sum(busy_ms), 0) AS gen_tok_s"  \
    more " FROM v_worker_stats GROUP BY host, gpu_index;"

/* The prefix hit rate of a set of results: of their prompt tokens, the
 * share their workers' prefix caches held (NULL: no prompt tokens). */
#define PREFIX_HIT_RATE(cached, prompt) \
    "1.0 * " cached " / nullif(" prompt ", 0) AS prefix_hit_rate"

static const char *const store_migrations[] = {
    /* 1: jobs, results, workers, attempts and the accounting views. */
    "CREATE TABLE workers ("
    "  id          INTEGER PRIMARY KEY,"
    "  name        TEXT NOT NULL,"
    "  host        TEXT NOT NULL,"
    "  pid         INTEGER NOT NULL,"
    "  gpu_name    TEXT,"
    "  gpu_index   INTEGER NOT NULL DEFAULT -1,"
    "  gpu_uuid    TEXT,"
    "  model       TEXT,"
    "  engine      TEXT,"
    "  slots       INTEGER NOT NULL,"
    "  first_seen  INTEGER NOT NULL,"
    "  last_seen   INTEGER NOT NULL,"
    "  jobs_done   INTEGER NOT NULL DEFAULT 0,"
    "  tokens_done INTEGER NOT NULL DEFAULT 0,"
    "  state       TEXT NOT NULL DEFAULT 'alive'"
    "              CHECK (state IN ('alive', 'gone', 'lost'))"
    ");"
    "CREATE TABLE submits ("
    "  id          INTEGER PRIMARY KEY,"
    "  batch_id    TEXT,"
    "  meta        TEXT NOT NULL,"
    "  received_at INTEGER NOT NULL"
    ");"
    "CREATE TABLE jobs ("
    JOBS_V1_COLUMNS
    "  CHECK ((prompt IS NULL) <> (prompt_ids IS NULL))"
    ");"
    JOBS_INDEXES
    "CREATE TABLE results ("
    "  job_id           INTEGER PRIMARY KEY REFERENCES jobs (id),"
    "  text             TEXT NOT NULL,"
    "  token_ids        TEXT,"
    "  finish_reason    TEXT NOT NULL,"
    "  prompt_tokens    INTEGER NOT NULL,"
    "  generated_tokens INTEGER NOT NULL,"
    "  queue_wait_ms    INTEGER NOT NULL,"
    "  prefill_ms       REAL NOT NULL,"
    "  prefill_tok_s    REAL,"
    "  decode_ms        REAL NOT NULL,"
    "  decode_tok_s     REAL,"
    "  total_ms         INTEGER NOT NULL,"
    "  worker_id        INTEGER NOT NULL REFERENCES workers (id),"
    "  attempt          INTEGER NOT NULL,"
    "  created_at       INTEGER NOT NULL"
    ");"
    "CREATE INDEX results_by_worker ON results (worker_id);"
    "CREATE TABLE attempts ("
    "  job_id     INTEGER NOT NULL REFERENCES jobs (id),"
    "  attempt    INTEGER NOT NULL,"
    "  worker_id  INTEGER NOT NULL REFERENCES workers (id),"
    "  started_at INTEGER NOT NULL,"
    "  ended_at   INTEGER,"
    "  outcome    TEXT CHECK (outcome IN ('done', 'lost', 'failed',"
    "             'returned', 'interrupted', 'cancelled')),"
    "  reason     TEXT,"
    "  PRIMARY KEY (job_id, attempt)"
    ") WITHOUT ROWID;"
    V_BATCH_STATS("")
    V_WORKER_STATS("", "")
    V_GPU_STATS(""),

    /* 2: log-probabilities: asked for per job, reported per result (the
     * packed records of broker/lpblob.h). */
    "ALTER TABLE jobs ADD COLUMN logprobs INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN top_logprobs INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE results ADD COLUMN logprobs BLOB;",

    /* 3: identities under CURVE: the client key that submitted a job (its
     * owner), the key each worker session connected with, and the key each
     * worker id is bound to (the first key it connected with). */
    "ALTER TABLE jobs ADD COLUMN owner TEXT;"
    "ALTER TABLE workers ADD COLUMN public_key TEXT;"
    "CREATE TABLE worker_keys ("
    "  name       TEXT PRIMARY KEY,"
    "  public_key TEXT NOT NULL,"
    "  bound_at   INTEGER NOT NULL"
    ") WITHOUT ROWID;",

    /* 4: structured outputs: the JSON schema a job's output follows (its
     * text, as submitted), or any JSON object; the other model names a
     * worker answers to (a JSON array of strings). */
    "ALTER TABLE jobs ADD COLUMN json_schema TEXT;"
    "ALTER TABLE jobs ADD COLUMN json_object INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE workers ADD COLUMN aliases TEXT;",

    /* 5: chat jobs, whose messages (a JSON array of {"role", "content"})
     * stand instead of a prompt or its token ids.  SQLite cannot change a
     * table's CHECK in place, so jobs is rebuilt as its documentation says
     * (ALTER TABLE, "making other kinds of table schema changes"), with the
     * migration's foreign keys off: a new table, every row copied with its
     * id, the AUTOINCREMENT counter carried over (ids are never reused,
     * even those of archived jobs), the old table dropped, the new one
     * renamed and its indexes made again.  The legacy rename leaves the
     * view v_batch_stats as it is, naming "jobs", which is the new table
     * once renamed (the checking rename would refuse the view for naming a
     * table that is, for a moment, not there). */
    "CREATE TABLE jobs_v5 ("
    JOBS_V1_COLUMNS
    "  logprobs          INTEGER NOT NULL DEFAULT 0,"
    "  top_logprobs      INTEGER NOT NULL DEFAULT 0,"
    "  owner             TEXT,"
    "  json_schema       TEXT,"
    "  json_object       INTEGER NOT NULL DEFAULT 0,"
    "  messages          TEXT,"
    "  CHECK ((prompt IS NOT NULL) + (prompt_ids IS NOT NULL)"
    "         + (messages IS NOT NULL) = 1)"
    ");"
    "INSERT INTO jobs_v5 (" JOBS_V4_COLUMNS ") SELECT " JOBS_V4_COLUMNS
    " FROM jobs;"
    "DELETE FROM sqlite_sequence WHERE name = 'jobs_v5';"
    "UPDATE sqlite_sequence SET name = 'jobs_v5' WHERE name = 'jobs';"
    "PRAGMA legacy_alter_table = ON;"
    "DROP TABLE jobs;"
    "ALTER TABLE jobs_v5 RENAME TO jobs;"
    JOBS_INDEXES
    "PRAGMA legacy_alter_table = OFF;",

    /* 6: cached prompt tokens: of each result's prompt tokens, those its
     * worker's prefix cache held (0 for results recorded before, and for
     * those of workers that do not report them); the views made again with
     * them and the prefix hit rate (a view cannot gain a column in place). */
    "ALTER TABLE results ADD COLUMN cached_prompt_tokens INTEGER NOT NULL DEFAULT 0;"
    "DROP VIEW v_gpu_stats;"
    "DROP VIEW v_worker_stats;"
    "DROP VIEW v_batch_stats;"
    V_BATCH_STATS(","
                  "  coalesce(sum(r.cached_prompt_tokens), 0) AS cached_prompt_tokens,"
                  "  " PREFIX_HIT_RATE("sum(r.cached_prompt_tokens)", "sum(r.prompt_tokens)"))
    V_WORKER_STATS(", sum(cached_prompt_tokens) AS cached_prompt_tokens",
                   ","
                   "  coalesce(d.cached_prompt_tokens, 0) AS cached_prompt_tokens,"
                   "  " PREFIX_HIT_RATE("d.cached_prompt_tokens", "d.prompt_tokens"))
    V_GPU_STATS(","
                "  sum(cached_prompt_tokens) AS cached_prompt_tokens,"
                "  " PREFIX_HIT_RATE("sum(cached_prompt_tokens)", "sum(prompt_tokens)")),
};
/* clang-format on */

#endif
