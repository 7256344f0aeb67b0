#include "tools/stats/report.h"

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "broker/store.h"
#include "common/check.h"
#include "common/json.h"

struct report_db {
    sqlite3 *db;
    int version;
};

/* ---- the selected jobs ---------------------------------------------------------- */

#define IN_LIST(param, expr) \
    " (" param " IS NULL OR " expr " IN (SELECT value FROM json_each(" param ")))"

/* Every report starts from `sel`, the jobs the filter selects (report.h).
 * The worker report leaves the worker out of it: a worker's time on jobs
 * that another worker finished still counts for it. */
#define SEL_JOBS(worker_clause)                                                           \
    "sel AS (SELECT j.id, j.batch_id, j.client_key, j.state, j.submitted_at,"             \
    " j.finished_at, j.attempts, w.name AS worker"                                        \
    " FROM jobs j LEFT JOIN workers w ON w.id = j.worker_id"                              \
    " WHERE" IN_LIST(":batches", "j.batch_id")                                            \
    " AND" IN_LIST(":models", "coalesce(j.model, w.model)") worker_clause                 \
    " AND CASE WHEN j.finished_at IS NULL THEN j.submitted_at < :until"                   \
    " ELSE j.finished_at >= :since AND j.finished_at < :until END)"
#define SEL SEL_JOBS(" AND" IN_LIST(":workers", "w.name"))

#define ISO(ms) "strftime('%Y-%m-%dT%H:%M:%fZ', (" ms ") / 1000.0, 'unixepoch')"

/* Buckets of the finished selected jobs, every one from the first to the
 * last (empty ones too: an idle minute is 0 tok/s, not a missing row). */
#define BUCKETS                                                                           \
    ", fin AS (SELECT (j.finished_at / :bucket) * :bucket AS t, j.state, j.worker,"       \
    " r.prompt_tokens AS pt, r.generated_tokens AS gt"                                    \
    " FROM sel j LEFT JOIN results r ON r.job_id = j.id WHERE j.finished_at IS NOT NULL)" \
    ", span AS (SELECT min(t) AS t0, max(t) AS t1 FROM fin)"                              \
    ", b(t) AS (SELECT t0 FROM span WHERE t0 IS NOT NULL"                                 \
    " UNION ALL SELECT b.t + :bucket FROM b, span WHERE b.t + :bucket <= span.t1)"

#define BUCKET_LABEL                                                                      \
    "CASE WHEN :bucket % 1000 = 0"                                                        \
    " THEN strftime('%Y-%m-%dT%H:%M:%SZ', b.t / 1000, 'unixepoch')"                       \
    " ELSE " ISO("b.t") " END"

/* The prefix hit rate, in percent: of the prompt tokens, those the
 * workers' prefix caches held (NULL: no prompt tokens). */
#define HIT_PCT(cached, prompt) "100.0 * " cached " / nullif(" prompt ", 0)"

static const char SQL_BATCHES[] =
    "WITH " SEL ", res AS (SELECT j.batch_id, r.* FROM sel j JOIN results r ON r.job_id = j.id)"
    ", qw AS (SELECT batch_id, queue_wait_ms AS v,"
    " row_number() OVER (PARTITION BY batch_id ORDER BY queue_wait_ms) AS rn,"
    " count(*) OVER (PARTITION BY batch_id) AS n FROM res)"
    /* nearest rank: the ceil(p * n / 100)-th smallest */
    ", pct AS (SELECT batch_id, max(CASE WHEN rn = (50 * n + 99) / 100 THEN v END) AS p50,"
    " max(CASE WHEN rn = (95 * n + 99) / 100 THEN v END) AS p95 FROM qw GROUP BY batch_id)"
    ", tok AS (SELECT batch_id, sum(prompt_tokens) AS pt, sum(generated_tokens) AS gt,"
    " sum(cached_prompt_tokens) AS ct, sum(prefill_ms) AS pms, sum(decode_ms) AS dms"
    " FROM res GROUP BY batch_id)"
    ", jb AS (SELECT batch_id, count(*) AS jobs, sum(state = 'done') AS done,"
    " sum(state = 'failed') AS failed, sum(state = 'cancelled') AS cancelled,"
    " sum(state = 'queued') AS queued, sum(state = 'running') AS running,"
    " min(submitted_at) AS t0, max(coalesce(finished_at, min(:now, :until))) AS t1"
    " FROM sel GROUP BY batch_id)"
    " SELECT jb.batch_id, jobs, done, failed, cancelled, queued, running,"
    " coalesce(pt, 0), coalesce(ct, 0), " HIT_PCT(
        "ct", "pt") ", coalesce(gt, 0),"
                    " (t1 - t0) / 1000.0,"
                    " 1000.0 * coalesce(gt, 0) / nullif(t1 - t0, 0), p50, p95,"
                    " 1000.0 * pt / nullif(pms, 0), 1000.0 * gt / nullif(dms, 0)"
                    " FROM jb LEFT JOIN tok ON tok.batch_id IS jb.batch_id"
                    " LEFT JOIN pct ON pct.batch_id IS jb.batch_id ORDER BY t0, jb.batch_id";

