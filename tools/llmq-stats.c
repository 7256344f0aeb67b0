/* llmq-stats: throughput accounting from the broker's SQLite file.
 *
 * Reads the database read-only (safe while the broker runs), prints per
 * batch, per worker and over-time tables as aligned text, CSV or JSON, and
 * with --plot writes an SVG of throughput over time per worker and of the
 * per-job decode speeds.  The numbers' definitions: tools/stats/report.h.
 *
 * Exit status: 0 done, 1 the database could not be read (missing, not an
 * llmq database, newer schema, SQLite error) or the plot not written,
 * 2 bad usage. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/json.h"
#include "tools/stats/plot.h"
#include "tools/stats/report.h"
#include "tools/stats/scale.h"
#include "tools/stats/when.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define MAX_LIST 64
#define HISTOGRAM_BINS 20

typedef enum format { FMT_TEXT, FMT_CSV, FMT_JSON } format;

typedef struct options {
    const char *db, *plot;
    const char *batches[MAX_LIST], *workers[MAX_LIST], *models[MAX_LIST];
    size_t n_batches, n_workers, n_models;
    const char *since, *until, *now, *bucket;
    bool want[REPORT_COUNT];
    bool any_table, quiet;
    format fmt;
} options;

static const char USAGE[] =
    "usage: llmq-stats [--db FILE] [--format text|csv|json] [--table NAME]...\n"
    "                  [--batch ID]... [--worker ID]... [--model NAME]...\n"
    "                  [--since TIME] [--until TIME] [--now TIME] [--bucket LENGTH]\n"
    "                  [--plot FILE.svg] [--quiet]\n"
    "\n"
    "Throughput accounting from llmq-broker's database, opened read-only (safe\n"
    "while the broker runs).\n";

static const char EPILOG[] =
    "TIME is ISO 8601 (2024-05-01, 2024-05-01T12:30:00Z, 2024-05-01T14:30+02:00; UTC\n"
    "when no zone is given), a length ago (90s, 15m, 1h, 2d, 1w) or now.\n"
    "CSV writes the tables one after the other, separated by an empty line.\n"
    "Exit status: 0 done, 1 the database could not be read or the plot written,\n"
    "2 bad usage.\n";

static int parse_format(void *fmt, const char *s, llmq_err *err)
{
    static const char *const NAMES[] = {
        [FMT_TEXT] = "text", [FMT_CSV] = "csv", [FMT_JSON] = "json"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(s, NAMES[i]) == 0) {
            *(format *)fmt = (format)i;
            return 0;
        }
    return llmq_errf(err, "'%s' is not text, csv or json", s);
}

static int parse_table(void *opts, const char *s, llmq_err *err)
{
    options *o = opts;
    report_kind k;
    if (report_parse(s, &k) != 0)
        return llmq_errf(err,
                         "'%s' is not one of batches, workers, time, worker-time, "
                         "histogram, jobs",
                         s);
    o->want[k] = true;
    o->any_table = true;
    return 0;
}

/* CLI_RUN, or the status to exit with at once (--help, bad usage). */
static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.db = "llmq.db", .bucket = "auto", .fmt = FMT_TEXT};
    const cli_flag flags[] = {
        {"db", 'd', "FILE", "the broker's SQLite database (default llmq.db)", CLI_TEXT(&o->db)},
        {"format", 'f', "FORMAT", "text (aligned columns, default), csv or json",
         CLI_CALL(parse_format, &o->fmt)},
        {"table", 't', "NAME",
         "a table to print (repeatable; default: batches, workers, time): batches, workers,"
         " time, worker-time, histogram, jobs",
         CLI_CALL(parse_table, o)},
        {"batch", 'b', "ID", "only jobs of this batch (repeatable)",
         CLI_LIST(o->batches, &o->n_batches, MAX_LIST, 0, 0)},
        {"worker", 'w', "ID", "only jobs run by this worker id (repeatable)",
         CLI_LIST(o->workers, &o->n_workers, MAX_LIST, 0, 0)},
        {"model", 'm', "NAME", "only jobs for this model (repeatable)",
         CLI_LIST(o->models, &o->n_models, MAX_LIST, 0, 0)},
        {"since", 0, "TIME", "only jobs finished at or after TIME (and unfinished ones)",
         CLI_TEXT(&o->since)},
        {"until", 0, "TIME", "only jobs finished, or unfinished ones submitted, before TIME",
         CLI_TEXT(&o->until)},
        {"now", 0, "TIME", "take TIME as now (default: the clock), for reproducible reports",
         CLI_TEXT(&o->now)},
        {"bucket", 0, "LENGTH",
         "time bucket of the time tables and the plot: auto (default, at most 60 buckets of"
         " 1 s or more), minute, hour, day, or a length of 1 s or more such as 10s, 5m, 1h",
         CLI_TEXT(&o->bucket)},
        {"plot", 'p', "FILE.svg",
         "also write an SVG: tok/s over time per worker and a histogram of the jobs' decode"
         " tok/s",
         CLI_TEXT(&o->plot)},
        {"quiet", 'q', NULL, "print no table (with --plot: only write the plot)",
         CLI_SWITCH(&o->quiet)},
    };
    const cli_spec spec = {.program = "llmq-stats",
                           .usage = USAGE,
                           .epilog = EPILOG,
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags)};
    const int status = cli_read(&spec, argc, argv);
    if (!o->any_table)
        o->want[REPORT_BATCHES] = o->want[REPORT_WORKERS] = o->want[REPORT_TIME] = true;
    return status;
}

