#include "broker/store.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "broker/checkpointer.h"
#include "broker/schema.sql.h"

#define N_MIGRATIONS (sizeof store_migrations / sizeof store_migrations[0])
_Static_assert(N_MIGRATIONS == STORE_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- prepared statements ------------------------------------------------- */

enum {
    S_BEGIN, S_COMMIT, S_ROLLBACK, S_MARK, S_MARK_RELEASE, S_MARK_UNDO,
    S_SUBMIT_META, S_FIND_KEY, S_INSERT_JOB, S_QUEUE_HEAD, S_CLAIM, S_ATTEMPT_START,
    S_JOB_READ, S_JSON_EACH, S_DONE, S_INSERT_RESULT, S_ATTEMPT_END,
    S_WORKER_CREDIT, S_JOB_CURRENT, S_REQUEUE, S_FAIL, S_CANCEL,
    S_RUNNING_ON, S_OUTCOME, S_BRIEF, S_BATCH_BRIEFS, S_WORKER_ADD,
    S_WORKER_SET, S_MODEL_SEEN,
    S_COUNT
};

#define JOB_COLUMNS                                                           \
    "id, client_key, batch_id, model, submit_id, priority, prompt,"           \
    " prompt_ids, max_tokens, temperature, top_k, top_p, min_p,"              \
    " repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,"    \
    " seed, ignore_eos, stop, state, attempts, submitted_at"

#define OUTCOME_COLUMNS                                                       \
    "j.id, j.client_key, j.batch_id, j.state, j.error, j.attempts, w.name,"   \
    " r.text, r.token_ids, r.finish_reason, r.prompt_tokens,"                 \
    " r.generated_tokens, r.prefill_ms, r.decode_ms, r.queue_wait_ms,"        \
    " r.prefill_tok_s, r.decode_tok_s, r.total_ms"                            \
    " FROM jobs j LEFT JOIN results r ON r.job_id = j.id"                     \
    " LEFT JOIN workers w ON w.id = j.worker_id"

#define BRIEF_COLUMNS                                                         \
    "j.id, j.state, j.attempts, w.name FROM jobs j"                           \
    " LEFT JOIN workers w ON w.id = j.worker_id"

static const char *const stmt_sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_MARK] = "SAVEPOINT msg",
    [S_MARK_RELEASE] = "RELEASE msg",
    [S_MARK_UNDO] = "ROLLBACK TO msg",
    [S_SUBMIT_META] = "INSERT INTO submits (batch_id, meta, received_at)"
                      " VALUES (?1, ?2, ?3)",
    [S_FIND_KEY] = "SELECT id FROM jobs WHERE client_key = ?1",
    [S_INSERT_JOB] =
        "INSERT INTO jobs (client_key, batch_id, model, submit_id, priority,"
        " prompt, prompt_ids, max_tokens, temperature, top_k, top_p, min_p,"
        " repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,"
        " seed, ignore_eos, stop, submitted_at) VALUES"
        " (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
        " ?16, ?17, ?18, ?19, ?20)",
    [S_QUEUE_HEAD] = "SELECT id FROM jobs WHERE state = 'queued'"
                     " AND (model IS NULL OR ?2 IS NULL OR model = ?2)"
                     " ORDER BY priority DESC, id LIMIT ?1",
    [S_CLAIM] = "UPDATE jobs SET state = 'running', attempts = attempts + 1,"
                " worker_id = ?2, started_at = ?3 WHERE id = ?1"
                " RETURNING attempts",
    [S_ATTEMPT_START] = "INSERT INTO attempts (job_id, attempt, worker_id,"
                        " started_at) VALUES (?1, ?2, ?3, ?4)",
    [S_JOB_READ] = "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?1",
    [S_JSON_EACH] = "SELECT value FROM json_each(?1)",
    [S_DONE] = "UPDATE jobs SET state = 'done', finished_at = ?4"
               " WHERE id = ?1 AND state = 'running' AND worker_id = ?2"
               " AND (?3 <= 0 OR attempts = ?3)"
               " RETURNING attempts, submitted_at, started_at",
    [S_INSERT_RESULT] =
        "INSERT INTO results (job_id, text, token_ids, finish_reason,"
        " prompt_tokens, generated_tokens, queue_wait_ms, prefill_ms,"
        " prefill_tok_s, decode_ms, decode_tok_s, total_ms, worker_id,"
        " attempt, created_at) VALUES"
        " (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [S_ATTEMPT_END] = "UPDATE attempts SET ended_at = ?3, outcome = ?4,"
                      " reason = ?5 WHERE job_id = ?1 AND attempt = ?2",
    [S_WORKER_CREDIT] = "UPDATE workers SET jobs_done = jobs_done + 1,"
                        " tokens_done = tokens_done + ?2, last_seen = ?3"
                        " WHERE id = ?1",
    [S_JOB_CURRENT] = "SELECT state, coalesce(worker_id, 0), attempts, faults"
                      " FROM jobs WHERE id = ?1",
    [S_REQUEUE] = "UPDATE jobs SET state = 'queued', worker_id = NULL,"
                  " faults = faults + ?2 WHERE id = ?1",
    /* The reasons of every faulted attempt, oldest first, become the error. */
    [S_FAIL] = "UPDATE jobs SET state = 'failed', faults = faults + 1,"
               " finished_at = ?2, error = (SELECT group_concat(line, '; ')"
               " FROM (SELECT 'attempt ' || attempt || ' on worker '"
               " || worker_id || ': ' || outcome || ': ' || coalesce(reason, '')"
               " AS line FROM attempts WHERE job_id = ?1"
               " AND outcome IN ('lost', 'failed') ORDER BY attempt))"
               " WHERE id = ?1",
    [S_CANCEL] = "UPDATE jobs SET state = 'cancelled', finished_at = ?2,"
                 " error = 'cancelled by a client' WHERE id = ?1",
    [S_RUNNING_ON] = "SELECT id FROM jobs WHERE state = 'running'"
                     " AND worker_id = ?1 ORDER BY id",
    [S_OUTCOME] = "SELECT " OUTCOME_COLUMNS " WHERE j.id = ?1",
    [S_BRIEF] = "SELECT " BRIEF_COLUMNS " WHERE j.id = ?1",
    [S_BATCH_BRIEFS] = "SELECT " BRIEF_COLUMNS " WHERE j.batch_id = ?1"
                       " ORDER BY j.id",
    [S_WORKER_ADD] =
        "INSERT INTO workers (name, host, pid, gpu_name, gpu_index, gpu_uuid,"
        " model, engine, slots, first_seen, last_seen) VALUES"
        " (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10) RETURNING id",
    [S_WORKER_SET] = "UPDATE workers SET state = ?2, last_seen = ?3"
                     " WHERE id = ?1",
    [S_MODEL_SEEN] = "SELECT 1 FROM workers WHERE model = ?1"
                     " AND last_seen >= ?2 LIMIT 1",
};

