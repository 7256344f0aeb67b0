#include "broker/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "broker/checkpointer.h"
#include "broker/lpblob.h"
#include "broker/schema.sql.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/grow.h"
#include "common/json.h"
#include "proto/curve.h"

#define N_MIGRATIONS (sizeof store_migrations / sizeof store_migrations[0])
_Static_assert(N_MIGRATIONS == STORE_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- rows ------------------------------------------------------------------
 * The columns a statement binds or reads and the struct fields they come
 * from or go to are listed once, as X(column, kind) lists: the SQL column
 * lists, the named parameters (":column") and the descriptors (col) that
 * bind_row / read_row walk are all expanded from them, so that no column is
 * bound or read by a number written by hand.  Reads take the descriptor's
 * columns first, in its order; a statement's other columns follow, numbered
 * by an enum that starts at the descriptor's count. */

typedef enum col_kind {
    COL_I32,
    COL_I64,
    COL_U32,
    COL_U64,
    COL_F32,
    COL_F64,
    COL_BOOL,
    COL_TEXT
} col_kind;

typedef struct col {
    const char *param; /* the parameter it binds (":name"); read-only rows: the
                          column */
    col_kind kind;
    size_t off; /* of the field in the row's struct */
} col;

#define SQL_NAME(name, ...) #name ", "
#define SQL_PARAM(name, ...) ":" #name ", "
#define COUNT_ONE(...) +1
/* A descriptor's entries, by name (the SQL parameter :name) or by expression;
 * their offsets are into COLS_OF, defined just before each descriptor. */
#define NAMED_COL(name, kind, ...) \
    {":" #name, COL_##kind, offsetof(COLS_OF, name)},
#define EXPR_COL(expr, field, kind) \
    {expr, COL_##kind, offsetof(COLS_OF, field)},

/* A job as submitted: store_job fields, then its job_params. */
/* clang-format off */
#define JOB_IN_ROW(X)   \
    X(client_key, TEXT) \
    X(owner, TEXT)      \
    X(batch_id, TEXT)   \
    X(model, TEXT)      \
    X(priority, I32)    \
    X(prompt, TEXT)
/* clang-format on */
/* Read back besides those. */
/* clang-format off */
#define JOB_OUT_ROW(X)   \
    X(id, I64)           \
    X(submit_id, I64)    \
    X(attempts, I32)     \
    X(submitted_at, I64)
/* clang-format on */

#define COLS_OF store_job
static const col JOB_IN_COLS[] = {JOB_IN_ROW(NAMED_COL)};
static const col JOB_OUT_COLS[] = {JOB_OUT_ROW(NAMED_COL)};
#undef COLS_OF
#define COLS_OF job_params
static const col PARAM_COLS[] = {JOB_PARAMS(NAMED_COL)};
#undef COLS_OF
enum {
    N_JOB_IN = 0 JOB_IN_ROW(COUNT_ONE),
    N_JOB_OUT = 0 JOB_OUT_ROW(COUNT_ONE),
    N_PARAMS = 0 JOB_PARAMS(COUNT_ONE)
};
/* S_JOB_READ's columns after the three descriptors'. */
enum {
    JR_PROMPT_IDS = N_JOB_IN + N_PARAMS + N_JOB_OUT,
    JR_MESSAGES,
    JR_STOP,
    JR_JSON_SCHEMA,
    JR_STATE
};

/* A worker's result: store_result's fields (token_ids apart). */
/* clang-format off */
#define RESULT_ROW(X)        \
    X(text, TEXT)            \
    X(finish_reason, TEXT)   \
    X(prompt_tokens, I32)    \
    X(generated_tokens, I32) \
    X(prefill_ms, F64)       \
    X(decode_ms, F64)        \
    X(cached_prompt_tokens, I32)
/* clang-format on */
#define SQL_RESULT(name, kind) "r." #name ", "
#define COLS_OF store_result
static const col RESULT_COLS[] = {RESULT_ROW(NAMED_COL)};
#undef COLS_OF
enum { N_RESULT = 0 RESULT_ROW(COUNT_ONE) };

/* Rows that are only read, from expressions: X(expression, field, kind). */
#define EXPR_SQL(expr, field, kind) expr ", "
/* clang-format off */
#define OUTCOME_ROW(X)                       \
    X("j.id", job_id, I64)                   \
    X("j.client_key", client_key, TEXT)      \
    X("j.batch_id", batch_id, TEXT)          \
    X("j.error", error, TEXT)                \
    X("j.attempts", attempts, I32)           \
    X("w.name", worker, TEXT)                \
    X("w.model", model, TEXT)                \
    X("r.queue_wait_ms", queue_wait_ms, F64) \
    X("r.prefill_tok_s", prefill_tok_s, F64) \
    X("r.decode_tok_s", decode_tok_s, F64)   \
    X("r.total_ms", total_ms, F64)
/* clang-format on */
#define COLS_OF store_outcome
static const col OUTCOME_COLS[] = {OUTCOME_ROW(EXPR_COL)};
#undef COLS_OF
enum { N_OUTCOME = 0 OUTCOME_ROW(COUNT_ONE) };
enum { OC_STATE = N_OUTCOME + N_RESULT, OC_TOKEN_IDS, OC_LOGPROBS };

/* clang-format off */
#define BRIEF_ROW(X)               \
    X("j.id", id, I64)             \
    X("j.attempts", attempts, I32) \
    X("w.name", worker, TEXT)      \
    X("j.owner", owner, TEXT)
/* clang-format on */
#define COLS_OF store_brief
static const col BRIEF_COLS[] = {BRIEF_ROW(EXPR_COL)};
#undef COLS_OF
enum { N_BRIEF = 0 BRIEF_ROW(COUNT_ONE), BR_STATE = N_BRIEF };

/* Where a job stands now (job_current). */
typedef struct job_now {
    store_state state;
    int64_t worker_id;
    int32_t attempt;
    int32_t faults;
} job_now;

/* clang-format off */
#define NOW_ROW(X)                              \
    X("coalesce(worker_id, 0)", worker_id, I64) \
    X("attempts", attempt, I32)                 \
    X("faults", faults, I32)
/* clang-format on */
#define COLS_OF job_now
static const col NOW_COLS[] = {NOW_ROW(EXPR_COL)};
#undef COLS_OF
enum { N_NOW = 0 NOW_ROW(COUNT_ONE), JC_STATE = N_NOW };

/* clang-format off */
#define WORKER_ROW(X) \
    X(name, TEXT)     \
    X(host, TEXT)     \
    X(pid, I64)       \
    X(gpu_name, TEXT) \
    X(gpu_index, I32) \
    X(gpu_uuid, TEXT) \
    X(model, TEXT)    \
    X(engine, TEXT)   \
    X(slots, I32)     \
    X(public_key, TEXT)
/* clang-format on */
#define COLS_OF store_worker
static const col WORKER_COLS[] = {WORKER_ROW(NAMED_COL)};
#undef COLS_OF

/* A text prompt's length is in bytes (length() of TEXT counts
 * characters). */
/* clang-format off */
#define FACTS_ROW(X)                                             \
    X("max_tokens", max_tokens, I32)                             \
    X("logprobs", logprobs, BOOL)                                \
    X("top_logprobs", top_logprobs, I32)                         \
    X("prompt_ids IS NOT NULL", token_prompt, BOOL)              \
    X("messages IS NOT NULL", chat_prompt, BOOL)                 \
    X("coalesce(json_array_length(prompt_ids),"                  \
      " length(CAST(prompt AS BLOB)))", prompt_len, I64)
/* clang-format on */
#define COLS_OF store_job_facts
static const col FACTS_COLS[] = {FACTS_ROW(EXPR_COL)};
#undef COLS_OF

#define N_COLS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- prepared statements ------------------------------------------------- */

/* clang-format off */
enum {
    S_BEGIN, S_COMMIT, S_ROLLBACK, S_MARK, S_MARK_RELEASE, S_MARK_UNDO,
    S_SUBMIT_META, S_FIND_KEY, S_INSERT_JOB, S_QUEUE_HEAD, S_CLAIM, S_ATTEMPT_START,
    S_JOB_READ, S_JSON_EACH, S_JSON_MESSAGES, S_DONE, S_INSERT_RESULT, S_ATTEMPT_END,
    S_WORKER_CREDIT, S_JOB_CURRENT, S_REQUEUE, S_FAIL, S_CANCEL,
    S_RUNNING_ON, S_OUTCOME, S_BRIEF, S_BATCH_BRIEFS, S_WORKER_ADD,
    S_WORKER_SET, S_MODEL_SEEN, S_WORKER_HEARD, S_WORKER_KEY, S_WORKER_KEY_BIND,
    S_JOB_FACTS,
    S_COUNT
};
/* clang-format on */

#define OUTCOME_FROM                                      \
    " FROM jobs j LEFT JOIN results r ON r.job_id = j.id" \
    " LEFT JOIN workers w ON w.id = j.worker_id"

/* The SQL reads best laid out by hand. */
/* clang-format off */
#define BRIEF_SELECT                                                      \
    "SELECT " BRIEF_ROW(EXPR_SQL) "j.state FROM jobs j"                   \
    " LEFT JOIN workers w ON w.id = j.worker_id"

static const char *const stmt_sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_MARK] = "SAVEPOINT msg",
    [S_MARK_RELEASE] = "RELEASE msg",
    [S_MARK_UNDO] = "ROLLBACK TO msg",
    [S_SUBMIT_META] = "INSERT INTO submits (batch_id, meta, received_at)"
                      " VALUES (:batch_id, :meta, :now)",
    [S_FIND_KEY] = "SELECT id, batch_id IS :batch_id, owner IS :owner FROM jobs"
                   " WHERE client_key = :client_key",
    [S_INSERT_JOB] =
        "INSERT INTO jobs (" JOB_IN_ROW(SQL_NAME) JOB_PARAMS(SQL_NAME)
        "submit_id, prompt_ids, messages, stop, json_schema, submitted_at)"
        " VALUES (" JOB_IN_ROW(SQL_PARAM) JOB_PARAMS(SQL_PARAM)
        ":submit_id, :prompt_ids, :messages, :stop, :json_schema, :now)",
    /* A job for one of the worker's aliases is one for its model. */
    [S_QUEUE_HEAD] = "SELECT id FROM jobs WHERE state = 'queued'"
                     " AND (model IS NULL OR :model IS NULL OR model = :model"
                     " OR model IN (SELECT a.value FROM workers w,"
                     " json_each(w.aliases) a WHERE w.id = :worker_id))"
                     " ORDER BY priority DESC, id LIMIT :max",
    [S_CLAIM] = "UPDATE jobs SET state = 'running', attempts = attempts + 1,"
                " worker_id = :worker_id, started_at = :now WHERE id = :job_id"
                " RETURNING attempts",
    [S_ATTEMPT_START] =
        "INSERT INTO attempts (job_id, attempt, worker_id,"
        " started_at) VALUES (:job_id, :attempt, :worker_id, :now)",
    [S_JOB_READ] =
        "SELECT " JOB_IN_ROW(SQL_NAME) JOB_PARAMS(SQL_NAME)
        JOB_OUT_ROW(SQL_NAME) "prompt_ids, messages, stop, json_schema, state"
        " FROM jobs WHERE id = :job_id",
    [S_JSON_EACH] = "SELECT value FROM json_each(:json)",
    [S_JSON_MESSAGES] = "SELECT json_extract(value, '$.role'),"
                        " json_extract(value, '$.content') FROM json_each(:json)",
    [S_DONE] =
        "UPDATE jobs SET state = 'done', finished_at = :now"
        " WHERE id = :job_id AND state = 'running' AND worker_id = :worker_id"
        " AND (:attempt <= 0 OR attempts = :attempt)"
        " RETURNING attempts",
    /* The derived columns are computed here, from the job's row (done by
     * S_DONE a moment before), so that every reader gets one definition. */
    [S_INSERT_RESULT] =
        "INSERT INTO results (job_id, " RESULT_ROW(SQL_NAME)
        "token_ids, logprobs, queue_wait_ms, prefill_tok_s, decode_tok_s,"
        " total_ms, worker_id, attempt, created_at)"
        " SELECT id, coalesce(:text, ''), :finish_reason,"
        " :prompt_tokens, :generated_tokens, :prefill_ms, :decode_ms,"
        " :cached_prompt_tokens, :token_ids, :logprobs,"
        " started_at - submitted_at,"
        " CASE WHEN :prefill_ms > 0"
        " THEN 1000.0 * :prompt_tokens / :prefill_ms END,"
        " CASE WHEN :decode_ms > 0"
        " THEN 1000.0 * :generated_tokens / :decode_ms END,"
        " :now - submitted_at, worker_id, attempts, :now"
        " FROM jobs WHERE id = :job_id",
    [S_ATTEMPT_END] =
        "UPDATE attempts SET ended_at = :now, outcome = :outcome,"
        " reason = :reason WHERE job_id = :job_id AND attempt = :attempt",
    [S_WORKER_CREDIT] = "UPDATE workers SET jobs_done = jobs_done + 1,"
                        " tokens_done = tokens_done + :tokens, last_seen = :now"
                        " WHERE id = :worker_id",
    [S_JOB_CURRENT] =
        "SELECT " NOW_ROW(EXPR_SQL) "state FROM jobs WHERE id = :job_id",
    [S_REQUEUE] = "UPDATE jobs SET state = 'queued', worker_id = NULL,"
                  " faults = faults + :faults WHERE id = :job_id",
    /* The reasons of every faulted attempt, oldest first, become the error. */
    [S_FAIL] =
        "UPDATE jobs SET state = 'failed', faults = faults + 1,"
        " finished_at = :now, error = (SELECT group_concat(line, '; ')"
        " FROM (SELECT 'attempt ' || attempt || ' on worker '"
        " || worker_id || ': ' || outcome || ': ' || coalesce(reason, '')"
        " AS line FROM attempts WHERE job_id = :job_id"
        " AND outcome IN ('lost', 'failed') ORDER BY attempt))"
        " WHERE id = :job_id",
    [S_CANCEL] = "UPDATE jobs SET state = 'cancelled', finished_at = :now,"
                 " error = 'cancelled by a client' WHERE id = :job_id",
    [S_RUNNING_ON] = "SELECT id FROM jobs WHERE state = 'running'"
                     " AND worker_id = :worker_id ORDER BY id",
    [S_OUTCOME] =
        "SELECT " OUTCOME_ROW(EXPR_SQL) RESULT_ROW(SQL_RESULT)
        "j.state, r.token_ids, r.logprobs" OUTCOME_FROM
        " WHERE j.id = :job_id",
    [S_BRIEF] = BRIEF_SELECT " WHERE j.id = :job_id",
    [S_BATCH_BRIEFS] =
        BRIEF_SELECT " WHERE j.batch_id = :batch_id ORDER BY j.id",
    [S_WORKER_ADD] =
        "INSERT INTO workers (" WORKER_ROW(SQL_NAME) "aliases, first_seen, last_seen)"
        " VALUES (" WORKER_ROW(SQL_PARAM) ":aliases, :now, :now) RETURNING id",
    [S_WORKER_SET] = "UPDATE workers SET state = :state, last_seen = :now"
                     " WHERE id = :worker_id",
    [S_MODEL_SEEN] = "SELECT 1 FROM workers WHERE last_seen >= :since"
                     " AND (model = :model OR EXISTS (SELECT 1 FROM"
                     " json_each(aliases) WHERE value = :model)) LIMIT 1",
    [S_WORKER_HEARD] = "SELECT 1 FROM workers WHERE last_seen >= :since LIMIT 1",
    [S_JOB_FACTS] =
        "SELECT " FACTS_ROW(EXPR_SQL) "1 FROM jobs WHERE id = :job_id"
        " AND state = 'running' AND worker_id = :worker_id"
        " AND (:attempt <= 0 OR attempts = :attempt)",
    [S_WORKER_KEY] = "SELECT public_key FROM worker_keys WHERE name = :name",
    [S_WORKER_KEY_BIND] =
        "INSERT INTO worker_keys (name, public_key, bound_at)"
        " VALUES (:name, :key, :now) ON CONFLICT (name) DO UPDATE"
        " SET public_key = excluded.public_key, bound_at = excluded.bound_at",
};
/* clang-format on */

/* The rows bound from a descriptor, each into one statement.  Their
 * parameters' indexes are looked up once, when the statements are prepared,
 * where a descriptor naming a parameter its statement lacks fails
 * store_open. */
typedef enum row_bind {
    RB_JOB,
    RB_JOB_PARAMS,
    RB_RESULT,
    RB_WORKER,
    RB_COUNT
} row_bind;

static const struct {
    int stmt;
    const col *cols;
    size_t n;
} ROW_BINDS[RB_COUNT] = {
    [RB_JOB] = {S_INSERT_JOB, JOB_IN_COLS, N_COLS(JOB_IN_COLS)},
    [RB_JOB_PARAMS] = {S_INSERT_JOB, PARAM_COLS, N_COLS(PARAM_COLS)},
    [RB_RESULT] = {S_INSERT_RESULT, RESULT_COLS, N_COLS(RESULT_COLS)},
    [RB_WORKER] = {S_WORKER_ADD, WORKER_COLS, N_COLS(WORKER_COLS)},
};

#define MAX_ROW_COLS 16
_Static_assert(N_JOB_IN <= MAX_ROW_COLS && N_PARAMS <= MAX_ROW_COLS &&
                   N_RESULT <= MAX_ROW_COLS &&
                   N_COLS(WORKER_COLS) <= MAX_ROW_COLS,
               "a row descriptor outgrew MAX_ROW_COLS");

/* WAL pages after which a checkpoint is asked for (SQLite's default). */
#define CHECKPOINT_PAGES 1000

struct store {
    sqlite3 *db;
    ckpt *ckpt;
    int lock_fd;
    int wal_fd, shm_fd; /* store_reserve's, opened when first needed */
    char *path;
    store_opts opts;
    store_open_info info;
    bool in_tx;
    /* Jobs per state, kept exact by every transition; the copies are
     * restored on rollback. */
    int64_t count[STORE_N_STATES];
    int64_t count_at_begin[STORE_N_STATES], count_at_mark[STORE_N_STATES];
    json_buf json_a, json_b; /* scratch for JSON columns being bound */
    const char *unbound;     /* a parameter name a bind did not find (a bug) */
    sqlite3_stmt *stmt[S_COUNT];
    int row_param[RB_COUNT][MAX_ROW_COLS]; /* ROW_BINDS' parameter indexes */
};

static const char *const state_names[STORE_N_STATES] = {
    [STORE_QUEUED] = "queued",       [STORE_RUNNING] = "running",
    [STORE_DONE] = "done",           [STORE_FAILED] = "failed",
    [STORE_CANCELLED] = "cancelled",
};

const char *store_state_name(store_state s)
{
    return (unsigned)s < STORE_N_STATES ? state_names[s] : "?";
}

static int state_parse(const unsigned char *text, store_state *out)
{
    for (int i = 0; i < STORE_N_STATES; i++) {
        if (text && strcmp((const char *)text, state_names[i]) == 0) {
            *out = (store_state)i;
            return 0;
        }
    }
    return -1;
}

static int db_fail(store *st, llmq_err *err, const char *what)
{
    return llmq_errf(err, "sqlite: %s: %s", what, sqlite3_errmsg(st->db));
}

/* Resets stmt for its next use; every statement is used through
 * stmt_get so that none is left mid-step holding a read snapshot. */
static sqlite3_stmt *stmt_get(store *st, int which)
{
    sqlite3_stmt *s = st->stmt[which];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

/* A bind to a name its statement lacks (a bug) fails the next step. */
static int unbound_fail(store *st, llmq_err *err)
{
    const char *name = st->unbound;
    st->unbound = NULL;
    return llmq_errf(
        err, "sqlite: parameter %s is not in the statement it was bound to",
        name);
}

/* Runs a statement that returns no row we want. */
static int stmt_run(store *st, sqlite3_stmt *s, llmq_err *err)
{
    if (st->unbound)
        return unbound_fail(st, err);
    int rc = sqlite3_step(s);
    while (rc == SQLITE_ROW)
        rc = sqlite3_step(s);
    if (rc != SQLITE_DONE)
        return llmq_errf(err, "sqlite: %s: %s", sqlite3_sql(s),
                         sqlite3_errmsg(st->db));
    return 0;
}

static int step_row(store *st, sqlite3_stmt *s, bool *has_row, llmq_err *err)
{
    *has_row = false;
    if (st->unbound)
        return unbound_fail(st, err);
    int rc = sqlite3_step(s);
    *has_row = rc == SQLITE_ROW;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return llmq_errf(err, "sqlite: %s: %s", sqlite3_sql(s),
                         sqlite3_errmsg(st->db));
    return 0;
}

/* ---- binding and reading by name ------------------------------------------
 */

static int param_index(store *st, sqlite3_stmt *s, const char *name)
{
    int i = sqlite3_bind_parameter_index(s, name);
    if (i == 0 && !st->unbound)
        st->unbound = name;
    return i;
}

/* SQLite integers are signed: a u64 (a seed above INT64_MAX) is stored as
 * its two's complement and read back unchanged. */
static void bind_at(sqlite3_stmt *s, int i, col_kind k, const void *p)
{
    switch (k) {
    case COL_I32: sqlite3_bind_int(s, i, *(const int32_t *)p); return;
    case COL_I64: sqlite3_bind_int64(s, i, *(const int64_t *)p); return;
    case COL_U32: sqlite3_bind_int64(s, i, *(const uint32_t *)p); return;
    case COL_U64:
        sqlite3_bind_int64(s, i, (int64_t) * (const uint64_t *)p);
        return;
    case COL_F32: sqlite3_bind_double(s, i, *(const float *)p); return;
    case COL_F64: sqlite3_bind_double(s, i, *(const double *)p); return;
    case COL_BOOL: sqlite3_bind_int(s, i, *(const bool *)p); return;
    case COL_TEXT: {
        const char *text = *(const char *const *)p;
        if (text)
            sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(s, i);
        return;
    }
    }
}

static void bind_value(store *st, sqlite3_stmt *s, const char *name, col_kind k,
                       const void *p)
{
    bind_at(s, param_index(st, s, name), k, p);
}

static void bind_i64(store *st, sqlite3_stmt *s, const char *name, int64_t v)
{
    bind_value(st, s, name, COL_I64, &v);
}

static void bind_str(store *st, sqlite3_stmt *s, const char *name,
                     const char *text)
{
    bind_value(st, s, name, COL_TEXT, &text);
}

/* Binds row rb's parameters (into its statement s) from obj. */
static void bind_row(store *st, sqlite3_stmt *s, row_bind rb, const void *obj)
{
    const col *c = ROW_BINDS[rb].cols;
    for (size_t i = 0; i < ROW_BINDS[rb].n; i++)
        bind_at(s, st->row_param[rb][i], c[i].kind,
                (const char *)obj + c[i].off);
}

static const char *col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

static void read_value(sqlite3_stmt *s, int i, col_kind k, void *p)
{
    switch (k) {
    case COL_I32: *(int32_t *)p = sqlite3_column_int(s, i); return;
    case COL_I64: *(int64_t *)p = sqlite3_column_int64(s, i); return;
    case COL_U32: *(uint32_t *)p = (uint32_t)sqlite3_column_int64(s, i); return;
    case COL_U64: *(uint64_t *)p = (uint64_t)sqlite3_column_int64(s, i); return;
    case COL_F32: *(float *)p = (float)sqlite3_column_double(s, i); return;
    case COL_F64: *(double *)p = sqlite3_column_double(s, i); return;
    case COL_BOOL: *(bool *)p = sqlite3_column_int(s, i) != 0; return;
    case COL_TEXT: *(const char **)p = col_text(s, i); return;
    }
}

/* Reads the row's columns first, first + 1, ... into obj, per c. */
static void read_row(sqlite3_stmt *s, int first, const col *c, size_t n,
                     void *obj)
{
    for (size_t i = 0; i < n; i++)
        read_value(s, first + (int)i, c[i].kind, (char *)obj + c[i].off);
}

/* ---- JSON arrays in TEXT columns ------------------------------------------
 * Token ids and stop strings are stored as JSON arrays so that any SQL
 * client can read them (json_each); they are written with common/json.h's
 * writer and read back through json_each. */

static int json_ids(const uint32_t *ids, size_t n, json_buf *b, llmq_err *err)
{
    int rc = json_buf_put(b, "[", 1);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char num[16];
        int k = snprintf(num, sizeof num, "%s%" PRIu32, i ? "," : "", ids[i]);
        rc = json_buf_put(b, num, (size_t)k);
    }
    if (rc || json_buf_put(b, "]", 1))
        return llmq_errf(err, "out of memory for a JSON array of %zu token ids",
                         n);
    return 0;
}

static int json_strings(const char *const *v, size_t n, json_buf *b,
                        llmq_err *err)
{
    int rc = json_buf_put(b, "[", 1);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = (i && json_buf_put(b, ",", 1)) ||
             json_buf_string(b, v[i], strlen(v[i]));
    if (rc || json_buf_put(b, "]", 1))
        return llmq_errf(err, "out of memory for a JSON array of %zu strings",
                         n);
    return 0;
}

/* [{"role": ..., "content": ...}, ...], the messages column. */
static int json_messages(const wire_message *m, size_t n, json_buf *b,
                         llmq_err *err)
{
    int rc = json_buf_put(b, "[", 1);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = (i && json_buf_put(b, ",", 1)) ||
             json_buf_put(b, "{\"role\":", 8) ||
             json_buf_string(b, m[i].role, strlen(m[i].role)) ||
             json_buf_put(b, ",\"content\":", 11) ||
             json_buf_string(b, m[i].content, strlen(m[i].content)) ||
             json_buf_put(b, "}", 1);
    if (rc || json_buf_put(b, "]", 1))
        return llmq_errf(err, "out of memory for a JSON array of %zu messages",
                         n);
    return 0;
}

/* Strings read back from a JSON array column, each its own copy. */
typedef struct strlist {
    char **v;
    size_t n, cap;
} strlist;

static void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Hands each row of statement `which` over a JSON column's text to take:
 * 0 at the end of the rows, -1 when a step or take fails. */
typedef int (*row_fn)(void *ctx, sqlite3_stmt *s, llmq_err *err);

static int each_row(store *st, int which, const char *json, row_fn take,
                    void *ctx, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, which);
    bind_str(st, s, ":json", json);
    for (;;) {
        bool row;
        if (step_row(st, s, &row, err))
            return -1;
        if (!row)
            return 0;
        if (take(ctx, s, err))
            return -1;
    }
}