static const table_col COLS_BATCHES[] = {
    {"batch", TABLE_TEXT, 0, false},        {"jobs", TABLE_INT, 0, false},
    {"done", TABLE_INT, 0, false},          {"failed", TABLE_INT, 0, false},
    {"cancelled", TABLE_INT, 0, false},     {"queued", TABLE_INT, 0, false},
    {"running", TABLE_INT, 0, false},       {"prompt_tokens", TABLE_INT, 0, false},
    {"cached_tokens", TABLE_INT, 0, false}, {"prefix_hit_pct", TABLE_REAL, 1, false},
    {"gen_tokens", TABLE_INT, 0, false},    {"wall_s", TABLE_REAL, 2, false},
    {"tok_s", TABLE_REAL, 1, false},        {"wait_p50_ms", TABLE_REAL, 0, false},
    {"wait_p95_ms", TABLE_REAL, 0, false},  {"prefill_tok_s", TABLE_REAL, 1, false},
    {"decode_tok_s", TABLE_REAL, 1, false},
};

static const char SQL_WORKERS[] = "WITH " SEL_JOBS(
    "") ", att AS (SELECT w.name AS worker, max(a.started_at, :since) AS s,"
        " min(coalesce(a.ended_at, :now), :until) AS e"
        " FROM sel j JOIN attempts a ON a.job_id = j.id JOIN workers w ON w.id = a.worker_id)"
        /* Busy time is the union of the attempt intervals: islands of
         * overlapping intervals, each starting where one begins after the
         * latest end so far. */
        ", ord AS (SELECT worker, s, e, max(e) OVER (PARTITION BY worker ORDER BY s, e"
        " ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev FROM att WHERE e > s)"
        ", isl AS (SELECT worker, s, e, sum(prev IS NULL OR s > prev) OVER (PARTITION BY worker"
        " ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS k FROM ord)"
        ", busy AS (SELECT worker, sum(e1 - s1) AS busy_ms, sum(job_ms) AS job_ms"
        " FROM (SELECT worker, min(s) AS s1, max(e) AS e1, sum(e - s) AS job_ms"
        " FROM isl GROUP BY worker, k) GROUP BY worker)"
        ", flt AS (SELECT w.name AS worker, count(*) AS faults"
        " FROM sel j JOIN attempts a ON a.job_id = j.id JOIN workers w ON w.id = a.worker_id"
        " WHERE a.outcome IN ('lost', 'failed') GROUP BY w.name)"
        ", done AS (SELECT w.name AS worker, count(*) AS jobs, sum(r.prompt_tokens) AS pt,"
        " sum(r.cached_prompt_tokens) AS ct, sum(r.generated_tokens) AS gt,"
        " sum(r.prefill_ms) AS pms, sum(r.decode_ms) AS dms"
        " FROM sel j JOIN results r ON r.job_id = j.id JOIN workers w ON w.id = r.worker_id"
        " GROUP BY w.name)"
        ", ses AS (SELECT name AS worker, count(*) AS sessions, max(host) AS host,"
        " max(gpu_index) AS gpu_index, max(gpu_name) AS gpu_name, max(engine) AS engine,"
        " max(slots) AS slots, sum(max(0, min(CASE WHEN state = 'alive' THEN :now"
        " ELSE last_seen END, :until) - max(first_seen, :since))) AS online_ms"
        " FROM workers WHERE" IN_LIST(
            ":models",
            "model") " GROUP BY name)"
                     " SELECT ses.worker, host, CASE WHEN gpu_index < 0 THEN 'cpu'"
                     " ELSE 'gpu' || gpu_index || coalesce(' ' || gpu_name, '') END, engine, "
                     "sessions, slots,"
                     " online_ms / 1000.0, coalesce(busy_ms, 0) / 1000.0,"
                     " 100.0 * coalesce(busy_ms, 0) / nullif(online_ms, 0), 1.0 * job_ms / "
                     "nullif(busy_ms, 0),"
                     " coalesce(jobs, 0), coalesce(faults, 0), coalesce(pt, 0), coalesce(ct, 0),"
                     " " HIT_PCT(
                         "ct",
                         "pt") ", coalesce(gt, 0),"
                               " 1000.0 * gt / nullif(busy_ms, 0), 1000.0 * pt / nullif(pms, 0),"
                               " 1000.0 * gt / nullif(dms, 0)"
                               " FROM ses LEFT JOIN busy USING (worker) LEFT JOIN done USING "
                               "(worker)"
                               " LEFT JOIN flt USING (worker)"
                               " WHERE" IN_LIST(
                                   ":workers",
                                   "ses.worker") " AND (busy_ms IS NOT NULL OR jobs IS NOT NULL OR "
                                                 "faults IS NOT NULL"
                                                 " OR (:batches IS NULL AND online_ms > 0))"
                                                 " ORDER BY ses.worker";