typedef struct strbuf {
    char *p;
    size_t len, cap;
} strbuf;

/* WAL pages after which a checkpoint is asked for (SQLite's default). */
#define CHECKPOINT_PAGES 1000

struct store {
    sqlite3 *db;
    ckpt *ckpt;
    int lock_fd;
    store_opts opts;
    bool in_tx;
    int64_t count[5]; /* jobs per state, kept exact by every transition */
    int64_t count_at_begin[5], count_at_mark[5]; /* restored on rollback */
    strbuf json_a, json_b; /* scratch for JSON columns being bound */
    sqlite3_stmt *stmt[S_COUNT];
};

static const char *const state_names[5] = {
    [STORE_QUEUED] = "queued",       [STORE_RUNNING] = "running",
    [STORE_DONE] = "done",           [STORE_FAILED] = "failed",
    [STORE_CANCELLED] = "cancelled",
};

const char *store_state_name(store_state s)
{
    return (unsigned)s < 5 ? state_names[s] : "?";
}

static int state_parse(const unsigned char *text, store_state *out)
{
    for (int i = 0; i < 5; i++) {
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

/* Runs a statement that returns no row we want. */
static int stmt_run(store *st, sqlite3_stmt *s, llmq_err *err)
{
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
    int rc = sqlite3_step(s);
    *has_row = rc == SQLITE_ROW;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return llmq_errf(err, "sqlite: %s: %s", sqlite3_sql(s),
                         sqlite3_errmsg(st->db));
    return 0;
}

static void bind_text(sqlite3_stmt *s, int i, const char *text)
{
    if (text)
        sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

static const char *col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

/* ---- JSON arrays in TEXT columns ------------------------------------------
 * Token ids and stop strings are stored as JSON arrays so that any SQL
 * client can read them (json_each); they are read back through json_each
 * too, so the only JSON code here is the writer. */

static int sb_reserve(strbuf *b, size_t more, llmq_err *err)
{
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return llmq_errf(err, "out of memory for a JSON array of %zu bytes",
                         cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

static int sb_putc(strbuf *b, char c, llmq_err *err)
{
    if (sb_reserve(b, 1, err))
        return -1;
    b->p[b->len++] = c;
    b->p[b->len] = 0;
    return 0;
}

static int sb_puts(strbuf *b, const char *s, size_t n, llmq_err *err)
{
    if (sb_reserve(b, n, err))
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static int json_ids(const uint32_t *ids, size_t n, strbuf *b, llmq_err *err)
{
    if (sb_putc(b, '[', err))
        return -1;
    for (size_t i = 0; i < n; i++) {
        char num[16];
        int k = snprintf(num, sizeof num, "%s%" PRIu32, i ? "," : "", ids[i]);
        if (sb_puts(b, num, (size_t)k, err))
            return -1;
    }
    return sb_putc(b, ']', err);
}

/* Strings reaching the store were validated as UTF-8 by the wire decoder,
 * so only quotes, backslashes and control characters need escaping. */
static int json_string(const char *s, strbuf *b, llmq_err *err)
{
    if (sb_putc(b, '"', err))
        return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        int k = 0;
        if (c == '"' || c == '\\')
            k = snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < 0x20)
            k = snprintf(esc, sizeof esc, "\\u%04x", c);
        if (k ? sb_puts(b, esc, (size_t)k, err) : sb_putc(b, (char)c, err))
            return -1;
    }
    return sb_putc(b, '"', err);
}

static int json_strings(const char *const *v, size_t n, strbuf *b,
                        llmq_err *err)
{
    if (sb_putc(b, '[', err))
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((i && sb_putc(b, ',', err)) || json_string(v[i], b, err))
            return -1;
    return sb_putc(b, ']', err);
}

/* Reads a JSON array column back through json_each: ids as int32, strings
 * into one buffer of NUL-terminated texts plus an array of pointers. */
typedef struct strlist {
    char **v;
    size_t n;
    strbuf text;
} strlist;

static void strlist_free(strlist *l)
{
    free(l->v);
    free(l->text.p);
    memset(l, 0, sizeof *l);
}

static sqlite3_stmt *json_each_stmt(store *st, const char *json)
{
    sqlite3_stmt *s = stmt_get(st, S_JSON_EACH);
    bind_text(s, 1, json);
    return s;
}

static int json_read_ids(store *st, const char *json, uint32_t **out,
                         size_t *n, llmq_err *err)
{
    *out = NULL;
    *n = 0;
    if (!json)
        return 0;
    sqlite3_stmt *s = json_each_stmt(st, json);
    size_t cap = 0;
    for (;;) {
        bool row;
        if (step_row(st, s, &row, err))
            goto fail;
        if (!row)
            return 0;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            uint32_t *p = realloc(*out, cap * sizeof *p);
            if (!p) {
                llmq_errf(err, "out of memory reading %zu token ids", cap);
                goto fail;
            }
            *out = p;
        }
        (*out)[(*n)++] = (uint32_t)sqlite3_column_int64(s, 0);
    }
fail:
    free(*out);
    *out = NULL;
    return -1;
}

static int json_read_strings(store *st, const char *json, strlist *l,
                             llmq_err *err)
{
    memset(l, 0, sizeof *l);
    if (!json)
        return 0;
    sqlite3_stmt *s = json_each_stmt(st, json);
    for (;;) {
        bool row;
        if (step_row(st, s, &row, err))
            goto fail;
        if (!row)
            break;
        const char *t = col_text(s, 0);
        if (sb_puts(&l->text, t ? t : "", t ? strlen(t) : 0, err) ||
            sb_putc(&l->text, 0, err))
            goto fail;
        l->n++;
    }
    l->v = calloc(l->n ? l->n : 1, sizeof *l->v);
    if (!l->v) {
        llmq_errf(err, "out of memory reading %zu stop strings", l->n);
        goto fail;
    }
    char *p = l->text.p;
    for (size_t i = 0; i < l->n; i++, p += strlen(p) + 1)
        l->v[i] = p;
    return 0;
fail:
    strlist_free(l);
    return -1;
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
             " PRAGMA busy_timeout = 5000; PRAGMA journal_size_limit = %d;",
             st->opts.sync == STORE_SYNC_NORMAL ? "NORMAL" : "FULL", 64 << 20);
    return exec_sql(st, sql, err);
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
    for (int64_t v = version; v < STORE_SCHEMA_VERSION; v++) {
        char bump[64];
        snprintf(bump, sizeof bump, "PRAGMA user_version = %" PRId64, v + 1);
        if (exec_sql(st, "BEGIN IMMEDIATE", err))
            return -1;
        if (exec_sql(st, store_migrations[v], err) ||
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

static int prepare_all(store *st, llmq_err *err)
{
    for (int i = 0; i < S_COUNT; i++)
        if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &st->stmt[i], NULL) != SQLITE_OK)
            return db_fail(st, err, stmt_sql[i]);
    return 0;
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

static int load_counts(store *st, llmq_err *err)
{
    sqlite3_stmt *s;
    const char *sql = "SELECT state, count(*) FROM jobs GROUP BY state";
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(st, err, sql);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        store_state state;
        if (state_parse(sqlite3_column_text(s, 0), &state) == 0)
            st->count[state] = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : db_fail(st, err, sql);
}

/* Two brokers on one file would requeue each other's running jobs: the
 * second one refuses to start.  flock is separate from SQLite's own POSIX
 * locks, and the descriptor stays open until after sqlite3_close so that
 * closing it cannot drop those. */
static int lock_file(store *st, const char *path, llmq_err *err)
{
    st->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (st->lock_fd < 0)
        return llmq_errf(err, "%s: %m", path);
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return llmq_errf(err, "%s: in use by another llmq-broker (%m)", path);
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

static int open_steps(store *st, const char *path, int64_t now, llmq_err *err)
{
    if (lock_file(st, path, err))
        return -1;
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
    if (configure(st, err) || migrate(st, err) || prepare_all(st, err) ||
        recover(st, now, err) || load_counts(st, err) ||
        ckpt_start(&st->ckpt, path, err))
        return llmq_err_prefix(err, "%s", path);
    /* Replaces SQLite's automatic checkpoint, which would run in commits. */
    sqlite3_wal_hook(st->db, wal_grew, st);
    return 0;
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
    st->lock_fd = -1;
    st->opts = *opts;
    if (open_steps(st, path, now_ms, err)) {
        store_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void store_close(store *st)
{
    if (!st)
        return;
    if (st->in_tx)
        store_rollback(st);
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    /* Stopped first, so that the broker's connection is the last one and its
     * close checkpoints everything and removes the WAL. */
    ckpt_stop(st->ckpt);
    sqlite3_close(st->db);
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    free(st->json_a.p);
    free(st->json_b.p);
    free(st);
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
    bind_text(s, 1, batch_id);
    bind_text(s, 2, meta);
    sqlite3_bind_int64(s, 3, now_ms);
    if (stmt_run(st, s, err))
        return -1;
    *submit_id = sqlite3_last_insert_rowid(st->db);
    return 0;
}

static int find_key(store *st, const store_job *job, int64_t *id, bool *found,
                    llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_FIND_KEY);
    bind_text(s, 1, job->client_key);
    if (step_row(st, s, found, err))
        return -1;
    if (*found)
        *id = sqlite3_column_int64(s, 0);
    return 0;
}

static int encode_json_columns(store *st, const store_job *job, llmq_err *err)
{
    st->json_a.len = st->json_b.len = 0;
    if (!job->prompt &&
        json_ids(job->prompt_ids, job->n_prompt_ids, &st->json_a, err))
        return -1;
    if (job->params.n_stop &&
        json_strings(job->params.stop, job->params.n_stop, &st->json_b, err))
        return -1;
    return 0;
}

static void bind_params(sqlite3_stmt *s, const job_params *p)
{
    sqlite3_bind_int(s, 8, p->max_tokens);
    sqlite3_bind_double(s, 9, p->temperature);
    sqlite3_bind_int(s, 10, p->top_k);
    sqlite3_bind_double(s, 11, p->top_p);
    sqlite3_bind_double(s, 12, p->min_p);
    sqlite3_bind_double(s, 13, p->repeat_penalty);
    sqlite3_bind_int(s, 14, p->repeat_last_n);
    sqlite3_bind_double(s, 15, p->presence_penalty);
    sqlite3_bind_double(s, 16, p->frequency_penalty);
    /* SQLite integers are signed: a seed above INT64_MAX is stored as its
     * two's complement and read back unchanged. */
    sqlite3_bind_int64(s, 17, (int64_t)p->seed);
    sqlite3_bind_int(s, 18, p->ignore_eos);
}

static int insert_job(store *st, const store_job *job, int64_t now,
                      int64_t *id, llmq_err *err)
{
    if (encode_json_columns(st, job, err))
        return -1;
    sqlite3_stmt *s = stmt_get(st, S_INSERT_JOB);
    bind_text(s, 1, job->client_key);
    bind_text(s, 2, job->batch_id);
    bind_text(s, 3, job->model);
    if (job->submit_id > 0)
        sqlite3_bind_int64(s, 4, job->submit_id);
    sqlite3_bind_int(s, 5, job->priority);
    bind_text(s, 6, job->prompt);
    bind_text(s, 7, job->prompt ? NULL : st->json_a.p);
    bind_params(s, &job->params);
    bind_text(s, 19, job->params.n_stop ? st->json_b.p : NULL);
    sqlite3_bind_int64(s, 20, now);
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
    bool found = false;
    if (job->client_key && find_key(st, job, job_id, &found, err))
        return -1;
    if (found) {
        *out = STORE_DUPLICATE;
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

static void params_from_row(sqlite3_stmt *s, job_params *p)
{
    p->max_tokens = (uint32_t)sqlite3_column_int(s, 8);
    p->temperature = (float)sqlite3_column_double(s, 9);
    p->top_k = sqlite3_column_int(s, 10);
    p->top_p = (float)sqlite3_column_double(s, 11);
    p->min_p = (float)sqlite3_column_double(s, 12);
    p->repeat_penalty = (float)sqlite3_column_double(s, 13);
    p->repeat_last_n = sqlite3_column_int(s, 14);
    p->presence_penalty = (float)sqlite3_column_double(s, 15);
    p->frequency_penalty = (float)sqlite3_column_double(s, 16);
    p->seed = (uint64_t)sqlite3_column_int64(s, 17);
    p->ignore_eos = sqlite3_column_int(s, 18) != 0;
}

/* Fills job from a S_JOB_READ row; *ids and *stop own the arrays. */
static int job_from_row(store *st, sqlite3_stmt *s, store_job *job,
                        uint32_t **ids, strlist *stop, llmq_err *err)
{
    memset(job, 0, sizeof *job);
    job->id = sqlite3_column_int64(s, 0);
    job->client_key = col_text(s, 1);
    job->batch_id = col_text(s, 2);
    job->model = col_text(s, 3);
    job->submit_id = sqlite3_column_int64(s, 4);
    job->priority = sqlite3_column_int(s, 5);
    job->prompt = col_text(s, 6);
    job_params *p = &job->params;
    params_from_row(s, p);
    if (state_parse(sqlite3_column_text(s, 20), &job->state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", job->id,
                         col_text(s, 20));
    job->attempts = sqlite3_column_int(s, 21);
    job->submitted_at = sqlite3_column_int64(s, 22);
    /* json_each runs on another statement: s keeps its row meanwhile. */
    if (json_read_ids(st, col_text(s, 7), ids, &job->n_prompt_ids, err))
        return -1;
    job->prompt_ids = *ids;
    if (json_read_strings(st, col_text(s, 19), stop, err))
        return -1;
    p->stop = (const char *const *)stop->v;
    p->n_stop = (uint32_t)stop->n;
    return 0;
}

static int emit_job(store *st, int64_t id, store_job_fn fn, void *ctx,
                    llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_JOB_READ);
    sqlite3_bind_int64(s, 1, id);
    bool row;
    if (step_row(st, s, &row, err))
        return -1;
    if (!row)
        return llmq_errf(err, "job %" PRId64 " vanished while claimed", id);
    store_job job;
    uint32_t *ids = NULL;
    strlist stop = {0};
    int rc = job_from_row(st, s, &job, &ids, &stop, err);
    if (rc == 0)
        rc = fn(ctx, &job, err);
    free(ids);
    strlist_free(&stop);
    return rc;
}

static int claim_one(store *st, int64_t id, int64_t worker_id, int64_t now,
                     llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_CLAIM);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, worker_id);
    sqlite3_bind_int64(s, 3, now);
    bool row;
    if (step_row(st, s, &row, err))
        return -1;
    if (!row)
        return llmq_errf(err, "job %" PRId64 " vanished while claimed", id);
    int64_t attempt = sqlite3_column_int64(s, 0);
    if (finish(st, s, err))
        return -1;
    s = stmt_get(st, S_ATTEMPT_START);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, attempt);
    sqlite3_bind_int64(s, 3, worker_id);
    sqlite3_bind_int64(s, 4, now);
    if (stmt_run(st, s, err))
        return -1;
    count_move(st, STORE_QUEUED, STORE_RUNNING);
    return 0;
}

/* The head of the queue, read in full before any of it changes state. */
static int queue_head(store *st, const char *model, int max, int64_t *ids,
                      int *n, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_QUEUE_HEAD);
    sqlite3_bind_int(s, 1, max);
    bind_text(s, 2, model);
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
    int n = 0, rc = queue_head(st, model, max, ids, &n, err);
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

typedef struct job_now {
    store_state state;
    int64_t worker_id;
    int32_t attempt;
    int32_t faults;
} job_now;

static int job_current(store *st, int64_t id, job_now *cur, bool *found,
                       llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_JOB_CURRENT);
    sqlite3_bind_int64(s, 1, id);
    if (step_row(st, s, found, err))
        return -1;
    if (!*found)
        return 0;
    if (state_parse(sqlite3_column_text(s, 0), &cur->state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", id,
                         col_text(s, 0));
    cur->worker_id = sqlite3_column_int64(s, 1);
    cur->attempt = sqlite3_column_int(s, 2);
    cur->faults = sqlite3_column_int(s, 3);
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
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int(s, 2, attempt);
    sqlite3_bind_int64(s, 3, now);
    bind_text(s, 4, outcome);
    bind_text(s, 5, reason);
    return stmt_run(st, s, err);
}

/* A running job leaves for `to` through statement `which` (?1 the job,
 * ?2 its argument: the faults to add for S_REQUEUE, the time for S_FAIL). */
static int leave_running(store *st, int which, int64_t id, int64_t arg,
                         store_state to, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, which);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, arg);
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
    return *failed ? leave_running(st, S_FAIL, id, now, STORE_FAILED, err)
                   : leave_running(st, S_REQUEUE, id, 1, STORE_QUEUED, err);
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
    return leave_running(st, S_REQUEUE, job_id, 0, STORE_QUEUED, err);
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
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, now_ms);
    if (stmt_run(st, s, err))
        return -1;
    count_move(st, cur.state, STORE_CANCELLED);
    return 0;
}

static int running_on(store *st, int64_t worker_id, int64_t **ids, size_t *n,
                      llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_RUNNING_ON);
    sqlite3_bind_int64(s, 1, worker_id);
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
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *p = realloc(*ids, cap * sizeof *p);
            if (!p) {
                llmq_errf(err, "out of memory listing jobs of worker %" PRId64,
                          worker_id);
                break;
            }
            *ids = p;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(s, 0);
    }
    free(*ids);
    *ids = NULL;
    return -1;
}