typedef struct idlist {
    uint32_t *v;
    size_t n, cap;
} idlist;

static int take_id(void *ctx, sqlite3_stmt *s, llmq_err *err)
{
    idlist *l = ctx;
    if (grow_reserve(&l->v, &l->cap, l->n + 1, sizeof *l->v))
        return llmq_errf(err, "out of memory reading %zu token ids", l->n + 1);
    l->v[l->n++] = (uint32_t)sqlite3_column_int64(s, 0);
    return 0;
}

static int json_read_ids(store *st, const char *json, uint32_t **out, size_t *n,
                         llmq_err *err)
{
    idlist l = {0};
    *out = NULL;
    *n = 0;
    if (json && each_row(st, S_JSON_EACH, json, take_id, &l, err)) {
        free(l.v);
        return -1;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

static int take_string(void *ctx, sqlite3_stmt *s, llmq_err *err)
{
    strlist *l = ctx;
    const char *t = col_text(s, 0);
    if (grow_reserve(&l->v, &l->cap, l->n + 1, sizeof *l->v) ||
        !(l->v[l->n] = strdup(t ? t : "")))
        return llmq_errf(err, "out of memory reading %zu stop strings",
                         l->n + 1);
    l->n++;
    return 0;
}

/* A chat job's messages read back, each string its own copy. */
typedef struct msglist {
    wire_message *v;
    size_t n, cap;
} msglist;

static void msglist_free(msglist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free((char *)l->v[i].role);
        free((char *)l->v[i].content);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int take_message(void *ctx, sqlite3_stmt *s, llmq_err *err)
{
    msglist *l = ctx;
    const char *role = col_text(s, 0), *content = col_text(s, 1);
    if (!role || !content)
        return llmq_errf(
            err, "messages[%zu]: not a {\"role\", \"content\"} object", l->n);
    if (grow_reserve(&l->v, &l->cap, l->n + 1, sizeof *l->v))
        return llmq_errf(err, "out of memory reading %zu messages", l->n + 1);
    wire_message *m = &l->v[l->n++];
    m->role = strdup(role);
    m->content = strdup(content);
    if (!m->role || !m->content)
        return llmq_errf(err, "out of memory reading %zu messages", l->n);
    return 0;
}

/* ---- opening, schema, migrations ----------------------------------------- */

static int exec_sql(store *st, const char *sql, llmq_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    llmq_errf(err, "sqlite: %s", msg ? msg : sqlite3_errmsg(st->db));
    sqlite3_free(msg);
    return -1;
}

static int pragma_int(store *st, const char *sql, int64_t *out, llmq_err *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(st, err, sql);
    int rc = sqlite3_step(s);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW)
        return db_fail(st, err, sql);
    return 0;
}

static int text_pragma(store *st, const char *sql, char *out, size_t size,
                       llmq_err *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(st, err, sql);
    int rc = sqlite3_step(s);
    snprintf(out, size, "%s",
             rc == SQLITE_ROW && sqlite3_column_text(s, 0)
                 ? (const char *)sqlite3_column_text(s, 0)
                 : "");
    sqlite3_finalize(s);
    return rc == SQLITE_ROW ? 0 : db_fail(st, err, sql);
}

/* WAL, so that readers (llmq-stats) never block the broker, checked: a
 * file system without shared memory would silently keep the rollback
 * journal.  FULL, so that a commit is fsync'ed before the broker acks it.
 * The WAL is cut back to 64 MiB when it restarts after a checkpoint. */
static int configure(store *st, llmq_err *err)
{
    char mode[16], sql[200];
    if (text_pragma(st, "PRAGMA journal_mode = WAL", mode, sizeof mode, err))
        return -1;
    if (strcmp(mode, "wal") != 0)
        return llmq_errf(err, "cannot use WAL mode (journal_mode is '%s')",
                         mode);
    snprintf(sql, sizeof sql,
             "PRAGMA synchronous = %s; PRAGMA foreign_keys = ON;"
             " PRAGMA journal_size_limit = %d;",
             st->opts.sync == STORE_SYNC_NORMAL ? "NORMAL" : "FULL", 64 << 20);
    return exec_sql(st, sql, err);
}

/* A migration's rows must still point where they did: checked before its
 * commit, since it ran with foreign keys off. */
static int keys_intact(store *st, llmq_err *err)
{
    int64_t broken;
    if (pragma_int(st, "SELECT count(*) FROM pragma_foreign_key_check", &broken,
                   err))
        return -1;
    return broken
               ? llmq_errf(err, "%" PRId64 " rows break a foreign key", broken)
               : 0;
}

/* Each migration in its transaction, with foreign keys off (a migration
 * that rebuilds a table drops the one other tables refer to), as SQLite's
 * ALTER TABLE documentation says; they are on again afterwards. */
static int migrate_from(store *st, int64_t version, llmq_err *err)
{
    for (int64_t v = version; v < STORE_SCHEMA_VERSION; v++) {
        char bump[64];
        snprintf(bump, sizeof bump, "PRAGMA user_version = %" PRId64, v + 1);
        if (exec_sql(st, "BEGIN IMMEDIATE", err))
            return -1;
        if (exec_sql(st, store_migrations[v], err) || keys_intact(st, err) ||
            exec_sql(st, bump, err)) {
            exec_sql(st, "ROLLBACK", NULL);
            return llmq_err_prefix(err, "migrating to schema version %" PRId64,
                                   v + 1);
        }
        if (exec_sql(st, "COMMIT", err))
            return -1;
    }
    return 0;
}

static int migrate(store *st, llmq_err *err)
{
    int64_t version;
    if (pragma_int(st, "PRAGMA user_version", &version, err))
        return -1;
    if (version > STORE_SCHEMA_VERSION)
        return llmq_errf(err,
                         "database schema version %" PRId64 " is newer than "
                         "this llmq-broker knows (%d): use a newer build",
                         version, STORE_SCHEMA_VERSION);
    st->info.from_version = version;
    if (version == STORE_SCHEMA_VERSION)
        return 0;
    const double t0 = clock_mono_ms_f();
    if (exec_sql(st, "PRAGMA foreign_keys = OFF", err))
        return -1;
    int rc = migrate_from(st, version, err);
    if (exec_sql(st, "PRAGMA foreign_keys = ON", rc ? NULL : err))
        return -1;
    st->info.migrate_ms = clock_mono_ms_f() - t0;
    return rc;
}

static int resolve_row_params(store *st, llmq_err *err)
{
    for (int rb = 0; rb < RB_COUNT; rb++)
        for (size_t i = 0; i < ROW_BINDS[rb].n; i++) {
            sqlite3_stmt *s = st->stmt[ROW_BINDS[rb].stmt];
            const char *name = ROW_BINDS[rb].cols[i].param;
            if (!(st->row_param[rb][i] = sqlite3_bind_parameter_index(s, name)))
                return llmq_errf(err, "sqlite: %s: no parameter %s",
                                 sqlite3_sql(s), name);
        }
    return 0;
}

static int prepare_all(store *st, llmq_err *err)
{
    for (int i = 0; i < S_COUNT; i++)
        if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &st->stmt[i], NULL) != SQLITE_OK)
            return db_fail(st, err, stmt_sql[i]);
    return resolve_row_params(st, err);
}