static const table_col COLS_WORKERS[] = {
    {"worker", TABLE_TEXT, 0, false},
    {"host", TABLE_TEXT, 0, false},
    {"device", TABLE_TEXT, 0, false},
    {"engine", TABLE_TEXT, 0, false},
    {"sessions", TABLE_INT, 0, false},
    {"slots", TABLE_INT, 0, false},
    {"online_s", TABLE_REAL, 2, false},
    {"busy_s", TABLE_REAL, 2, false},
    {"util_pct", TABLE_REAL, 1, false},
    {"concurrency", TABLE_REAL, 2, false},
    {"jobs", TABLE_INT, 0, false},
    {"faults", TABLE_INT, 0, false},
    {"prompt_tokens", TABLE_INT, 0, false},
    {"cached_tokens", TABLE_INT, 0, false},
    {"prefix_hit_pct", TABLE_REAL, 1, false},
    {"gen_tokens", TABLE_INT, 0, false},
    {"tok_s", TABLE_REAL, 1, false},
    {"prefill_tok_s", TABLE_REAL, 1, false},
    {"decode_tok_s", TABLE_REAL, 1, false},
};

static const char SQL_TIME[] =
    "WITH RECURSIVE " SEL BUCKETS
    ", agg AS (SELECT t, sum(state = 'done') AS done, sum(state = 'failed') AS failed,"
    " sum(state = 'cancelled') AS cancelled, sum(pt) AS pt, sum(gt) AS gt,"
    " count(DISTINCT CASE WHEN state = 'done' THEN worker END) AS workers"
    " FROM fin GROUP BY t)"
    " SELECT " BUCKET_LABEL ", b.t, coalesce(done, 0), coalesce(failed, 0),"
    " coalesce(cancelled, 0), coalesce(pt, 0), coalesce(gt, 0),"
    " 1000.0 * coalesce(gt, 0) / :bucket, coalesce(workers, 0)"
    " FROM b LEFT JOIN agg USING (t) ORDER BY b.t";