int store_hand_back_worker(store *st, int64_t worker_id, const char *reason,
                           int64_t now_ms, llmq_err *err)
{
    int64_t *ids;
    size_t n;
    if (running_on(st, worker_id, &ids, &n, err))
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        store_change ch;
        rc = store_hand_back(st, ids[i], worker_id, 0, reason, now_ms, &ch,
                             err);
    }
    free(ids);
    return rc;
}

int store_fault_worker(store *st, int64_t worker_id, const char *reason,
                       int64_t now_ms, store_id_fn failed_fn, void *ctx,
                       llmq_err *err)
{
    int64_t *ids;
    size_t n;
    if (running_on(st, worker_id, &ids, &n, err))
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        store_change ch;
        bool failed;
        rc = fault_job(st, ids[i], worker_id, 0, "lost", reason, false, now_ms,
                       &ch, &failed, err);
        if (rc == 0 && failed && failed_fn)
            rc = failed_fn(ctx, ids[i], err);
    }
    free(ids);
    return rc;
}

/* ---- results ----------------------------------------------------------------- */

static void bind_rate(sqlite3_stmt *s, int i, int32_t tokens, double ms)
{
    if (ms > 0)
        sqlite3_bind_double(s, i, 1000.0 * tokens / ms);
    else
        sqlite3_bind_null(s, i);
}

