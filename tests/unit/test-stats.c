/* test-stats: llmq-stats' reports on a database written by the broker's
 * own store (broker/store.c) with a scripted clock, so that every figure
 * can be computed a second way.
 *
 * Pins: per-batch counts, tokens, wall time and rates equal sums computed
 * directly in SQL over the raw tables; queue-wait percentiles equal the
 * nearest rank of the sorted waits; worker busy time equals the union of
 * its attempt intervals merged in C, utilisation and concurrency follow;
 * time buckets hold the jobs and tokens that finished in them, idle
 * buckets included; the batch, worker, model and time filters select what
 * they say; the histogram counts every done job once; the CLI's JSON, CSV
 * and text agree with the library, its errors name a missing file, a file
 * that is not SQLite, an SQLite file that is not llmq's and a newer schema;
 * the plot is well-formed XML (python3's minidom) with one line per worker
 * and one bar per bin.
 *
 * And figures that hold, on a second database: a batch's and a worker's
 * tok/s over a span under a second is withheld (NULL in JSON, "short" in
 * text with a note saying why) while over seconds it is given; buckets are
 * never shorter than a second (auto picks 1 s for a 13 s run, --bucket
 * 500ms is refused); the histogram's bins follow the bulk of the decode
 * speeds (Tukey's fences) and count one outlier in an "above" row of its
 * own, which the plot draws beside an axis that ends where the bins do
 * (at 200, past the bulk's largest, 195). */
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker/schema.sql.h"
#include "broker/store.h"
#include "common/json.h"
#include "tests/unit/check.h"
#include "tools/stats/report.h"
#include "tools/stats/when.h"

/* 2023-11-14T22:14:00Z: on a minute boundary, so minute buckets start here. */
#define T0 1700000040000LL
#define NOW (T0 + 80000)
/* Markup in a worker id: the text, CSV, JSON and SVG writers must escape it. */
#define WORKER_A "h:gpu0 \"A\", <B&C>"

static char dir[256], db_path[300];

/* ---- the scenario ----------------------------------------------------------------- */

typedef struct scenario {
    store *st;
    int64_t a, b;   /* worker sessions: a WORKER_A (model stories), b "h:cpu" (model other) */
    int64_t id[32]; /* job ids by scenario number (1..13 in the first scenario) */
    int failures;
} scenario;

static void must(scenario *s, int rc, const llmq_err *err, const char *what)
{
    if (rc) {
        printf("setup failed: %s: %s\n", what, err->msg);
        s->failures++;
    }
}

static void add_jobs(scenario *s, const char *batch, int first, int last, int64_t at)
{
    for (int n = first; n <= last; n++) {
        store_job j = {.prompt = "Once upon a time", .batch_id = batch};
        j.params = (job_params){
            .max_tokens = 64, .top_p = 1, .repeat_penalty = 1, .repeat_last_n = 64};
        store_submit_outcome out;
        llmq_err err = {0};
        must(s, store_submit(s->st, &j, 0, at, &s->id[n], &out, &err), &err, "submit");
    }
}

static int no_op(void *ctx, const store_job *job, llmq_err *err)
{
    (void)ctx, (void)job, (void)err;
    return 0;
}

static void claim(scenario *s, int64_t worker, int n, int64_t at)
{
    int got;
    llmq_err err = {0};
    must(s, store_claim(s->st, worker, NULL, n, at, no_op, NULL, &got, &err), &err, "claim");
    if (got != n) {
        printf("setup failed: claimed %d jobs, not %d\n", got, n);
        s->failures++;
    }
}

static void result(scenario *s, int n, int64_t worker, int64_t at, int pt, int gt,
                   double prefill_ms, double decode_ms)
{
    store_result r = {.text = "x",
                      .finish_reason = "length",
                      .prompt_tokens = pt,
                      .cached_prompt_tokens = pt / 2,
                      .generated_tokens = gt,
                      .prefill_ms = prefill_ms,
                      .decode_ms = decode_ms};
    store_change ch;
    llmq_err err = {0};
    must(s, store_result_put(s->st, s->id[n], worker, 0, &r, at, &ch, &err), &err, "result");
    if (ch != STORE_APPLIED) {
        printf("setup failed: result of job %d not applied\n", n);
        s->failures++;
    }
}

static void fault(scenario *s, int n, int64_t worker, int64_t at, bool permanent)
{
    store_change ch;
    bool failed;
    llmq_err err = {0};
    must(s, store_fault(s->st, s->id[n], worker, 0, permanent ? "bad prompt" : "worker lost",
                        permanent, at, &ch, &failed, &err), &err, "fault");
}

static int64_t add_worker(scenario *s, const char *name, int gpu, const char *model, int slots)
{
    store_worker w = {.name = name, .host = "h", .pid = 42, .gpu_index = gpu,
                      .gpu_name = gpu >= 0 ? "Test GPU" : NULL, .model = model,
                      .engine = gpu >= 0 ? "cuda" : "cpu", .slots = slots};
    int64_t id = 0;
    llmq_err err = {0};
    must(s, store_worker_add(s->st, &w, T0, &id, &err), &err, "worker");
    return id;
}