/* A previous broker's running jobs and live workers: it is gone, so are its
 * worker sessions, and its jobs go back to the queue. */
static int recover(store *st, int64_t now, llmq_err *err)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "BEGIN IMMEDIATE;"
             "UPDATE attempts SET ended_at = %" PRId64 ", outcome = 'interrupted',"
             " reason = 'broker restarted' WHERE ended_at IS NULL;"
             "UPDATE jobs SET state = 'queued', worker_id = NULL"
             " WHERE state = 'running';"
             "UPDATE workers SET state = 'gone' WHERE state = 'alive';"
             "COMMIT;",
             now);
    if (exec_sql(st, sql, err)) {
        exec_sql(st, "ROLLBACK", NULL);
        return llmq_err_prefix(err, "requeueing jobs of the previous broker");
    }
    return 0;
}

/* Jobs per state as the jobs table has them (a scan of the table). */
static int count_table(store *st, int64_t count[STORE_N_STATES], llmq_err *err)
{
    memset(count, 0, STORE_N_STATES * sizeof *count);
    sqlite3_stmt *s;
    const char *sql = "SELECT state, count(*) FROM jobs GROUP BY state";
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(st, err, sql);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        store_state state;
        if (state_parse(sqlite3_column_text(s, 0), &state) == 0)
            count[state] = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : db_fail(st, err, sql);
}