/* ---- times -------------------------------------------------------------------------- */

static int parse_bucket(const char *s, int64_t *out_ms, llmq_err *err)
{
    static const struct { const char *name; int64_t ms; } words[] = {
        {"auto", 0}, {"minute", 60000}, {"hour", 3600000}, {"day", 86400000},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(s, words[i].name) == 0) {
            *out_ms = words[i].ms;
            return 0;
        }
    if (when_duration(s, out_ms, err))
        return llmq_err_prefix(err, "--bucket (auto, minute, hour, day or a length)");
    if (*out_ms < REPORT_MIN_SPAN_MS)
        return llmq_errf(err,
                         "--bucket: %s is shorter than a second: a bucket's tok/s would be a "
                         "rate over too short a span (use 1s or longer)",
                         s);
    return 0;
}

static int resolve_times(const options *o, report_filter *f, int64_t *bucket_ms, llmq_err *err)
{
    f->now_ms = clock_wall_ms();
    f->since_ms = INT64_MIN;
    f->until_ms = INT64_MAX;
    if (o->now && when_parse(o->now, f->now_ms, &f->now_ms, err))
        return llmq_err_prefix(err, "--now");
    if (o->since && when_parse(o->since, f->now_ms, &f->since_ms, err))
        return llmq_err_prefix(err, "--since");
    if (o->until && when_parse(o->until, f->now_ms, &f->until_ms, err))
        return llmq_err_prefix(err, "--until");
    if (f->since_ms >= f->until_ms)
        return llmq_errf(err, "--since (%s) is not before --until (%s)", o->since, o->until);
    return parse_bucket(o->bucket, bucket_ms, err);
}

/* ---- reports ------------------------------------------------------------------------ */

typedef struct run {
    report_db *db;
    report_filter filter;
    report_shape shape;
    table tables[REPORT_COUNT];
    bool have[REPORT_COUNT];
} run;

/* The auto bucket and the histogram's bins depend on the data. */
static int shape_from_data(run *r, int64_t bucket_ms, llmq_err *err)
{
    int64_t first = 0, last = 0;
    bool any;
    if (report_finish_span(r->db, &r->filter, &first, &last, &any, err))
        return -1;
    if (!bucket_ms) {
        bucket_ms = scale_time_step(any ? last - first : 0, 60);
        bucket_ms = bucket_ms < REPORT_MIN_SPAN_MS ? REPORT_MIN_SPAN_MS : bucket_ms;
    }
    r->shape.bucket_ms = bucket_ms;
    double lo = 0, hi = 0;
    if (report_rate_span(r->db, &r->filter, &lo, &hi, &any, err))
        return -1;
    scale_bins(lo, hi, HISTOGRAM_BINS, &r->shape.bin_lo, &r->shape.bin_width,
               &r->shape.n_bins);
    return 0;
}

static int run_reports(run *r, const options *o, llmq_err *err)
{
    bool need[REPORT_COUNT];
    for (int k = 0; k < REPORT_COUNT; k++)
        need[k] = (o->want[k] && !o->quiet) ||
                  (o->plot && (k == REPORT_WORKER_TIME || k == REPORT_HISTOGRAM));
    for (int k = 0; k < REPORT_COUNT; k++) {
        if (!need[k])
            continue;
        r->have[k] = true;
        if (report_run(r->db, (report_kind)k, &r->filter, &r->shape, &r->tables[k], err))
            return llmq_err_prefix(err, "%s", report_name((report_kind)k));
    }
    return 0;
}