static const table_col COLS_TIME[] = {
    {"time", TABLE_TEXT, 0, false},         {"epoch_ms", TABLE_INT, 0, true},
    {"done", TABLE_INT, 0, false},          {"failed", TABLE_INT, 0, false},
    {"cancelled", TABLE_INT, 0, false},     {"prompt_tokens", TABLE_INT, 0, false},
    {"gen_tokens", TABLE_INT, 0, false},    {"tok_s", TABLE_REAL, 1, false},
    {"workers", TABLE_INT, 0, false},
};

static const char SQL_WORKER_TIME[] =
    "WITH RECURSIVE " SEL BUCKETS
    ", ws AS (SELECT DISTINCT worker FROM fin WHERE state = 'done')"
    ", agg AS (SELECT t, worker, count(*) AS done, sum(gt) AS gt FROM fin"
    " WHERE state = 'done' GROUP BY t, worker)"
    " SELECT " BUCKET_LABEL ", b.t, ws.worker, coalesce(done, 0), coalesce(gt, 0),"
    " 1000.0 * coalesce(gt, 0) / :bucket"
    " FROM b CROSS JOIN ws LEFT JOIN agg ON agg.t = b.t AND agg.worker = ws.worker"
    " ORDER BY ws.worker, b.t";

static const table_col COLS_WORKER_TIME[] = {
    {"time", TABLE_TEXT, 0, false},       {"epoch_ms", TABLE_INT, 0, true},
    {"worker", TABLE_TEXT, 0, false},     {"done", TABLE_INT, 0, false},
    {"gen_tokens", TABLE_INT, 0, false},  {"tok_s", TABLE_REAL, 1, false},
};

#define RATES ", v AS (SELECT r.decode_tok_s AS x FROM sel j JOIN results r ON r.job_id = j.id" \
              " WHERE r.decode_tok_s IS NOT NULL)"

/* Bins 0 .. nbins-1 from :lo, each :width wide; the jobs below :lo or at
 * or past the last bin's end go into the tails, rows that span those jobs'
 * own speeds (report.h). */
static const char SQL_HISTOGRAM[] =
    "WITH RECURSIVE " SEL RATES
    ", bins(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM bins WHERE i + 1 < :nbins)"
    ", agg AS (SELECT CASE WHEN x < :lo THEN -1 WHEN x >= :lo + :nbins * :width THEN :nbins"
    " ELSE min(max(CAST((x - :lo) / :width AS INTEGER), 0), :nbins - 1) END AS i,"
    " count(*) AS n, min(x) AS x0, max(x) AS x1 FROM v GROUP BY 1)"
    ", r AS (SELECT -1 AS k, x0 AS a, :lo AS b, n, 'below' AS tail FROM agg WHERE i = -1"
    " UNION ALL SELECT i, :lo + i * :width, :lo + (i + 1) * :width, coalesce(n, 0), NULL"
    " FROM bins LEFT JOIN agg USING (i)"
    " UNION ALL SELECT :nbins, :lo + :nbins * :width, x1, n, 'above' FROM agg WHERE i = :nbins)"
    " SELECT a, b, n, tail FROM r ORDER BY k";

static const table_col COLS_HISTOGRAM[] = {
    {"decode_tok_s_from", TABLE_REAL, 1, false},
    {"decode_tok_s_to", TABLE_REAL, 1, false},
    {"jobs", TABLE_INT, 0, false},
    {"tail", TABLE_TEXT, 0, false},
};

static const char SQL_JOBS[] =
    "WITH " SEL " SELECT j.id, j.batch_id, j.client_key, j.state, j.worker, j.attempts,"
    " r.prompt_tokens, r.cached_prompt_tokens, r.generated_tokens, r.queue_wait_ms,"
    " r.prefill_tok_s, r.decode_tok_s,"
    " r.total_ms, r.finish_reason, " ISO("j.submitted_at") ", " ISO(
        "j.finished_at") " FROM sel j LEFT JOIN results r ON r.job_id = j.id ORDER BY j.id";