/* The counts kept since store_open against the table: a scan, so once, as
 * the store closes (every test that runs a broker ends there). */
static void assert_counts(store *st)
{
    int64_t table[STORE_N_STATES];
    if (count_table(st, table, NULL) != 0)
        return; /* a read that fails says nothing about the counts */
    for (int s = 0; s < STORE_N_STATES; s++)
        LLMQ_ASSERT(st->count[s] == table[s],
                    "%s: %" PRId64 " jobs counted, %" PRId64 " in the table",
                    state_names[s], st->count[s], table[s]);
}

/* Two brokers on one file would requeue each other's running jobs: the
 * second one refuses to start.  flock is separate from SQLite's own POSIX
 * locks, and the descriptor stays open until after sqlite3_close so that
 * closing it cannot drop those. */
static int lock_file(store *st, const char *path, llmq_err *err)
{
    st->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (st->lock_fd < 0)
        return llmq_errc(err, LLMQ_ERR_IO, "%m");
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return llmq_errc(err, LLMQ_ERR_UNAVAILABLE,
                         "in use by another llmq-broker (%m)");
    return 0;
}

static int wal_grew(void *ctx, sqlite3 *db, const char *name, int pages)
{
    (void)db, (void)name;
    store *st = ctx;
    if (pages >= CHECKPOINT_PAGES)
        ckpt_poke(st->ckpt);
    return SQLITE_OK;
}

/* ---- what the file holds, read before anything is written to it ---- */

/* *size: the file's bytes, -1 when there is none. */
static int file_size(const char *path, int64_t *size, llmq_err *err)
{
    struct stat sb;
    *size = -1;
    if (stat(path, &sb) == 0)
        *size = (int64_t)sb.st_size;
    else if (errno != ENOENT)
        return llmq_errc(err, LLMQ_ERR_IO, "%m");
    return 0;
}