typedef struct done_row {
    int64_t job_id, worker_id, submitted_at, started_at, now;
    int32_t attempt;
} done_row;

static int insert_result(store *st, const done_row *d, const store_result *r,
                         llmq_err *err)
{
    st->json_a.len = 0;
    if (r->token_ids &&
        json_ids(r->token_ids, r->n_token_ids, &st->json_a, err))
        return -1;
    sqlite3_stmt *s = stmt_get(st, S_INSERT_RESULT);
    sqlite3_bind_int64(s, 1, d->job_id);
    bind_text(s, 2, r->text ? r->text : "");
    bind_text(s, 3, r->token_ids ? st->json_a.p : NULL);
    bind_text(s, 4, r->finish_reason);
    sqlite3_bind_int(s, 5, r->prompt_tokens);
    sqlite3_bind_int(s, 6, r->generated_tokens);
    sqlite3_bind_int64(s, 7, d->started_at - d->submitted_at);
    sqlite3_bind_double(s, 8, r->prefill_ms);
    bind_rate(s, 9, r->prompt_tokens, r->prefill_ms);
    sqlite3_bind_double(s, 10, r->decode_ms);
    bind_rate(s, 11, r->generated_tokens, r->decode_ms);
    sqlite3_bind_int64(s, 12, d->now - d->submitted_at);
    sqlite3_bind_int64(s, 13, d->worker_id);
    sqlite3_bind_int(s, 14, d->attempt);
    sqlite3_bind_int64(s, 15, d->now);
    return stmt_run(st, s, err);
}