static const table_col COLS_JOBS[] = {
    {"id", TABLE_INT, 0, false},
    {"batch", TABLE_TEXT, 0, false},
    {"key", TABLE_TEXT, 0, false},
    {"state", TABLE_TEXT, 0, false},
    {"worker", TABLE_TEXT, 0, false},
    {"attempts", TABLE_INT, 0, false},
    {"prompt_tokens", TABLE_INT, 0, false},
    {"cached_tokens", TABLE_INT, 0, false},
    {"gen_tokens", TABLE_INT, 0, false},
    {"queue_wait_ms", TABLE_INT, 0, false},
    {"prefill_tok_s", TABLE_REAL, 1, false},
    {"decode_tok_s", TABLE_REAL, 1, false},
    {"total_ms", TABLE_INT, 0, false},
    {"finish", TABLE_TEXT, 0, false},
    {"submitted", TABLE_TEXT, 0, false},
    {"finished", TABLE_TEXT, 0, false},
};

static const char SQL_FINISH_SPAN[] =
    "WITH " SEL " SELECT min(finished_at), max(finished_at) FROM sel"
    " WHERE finished_at IS NOT NULL";

/* The smallest and largest decode speeds within Tukey's fences: 1.5
 * interquartile ranges beyond the quartiles (nearest rank).  Speeds whose
 * middle half is one value have no spread to tell outliers by: all count. */
static const char SQL_RATE_SPAN[] =
    "WITH " SEL RATES
    ", o AS (SELECT x, row_number() OVER (ORDER BY x) AS rn, count(*) OVER () AS n FROM v)"
    ", q AS (SELECT max(CASE WHEN rn = (25 * n + 99) / 100 THEN x END) AS q1,"
    " max(CASE WHEN rn = (75 * n + 99) / 100 THEN x END) AS q3 FROM o)"
    ", f AS (SELECT CASE WHEN q3 > q1 THEN q1 - 1.5 * (q3 - q1) END AS lo,"
    " CASE WHEN q3 > q1 THEN q3 + 1.5 * (q3 - q1) END AS hi FROM q)"
    " SELECT min(x), max(x) FROM v, f WHERE f.lo IS NULL OR x BETWEEN f.lo AND f.hi";

/* A rate column and the column of the span it is over, in seconds: over
 * less than REPORT_MIN_SPAN_MS the rate is withheld (report.h). */
typedef struct rate_guard {
    const char *rate, *span_s, *note;
} rate_guard;

static const rate_guard GUARD_BATCHES = {
    "tok_s", "wall_s",
    "short: the batch took less than 1 s (wall_s), too short a span for its tok_s to be a rate"};
static const rate_guard GUARD_WORKERS = {
    "tok_s", "busy_s",
    "short: the worker was busy for less than 1 s (busy_s), too short a span for its tok_s to be "
    "a rate"};

typedef struct report_def {
    const char *name, *title, *sql;
    const table_col *cols;
    size_t n_cols;
    const rate_guard *guard; /* NULL: none */
} report_def;

#define DEF(name, title, sql, cols)                                \
    {                                                              \
        name, title, sql, cols, sizeof cols / sizeof cols[0], NULL \
    }
#define DEF_GUARDED(name, title, sql, cols, guard)                   \
    {                                                                \
        name, title, sql, cols, sizeof cols / sizeof cols[0], &guard \
    }

static const report_def REPORTS[REPORT_COUNT] = {
    [REPORT_BATCHES] = DEF_GUARDED("batches", "Batches", SQL_BATCHES, COLS_BATCHES, GUARD_BATCHES),
    [REPORT_WORKERS] = DEF_GUARDED("workers", "Workers", SQL_WORKERS, COLS_WORKERS, GUARD_WORKERS),
    [REPORT_TIME] = DEF("time", "Over time", SQL_TIME, COLS_TIME),
    [REPORT_WORKER_TIME] = DEF("worker-time", "Per worker over time", SQL_WORKER_TIME,
                               COLS_WORKER_TIME),
    [REPORT_HISTOGRAM] = DEF("histogram", "Jobs by decode tok/s", SQL_HISTOGRAM, COLS_HISTOGRAM),
    [REPORT_JOBS] = DEF("jobs", "Jobs", SQL_JOBS, COLS_JOBS),
};