/* SQLite writes a file's header with its first transaction, so a database
 * never shrinks to 0 bytes by itself: such a file was truncated (or made by
 * hand), and opening it as a new, empty queue would hide that. */
static int refuse_empty(const store *st, llmq_err *err)
{
    if (st->info.bytes != 0 || st->opts.init)
        return 0;
    return llmq_errc(err, LLMQ_ERR_INVALID,
                     "the file is empty (0 bytes): not a database; if it was"
                     " truncated, restore it from a backup (docs/OPERATIONS.md,"
                     " Backups); --init starts an empty queue in it");
}

/* user_version 0 is a file without llmq's schema: an empty SQLite file is
 * given one only when it is new or init says so, and a file holding tables
 * of another program never is. */
static int check_schema(store *st, llmq_err *err)
{
    int64_t version, tables;
    if (pragma_int(st, "PRAGMA user_version", &version, err) ||
        pragma_int(st, "SELECT count(*) FROM sqlite_master", &tables, err))
        return -1;
    if (version > 0)
        return 0;
    if (tables > 0)
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "a SQLite database of another program (%" PRId64
                         " tables, indexes or views, and no llmq schema"
                         " version): the broker does not write into it; give"
                         " it a file of its own",
                         tables);
    if (st->info.bytes > 0 && !st->opts.init)
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "a SQLite file without llmq's schema (no tables):"
                         " --init creates the schema in it");
    st->info.created = true;
    return 0;
}

/* One line of quick_check's findings, on one line ("ok" is none): its
 * lines may hold line breaks, and the first names the schema. */
static void add_finding(char *buf, size_t size, size_t *used, const char *line)
{
    static const char SCHEMA[] = "*** in database main ***";
    if (!line || strcmp(line, "ok") == 0)
        return;
    if (strncmp(line, SCHEMA, sizeof SCHEMA - 1) == 0)
        line += sizeof SCHEMA - 1;
    line += strspn(line, " \n");
    if (*used && *used < size - 2) {
        memcpy(buf + *used, "; ", 2);
        *used += 2;
    }
    for (; *line && *used < size - 1; line++)
        buf[(*used)++] = *line == '\n' ? ' ' : *line;
    buf[*used] = 0;
}

/* The structure of every b-tree, page by page (not whether indexes agree
 * with their tables: integrity_check's far longer job), so that a damaged
 * page stops the broker before it acknowledges anything, rather than at
 * the first write that reaches the page. */
static int quick_check(store *st, llmq_err *err)
{
    st->info.check_ms = -1;
    if (st->opts.skip_check || st->info.created)
        return 0;
    const double t0 = clock_mono_ms_f();
    const char *sql = "PRAGMA quick_check(5)";
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(st, err, sql);
    char found[LLMQ_ERR_MAX / 2] = "";
    size_t used = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        add_finding(found, sizeof found, &used, col_text(s, 0));
    if (rc != SQLITE_DONE)
        add_finding(found, sizeof found, &used, sqlite3_errmsg(st->db));
    sqlite3_finalize(s);
    st->info.check_ms = clock_mono_ms_f() - t0;
    if (!found[0])
        return 0;
    return llmq_errc(
        err, LLMQ_ERR_INVALID,
        "damaged: PRAGMA quick_check found: %s; restore it from a"
        " backup (docs/OPERATIONS.md, Backups) or salvage it with"
        " sqlite3's .recover; --skip-check starts without the check",
        found);
}

static int open_steps(store *st, const char *path, int64_t now, llmq_err *err)
{
    if (file_size(path, &st->info.bytes, err) || refuse_empty(st, err) ||
        lock_file(st, path, err))
        return llmq_err_prefix(err, "%s", path);
    /* Memory statistics cost a global mutex on every SQLite allocation; the
     * call is refused (harmlessly) once SQLite is initialized.  The
     * connection is the loop thread's alone: no mutex on it either. */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    if (sqlite3_open_v2(path, &st->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                            SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK)
        return llmq_errf(err, "%s: %s", path,
                         st->db ? sqlite3_errmsg(st->db) : "out of memory");
    /* Before the first statement: the schema check, the quick check and the
     * switch to WAL (an exclusive lock) would otherwise fail at once with
     * "database is locked" while a reader (llmq-stats, a test polling the
     * tables) has the file open; they wait for it instead. */
    sqlite3_busy_timeout(st->db, 5000);
    if (check_schema(st, err) || quick_check(st, err) || configure(st, err) ||
        migrate(st, err) || prepare_all(st, err) || recover(st, now, err) ||
        count_table(st, st->count, err) || ckpt_start(&st->ckpt, path, err))
        return llmq_err_prefix(err, "%s", path);
    /* Replaces SQLite's automatic checkpoint, which would run in commits. */
    sqlite3_wal_hook(st->db, wal_grew, st);
    return 0;
}

/* Everything open_steps made, in any state it left them. */
static void release(store *st)
{
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    /* Stopped first, so that the broker's connection is the last one and its
     * close checkpoints everything and removes the WAL. */
    ckpt_stop(st->ckpt);
    sqlite3_close(st->db);
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    if (st->wal_fd >= 0)
        close(st->wal_fd);
    if (st->shm_fd >= 0)
        close(st->shm_fd);
    free(st->path);
    free(st->json_a.p);
    free(st->json_b.p);
    free(st);
}

int store_open(store **out, const char *path, const store_opts *opts,
               int64_t now_ms, llmq_err *err)
{
    *out = NULL;
    if (opts->max_attempts < 1)
        return llmq_errf(err, "max_attempts must be at least 1, not %d",
                         opts->max_attempts);
    store *st = calloc(1, sizeof *st);
    if (!st)
        return llmq_errf(err, "out of memory opening %s", path);
    st->lock_fd = st->wal_fd = st->shm_fd = -1;
    st->opts = *opts;
    st->path = strdup(path);
    if (!st->path) {
        free(st);
        return llmq_errf(err, "out of memory opening %s", path);
    }
    if (open_steps(st, path, now_ms, err)) {
        release(st);
        return -1;
    }
    *out = st;
    return 0;
}

bool store_remove_if_new(store *st)
{
    if (!st->info.created || st->info.bytes >= 0)
        return false;
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s%s", st->path, suffixes[i]);
        (void)unlink(path); /* -wal, -shm: there or not */
    }
    return true;
}

store_open_info store_opened(const store *st)
{
    return st->info;
}

int store_space(store *st, int64_t *db_bytes, int64_t *fs_free, llmq_err *err)
{
    int64_t pages, unused, page_bytes;
    if (pragma_int(st, "PRAGMA page_count", &pages, err) ||
        pragma_int(st, "PRAGMA freelist_count", &unused, err) ||
        pragma_int(st, "PRAGMA page_size", &page_bytes, err))
        return -1;
    *db_bytes = (pages - unused) * page_bytes;
    struct statvfs vfs;
    if (fstatvfs(st->lock_fd, &vfs) != 0)
        return llmq_errc(err, LLMQ_ERR_IO, "statvfs: %m");
    *fs_free = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    return 0;
}

/* SQLite's wal-index: 32 KiB per 4096 frames, and a header block. */
#define SHM_BLOCK 32768
#define SHM_FRAMES 4096

/* fd of path + suffix, opened once; -1 while it does not exist (the WAL is
 * made by the first write).  SQLite locks the database file and the -shm
 * file through its own descriptors, which this one does not touch. */
static int aux_fd(const store *st, int *fd, const char *suffix)
{
    if (*fd < 0) {
        char name[4096];
        snprintf(name, sizeof name, "%s%s", st->path, suffix);
        *fd = open(name, O_RDWR | O_CLOEXEC);
    }
    return *fd;
}

/* Allocates [size, size + bytes) of fd without changing its size. */
static int hold(int fd, int64_t bytes, bool *held, llmq_err *err)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return llmq_errc(err, LLMQ_ERR_IO, "fstat: %m");
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, sb.st_size, bytes) == 0)
        return 0;
    if (errno != ENOSPC && errno != EOPNOTSUPP && errno != ENOSYS)
        return llmq_errc(err, LLMQ_ERR_IO, "fallocate: %m");
    *held = false;
    return 0;
}

int store_reserve(store *st, int64_t bytes, bool *held, llmq_err *err)
{
    int64_t page;
    *held = true;
    if (pragma_int(st, "PRAGMA page_size", &page, err))
        return -1;
    const int64_t frames = bytes / (page + 24) + 1;
    const int64_t shm = (frames / SHM_FRAMES + 2) * SHM_BLOCK;
    if (aux_fd(st, &st->wal_fd, "-wal") >= 0 &&
        hold(st->wal_fd, bytes, held, err))
        return llmq_err_prefix(err, "%s-wal", st->path);
    if (aux_fd(st, &st->shm_fd, "-shm") >= 0 &&
        hold(st->shm_fd, shm, held, err))
        return llmq_err_prefix(err, "%s-shm", st->path);
    return 0;
}

void store_close(store *st)
{
    if (!st)
        return;
    if (st->in_tx)
        store_rollback(st);
    if (LLMQ_ASSERTS_ON)
        assert_counts(st);
    release(st);
}

/* ---- transactions ---------------------------------------------------------- */

static int run_simple(store *st, int which, llmq_err *err)
{
    return stmt_run(st, stmt_get(st, which), err);
}