static int credit_worker(store *st, int64_t worker_id, int32_t tokens,
                         int64_t now, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_WORKER_CREDIT);
    sqlite3_bind_int64(s, 1, worker_id);
    sqlite3_bind_int(s, 2, tokens);
    sqlite3_bind_int64(s, 3, now);
    return stmt_run(st, s, err);
}

/* The conditional UPDATE is the whole first-result-wins rule: it matches
 * only while the job runs on that worker session and attempt. */
static int mark_done(store *st, done_row *d, bool *applied, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_DONE);
    sqlite3_bind_int64(s, 1, d->job_id);
    sqlite3_bind_int64(s, 2, d->worker_id);
    sqlite3_bind_int(s, 3, d->attempt);
    sqlite3_bind_int64(s, 4, d->now);
    if (step_row(st, s, applied, err))
        return -1;
    if (!*applied)
        return 0;
    d->attempt = sqlite3_column_int(s, 0);
    d->submitted_at = sqlite3_column_int64(s, 1);
    d->started_at = sqlite3_column_int64(s, 2);
    return finish(st, s, err);
}

int store_result_put(store *st, int64_t job_id, int64_t worker_id,
                     int32_t attempt, const store_result *res, int64_t now_ms,
                     store_change *out, llmq_err *err)
{
    done_row d = {.job_id = job_id, .worker_id = worker_id,
                  .attempt = attempt, .now = now_ms};
    bool applied;
    if (mark_done(st, &d, &applied, err))
        return -1;
    if (!applied) {
        job_now cur;
        return check_running(st, job_id, worker_id, attempt, &cur, out, err);
    }
    *out = STORE_APPLIED;
    if (insert_result(st, &d, res, err) ||
        attempt_end(st, job_id, d.attempt, now_ms, "done", NULL, err) ||
        credit_worker(st, worker_id, res->generated_tokens, now_ms, err))
        return -1;
    count_move(st, STORE_RUNNING, STORE_DONE);
    return 0;
}