/* A new database at path, written through the broker's store from now_ms. */
static int open_scenario(scenario *s, const char *path, int64_t now_ms)
{
    llmq_err err = {0};
    store_opts o = {.max_attempts = 3, .sync = STORE_SYNC_NORMAL};
    if (store_open(&s->st, path, &o, now_ms, &err)) {
        printf("store_open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Batch b1 (jobs 1-8) at T0, b2 (9-12) at +10 s, job 13 without a batch at
 * +20 s.  Worker a runs 1-4, then 6 (after b lost it), 7 and 8 (fails for
 * good); b runs 5, loses 6, runs 10 and is still running 11 at NOW.  Job 9
 * is cancelled while queued; 12 and 13 stay queued. */
static int build_scenario(void)
{
    scenario s = {0};
    llmq_err err = {0};
    if (open_scenario(&s, db_path, T0))
        return -1;
    s.a = add_worker(&s, WORKER_A, 0, "stories", 4);
    s.b = add_worker(&s, "h:cpu", -1, "other", 2);
    add_jobs(&s, "b1", 1, 8, T0);
    claim(&s, s.a, 4, T0 + 1000);
    claim(&s, s.b, 2, T0 + 1000);
    result(&s, 1, s.a, T0 + 3000, 10, 20, 50, 1000);
    result(&s, 2, s.a, T0 + 4000, 12, 30, 60, 1000);
    result(&s, 3, s.a, T0 + 5000, 8, 40, 40, 1000);
    result(&s, 4, s.a, T0 + 6000, 10, 16, 50, 400);
    result(&s, 5, s.b, T0 + 7000, 10, 20, 100, 2000);
    fault(&s, 6, s.b, T0 + 8000, false);
    claim(&s, s.a, 3, T0 + 9000); /* 6 (second attempt), 7, 8 */
    add_jobs(&s, "b2", 9, 12, T0 + 10000);
    store_state was;
    int64_t on;
    store_change ch;
    must(&s, store_cancel(s.st, s.id[9], T0 + 11000, &ch, &was, &on, &err), &err, "cancel");
    fault(&s, 8, s.a, T0 + 12000, true);
    add_jobs(&s, NULL, 13, 13, T0 + 20000);
    result(&s, 6, s.a, T0 + 65000, 10, 10, 20, 500);
    result(&s, 7, s.a, T0 + 66000, 10, 25, 30, 1250);
    claim(&s, s.b, 2, T0 + 70000); /* 10, 11 */
    result(&s, 10, s.b, T0 + 72000, 5, 50, 10, 2500);
    store_close(s.st);
    return s.failures ? -1 : 0;
}

/* ---- independent figures ---------------------------------------------------------------- */

static double sql_num(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* First column of the first row on a connection of its own; NAN if NULL. */
static double sql_num(const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    sqlite3 *db;
    sqlite3_stmt *s;
    double v = NAN;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
            v = sqlite3_column_double(s, 0);
        sqlite3_finalize(s);
    } else {
        printf("sql: %s: %s\n", sql, sqlite3_errmsg(db));
    }
    sqlite3_close(db);
    return v;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Reads rows of two integers (a NULL second one becomes `dflt`). */
static size_t sql_pairs(const char *sql, int64_t dflt, int64_t (*out)[2], size_t max)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    size_t n = 0;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        while (n < max && sqlite3_step(s) == SQLITE_ROW) {
            out[n][0] = sqlite3_column_int64(s, 0);
            out[n][1] = sqlite3_column_type(s, 1) == SQLITE_NULL ? dflt
                                                                 : sqlite3_column_int64(s, 1);
            n++;
        }
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return n;
}

/* Union length of a worker's attempt intervals from `since` on, merged
 * after sorting; only attempts of jobs a --since filter selects count. */
static int64_t busy_ms(const char *worker, int64_t since)
{
    char sql[512];
    int64_t iv[64][2];
    snprintf(sql, sizeof sql,
             "SELECT max(a.started_at, %" PRId64 "), coalesce(a.ended_at, %lld)"
             " FROM attempts a JOIN workers w ON w.id = a.worker_id"
             " JOIN jobs j ON j.id = a.job_id WHERE w.name = '%s'"
             " AND (j.finished_at IS NULL OR j.finished_at >= %" PRId64 ")",
             since, NOW, worker, since);
    size_t n = sql_pairs(sql, NOW, iv, 64);
    qsort(iv, n, sizeof iv[0], cmp_i64);
    int64_t total = 0, s = 0, e = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        if (iv[i][0] > e) {
            total += e > s ? e - s : 0;
            s = iv[i][0];
            e = iv[i][1];
        } else if (iv[i][1] > e) {
            e = iv[i][1];
        }
    }
    return total + (e > s ? e - s : 0);
}

/* Nearest-rank percentile of a batch's queue waits, sorted in C. */
static double wait_pct(const char *batch, int p)
{
    char sql[256];
    int64_t w[64][2];
    snprintf(sql, sizeof sql,
             "SELECT r.queue_wait_ms, 0 FROM results r JOIN jobs j ON j.id = r.job_id"
             " WHERE j.batch_id = '%s'", batch);
    size_t n = sql_pairs(sql, 0, w, 64);
    int64_t v[64];
    for (size_t i = 0; i < n; i++)
        v[i] = w[i][0];
    qsort(v, n, sizeof v[0], cmp_i64);
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    return n ? (double)v[rank - 1] : NAN;
}

/* ---- reading report tables ---------------------------------------------------------- */

static double num(const table *t, size_t r, const char *col)
{
    int c = table_col_index(t, col);
    if (c < 0 || r >= t->n_rows) {
        printf("no cell %s[%zu]\n", col, r);
        return NAN;
    }
    const table_cell *cell = table_at(t, r, (size_t)c);
    if (cell->null)
        return NAN;
    return t->cols[c].kind == TABLE_INT ? (double)cell->i : cell->d;
}

static const char *str(const table *t, size_t r, const char *col)
{
    int c = table_col_index(t, col);
    if (c < 0 || r >= t->n_rows || table_at(t, r, (size_t)c)->null)
        return "";
    return table_at(t, r, (size_t)c)->s;
}

/* Row whose column col holds text v, or SIZE_MAX. */
static size_t row_of(const table *t, const char *col, const char *v)
{
    for (size_t r = 0; r < t->n_rows; r++)
        if (strcmp(str(t, r, col), v) == 0)
            return r;
    return SIZE_MAX;
}

static bool near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(1, fabs(b));
}

static report_filter all_jobs(void)
{
    return (report_filter){.since_ms = INT64_MIN, .until_ms = INT64_MAX, .now_ms = NOW};
}

static const report_shape MINUTES = {.bucket_ms = 60000, .bin_lo = 0, .bin_width = 5,
                                     .n_bins = 5};

static int run(report_db *db, report_kind k, const report_filter *f, const report_shape *sh,
               table *t)
{
    llmq_err err = {0};
    if (report_run(db, k, f, sh, t, &err)) {
        printf("report %s: %s\n", report_name(k), err.msg);
        return -1;
    }
    return 0;
}

/* ---- library checks ------------------------------------------------------------------ */

static void check_batch_row(const table *t, const char *batch)
{
    size_t r = row_of(t, "batch", batch);
    const char *name = batch[0] ? batch : "(none)";
    char where[96];
    snprintf(where, sizeof where, batch[0] ? "j.batch_id = '%s'" : "j.batch_id IS NULL%s", batch);
    CHECK(r != SIZE_MAX, "batch %s has a row", name);
    if (r == SIZE_MAX)
        return;
    static const char *const states[] = {"done", "failed", "cancelled", "queued", "running"};
    bool counts_ok = near(num(t, r, "jobs"), sql_num("SELECT count(*) FROM jobs j WHERE %s", where));
    for (size_t i = 0; i < 5; i++)
        counts_ok = counts_ok &&
                    near(num(t, r, states[i]),
                         sql_num("SELECT count(*) FROM jobs j WHERE %s AND state = '%s'", where,
                                 states[i]));
    CHECK(counts_ok, "batch %s: jobs per state equal counts in SQL", name);
    double pt = sql_num("SELECT coalesce(sum(prompt_tokens), 0) FROM results r JOIN jobs j"
                        " ON j.id = r.job_id WHERE %s", where);
    double gt = sql_num("SELECT coalesce(sum(generated_tokens), 0) FROM results r JOIN jobs j"
                        " ON j.id = r.job_id WHERE %s", where);
    CHECK(near(num(t, r, "prompt_tokens"), pt) && near(num(t, r, "gen_tokens"), gt),
          "batch %s: prompt and generated tokens equal sums in SQL (%.0f, %.0f)", name, pt, gt);
    double ct = sql_num("SELECT coalesce(sum(cached_prompt_tokens), 0) FROM results r JOIN jobs j"
                        " ON j.id = r.job_id WHERE %s",
                        where);
    CHECK(near(num(t, r, "cached_tokens"), ct) &&
              (pt ? near(num(t, r, "prefix_hit_pct"), 100 * ct / pt)
                  : isnan(num(t, r, "prefix_hit_pct"))),
          "batch %s: cached prompt tokens equal their sum in SQL (%.0f), the prefix hit rate is"
          " their share of the prompt tokens",
          name, ct);
    double wall = sql_num("SELECT (max(coalesce(finished_at, %lld)) - min(submitted_at))"
                          " / 1000.0 FROM jobs j WHERE %s", NOW, where);
    CHECK(near(num(t, r, "wall_s"), wall) && near(num(t, r, "tok_s"), gt / wall),
          "batch %s: wall time from first submit to last finish (or now): %.1f s, "
          "tok/s = generated / wall", name, wall);
    double pre = sql_num("SELECT 1000.0 * sum(prompt_tokens) / sum(prefill_ms) FROM results r"
                         " JOIN jobs j ON j.id = r.job_id WHERE %s", where);
    double dec = sql_num("SELECT 1000.0 * sum(generated_tokens) / sum(decode_ms) FROM results r"
                         " JOIN jobs j ON j.id = r.job_id WHERE %s", where);
    CHECK((isnan(pre) ? isnan(num(t, r, "prefill_tok_s")) : near(num(t, r, "prefill_tok_s"), pre)) &&
          (isnan(dec) ? isnan(num(t, r, "decode_tok_s")) : near(num(t, r, "decode_tok_s"), dec)),
          "batch %s: prefill and decode tok/s are token-weighted (%.1f, %.1f)", name, pre, dec);
    if (!batch[0])
        return;
    double p50 = wait_pct(batch, 50), p95 = wait_pct(batch, 95);
    CHECK(near(num(t, r, "wait_p50_ms"), p50) && near(num(t, r, "wait_p95_ms"), p95),
          "batch %s: queue wait p50 %.0f ms and p95 %.0f ms are the nearest ranks", name, p50,
          p95);
}

static void test_batches(report_db *db)
{
    report_filter f = all_jobs();
    table t;
    if (run(db, REPORT_BATCHES, &f, &MINUTES, &t) == 0) {
        CHECK(t.n_rows == 3, "three batch rows: b1, b2 and jobs without a batch (%zu)", t.n_rows);
        CHECK(strcmp(str(&t, 0, "batch"), "b1") == 0, "batches come in order of first submit");
        check_batch_row(&t, "b1");
        check_batch_row(&t, "b2");
        check_batch_row(&t, "");
    }
    table_free(&t);
}

static void check_worker_row(const table *t, const char *worker, const char *device)
{
    size_t r = row_of(t, "worker", worker);
    CHECK(r != SIZE_MAX, "worker %s has a row", worker);
    if (r == SIZE_MAX)
        return;
    double busy = (double)busy_ms(worker, INT64_MIN) / 1000;
    double job_s = sql_num("SELECT sum(coalesce(ended_at, %lld) - started_at) / 1000.0"
                           " FROM attempts a JOIN workers w ON w.id = a.worker_id"
                           " WHERE w.name = '%s'", NOW, worker);
    double online = sql_num("SELECT (%lld - first_seen) / 1000.0 FROM workers WHERE name = '%s'",
                            NOW, worker);
    CHECK(near(num(t, r, "busy_s"), busy), "worker %s: busy time is the union of its attempts "
          "(%.1f s)", worker, busy);
    CHECK(near(num(t, r, "online_s"), online) &&
              near(num(t, r, "util_pct"), 100 * busy / online),
          "worker %s: online %.0f s, utilisation busy / online", worker, online);
    CHECK(near(num(t, r, "concurrency"), job_s / busy),
          "worker %s: concurrency = job time / busy time (%.2f)", worker, job_s / busy);
    double jobs = sql_num("SELECT count(*) FROM results r JOIN workers w ON w.id = r.worker_id"
                          " WHERE w.name = '%s'", worker);
    double gt = sql_num("SELECT sum(generated_tokens) FROM results r JOIN workers w"
                        " ON w.id = r.worker_id WHERE w.name = '%s'", worker);
    double faults = sql_num("SELECT count(*) FROM attempts a JOIN workers w ON w.id = a.worker_id"
                            " WHERE w.name = '%s' AND outcome IN ('lost', 'failed')", worker);
    double pt = sql_num("SELECT sum(prompt_tokens) FROM results r JOIN workers w"
                        " ON w.id = r.worker_id WHERE w.name = '%s'",
                        worker);
    double ct = sql_num("SELECT sum(cached_prompt_tokens) FROM results r JOIN workers w"
                        " ON w.id = r.worker_id WHERE w.name = '%s'",
                        worker);
    CHECK(ct > 0 && near(num(t, r, "cached_tokens"), ct) &&
              near(num(t, r, "prefix_hit_pct"), 100 * ct / pt),
          "worker %s: %.0f cached of %.0f prompt tokens, as in SQL, and their share", worker, ct,
          pt);
    CHECK(near(num(t, r, "jobs"), jobs) && near(num(t, r, "gen_tokens"), gt) &&
              near(num(t, r, "faults"), faults) && near(num(t, r, "tok_s"), gt / busy),
          "worker %s: %.0f jobs, %.0f tokens, %.0f faults as in SQL, tok/s over busy time",
          worker, jobs, gt, faults);
    CHECK(strcmp(str(t, r, "device"), device) == 0, "worker %s: device '%s' (%s)", worker,
          device, str(t, r, "device"));
}

static void test_workers(report_db *db)
{
    report_filter f = all_jobs();
    table t;
    if (run(db, REPORT_WORKERS, &f, &MINUTES, &t) == 0) {
        CHECK(t.n_rows == 2, "two worker rows (%zu)", t.n_rows);
        check_worker_row(&t, WORKER_A, "gpu0 Test GPU");
        check_worker_row(&t, "h:cpu", "cpu");
    }
    table_free(&t);
    f.since_ms = T0 + 60000;
    if (run(db, REPORT_WORKERS, &f, &MINUTES, &t) == 0) {
        size_t r = row_of(&t, "worker", WORKER_A);
        double busy = (double)busy_ms(WORKER_A, f.since_ms) / 1000;
        CHECK(r != SIZE_MAX && near(num(&t, r, "busy_s"), busy) &&
                  near(num(&t, r, "online_s"), 20),
              "--since clips busy (%.1f s) and online time (20 s) to the window", busy);
    }
    table_free(&t);
}

static void test_time(report_db *db)
{
    report_filter f = all_jobs();
    table t;
    if (run(db, REPORT_TIME, &f, &MINUTES, &t) == 0) {
        bool ok = t.n_rows == 2;
        for (size_t r = 0; ok && r < t.n_rows; r++) {
            double at = num(&t, r, "epoch_ms");
            ok = near(at, (double)T0 + 60000.0 * (double)r) &&
                 near(num(&t, r, "done"),
                      sql_num("SELECT count(*) FROM jobs WHERE state = 'done' AND"
                              " finished_at / 60000 * 60000 = %.0f", at)) &&
                 near(num(&t, r, "gen_tokens"),
                      sql_num("SELECT sum(generated_tokens) FROM results WHERE"
                              " created_at / 60000 * 60000 = %.0f", at)) &&
                 near(num(&t, r, "failed") + num(&t, r, "cancelled"),
                      sql_num("SELECT count(*) FROM jobs WHERE state IN ('failed', 'cancelled')"
                              " AND finished_at / 60000 * 60000 = %.0f", at)) &&
                 near(num(&t, r, "tok_s"), num(&t, r, "gen_tokens") / 60);
        }
        CHECK(ok, "minute buckets hold the jobs, failures and tokens finished in them");
        CHECK(strcmp(str(&t, 0, "time"), "2023-11-14T22:14:00Z") == 0,
              "buckets are labelled with their UTC start (%s)", str(&t, 0, "time"));
    }
    table_free(&t);
    report_shape ten = MINUTES;
    ten.bucket_ms = 10000;
    if (run(db, REPORT_TIME, &f, &ten, &t) == 0) {
        double first = sql_num("SELECT min(finished_at) / 10000 FROM jobs");
        double last = sql_num("SELECT max(finished_at) / 10000 FROM jobs");
        double gen = 0, idle = 0;
        for (size_t r = 0; r < t.n_rows; r++) {
            gen += num(&t, r, "gen_tokens");
            idle += num(&t, r, "done") + num(&t, r, "failed") + num(&t, r, "cancelled") == 0;
        }
        CHECK(near((double)t.n_rows, floor(last) - floor(first) + 1) && idle > 0 &&
                  near(gen, sql_num("SELECT sum(generated_tokens) FROM results")),
              "10 s buckets: one row per bucket from first to last finish, %.0f idle ones "
              "included, tokens add up", idle);
    }
    table_free(&t);
    if (run(db, REPORT_WORKER_TIME, &f, &MINUTES, &t) == 0) {
        double a = 0;
        for (size_t r = 0; r < t.n_rows; r++)
            if (strcmp(str(&t, r, "worker"), WORKER_A) == 0)
                a += num(&t, r, "gen_tokens");
        CHECK(t.n_rows == 4 && near(a, sql_num("SELECT sum(generated_tokens) FROM results r"
                                               " JOIN workers w ON w.id = r.worker_id"
                                               " WHERE w.name = '%s'", WORKER_A)),
              "worker-time: every worker in every bucket (%zu rows), a worker's tokens add up",
              t.n_rows);
    }
    table_free(&t);
}

static void test_histogram(report_db *db)
{
    report_filter f = all_jobs();
    report_shape sh = {.bucket_ms = 60000, .bin_lo = 0, .bin_width = 10, .n_bins = 5};
    table t;
    if (run(db, REPORT_HISTOGRAM, &f, &sh, &t) == 0) {
        bool ok = t.n_rows == 5;
        for (size_t r = 0; ok && r < t.n_rows; r++) {
            double lo = num(&t, r, "decode_tok_s_from"), hi = num(&t, r, "decode_tok_s_to");
            ok = near(num(&t, r, "jobs"),
                      sql_num("SELECT count(*) FROM results WHERE decode_tok_s >= %g AND"
                              " (decode_tok_s < %g OR %d)", lo, hi, r + 1 == t.n_rows));
        }
        CHECK(ok, "histogram: each bin counts the done jobs whose decode tok/s falls in it");
    }
    table_free(&t);
}

/* Jobs a filter selects, over every batch row. */
static double selected(report_db *db, const report_filter *f)
{
    table t;
    double n = 0;
    if (run(db, REPORT_BATCHES, f, &MINUTES, &t) == 0)
        for (size_t r = 0; r < t.n_rows; r++)
            n += num(&t, r, "jobs");
    table_free(&t);
    return n;
}

static void test_filters(report_db *db)
{
    static const char *const b2[] = {"b2"}, *const cpu[] = {"h:cpu"}, *const other[] = {"other"};
    report_filter f = all_jobs();
    f.batches = b2;
    f.n_batches = 1;
    table t;
    if (run(db, REPORT_WORKERS, &f, &MINUTES, &t) == 0)
        CHECK(t.n_rows == 1 && strcmp(str(&t, 0, "worker"), "h:cpu") == 0 &&
                  near(selected(db, &f), 4),
              "--batch b2: its 4 jobs, and only the worker that ran some of them");
    table_free(&t);
    double on_cpu = sql_num("SELECT count(*) FROM jobs j JOIN workers w ON w.id = j.worker_id"
                            " WHERE w.name = 'h:cpu'");
    f = all_jobs();
    f.workers = cpu;
    f.n_workers = 1;
    CHECK(near(selected(db, &f), on_cpu), "--worker h:cpu: the %.0f jobs it ran last", on_cpu);
    f = all_jobs();
    f.models = other;
    f.n_models = 1;
    CHECK(near(selected(db, &f), on_cpu), "--model other: the jobs of the worker serving it");
    f = all_jobs();
    f.since_ms = T0 + 60000;
    CHECK(near(selected(db, &f), sql_num("SELECT count(*) FROM jobs WHERE finished_at IS NULL"
                                         " OR finished_at >= %lld", T0 + 60000)),
          "--since: jobs finished since then, and unfinished ones");
    f = all_jobs();
    f.until_ms = T0 + 30000;
    CHECK(near(selected(db, &f), sql_num("SELECT count(*) FROM jobs WHERE finished_at < %lld"
                                         " OR (finished_at IS NULL AND submitted_at < %lld)",
                                         T0 + 30000, T0 + 30000)),
          "--until: jobs finished before then, and unfinished ones submitted before");
}

/* ---- the command line ----------------------------------------------------------------- */

static char exe[512];

static int capture(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Runs a shell command, its stdout (and whatever it redirects) into out;
 * returns its exit status. */
static int capture(char *out, size_t size, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    out[0] = 0;
    if (!p)
        return -1;
    size_t got;
    while (n + 1 < size && (got = fread(out + n, 1, size - 1 - n, p)) > 0)
        n += got;
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const json_value *find_row(const json_value *arr, const char *key, const char *v)
{
    for (size_t i = 0; arr && arr->type == JSON_ARRAY && i < arr->arr.n; i++) {
        const json_value *k = json_get(&arr->arr.items[i], key);
        if (k && k->type == JSON_STRING && strcmp(k->str.s, v) == 0)
            return &arr->arr.items[i];
    }
    return NULL;
}

static double json_num(const json_value *obj, const char *key)
{
    const json_value *v = obj ? json_get(obj, key) : NULL;
    return v && v->type == JSON_NUMBER ? v->num.d : NAN;
}

static void test_cli_json(const char *now)
{
    static char out[1 << 16];
    int rc = capture(out, sizeof out, "%s --db %s --now %s --bucket 1m --format json"
                     " -t batches -t workers -t time", exe, db_path, now);
    json_value *root = NULL;
    llmq_err err = {0};
    CHECK(rc == 0 && json_parse(out, strlen(out), &root, &err) == 0,
          "--format json exits 0 and prints one valid JSON document%s%s", rc ? "" : " ",
          rc ? "" : err.msg);
    if (!root)
        return;
    const json_value *b = json_get(root, "batches"), *w = json_get(root, "workers");
    const json_value *t = json_get(root, "time"), *b1 = find_row(b, "batch", "b1");
    double wall = sql_num("SELECT (max(finished_at) - min(submitted_at)) / 1000.0 FROM jobs"
                          " WHERE batch_id = 'b1'");
    double gt = sql_num("SELECT sum(generated_tokens) FROM results r JOIN jobs j"
                        " ON j.id = r.job_id WHERE j.batch_id = 'b1'");
    CHECK(b && b->type == JSON_ARRAY && b->arr.n == 3 && near(json_num(b1, "gen_tokens"), gt) &&
              near(json_num(b1, "tok_s"), gt / wall),
          "JSON batches: 3 rows, b1's tokens and tok/s as computed in SQL");
    CHECK(find_row(w, "worker", WORKER_A) != NULL,
          "JSON workers: a worker id with quotes and markup survives escaping");
    CHECK(t && t->type == JSON_ARRAY && t->arr.n == 2 && json_num(root, "bucket_ms") == 60000,
          "JSON time: two minute buckets, bucket_ms 60000");
    const json_value *n = json_get(root, "now");
    CHECK(n && n->type == JSON_STRING && strcmp(n->str.s, now) == 0, "JSON says which now");
    json_free(root);
}

static void test_cli_csv_text(const char *now)
{
    static char out[1 << 16];
    int rc = capture(out, sizeof out, "%s --db %s --now %s --bucket 1m --format csv -t time",
                     exe, db_path, now);
    int lines = 0;
    for (const char *p = out; (p = strstr(p, "\r\n")); p += 2)
        lines++;
    CHECK(rc == 0 && strncmp(out, "time,epoch_ms,done,failed,", 26) == 0 && lines == 3,
          "--format csv: a header and one CRLF line per bucket (%d lines)", lines);
    rc = capture(out, sizeof out, "%s --db %s --now %s --format csv -t workers", exe, db_path,
                 now);
    CHECK(rc == 0 && strstr(out, "\r\n\"h:gpu0 \"\"A\"\", <B&C>\",h,") != NULL,
          "CSV quotes a field with a comma and doubles its quotes");
    rc = capture(out, sizeof out, "%s --db %s --now %s -t batches", exe, db_path, now);
    const char *row = strstr(out, "\nb1 ");
    CHECK(rc == 0 && strncmp(out, "Batches\nbatch ", 14) == 0 && row,
          "text: a title, a header and aligned rows");
}

/* capture for one-line error messages: the final newline dropped. */
#define err_capture(out, size, ...) chomp(out, capture(out, size, __VA_ARGS__))

static int chomp(char *s, int rc)
{
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n')
        s[n - 1] = 0;
    return rc;
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, NULL))
        printf("%s: %s: %s\n", path, sql, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
}

/* llmq-stats on path exits with status and says expect. */
static void refused(const char *path, const char *flags, int status, const char *expect,
                    const char *what)
{
    char out[4096];
    int rc = err_capture(out, sizeof out, "%s --db %s %s 2>&1", exe, path, flags);
    CHECK(rc == status && strstr(out, expect), "%s: %s", what, out);
}

static void test_cli_errors(void)
{
    char path[400], sql[512];
    snprintf(path, sizeof path, "%s/nope.db", dir);
    refused(path, "", 1, "nope.db: No such file or directory", "a missing file is named");
    snprintf(path, sizeof path, "%s/text.db", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("this is not a database, but it is long enough to have a header ...........\n"
              "................................................................\n", f);
        fclose(f);
    }
    refused(path, "", 1, "not an llmq database (not an SQLite file)",
            "a text file is not an llmq database");
    snprintf(path, sizeof path, "%s/other.db", dir);
    sql_exec(path, "CREATE TABLE jobs (x)");
    refused(path, "", 1, "not an llmq database (no table results",
            "an SQLite file without llmq's tables is refused");
    snprintf(path, sizeof path, "%s/newer.db", dir);
    snprintf(sql, sizeof sql, "VACUUM INTO '%s'", path);
    sql_exec(db_path, sql);
    sql_exec(path, "PRAGMA user_version = 99");
    refused(path, "", 1, "schema version 99 is newer than this llmq-stats knows",
            "a newer schema is refused by version");
    refused(db_path, "--format xml", 2, "--format", "a bad --format is a usage error (2)");
    refused(db_path, "--since 2023-02-30", 2, "no such day", "an impossible date is refused");
}

/* The reader keeps working while a writer holds the database, and sees
 * only what was committed. */
static void test_cli_beside_writer(const char *now)
{
    sqlite3 *w = NULL;
    static char out[1 << 16];
    bool locked = sqlite3_open(db_path, &w) == SQLITE_OK &&
                  sqlite3_exec(w, "BEGIN IMMEDIATE; UPDATE jobs SET state = 'cancelled'"
                                  " WHERE state = 'queued'", NULL, NULL, NULL) == SQLITE_OK;
    int rc = capture(out, sizeof out, "%s --db %s --now %s --format csv -t batches", exe,
                     db_path, now);
    double queued = sql_num("SELECT count(*) FROM jobs WHERE state = 'queued'");
    CHECK(locked && rc == 0 && queued == 2,
          "llmq-stats reads while another connection holds a write transaction");
    sqlite3_exec(w, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(w);
}

static void test_plot(const char *now)
{
    char svg[400], out[4096];
    snprintf(svg, sizeof svg, "%s/plot.svg", dir);
    int rc = capture(out, sizeof out, "%s --db %s --now %s --bucket 10s --quiet --plot %s",
                     exe, db_path, now, svg);
    CHECK(rc == 0 && out[0] == 0, "--plot --quiet writes the plot and prints nothing");
    /* Prints: the root element, the bar count, the jobs in the bars' titles,
     * then each line's series name. */
    rc = capture(out, sizeof out,
                 "/usr/bin/python3 -c '"
                 "import sys, xml.dom.minidom as m\n"
                 "d = m.parse(sys.argv[1])\n"
                 "g = {e.getAttribute(\"id\"): e for e in d.getElementsByTagName(\"g\")}\n"
                 "lines = g[\"throughput\"].getElementsByTagName(\"polyline\")\n"
                 "bars = g[\"histogram\"].getElementsByTagName(\"rect\")\n"
                 "jobs = sum(int(b.getElementsByTagName(\"title\")[0].firstChild.data"
                 ".split(\": \")[1].split()[0]) for b in bars)\n"
                 "print(d.documentElement.tagName, len(bars), jobs)\n"
                 "for n in sorted({p.getAttribute(\"data-series\") for p in lines}): print(n)"
                 "' %s 2>&1",
                 svg);
    char root[16] = "", names[256] = "";
    int bars = 0, jobs = -1, used = 0;
    sscanf(out, "%15s %d %d\n%n", root, &bars, &jobs, &used);
    snprintf(names, sizeof names, "%s", out + used);
    char expect[128];
    snprintf(expect, sizeof expect, "h:cpu\n%s\n", WORKER_A);
    double done = sql_num("SELECT count(*) FROM results WHERE decode_tok_s IS NOT NULL");
    bool ok = rc == 0 && strcmp(root, "svg") == 0 && strcmp(names, expect) == 0;
    if (!ok)
        printf("python3 said:\n%s\n", out);
    CHECK(ok, "the SVG parses as XML with one line per worker, markup escaped");
    CHECK(bars >= 2 && jobs == (int)done, "the histogram's %d bars hold all %.0f done jobs",
          bars, done);
}

/* The time arguments: every form the man page promises, and refusals. */
static void test_when(void)
{
    static const struct {
        const char *text;
        int64_t ms; /* expected, relative to NOW for the relative forms */
    } good[] = {
        {"2023-11-14", 1699920000000LL},
        {"2023-11-14T22:14", T0},
        {"2023-11-14 22:14:00Z", T0},
        {"2023-11-14T22:14:00.250z", T0 + 250},
        {"2023-11-15T00:14:00+02:00", T0},
        {"2023-11-14T20:14:00-0200", T0},
        {"now", NOW},
        {"90s", NOW - 90000},
        {"1.5h", NOW - 5400000},
        {"2d", NOW - 2 * 86400000LL},
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ms = 0;
        llmq_err err = {0};
        if (when_parse(good[i].text, NOW, &ms, &err) || ms != good[i].ms) {
            printf("  %s: %" PRId64 " (%s), not %" PRId64 "\n", good[i].text, ms, err.msg,
                   good[i].ms);
            ok = false;
        }
    }
    CHECK(ok, "ISO 8601 dates, times, zones, fractions and lengths ago parse to their instant");
    static const char *const bad[] = {"2023-13-01", "2023-11-14T25:00", "yesterday", "10",
                                      "-5m", "2023-11-14T22:14+2", "1h ago", ""};
    ok = true;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms;
        llmq_err err = {0};
        if (when_parse(bad[i], NOW, &ms, &err) == 0 || !strstr(err.msg, "not a time")) {
            printf("  '%s' was taken (%s)\n", bad[i], err.msg);
            ok = false;
        }
    }
    CHECK(ok, "bad times are refused with a message saying what a time is");
    char iso[WHEN_ISO_MAX];
    when_format(T0 + 5, iso, sizeof iso);
    CHECK(strcmp(iso, "2023-11-14T22:14:00.005Z") == 0, "times print as ISO 8601 UTC (%s)", iso);
}

/* ---- figures that hold ------------------------------------------------------------- */

/* An hour after the first scenario, on a database of its own. */
#define T1 (T0 + 3600000)
#define QUICK_GT 8 /* tokens per job of batch quick */
#define STEADY_JOBS 21
static char figures_path[300];

/* Batch quick: 3 jobs of QUICK_GT tokens submitted at T1, run by h:quick
 * from T1 + 1 ms, done at T1 + 5, 6 and 7 ms.  Batch steady: STEADY_JOBS
 * jobs of 100 tokens submitted at T1 + 10 s and run by h:steady, done at
 * T1 + 11 s to T1 + 13 s; twenty decode at 100, 105 ... 195 tok/s, the last
 * at 10000 tok/s. */
static int build_figures(void)
{
    scenario s = {0};
    if (open_scenario(&s, figures_path, T1))
        return -1;
    int64_t quick = add_worker(&s, "h:quick", -1, "stories", 4);
    int64_t steady = add_worker(&s, "h:steady", -1, "stories", 32);
    add_jobs(&s, "quick", 1, 3, T1);
    claim(&s, quick, 3, T1 + 1);
    for (int n = 1; n <= 3; n++)
        result(&s, n, quick, T1 + 4 + n, 5, QUICK_GT, 0.1, 0.2);
    add_jobs(&s, "steady", 4, 3 + STEADY_JOBS, T1 + 10000);
    claim(&s, steady, STEADY_JOBS, T1 + 10000);
    for (int k = 0; k < STEADY_JOBS; k++) {
        double rate = k < STEADY_JOBS - 1 ? 100 + 5 * k : 10000;
        result(&s, 4 + k, steady, T1 + 11000 + 100 * k, 10, 100, 10, 100 * 1000.0 / rate);
    }
    store_close(s.st);
    return s.failures ? -1 : 0;
}

static void test_short_spans(report_db *db)
{
    report_filter f = {.since_ms = INT64_MIN, .until_ms = INT64_MAX, .now_ms = T1 + 60000};
    table t;
    if (run(db, REPORT_BATCHES, &f, &MINUTES, &t) == 0) {
        size_t q = row_of(&t, "batch", "quick"), st = row_of(&t, "batch", "steady");
        CHECK(q != SIZE_MAX && near(num(&t, q, "wall_s"), 0.007) && isnan(num(&t, q, "tok_s")) &&
                  near(num(&t, q, "gen_tokens"), 3 * QUICK_GT),
              "a batch of 7 ms has its wall time and tokens, and no tok/s");
        CHECK(st != SIZE_MAX && near(num(&t, st, "wall_s"), 3) &&
                  near(num(&t, st, "tok_s"), 100.0 * STEADY_JOBS / 3),
              "a batch of 3 s has its tok/s (%.1f)", num(&t, st, "tok_s"));
        CHECK(strstr(t.note, "less than 1 s") != NULL, "the table says why: %s", t.note);
    }
    table_free(&t);
    if (run(db, REPORT_WORKERS, &f, &MINUTES, &t) == 0) {
        size_t q = row_of(&t, "worker", "h:quick"), st = row_of(&t, "worker", "h:steady");
        CHECK(q != SIZE_MAX && near(num(&t, q, "busy_s"), 0.006) && isnan(num(&t, q, "tok_s")),
              "a worker busy for 6 ms has no tok/s");
        CHECK(st != SIZE_MAX && near(num(&t, st, "busy_s"), 3) &&
                  near(num(&t, st, "tok_s"), 100.0 * STEADY_JOBS / 3),
              "a worker busy for 3 s has its tok/s");
    }
    table_free(&t);
    report_shape half = MINUTES;
    half.bucket_ms = 500;
    llmq_err err = {0};
    CHECK(report_run(db, REPORT_TIME, &f, &half, &t, &err) == -1 &&
              strstr(err.msg, "at least 1000 ms"),
          "buckets under a second are refused: %s", err.msg);
    table_free(&t);
}

static void test_outliers(report_db *db)
{
    static const char *const steady[] = {"steady"};
    report_filter f = {.since_ms = INT64_MIN,
                       .until_ms = INT64_MAX,
                       .now_ms = T1 + 60000,
                       .batches = steady,
                       .n_batches = 1};
    double lo = 0, hi = 0;
    bool any = false;
    llmq_err err = {0};
    CHECK(report_rate_span(db, &f, &lo, &hi, &any, &err) == 0 && any && near(lo, 100) &&
              near(hi, 195),
          "the bins cover the speeds within 1.5 IQR of the quartiles 125 and 175: %.1f to %.1f,"
          " not the outlier at 10000",
          lo, hi);
    report_shape sh = {.bucket_ms = 60000, .bin_lo = 100, .bin_width = 10, .n_bins = 16};
    table t;
    if (run(db, REPORT_HISTOGRAM, &f, &sh, &t) == 0) {
        double in_bins = 0;
        bool plain = t.n_rows == 17;
        for (size_t r = 0; plain && r + 1 < t.n_rows; r++) {
            in_bins += num(&t, r, "jobs");
            plain = str(&t, r, "tail")[0] == 0 &&
                    near(num(&t, r, "decode_tok_s_to"), 110 + 10 * (double)r);
        }
        size_t last = t.n_rows - 1;
        CHECK(plain && near(in_bins, STEADY_JOBS - 1) &&
                  strcmp(str(&t, last, "tail"), "above") == 0 && near(num(&t, last, "jobs"), 1) &&
                  near(num(&t, last, "decode_tok_s_from"), 260) &&
                  near(num(&t, last, "decode_tok_s_to"), 10000),
              "16 bins of 10 tok/s hold 20 jobs; the outlier is counted in an 'above' row from "
              "260 to its 10000 (%zu rows)",
              t.n_rows);
    }
    table_free(&t);
}

static void test_figures_cli(void)
{
    static char out[1 << 16];
    char now[WHEN_ISO_MAX];
    when_format(T1 + 60000, now, sizeof now);
    int rc = capture(out, sizeof out, "%s --db %s --now %s -t batches -t workers", exe,
                     figures_path, now);
    const char *quick = strstr(out, "\nquick "), *eol = quick ? strchr(quick + 1, '\n') : NULL;
    char row[512] = "";
    if (quick && eol)
        snprintf(row, sizeof row, "%.*s", (int)(eol - quick - 1), quick + 1);
    CHECK(rc == 0 && strstr(row, " short ") &&
              strstr(out, "\nshort: the batch took less than 1 s") &&
              strstr(out, "\nshort: the worker was busy for less than 1 s"),
          "text marks the withheld rates 'short' and says why under each table: %s", row);
    rc = capture(out, sizeof out, "%s --db %s --now %s --format json -t batches", exe, figures_path,
                 now);
    json_value *root = NULL;
    llmq_err err = {0};
    const json_value *q = NULL;
    if (rc == 0 && json_parse(out, strlen(out), &root, &err) == 0)
        q = find_row(json_get(root, "batches"), "batch", "quick");
    const json_value *tok = q ? json_get(q, "tok_s") : NULL;
    CHECK(tok && tok->type == JSON_NULL, "JSON gives the short batch's tok_s as null");
    CHECK(root && json_num(root, "bucket_ms") == 1000,
          "auto buckets for a 13 s run are 1 s, not 500 ms (%.0f)", json_num(root, "bucket_ms"));
    json_free(root);
    rc = err_capture(out, sizeof out, "%s --db %s --bucket 500ms 2>&1", exe, figures_path);
    CHECK(rc == 2 && strstr(out, "--bucket: 500ms is shorter than a second"),
          "--bucket 500ms is a usage error: %s", out);
}

/* The histogram's axis ends where its bins do; the outlier stands beside. */
static void test_figures_plot(void)
{
    char svg[400], out[4096], now[WHEN_ISO_MAX];
    when_format(T1 + 60000, now, sizeof now);
    snprintf(svg, sizeof svg, "%s/figures.svg", dir);
    int rc = capture(out, sizeof out, "%s --db %s --now %s --batch steady --quiet --plot %s", exe,
                     figures_path, now, svg);
    /* Prints the largest number among the histogram's labels, then the
     * titles of its bars that say "above". */
    rc = rc ? rc
            : capture(out, sizeof out,
                      "/usr/bin/python3 -c '"
                      "import sys, xml.dom.minidom as m\n"
                      "d = m.parse(sys.argv[1])\n"
                      "g = [e for e in d.getElementsByTagName(\"g\")"
                      " if e.getAttribute(\"id\") == \"histogram\"][0]\n"
                      "nums = []\n"
                      "for t in g.getElementsByTagName(\"text\"):\n"
                      "    try: nums.append(float(t.firstChild.data))\n"
                      "    except ValueError: pass\n"
                      "print(max(nums))\n"
                      "for b in g.getElementsByTagName(\"title\"):\n"
                      "    if \"above\" in b.firstChild.data: print(b.firstChild.data)"
                      "' %s 2>&1",
                      svg);
    double top = 0;
    sscanf(out, "%lf", &top);
    CHECK(rc == 0 && top <= 200 && strstr(out, "200 to 10000 tok/s: 1 jobs"),
          "the plot's decode axis ends at the bins (%.0f), the outlier's bar beside it: %s", top,
          out);
}

static report_db *open_reports(const char *path)
{
    report_db *db = NULL;
    llmq_err err = {0};
    CHECK(report_db_open(&db, path, &err) == 0, "report_db_open reads %s%s%s", path, db ? "" : ": ",
          db ? "" : err.msg);
    return db;
}

/* A database of schema version 5, before cached prompt tokens (made by its
 * own migrations), is read as the broker would migrate it: its results
 * count no cached prompt tokens; the file is left as it was. */
static void test_old_schema(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/v5.db", dir);
    sqlite3 *w = NULL;
    bool ok = sqlite3_open(path, &w) == SQLITE_OK;
    for (int v = 0; ok && v < 5; v++)
        ok = sqlite3_exec(w, store_migrations[v], NULL, NULL, NULL) == SQLITE_OK;
    ok = ok &&
         sqlite3_exec(w,
                      "INSERT INTO workers (name, host, pid, slots, first_seen, last_seen)"
                      " VALUES ('old-w', 'h', 1, 4, 1, 2);"
                      "INSERT INTO jobs (batch_id, state, prompt, max_tokens, temperature,"
                      " top_k, top_p, min_p, repeat_penalty, repeat_last_n,"
                      " presence_penalty, frequency_penalty, seed, submitted_at, worker_id,"
                      " attempts, finished_at) VALUES ('old', 'done', 'p', 8, 0, 0, 1, 0, 1,"
                      " 64, 0, 0, 0, 1000, 1, 1, 3000);"
                      "INSERT INTO attempts (job_id, attempt, worker_id, started_at, ended_at,"
                      " outcome) VALUES (1, 1, 1, 2000, 3000, 'done');"
                      "INSERT INTO results (job_id, text, finish_reason, prompt_tokens,"
                      " generated_tokens, queue_wait_ms, prefill_ms, decode_ms, total_ms,"
                      " worker_id, attempt, created_at)"
                      " VALUES (1, 'x', 'length', 6, 8, 1000, 1, 1, 2000, 1, 1, 3000);"
                      "PRAGMA user_version = 5;",
                      NULL, NULL, NULL) == SQLITE_OK;
    if (!ok)
        printf("# version 5 database: %s\n", sqlite3_errmsg(w));
    sqlite3_close(w);
    report_db *db = ok ? open_reports(path) : NULL;
    report_filter f = all_jobs();
    table b, k;
    int rc = db ? run(db, REPORT_BATCHES, &f, &MINUTES, &b) | run(db, REPORT_JOBS, &f, &MINUTES, &k)
                : -1;
    CHECK(rc == 0 && report_db_version(db) == 5 && b.n_rows == 1 &&
              near(num(&b, 0, "prompt_tokens"), 6) && near(num(&b, 0, "cached_tokens"), 0) &&
              near(num(&b, 0, "prefix_hit_pct"), 0) && near(num(&k, 0, "cached_tokens"), 0),
          "a version 5 database reads with no cached prompt tokens, a prefix hit rate of 0");
    if (db) {
        table_free(&b);
        table_free(&k);
    }
    report_db_close(db);
    static const char sql[] = "SELECT (SELECT user_version FROM pragma_user_version) * 10 +"
                              " (SELECT count(*) FROM sqlite_master WHERE type = 'view'"
                              " AND name = 'results')";
    sqlite3 *r = NULL;
    sqlite3_stmt *s = NULL;
    int left = -1;
    if (sqlite3_open_v2(path, &r, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(r, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        left = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(r);
    CHECK(left == 50, "the file is still of version 5, with no view of llmq-stats' in it (%d)",
          left);
}

int main(void)
{
    const char *build = getenv("LLMQ_BUILDDIR");
    if (!build) {
        fprintf(stderr, "LLMQ_BUILDDIR is not set: run through `make check`\n");
        return 77;
    }
    snprintf(exe, sizeof exe, "%s/tools/llmq-stats", build);
    snprintf(dir, sizeof dir, "%s/llmq-stats-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 99;
    }
    snprintf(db_path, sizeof db_path, "%s/llmq.db", dir);
    CHECK(build_scenario() == 0, "the scenario is written through the broker's store");
    report_db *db = open_reports(db_path);
    if (db) {
        test_batches(db);
        test_workers(db);
        test_time(db);
        test_histogram(db);
        test_filters(db);
        report_db_close(db);
    }
    test_when();
    char now[WHEN_ISO_MAX];
    when_format(NOW, now, sizeof now);
    test_cli_json(now);
    test_cli_csv_text(now);
    test_cli_errors();
    test_old_schema();
    test_cli_beside_writer(now);
    test_plot(now);
    snprintf(figures_path, sizeof figures_path, "%s/figures.db", dir);
    CHECK(build_figures() == 0, "the second scenario is written through the broker's store");
    db = open_reports(figures_path);
    if (db) {
        test_short_spans(db);
        test_outliers(db);
        report_db_close(db);
    }
    test_figures_cli();
    test_figures_plot();
    int rc = check_done();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (rc == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