int store_begin(store *st, llmq_err *err)
{
    if (run_simple(st, S_BEGIN, err))
        return -1;
    st->in_tx = true;
    memcpy(st->count_at_begin, st->count, sizeof st->count);
    return 0;
}

int store_commit(store *st, llmq_err *err)
{
    if (run_simple(st, S_COMMIT, err)) {
        store_rollback(st);
        return llmq_err_prefix(err, "commit");
    }
    st->in_tx = false;
    return 0;
}

void store_rollback(store *st)
{
    if (sqlite3_get_autocommit(st->db) == 0)
        run_simple(st, S_ROLLBACK, NULL);
    st->in_tx = false;
    memcpy(st->count, st->count_at_begin, sizeof st->count);
}

bool store_in_transaction(const store *st)
{
    return st->in_tx;
}

int store_mark(store *st, llmq_err *err)
{
    memcpy(st->count_at_mark, st->count, sizeof st->count);
    return run_simple(st, S_MARK, err);
}

int store_mark_release(store *st, llmq_err *err)
{
    return run_simple(st, S_MARK_RELEASE, err);
}

void store_mark_undo(store *st)
{
    run_simple(st, S_MARK_UNDO, NULL);
    run_simple(st, S_MARK_RELEASE, NULL);
    memcpy(st->count, st->count_at_mark, sizeof st->count);
}

int64_t store_queued(const store *st)
{
    return st->count[STORE_QUEUED];
}

int64_t store_running(const store *st)
{
    return st->count[STORE_RUNNING];
}

static void count_move(store *st, store_state from, store_state to)
{
    LLMQ_ASSERT(st->count[from] > 0, "a job leaves %s, which counts none",
                state_names[from]);
    st->count[from]--;
    st->count[to]++;
}

/* Steps a statement to its end, for RETURNING statements whose row was read. */
static int finish(store *st, sqlite3_stmt *s, llmq_err *err)
{
    return stmt_run(st, s, err);
}

/* ---- submit ---------------------------------------------------------------- */

int store_submit_meta(store *st, const char *batch_id, const char *meta,
                      int64_t now_ms, int64_t *submit_id, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_SUBMIT_META);
    bind_str(st, s, ":batch_id", batch_id);
    bind_str(st, s, ":meta", meta);
    bind_i64(st, s, ":now", now_ms);
    if (stmt_run(st, s, err))
        return -1;
    *submit_id = sqlite3_last_insert_rowid(st->db);
    return 0;
}

/* What a known client key says about a new job with that key. */
typedef struct key_match {
    bool found, same_batch, same_owner;
} key_match;

static int find_key(store *st, const store_job *job, int64_t *id, key_match *k,
                    llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_FIND_KEY);
    bind_str(st, s, ":client_key", job->client_key);
    bind_str(st, s, ":batch_id", job->batch_id);
    bind_str(st, s, ":owner", job->owner);
    if (step_row(st, s, &k->found, err))
        return -1;
    if (k->found) {
        *id = sqlite3_column_int64(s, 0);
        k->same_batch = sqlite3_column_int(s, 1) != 0;
        k->same_owner = sqlite3_column_int(s, 2) != 0;
    }
    return 0;
}

static store_submit_outcome known_key(const key_match *k)
{
    if (!k->same_owner)
        return k->same_batch ? STORE_OTHER_OWNER : STORE_OTHER_OWNER_BATCH;
    return k->same_batch ? STORE_DUPLICATE : STORE_OTHER_BATCH;
}

/* The JSON columns into the scratch buffers: json_a holds the prompt's ids
 * or the messages (a job has one of them at most), json_b the stop strings. */
static int encode_json_columns(store *st, const store_job *job, llmq_err *err)
{
    st->json_a.len = st->json_b.len = 0;
    if (job->prompt_ids &&
        json_ids(job->prompt_ids, job->n_prompt_ids, &st->json_a, err))
        return -1;
    if (job->messages &&
        json_messages(job->messages, job->n_messages, &st->json_a, err))
        return -1;
    if (job->params.n_stop &&
        json_strings(job->params.stop, job->params.n_stop, &st->json_b, err))
        return -1;
    return 0;
}

static int insert_job(store *st, const store_job *job, int64_t now,
                      int64_t *id, llmq_err *err)
{
    if (encode_json_columns(st, job, err))
        return -1;
    sqlite3_stmt *s = stmt_get(st, S_INSERT_JOB);
    bind_row(st, s, RB_JOB, job);
    bind_row(st, s, RB_JOB_PARAMS, &job->params);
    if (job->submit_id > 0)
        bind_i64(st, s, ":submit_id", job->submit_id);
    else
        bind_str(st, s, ":submit_id", NULL);
    bind_str(st, s, ":prompt_ids", job->prompt_ids ? st->json_a.p : NULL);
    bind_str(st, s, ":messages", job->messages ? st->json_a.p : NULL);
    bind_str(st, s, ":stop", job->params.n_stop ? st->json_b.p : NULL);
    bind_str(st, s, ":json_schema", job->params.json_schema);
    bind_i64(st, s, ":now", now);
    if (stmt_run(st, s, err))
        return -1;
    *id = sqlite3_last_insert_rowid(st->db);
    st->count[STORE_QUEUED]++;
    return 0;
}

int store_submit(store *st, const store_job *job, int64_t max_queued,
                 int64_t now_ms, int64_t *job_id, store_submit_outcome *out,
                 llmq_err *err)
{
    key_match k = {0};
    if (job->client_key && find_key(st, job, job_id, &k, err))
        return -1;
    if (k.found) {
        *out = known_key(&k);
        return 0;
    }
    if (max_queued > 0 && st->count[STORE_QUEUED] >= max_queued) {
        *out = STORE_FULL;
        return 0;
    }
    *out = STORE_NEW;
    return insert_job(st, job, now_ms, job_id, err);
}

/* ---- claim ----------------------------------------------------------------- */

/* What a job read back owns: its arrays. */
typedef struct job_arrays {
    uint32_t *ids;
    msglist messages;
    strlist stop;
} job_arrays;

static void job_arrays_free(job_arrays *a)
{
    free(a->ids);
    msglist_free(&a->messages);
    strlist_free(&a->stop);
}

/* Fills job from a S_JOB_READ row; *a (zeroed by the caller) owns its
 * arrays, also after a failure: the caller frees them either way. */
static int job_from_row(store *st, sqlite3_stmt *s, store_job *job,
                        job_arrays *a, llmq_err *err)
{
    memset(job, 0, sizeof *job);
    job_params *p = &job->params;
    read_row(s, 0, JOB_IN_COLS, N_COLS(JOB_IN_COLS), job);
    read_row(s, N_JOB_IN, PARAM_COLS, N_COLS(PARAM_COLS), p);
    read_row(s, N_JOB_IN + N_PARAMS, JOB_OUT_COLS, N_COLS(JOB_OUT_COLS), job);
    if (state_parse(sqlite3_column_text(s, JR_STATE), &job->state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", job->id,
                         col_text(s, JR_STATE));
    /* json_each runs on another statement: s keeps its row meanwhile. */
    if (json_read_ids(st, col_text(s, JR_PROMPT_IDS), &a->ids,
                      &job->n_prompt_ids, err))
        return -1;
    job->prompt_ids = a->ids;
    const char *messages = col_text(s, JR_MESSAGES),
               *stop = col_text(s, JR_STOP);
    if (messages && each_row(st, S_JSON_MESSAGES, messages, take_message,
                             &a->messages, err))
        return llmq_err_prefix(err, "job %" PRId64, job->id);
    job->messages = a->messages.v;
    job->n_messages = a->messages.n;
    if (stop && each_row(st, S_JSON_EACH, stop, take_string, &a->stop, err))
        return -1;
    p->stop = (const char *const *)a->stop.v;
    p->n_stop = (uint32_t)a->stop.n;
    p->json_schema = col_text(s, JR_JSON_SCHEMA);
    return 0;
}

/* Steps a statement of a claim, which must yield the job's row. */
static int claimed_row(store *st, sqlite3_stmt *s, int64_t id, llmq_err *err)
{
    bool row;
    if (step_row(st, s, &row, err))
        return -1;
    return row ? 0
               : llmq_errf(err, "job %" PRId64 " vanished while claimed", id);
}

static int emit_job(store *st, int64_t id, store_job_fn fn, void *ctx,
                    llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_JOB_READ);
    bind_i64(st, s, ":job_id", id);
    if (claimed_row(st, s, id, err))
        return -1;
    store_job job;
    job_arrays a = {0};
    int rc = job_from_row(st, s, &job, &a, err);
    if (rc == 0)
        rc = fn(ctx, &job, err);
    job_arrays_free(&a);
    return rc;
}

static int claim_one(store *st, int64_t id, int64_t worker_id, int64_t now,
                     llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_CLAIM);
    bind_i64(st, s, ":job_id", id);
    bind_i64(st, s, ":worker_id", worker_id);
    bind_i64(st, s, ":now", now);
    if (claimed_row(st, s, id, err))
        return -1;
    int64_t attempt = sqlite3_column_int64(s, 0);
    if (finish(st, s, err))
        return -1;
    s = stmt_get(st, S_ATTEMPT_START);
    bind_i64(st, s, ":job_id", id);
    bind_i64(st, s, ":attempt", attempt);
    bind_i64(st, s, ":worker_id", worker_id);
    bind_i64(st, s, ":now", now);
    if (stmt_run(st, s, err))
        return -1;
    count_move(st, STORE_QUEUED, STORE_RUNNING);
    return 0;
}