/* ---- reading outcomes ---------------------------------------------------------- */

static int emit_outcome(store *st, sqlite3_stmt *s, store_outcome_fn fn,
                        void *ctx, llmq_err *err)
{
    store_outcome o = {0};
    store_result r = {0};
    o.job_id = sqlite3_column_int64(s, 0);
    o.client_key = col_text(s, 1);
    o.batch_id = col_text(s, 2);
    if (state_parse(sqlite3_column_text(s, 3), &o.state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", o.job_id,
                         col_text(s, 3));
    o.error = col_text(s, 4);
    o.attempts = sqlite3_column_int(s, 5);
    o.worker = col_text(s, 6);
    if (o.state != STORE_DONE)
        return fn(ctx, &o, err);
    r.text = col_text(s, 7);
    r.finish_reason = col_text(s, 9);
    r.prompt_tokens = sqlite3_column_int(s, 10);
    r.generated_tokens = sqlite3_column_int(s, 11);
    r.prefill_ms = sqlite3_column_double(s, 12);
    r.decode_ms = sqlite3_column_double(s, 13);
    o.queue_wait_ms = sqlite3_column_double(s, 14);
    o.prefill_tok_s = sqlite3_column_double(s, 15);
    o.decode_tok_s = sqlite3_column_double(s, 16);
    o.total_ms = sqlite3_column_double(s, 17);
    uint32_t *ids;
    if (json_read_ids(st, col_text(s, 8), &ids, &r.n_token_ids, err))
        return -1;
    r.token_ids = ids;
    o.res = &r;
    int rc = fn(ctx, &o, err);
    free(ids);
    return rc;
}

int store_outcome_get(store *st, int64_t job_id, store_outcome_fn fn,
                      void *ctx, bool *found, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_OUTCOME);
    sqlite3_bind_int64(s, 1, job_id);
    if (step_row(st, s, found, err))
        return -1;
    return *found ? emit_outcome(st, s, fn, ctx, err) : 0;
}