const char *report_name(report_kind k)
{
    return k < REPORT_COUNT ? REPORTS[k].name : "?";
}

int report_parse(const char *name, report_kind *out)
{
    for (int k = 0; k < REPORT_COUNT; k++)
        if (strcmp(REPORTS[k].name, name) == 0) {
            *out = (report_kind)k;
            return 0;
        }
    return -1;
}

/* ---- opening ---------------------------------------------------------------------- */

static int db_error(sqlite3 *db, llmq_err *err, const char *what)
{
    return llmq_errf(err, "%s: %s", what, sqlite3_errmsg(db));
}

static int table_exists(sqlite3 *db, const char *name, bool *yes, llmq_err *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                           -1, &s, NULL) != SQLITE_OK)
        return db_error(db, err, "reading the schema");
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return db_error(db, err, "reading the schema");
    *yes = rc == SQLITE_ROW;
    return 0;
}

/* A database from before version 6 has no results.cached_prompt_tokens: a
 * temporary view of that name, which the reports' plain "results" finds
 * before the table (SQLite looks in temp first), gives its results the 0
 * that migration 6 gives them.  The file is not written: temp is the
 * connection's own. */
static int shim_old_results(report_db *r, llmq_err *err)
{
    if (r->version >= 6)
        return 0;
    if (sqlite3_exec(r->db,
                     "CREATE TEMP VIEW results AS SELECT *, 0 AS cached_prompt_tokens"
                     " FROM main.results",
                     NULL, NULL, NULL) != SQLITE_OK)
        return db_error(r->db, err, "reading a database of schema version < 6");
    return 0;
}

/* An llmq database has user_version 1..STORE_SCHEMA_VERSION and the tables
 * the reports read. */
static int check_schema(report_db *r, llmq_err *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(r->db, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK ||
        sqlite3_step(s) != SQLITE_ROW) {
        int code = sqlite3_errcode(r->db);
        sqlite3_finalize(s);
        if (code == SQLITE_NOTADB)
            return llmq_errf(err, "not an llmq database (not an SQLite file)");
        return db_error(r->db, err, "reading user_version");
    }
    r->version = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    if (r->version > STORE_SCHEMA_VERSION)
        return llmq_errf(err, "schema version %d is newer than this llmq-stats knows (%d): "
                              "use a newer llmq-stats", r->version, STORE_SCHEMA_VERSION);
    static const char *const tables[] = {"jobs", "results", "workers", "attempts"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        bool yes = false;
        if (table_exists(r->db, tables[i], &yes, err))
            return -1;
        if (!yes)
            return llmq_errf(err, "not an llmq database (no table %s)", tables[i]);
    }
    if (r->version < 1)
        return llmq_errf(err, "not an llmq database (user_version %d; llmq's start at 1)",
                         r->version);
    return 0;
}