/* The head of the queue, read in full before any of it changes state. */
static int queue_head(store *st, int64_t worker_id, const char *model, int max,
                      int64_t *ids, int *n, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_QUEUE_HEAD);
    bind_i64(st, s, ":max", max);
    bind_str(st, s, ":model", model);
    bind_i64(st, s, ":worker_id", worker_id);
    *n = 0;
    for (;;) {
        bool row;
        if (step_row(st, s, &row, err))
            return -1;
        if (!row || *n == max)
            break;
        ids[(*n)++] = sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    return 0;
}

int store_claim(store *st, int64_t worker_id, const char *model, int max,
                int64_t now_ms, store_job_fn fn, void *ctx, int *claimed,
                llmq_err *err)
{
    *claimed = 0;
    if (max > st->count[STORE_QUEUED])
        max = (int)st->count[STORE_QUEUED];
    if (max <= 0)
        return 0;
    int64_t *ids = malloc((size_t)max * sizeof *ids);
    if (!ids)
        return llmq_errf(err, "out of memory claiming %d jobs", max);
    int n = 0, rc = queue_head(st, worker_id, model, max, ids, &n, err);
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = claim_one(st, ids[i], worker_id, now_ms, err);
        if (rc == 0)
            rc = emit_job(st, ids[i], fn, ctx, err);
        if (rc == 0)
            (*claimed)++;
    }
    free(ids);
    return rc;
}

/* ---- ends of attempts ------------------------------------------------------ */

static int job_current(store *st, int64_t id, job_now *cur, bool *found,
                       llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_JOB_CURRENT);
    bind_i64(st, s, ":job_id", id);
    if (step_row(st, s, found, err))
        return -1;
    if (!*found)
        return 0;
    if (state_parse(sqlite3_column_text(s, JC_STATE), &cur->state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", id,
                         col_text(s, JC_STATE));
    read_row(s, 0, NOW_COLS, N_COLS(NOW_COLS), cur);
    return 0;
}

/* Whether attempt `attempt` (<= 0: any) of job id runs on worker_id now. */
static int check_running(store *st, int64_t id, int64_t worker_id,
                         int32_t attempt, job_now *cur, store_change *out,
                         llmq_err *err)
{
    bool found;
    if (job_current(st, id, cur, &found, err))
        return -1;
    if (!found)
        *out = STORE_UNKNOWN;
    else if (cur->state != STORE_RUNNING || cur->worker_id != worker_id ||
             (attempt > 0 && attempt != cur->attempt))
        *out = STORE_STALE;
    else
        *out = STORE_APPLIED;
    return 0;
}

static int attempt_end(store *st, int64_t id, int32_t attempt, int64_t now,
                       const char *outcome, const char *reason, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_ATTEMPT_END);
    bind_i64(st, s, ":job_id", id);
    bind_i64(st, s, ":attempt", attempt);
    bind_i64(st, s, ":now", now);
    bind_str(st, s, ":outcome", outcome);
    bind_str(st, s, ":reason", reason);
    return stmt_run(st, s, err);
}

/* A running job leaves for `to` through statement `which`, given its
 * argument: :faults to add for S_REQUEUE, the time :now for S_FAIL. */
static int leave_running(store *st, int which, int64_t id, const char *name,
                         int64_t arg, store_state to, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, which);
    bind_i64(st, s, ":job_id", id);
    bind_i64(st, s, name, arg);
    if (stmt_run(st, s, err))
        return -1;
    count_move(st, STORE_RUNNING, to);
    return 0;
}

static int fault_job(store *st, int64_t id, int64_t worker_id, int32_t attempt,
                     const char *outcome, const char *reason, bool permanent,
                     int64_t now, store_change *out, bool *failed,
                     llmq_err *err)
{
    job_now cur;
    *failed = false;
    if (check_running(st, id, worker_id, attempt, &cur, out, err))
        return -1;
    if (*out != STORE_APPLIED)
        return 0;
    if (attempt_end(st, id, cur.attempt, now, outcome, reason, err))
        return -1;
    *failed = permanent || cur.faults + 1 >= st->opts.max_attempts;
    return *failed
               ? leave_running(st, S_FAIL, id, ":now", now, STORE_FAILED, err)
               : leave_running(st, S_REQUEUE, id, ":faults", 1, STORE_QUEUED,
                               err);
}

int store_fault(store *st, int64_t job_id, int64_t worker_id, int32_t attempt,
                const char *reason, bool permanent, int64_t now_ms,
                store_change *out, bool *failed, llmq_err *err)
{
    return fault_job(st, job_id, worker_id, attempt, "failed", reason,
                     permanent, now_ms, out, failed, err);
}

int store_hand_back(store *st, int64_t job_id, int64_t worker_id,
                    int32_t attempt, const char *reason, int64_t now_ms,
                    store_change *out, llmq_err *err)
{
    job_now cur;
    if (check_running(st, job_id, worker_id, attempt, &cur, out, err))
        return -1;
    if (*out != STORE_APPLIED)
        return 0;
    if (attempt_end(st, job_id, cur.attempt, now_ms, "returned", reason, err))
        return -1;
    return leave_running(st, S_REQUEUE, job_id, ":faults", 0, STORE_QUEUED,
                         err);
}

int store_cancel(store *st, int64_t job_id, int64_t now_ms, store_change *out,
                 store_state *was, int64_t *worker_id, llmq_err *err)
{
    job_now cur;
    bool found;
    *worker_id = 0;
    if (job_current(st, job_id, &cur, &found, err))
        return -1;
    *out = !found ? STORE_UNKNOWN
           : cur.state == STORE_QUEUED || cur.state == STORE_RUNNING
               ? STORE_APPLIED
               : STORE_STALE;
    if (!found)
        return 0;
    *was = cur.state;
    if (*out != STORE_APPLIED)
        return 0;
    if (cur.state == STORE_RUNNING) {
        *worker_id = cur.worker_id;
        if (attempt_end(st, job_id, cur.attempt, now_ms, "cancelled",
                        "cancelled by client", err))
            return -1;
    }
    sqlite3_stmt *s = stmt_get(st, S_CANCEL);
    bind_i64(st, s, ":job_id", job_id);
    bind_i64(st, s, ":now", now_ms);
    if (stmt_run(st, s, err))
        return -1;
    count_move(st, cur.state, STORE_CANCELLED);
    return 0;
}

static int running_on(store *st, int64_t worker_id, int64_t **ids, size_t *n,
                      llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_RUNNING_ON);
    bind_i64(st, s, ":worker_id", worker_id);
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    for (;;) {
        bool row;
        if (step_row(st, s, &row, err))
            break;
        if (!row) {
            sqlite3_reset(s);
            return 0;
        }
        if (grow_reserve(ids, &cap, *n + 1, sizeof **ids)) {
            llmq_errf(err, "out of memory listing jobs of worker %" PRId64,
                      worker_id);
            break;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(s, 0);
    }
    free(*ids);
    *ids = NULL;
    return -1;
}

/* What ends for every job running on a worker, and how. */
typedef struct worker_end {
    int64_t worker_id;
    const char *reason;
    int64_t now;
    store_id_fn
        failed_fn; /* store_fault_worker: called for each job failed for good */
    void *ctx;
} worker_end;

typedef int (*end_fn)(store *st, int64_t job_id, const worker_end *w,
                      llmq_err *err);

static int hand_back_one(store *st, int64_t job_id, const worker_end *w,
                         llmq_err *err)
{
    store_change ch;
    return store_hand_back(st, job_id, w->worker_id, 0, w->reason, w->now, &ch,
                           err);
}

static int lose_one(store *st, int64_t job_id, const worker_end *w,
                    llmq_err *err)
{
    store_change ch;
    bool failed;
    if (fault_job(st, job_id, w->worker_id, 0, "lost", w->reason, false, w->now,
                  &ch, &failed, err))
        return -1;
    return failed && w->failed_fn ? w->failed_fn(w->ctx, job_id, err) : 0;
}

static int end_running(store *st, const worker_end *w, end_fn fn, llmq_err *err)
{
    int64_t *ids;
    size_t n;
    if (running_on(st, w->worker_id, &ids, &n, err))
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = fn(st, ids[i], w, err);
    free(ids);
    return rc;
}

int store_hand_back_worker(store *st, int64_t worker_id, const char *reason,
                           int64_t now_ms, llmq_err *err)
{
    const worker_end w = {
        .worker_id = worker_id, .reason = reason, .now = now_ms};
    return end_running(st, &w, hand_back_one, err);
}

int store_fault_worker(store *st, int64_t worker_id, const char *reason,
                       int64_t now_ms, store_id_fn failed_fn, void *ctx,
                       llmq_err *err)
{
    const worker_end w = {.worker_id = worker_id,
                          .reason = reason,
                          .now = now_ms,
                          .failed_fn = failed_fn,
                          .ctx = ctx};
    return end_running(st, &w, lose_one, err);
}

/* ---- results
 * ----------------------------------------------------------------- */