static void json_str_or_null(FILE *f, const char *s)
{
    if (s)
        json_write_string(f, s, strlen(s));
    else
        fputs("null", f);
}

static void json_time_or_null(FILE *f, int64_t ms, bool open)
{
    char buf[WHEN_ISO_MAX];
    when_format(ms, buf, sizeof buf);
    json_str_or_null(f, open ? NULL : buf);
}

static void print_json(const run *r, const options *o)
{
    fputs("{\"database\": ", stdout);
    json_str_or_null(stdout, o->db);
    printf(", \"schema_version\": %d, \"now\": ", report_db_version(r->db));
    json_time_or_null(stdout, r->filter.now_ms, false);
    fputs(", \"since\": ", stdout);
    json_time_or_null(stdout, r->filter.since_ms, r->filter.since_ms == INT64_MIN);
    fputs(", \"until\": ", stdout);
    json_time_or_null(stdout, r->filter.until_ms, r->filter.until_ms == INT64_MAX);
    printf(", \"bucket_ms\": %" PRId64, r->shape.bucket_ms);
    for (int k = 0; k < REPORT_COUNT; k++) {
        if (!o->want[k])
            continue;
        fputs(",\n", stdout);
        json_str_or_null(stdout, report_name((report_kind)k));
        fputs(": ", stdout);
        table_write_json(stdout, &r->tables[k]);
    }
    fputs("}\n", stdout);
}

static void print_tables(const run *r, const options *o)
{
    if (o->quiet)
        return;
    if (o->fmt == FMT_JSON) {
        print_json(r, o);
        return;
    }
    bool first = true;
    for (int k = 0; k < REPORT_COUNT; k++) {
        if (!o->want[k])
            continue;
        if (!first)
            fputc('\n', stdout);
        first = false;
        if (o->fmt == FMT_CSV)
            table_write_csv(stdout, &r->tables[k]);
        else
            table_write_text(stdout, &r->tables[k]);
    }
}

/* "llmq.db, batch b1, since ..." for the plot's subtitle. */
static void describe(const run *r, const options *o, char *buf, size_t size)
{
    char now[WHEN_ISO_MAX];
    when_format(r->filter.now_ms, now, sizeof now);
    int n = snprintf(buf, size, "%s as of %s", o->db, now);
    for (size_t i = 0; i < o->n_batches && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%s", i ? ", " : "; batch ", o->batches[i]);
    for (size_t i = 0; i < o->n_workers && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%s", i ? ", " : "; worker ", o->workers[i]);
    for (size_t i = 0; i < o->n_models && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%s", i ? ", " : "; model ", o->models[i]);
}

static int write_plot(const run *r, const options *o, llmq_err *err)
{
    FILE *f = fopen(o->plot, "w");
    if (!f)
        return llmq_errf(err, "%s: %m", o->plot);
    char subtitle[512];
    describe(r, o, subtitle, sizeof subtitle);
    int rc = plot_write(f, &r->tables[REPORT_WORKER_TIME], r->shape.bucket_ms,
                        &r->tables[REPORT_HISTOGRAM], subtitle, err);
    if (fclose(f) != 0 && rc == 0)
        rc = llmq_errf(err, "%s: %m", o->plot);
    return rc;
}

static int stats_main(const options *o, llmq_err *err)
{
    run r = {0};
    int64_t bucket_ms;
    int rc = -1;
    r.filter = (report_filter){.batches = o->batches, .n_batches = o->n_batches,
                               .workers = o->workers, .n_workers = o->n_workers,
                               .models = o->models, .n_models = o->n_models};
    if (resolve_times(o, &r.filter, &bucket_ms, err))
        return EXIT_USAGE;
    if (report_db_open(&r.db, o->db, err) || shape_from_data(&r, bucket_ms, err) ||
        run_reports(&r, o, err))
        goto out;
    print_tables(&r, o);
    if (o->plot && write_plot(&r, o, err))
        goto out;
    rc = 0;
out:
    for (int k = 0; k < REPORT_COUNT; k++)
        if (r.have[k])
            table_free(&r.tables[k]);
    report_db_close(r.db);
    return rc ? EXIT_FAIL : 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_RUN)
        return rc;
    llmq_err err = {0};
    rc = stats_main(&o, &err);
    if (rc)
        fprintf(stderr, "llmq-stats: %s\n", err.msg);
    if (fflush(stdout) != 0) {
        perror("llmq-stats: writing the tables");
        rc = rc ? rc : EXIT_FAIL;
    }
    return rc;
}
