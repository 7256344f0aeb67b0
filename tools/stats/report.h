/* report: llmq-stats' questions to the broker's database, in SQL.
 *
 * Opens the SQLite file read-only (the broker keeps it in WAL mode, so this
 * never blocks it and sees a consistent snapshot: every report of one
 * report_db runs in one read transaction), checks that it is an llmq
 * database of a schema version this build knows (broker/store.h), and runs
 * the reports into tables (tools/stats/table.h).
 *
 * Which jobs a report covers (report_filter): batch, model and worker lists
 * (empty: any), and a time window [since, until).  A finished job (done,
 * failed, cancelled) counts in the window it finished in; a job not
 * finished yet counts if it was submitted before `until`, with its state as
 * it stands.  A job's worker is the one that ran it last; its model is the
 * job's own model field, else its worker's model.
 *
 * Definitions (docs/SCHEMA.md has the columns they come from):
 *  - batch wall time: first submit to last finish (or now while jobs are
 *    unfinished); batch tok/s: generated tokens over wall time;
 *  - queue wait percentiles: nearest rank over the done jobs' queue waits;
 *  - prefill / decode tok/s: token-weighted, sum of tokens over the sum of
 *    the jobs' prefill / decode times;
 *  - worker busy time: the union of its attempts' intervals (at least one job
 *    in flight) clipped to the window; online time: its sessions (hello to
 *    bye, loss, or now) clipped to the window; utilisation = busy / online;
 *    concurrency = job-time / busy time, the mean jobs in flight while busy;
 *    tok/s = generated tokens / busy time;
 *  - time buckets are aligned to multiples of the bucket length since the
 *    epoch (UTC); a bucket's tok/s is its generated tokens over its length.
 * A throughput over a span shorter than REPORT_MIN_SPAN_MS (a batch's wall
 * time, a worker's busy time) is withheld: NULL in every format, "short" in
 * text with a note under the table.  Those spans come from the broker's
 * millisecond timestamps and hold the start and the end of the work, so a
 * few milliseconds of them give tens of thousands of tok/s of noise.  The
 * prefill and decode figures are the jobs' own speeds, measured by the
 * workers per job to the microsecond, and are given as measured.  Buckets
 * are at least REPORT_MIN_SPAN_MS long for the same reason.
 * The histogram's bins are of a round width over the bulk of the decode
 * speeds: those within Tukey's fences (1.5 interquartile ranges beyond the
 * quartiles); the jobs beyond the bins, if any, are counted in a row of
 * their own at either end (`tail` "below" or "above", spanning those jobs'
 * speeds), so a few outliers neither stretch the bins nor go uncounted.
 * Workers are grouped by worker id (name): sessions of a restarted worker
 * add up. */
#ifndef LLMQ_TOOLS_STATS_REPORT_H
#define LLMQ_TOOLS_STATS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "tools/stats/table.h"

typedef struct report_db report_db;

/* Opens path read-only and checks its schema; the error says whether the
 * file is missing, not SQLite, not llmq's, or of a newer schema. */
int report_db_open(report_db **out, const char *path, llmq_err *err);
void report_db_close(report_db *db);
/* The database's schema version (PRAGMA user_version). */
int report_db_version(const report_db *db);

typedef struct report_filter {
    const char *const *batches; /* n_batches ids; none: every batch */
    size_t n_batches;
    const char *const *workers;
    size_t n_workers;
    const char *const *models;
    size_t n_models;
    int64_t since_ms, until_ms; /* INT64_MIN / INT64_MAX: open */
    int64_t now_ms;
} report_filter;

typedef enum report_kind {
    REPORT_BATCHES,     /* one row per batch */
    REPORT_WORKERS,     /* one row per worker id */
    REPORT_TIME,        /* one row per time bucket */
    REPORT_WORKER_TIME, /* one row per worker and time bucket (the plot's lines) */
    REPORT_HISTOGRAM,   /* jobs per decode tok/s bin */
    REPORT_JOBS,        /* one row per job */
    REPORT_COUNT
} report_kind;

/* "batches", "workers", "time", "worker-time", "histogram", "jobs". */
const char *report_name(report_kind k);
int report_parse(const char *name, report_kind *out);

#define REPORT_MAX_BUCKETS 100000
/* The shortest span a rate is given over, and the shortest bucket. */
#define REPORT_MIN_SPAN_MS 1000

/* Bucketing (REPORT_TIME, REPORT_WORKER_TIME) and bins (REPORT_HISTOGRAM). */
typedef struct report_shape {
    int64_t bucket_ms;
    double bin_lo, bin_width;
    int n_bins;
} report_shape;

/* First and last finish among the selected jobs; *any false if none. */
int report_finish_span(report_db *db, const report_filter *f, int64_t *first_ms,
                       int64_t *last_ms, bool *any, llmq_err *err);
/* The range of decode tok/s the histogram's bins cover: the smallest and
 * the largest of the selected done jobs' speeds within Tukey's fences;
 * *any false if there are none. */
int report_rate_span(report_db *db, const report_filter *f, double *lo, double *hi,
                     bool *any, llmq_err *err);

/* Runs report k into out (initialised here; the caller frees it, also on
 * failure).  Time reports refuse more than REPORT_MAX_BUCKETS buckets. */
int report_run(report_db *db, report_kind k, const report_filter *f,
               const report_shape *shape, table *out, llmq_err *err);

#endif