static int open_steps(report_db *r, const char *path, llmq_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return llmq_errf(err, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return llmq_errf(err, "not a regular file");
    if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return r->db ? db_error(r->db, err, "opening") : llmq_errf(err, "out of memory");
    /* The broker may hold the write lock for a moment (checkpoints). */
    sqlite3_busy_timeout(r->db, 5000);
    if (check_schema(r, err) || shim_old_results(r, err))
        return -1;
    /* One read transaction: every report sees the same snapshot. */
    if (sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return db_error(r->db, err, "starting a read transaction");
    return 0;
}

int report_db_open(report_db **out, const char *path, llmq_err *err)
{
    *out = NULL;
    report_db *r = calloc(1, sizeof *r);
    if (!r)
        return llmq_errf(err, "%s: out of memory", path);
    if (open_steps(r, path, err)) {
        report_db_close(r);
        return llmq_err_prefix(err, "%s", path);
    }
    *out = r;
    return 0;
}

void report_db_close(report_db *r)
{
    if (!r)
        return;
    if (r->db && !sqlite3_get_autocommit(r->db))
        sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(r->db);
    free(r);
}

int report_db_version(const report_db *r)
{
    return r->version;
}

/* ---- running ---------------------------------------------------------------------- */

/* A filter list as a JSON array for json_each(); NULL when empty. */
static int json_list(const char *const *v, size_t n, char **out, llmq_err *err)
{
    *out = NULL;
    if (n == 0)
        return 0;
    size_t size = 0;
    FILE *f = open_memstream(out, &size);
    if (!f)
        return llmq_errf(err, "out of memory");
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        json_write_string(f, v[i], strlen(v[i]));
    }
    fputc(']', f);
    if (fclose(f) != 0) {
        free(*out);
        *out = NULL;
        return llmq_errf(err, "out of memory");
    }
    return 0;
}

static void bind_int(sqlite3_stmt *s, const char *name, int64_t v)
{
    int i = sqlite3_bind_parameter_index(s, name);
    if (i > 0)
        sqlite3_bind_int64(s, i, v);
}

static void bind_real(sqlite3_stmt *s, const char *name, double v)
{
    int i = sqlite3_bind_parameter_index(s, name);
    if (i > 0)
        sqlite3_bind_double(s, i, v);
}

static int bind_list(sqlite3_stmt *s, const char *name, const char *const *v, size_t n,
                     llmq_err *err)
{
    int i = sqlite3_bind_parameter_index(s, name);
    if (i <= 0)
        return 0;
    char *json;
    if (json_list(v, n, &json, err))
        return -1;
    if (json)
        sqlite3_bind_text(s, i, json, -1, free);
    return 0;
}

static int bind_all(sqlite3_stmt *s, const report_filter *f, const report_shape *shape,
                    llmq_err *err)
{
    if (bind_list(s, ":batches", f->batches, f->n_batches, err) ||
        bind_list(s, ":workers", f->workers, f->n_workers, err) ||
        bind_list(s, ":models", f->models, f->n_models, err))
        return -1;
    bind_int(s, ":since", f->since_ms);
    bind_int(s, ":until", f->until_ms);
    bind_int(s, ":now", f->now_ms);
    if (shape) {
        bind_int(s, ":bucket", shape->bucket_ms);
        bind_real(s, ":lo", shape->bin_lo);
        bind_real(s, ":width", shape->bin_width);
        bind_int(s, ":nbins", shape->n_bins);
    }
    return 0;
}

static int fill_row(sqlite3_stmt *s, table *t, llmq_err *err)
{
    table_cell *row;
    if (table_add_row(t, &row, err))
        return -1;
    for (size_t c = 0; c < t->n_cols; c++) {
        if (sqlite3_column_type(s, (int)c) == SQLITE_NULL)
            continue;
        switch (t->cols[c].kind) {
        case TABLE_INT:
            row[c].i = sqlite3_column_int64(s, (int)c);
            row[c].null = false;
            break;
        case TABLE_REAL:
            row[c].d = sqlite3_column_double(s, (int)c);
            row[c].null = false;
            break;
        case TABLE_TEXT:
            if (table_set_text(&row[c], (const char *)sqlite3_column_text(s, (int)c), err))
                return -1;
            break;
        }
    }
    return 0;
}

/* Runs sql with the filter bound, one table row per result row. */
static int run_sql(report_db *r, const char *sql, const report_filter *f,
                   const report_shape *shape, table *t, llmq_err *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(r->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_error(r->db, err, t->name);
    int rc = -1;
    if ((size_t)sqlite3_column_count(s) != t->n_cols) {
        llmq_errf(err, "%s: the query has %d columns, the table %zu", t->name,
                  sqlite3_column_count(s), t->n_cols);
        goto out;
    }
    if (bind_all(s, f, shape, err))
        goto out;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        if (fill_row(s, t, err))
            goto out;
    if (step != SQLITE_DONE) {
        db_error(r->db, err, t->name);
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(s);
    return rc;
}

static int check_buckets(report_db *r, const report_filter *f, int64_t bucket_ms, llmq_err *err)
{
    int64_t first, last;
    bool any;
    if (report_finish_span(r, f, &first, &last, &any, err))
        return -1;
    int64_t n = any ? last / bucket_ms - first / bucket_ms + 1 : 0;
    if (n > REPORT_MAX_BUCKETS)
        return llmq_errf(err, "%" PRId64 " buckets of %" PRId64 " ms between the first and "
                              "the last finish (at most %d): choose a longer bucket",
                         n, bucket_ms, REPORT_MAX_BUCKETS);
    return 0;
}

/* Withholds each row's rate whose span is under REPORT_MIN_SPAN_MS. */
static void guard_rates(table *t, const rate_guard *g)
{
    const int rate = table_col_index(t, g->rate), span = table_col_index(t, g->span_s);
    LLMQ_ASSERT(rate >= 0 && span >= 0, "table %s has no %s or %s", t->name, g->rate, g->span_s);
    for (size_t row = 0; row < t->n_rows; row++) {
        const table_cell *s = table_at(t, row, (size_t)span);
        if (!s->null && s->d * 1000 < REPORT_MIN_SPAN_MS)
            table_withhold(t, row, (size_t)rate, "short", g->note);
    }
}

int report_run(report_db *r, report_kind k, const report_filter *f, const report_shape *shape,
               table *out, llmq_err *err)
{
    const report_def *d = &REPORTS[k];
    table_init(out, d->name, d->title, d->cols, d->n_cols);
    bool bucketed = k == REPORT_TIME || k == REPORT_WORKER_TIME;
    if (bucketed) {
        if (!shape || shape->bucket_ms < REPORT_MIN_SPAN_MS)
            return llmq_errf(err, "%s: buckets of %" PRId64 " ms: at least %d ms", d->name,
                             shape ? shape->bucket_ms : 0, REPORT_MIN_SPAN_MS);
        if (check_buckets(r, f, shape->bucket_ms, err))
            return -1;
        char len[32];
        if (shape->bucket_ms % 1000 == 0)
            snprintf(len, sizeof len, "%" PRId64 " s", shape->bucket_ms / 1000);
        else
            snprintf(len, sizeof len, "%" PRId64 " ms", shape->bucket_ms);
        snprintf(out->title, sizeof out->title, "%s (UTC buckets of %s)", d->title, len);
    }
    if (k == REPORT_HISTOGRAM && (!shape || shape->n_bins < 1 || !(shape->bin_width > 0)))
        return llmq_errf(err, "%s: no bins", d->name);
    if (run_sql(r, d->sql, f, shape, out, err))
        return -1;
    if (d->guard)
        guard_rates(out, d->guard);
    return 0;
}

/* ---- spans and shapes -------------------------------------------------------------- */

static const table_col COLS_SPAN_INT[] = {{"lo", TABLE_INT, 0, false}, {"hi", TABLE_INT, 0, false}};
static const table_col COLS_SPAN_REAL[] = {{"lo", TABLE_REAL, 0, false},
                                           {"hi", TABLE_REAL, 0, false}};

int report_finish_span(report_db *r, const report_filter *f, int64_t *first_ms, int64_t *last_ms,
                       bool *any, llmq_err *err)
{
    table t;
    table_init(&t, "finish span", "", COLS_SPAN_INT, 2);
    int rc = run_sql(r, SQL_FINISH_SPAN, f, NULL, &t, err);
    *any = rc == 0 && !table_at(&t, 0, 0)->null;
    if (*any) {
        *first_ms = table_at(&t, 0, 0)->i;
        *last_ms = table_at(&t, 0, 1)->i;
    }
    table_free(&t);
    return rc;
}

int report_rate_span(report_db *r, const report_filter *f, double *lo, double *hi, bool *any,
                     llmq_err *err)
{
    table t;
    table_init(&t, "rate span", "", COLS_SPAN_REAL, 2);
    int rc = run_sql(r, SQL_RATE_SPAN, f, NULL, &t, err);
    *any = rc == 0 && !table_at(&t, 0, 0)->null;
    if (*any) {
        *lo = table_at(&t, 0, 0)->d;
        *hi = table_at(&t, 0, 1)->d;
    }
    table_free(&t);
    return rc;
}