static int emit_brief(store *st, sqlite3_stmt *s, store_brief_fn fn,
                      void *ctx, llmq_err *err)
{
    store_brief b = {.id = sqlite3_column_int64(s, 0),
                     .attempts = sqlite3_column_int(s, 2),
                     .worker = col_text(s, 3)};
    if (state_parse(sqlite3_column_text(s, 1), &b.state))
        return llmq_errf(err, "job %" PRId64 ": unknown state '%s'", b.id,
                         col_text(s, 1));
    return fn(ctx, &b, err);
}

int store_brief_get(store *st, int64_t job_id, store_brief_fn fn, void *ctx,
                    bool *found, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_BRIEF);
    sqlite3_bind_int64(s, 1, job_id);
    if (step_row(st, s, found, err))
        return -1;
    return *found ? emit_brief(st, s, fn, ctx, err) : 0;
}

int store_batch_briefs(store *st, const char *batch_id, store_brief_fn fn,
                       void *ctx, int64_t *n, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_BATCH_BRIEFS);
    bind_text(s, 1, batch_id);
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

void store_counts_all(const store *st, int64_t out[5])
{
    memcpy(out, st->count, sizeof st->count);
}

/* ---- workers ------------------------------------------------------------------- */

int store_worker_add(store *st, const store_worker *w, int64_t now_ms,
                     int64_t *worker_id, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_WORKER_ADD);
    bind_text(s, 1, w->name);
    bind_text(s, 2, w->host);
    sqlite3_bind_int64(s, 3, w->pid);
    bind_text(s, 4, w->gpu_name);
    sqlite3_bind_int(s, 5, w->gpu_index);
    bind_text(s, 6, w->gpu_uuid);
    bind_text(s, 7, w->model);
    bind_text(s, 8, w->engine);
    sqlite3_bind_int(s, 9, w->slots);
    sqlite3_bind_int64(s, 10, now_ms);
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
    sqlite3_stmt *s = stmt_get(st, S_WORKER_SET);
    sqlite3_bind_int64(s, 1, worker_id);
    bind_text(s, 2, state);
    sqlite3_bind_int64(s, 3, now_ms);
    return stmt_run(st, s, err);
}

int store_model_seen(store *st, const char *model, int64_t since_ms,
                     bool *seen, llmq_err *err)
{
    sqlite3_stmt *s = stmt_get(st, S_MODEL_SEEN);
    bind_text(s, 1, model);
    sqlite3_bind_int64(s, 2, since_ms);
    int rc = step_row(st, s, seen, err);
    sqlite3_reset(s);
    return rc;
}