static int insert_result(store *st, int64_t job_id, const store_result *r,
                         int64_t now, llmq_err *err)
{
    st->json_a.len = 0;
    if (r->token_ids &&
        json_ids(r->token_ids, r->n_token_ids, &st->json_a, err))
        return -1;
    const size_t lp_size = r->logprobs ? lpblob_size(r->logprobs, r->n_logprobs)
                                       : 0;
    uint8_t *lp = r->logprobs ? malloc(lp_size ? lp_size : 1) : NULL;
    if (r->logprobs && !lp)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM,
                         "job %" PRId64 ": out of memory for logprobs", job_id);
    if (lp)
        lpblob_pack(r->logprobs, r->n_logprobs, lp);
    sqlite3_stmt *s = stmt_get(st, S_INSERT_RESULT);
    bind_i64(st, s, ":job_id", job_id);
    bind_row(st, s, RB_RESULT, r);
    bind_str(st, s, ":token_ids", r->token_ids ? st->json_a.p : NULL);
    if (lp)
        sqlite3_bind_blob64(s, param_index(st, s, ":logprobs"), lp, lp_size,
                            SQLITE_STATIC);
    bind_i64(st, s, ":now", now);
    int rc = stmt_run(st, s, err);
    free(lp);
    return rc;
}

/* A workers row update (S_WORKER_CREDIT, S_WORKER_SET): one value named
 * `name`, and last_seen. */
static int worker_update(store *st, int which, int64_t worker_id,
                         const char *name, col_kind kind, const void *value,
                         int64_t now, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, which);
    bind_i64(st, s, ":worker_id", worker_id);
    bind_value(st, s, name, kind, value);
    bind_i64(st, s, ":now", now);
    return stmt_run(st, s, err);
}

/* The conditional UPDATE is the whole first-result-wins rule: it matches
 * only while the job runs on that worker session and attempt.  *attempt
 * becomes the attempt that ended. */
static int mark_done(store *st, int64_t job_id, int64_t worker_id,
                     int32_t *attempt, int64_t now, bool *applied,
                     llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_DONE);
    bind_i64(st, s, ":job_id", job_id);
    bind_i64(st, s, ":worker_id", worker_id);
    bind_i64(st, s, ":attempt", *attempt);
    bind_i64(st, s, ":now", now);
    if (step_row(st, s, applied, err))
        return -1;
    if (!*applied)
        return 0;
    *attempt = sqlite3_column_int(s, 0);
    return finish(st, s, err);
}

int store_result_put(store *st, int64_t job_id, int64_t worker_id,
                     int32_t attempt, const store_result *res, int64_t now_ms,
                     store_change *out, llmq_err *err)
{
    int32_t ended = attempt;
    bool applied;
    if (mark_done(st, job_id, worker_id, &ended, now_ms, &applied, err))
        return -1;
    if (!applied) {
        job_now cur;
        return check_running(st, job_id, worker_id, attempt, &cur, out, err);
    }
    *out = STORE_APPLIED;
    if (insert_result(st, job_id, res, now_ms, err) ||
        attempt_end(st, job_id, ended, now_ms, "done", NULL, err) ||
        worker_update(st, S_WORKER_CREDIT, worker_id, ":tokens", COL_I32,
                      &res->generated_tokens, now_ms, err))
        return -1;
    count_move(st, STORE_RUNNING, STORE_DONE);
    return 0;
}

int store_job_facts_get(store *st, int64_t job_id, int64_t worker_id,
                        int32_t attempt, store_job_facts *out, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_JOB_FACTS);
    bind_i64(st, s, ":job_id", job_id);
    bind_i64(st, s, ":worker_id", worker_id);
    bind_i64(st, s, ":attempt", attempt);
    memset(out, 0, sizeof *out);
    if (step_row(st, s, &out->current, err))
        return -1;
    if (out->current)
        read_row(s, 0, FACTS_COLS, N_COLS(FACTS_COLS), out);
    sqlite3_reset(s);
    return 0;
}

/* ---- reading outcomes ---------------------------------------------------------- */

static int emit_outcome(store *st, sqlite3_stmt *s, store_outcome_fn fn,
                        void *ctx, llmq_err *err)
{
    store_outcome o = {0};
    store_result r = {0};
    read_row(s, 0, OUTCOME_COLS, N_COLS(OUTCOME_COLS), &o);
    if (state_parse(sqlite3_column_text(s, OC_STATE), &o.state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", o.job_id,
                         col_text(s, OC_STATE));
    if (o.state != STORE_DONE)
        return fn(ctx, &o, err);
    read_row(s, N_OUTCOME, RESULT_COLS, N_COLS(RESULT_COLS), &r);
    wire_token_logprobs *lp = NULL;
    const void *blob = sqlite3_column_blob(s, OC_LOGPROBS);
    if (sqlite3_column_type(s, OC_LOGPROBS) != SQLITE_NULL &&
        lpblob_unpack(blob, (size_t)sqlite3_column_bytes(s, OC_LOGPROBS), &lp,
                      &r.n_logprobs, err))
        return llmq_err_prefix(err, "job %" PRId64, o.job_id);
    r.logprobs = lp;
    uint32_t *ids;
    if (json_read_ids(st, col_text(s, OC_TOKEN_IDS), &ids, &r.n_token_ids,
                      err)) {
        free(lp);
        return -1;
    }
    r.token_ids = ids;
    o.res = &r;
    int rc = fn(ctx, &o, err);
    free(ids);
    free(lp);
    return rc;
}

int store_outcome_get(store *st, int64_t job_id, store_outcome_fn fn,
                      void *ctx, bool *found, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_OUTCOME);
    bind_i64(st, s, ":job_id", job_id);
    if (step_row(st, s, found, err))
        return -1;
    return *found ? emit_outcome(st, s, fn, ctx, err) : 0;
}

static int emit_brief(store *st, sqlite3_stmt *s, store_brief_fn fn,
                      void *ctx, llmq_err *err)
{
    store_brief b;
    read_row(s, 0, BRIEF_COLS, N_COLS(BRIEF_COLS), &b);
    if (state_parse(sqlite3_column_text(s, BR_STATE), &b.state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", b.id,
                         col_text(s, BR_STATE));
    return fn(ctx, &b, err);
}

int store_brief_get(store *st, int64_t job_id, store_brief_fn fn, void *ctx,
                    bool *found, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_BRIEF);
    bind_i64(st, s, ":job_id", job_id);
    if (step_row(st, s, found, err))
        return -1;
    return *found ? emit_brief(st, s, fn, ctx, err) : 0;
}

int store_batch_briefs(store *st, const char *batch_id, store_brief_fn fn,
                       void *ctx, int64_t *n, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_BATCH_BRIEFS);
    bind_str(st, s, ":batch_id", batch_id);
    *n = 0;
    for (;;) {
        bool row;
        if (step_row(st, s, &row, err))
            return -1;
        if (!row)
            return 0;
        if (emit_brief(st, s, fn, ctx, err))
            return -1;
        (*n)++;
    }
}

void store_counts_all(const store *st, int64_t out[STORE_N_STATES])
{
    memcpy(out, st->count, sizeof st->count);
}

/* ---- workers ------------------------------------------------------------------- */

int store_worker_add(store *st, const store_worker *w, int64_t now_ms,
                     int64_t *worker_id, llmq_err *err)
{
    st->json_b.len = 0;
    if (w->n_aliases &&
        json_strings(w->aliases, w->n_aliases, &st->json_b, err))
        return -1;
    sqlite3_stmt *s = stmt_get(st, S_WORKER_ADD);
    bind_row(st, s, RB_WORKER, w);
    bind_str(st, s, ":aliases", w->n_aliases ? st->json_b.p : NULL);
    bind_i64(st, s, ":now", now_ms);
    bool row;
    if (step_row(st, s, &row, err))
        return -1;
    if (!row)
        return llmq_errf(err, "worker %s: insert returned no id", w->name);
    *worker_id = sqlite3_column_int64(s, 0);
    return finish(st, s, err);
}

int store_worker_set(store *st, int64_t worker_id, const char *state,
                     int64_t now_ms, llmq_err *err)
{
    return worker_update(st, S_WORKER_SET, worker_id, ":state", COL_TEXT,
                         &state, now_ms, err);
}

int store_model_seen(store *st, const char *model, int64_t since_ms,
                     bool *seen, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_MODEL_SEEN);
    bind_str(st, s, ":model", model);
    bind_i64(st, s, ":since", since_ms);
    int rc = step_row(st, s, seen, err);
    sqlite3_reset(s);
    return rc;
}

int store_worker_heard(store *st, int64_t since_ms, bool *heard, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_WORKER_HEARD);
    bind_i64(st, s, ":since", since_ms);
    int rc = step_row(st, s, heard, err);
    sqlite3_reset(s);
    return rc;
}

int store_worker_key(store *st, const char *name, char *key, bool *found,
                     llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_WORKER_KEY);
    bind_str(st, s, ":name", name);
    key[0] = '\0';
    int rc = step_row(st, s, found, err);
    if (rc == 0 && *found)
        snprintf(key, CURVE_Z85_LEN + 1, "%s", col_text(s, 0));
    sqlite3_reset(s);
    return rc;
}

int store_worker_key_bind(store *st, const char *name, const char *key,
                          int64_t now_ms, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_WORKER_KEY_BIND);
    bind_str(st, s, ":name", name);
    bind_str(st, s, ":key", key);
    bind_i64(st, s, ":now", now_ms);
    return stmt_run(st, s, err);
}
