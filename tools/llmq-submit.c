/* llmq-submit: submit a JSONL file of jobs to the broker as one batch, wait
 * for the results (progress on stderr) and write them as JSONL.
 *
 * Input and output shapes: tools/jobfile.h.  Results are written in the
 * order they complete.  Exit status: 0 every job done; 1 some job failed,
 * was cancelled or did not finish in time (reasons on stderr); 2 bad usage or
 * bad input (nothing was submitted); 3 the broker could not be reached or
 * refused the submit. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "proto/llmq.h"
#include "tools/jobfile.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_BROKER 3
#define STEP_MS 200            /* progress redraw on a terminal */
#define LOG_EVERY_MS 5000      /* progress line when stderr is not a terminal */

typedef struct options {
    const char *broker, *in, *out, *batch, *meta, *broker_key, *curve_secret;
    double timeout_s;          /* < 0: wait without limit */
    bool no_wait;
} options;

static const char USAGE[] =
    "usage: llmq-submit [--broker ENDPOINT] [-i JOBS.jsonl] [-o RESULTS.jsonl]\n"
    "                   [--batch ID] [--meta TEXT] [--no-wait] [--timeout SECONDS]\n"
    "\n"
    "Submits every line of JOBS.jsonl as one batch, waits for the results and\n"
    "writes one JSON line per job as it completes.\n";

static const char EPILOG[] =
    "Job lines: {\"id\": ..., \"prompt\": \"...\", \"max_tokens\": N, \"temperature\": T,\n"
    "\"top_k\", \"top_p\", \"min_p\", \"repeat_penalty\", \"repeat_last_n\",\n"
    "\"presence_penalty\", \"frequency_penalty\", \"seed\", \"stop\", \"ignore_eos\",\n"
    "\"priority\", \"model\"} (\"tokens\": [ids], or a chat job's \"messages\": [{\"role\",\n"
    "\"content\"}], instead of \"prompt\"), or OpenAI batch lines {\"custom_id\", \"method\",\n"
    "\"url\", \"body\": {\"prompt\" or \"messages\", ...}}.  Messages go to the workers as\n"
    "they are: each renders them with its model's chat template.\n"
    "Exit status: 0 all done, 1 some job failed or unfinished, 2 bad input,\n"
    "3 broker unreachable or submit refused.\n";

static int check_keys(void *opts, llmq_err *err)
{
    const options *o = opts;
    if (!o->broker_key != !o->curve_secret)
        return llmq_errf(err, "--broker-key and --curve-secret go together");
    return 0;
}

/* CLI_RUN, or the status to exit with at once (--help, bad usage). */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.broker = "tcp://127.0.0.1:5555", .in = "-", .out = "-", .timeout_s = -1};
    const cli_flag flags[] = {
        {"broker", 'b', "ENDPOINT", "broker client endpoint (default tcp://127.0.0.1:5555)",
         CLI_TEXT(&o->broker)},
        {"broker-key", 0, "FILE",
         "the broker's CURVE public key, for a broker that requires CURVE (with --curve-secret)",
         CLI_TEXT(&o->broker_key)},
        {"curve-secret", 0, "FILE", "this client's CURVE secret key (from llmq-keygen)",
         CLI_TEXT(&o->curve_secret)},
        {"input", 'i', "FILE", "jobs, one JSON object per line; - is stdin (default)",
         CLI_TEXT(&o->in)},
        {"output", 'o', "FILE", "results; - is stdout (default)", CLI_TEXT(&o->out)},
        {"batch", 0, "ID",
         "batch id (default: llmq-submit-TIME-PID); job keys are BATCH:ID, so resubmitting a"
         " file with the same batch id returns the existing jobs instead of running them again",
         CLI_TEXT(&o->batch)},
        {"meta", 0, "TEXT", "batch metadata stored with the jobs", CLI_TEXT(&o->meta)},
        {"no-wait", 0, NULL, "submit, write {id, job_id, existing} lines, exit",
         CLI_SWITCH(&o->no_wait)},
        {"timeout", 0, "SECONDS", "stop waiting after this long (default: no limit)",
         CLI_DOUBLE(&o->timeout_s, 0, 4e6)},
    };
    const cli_spec spec = {.program = "llmq-submit",
                           .usage = USAGE,
                           .epilog = EPILOG,
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags),
                           .check = check_keys,
                           .check_ctx = o};
    return cli_read(&spec, argc, argv);
}

/* ---- progress ------------------------------------------------------------------------- */

typedef struct progress {
    size_t total, done, failed;
    uint64_t tokens;
    double t0_ms; /* monotonic */
    double last_ms;
    bool tty;
} progress;

static void format_eta(char *buf, size_t size, const progress *p, double ms)
{
    if (p->done == 0 || p->done >= p->total) {
        snprintf(buf, size, p->done >= p->total ? "0:00" : "?");
        return;
    }
    double left = ms / 1e3 * (double)(p->total - p->done) / (double)p->done;
    long s = lround(left);
    snprintf(buf, size, "%ld:%02ld", s / 60, s % 60);
}

static void show(progress *p, bool final)
{
    double ms = clock_mono_ms_f() - p->t0_ms;
    if (!p->tty && !final && ms - p->last_ms < LOG_EVERY_MS)
        return;
    p->last_ms = ms;
    char eta[32];
    format_eta(eta, sizeof eta, p, ms);
    double tok_s = ms > 0 ? (double)p->tokens * 1e3 / ms : 0;
    if (p->tty) {
        enum { WIDTH = 30 };
        int fill = p->total ? (int)(WIDTH * p->done / p->total) : WIDTH;
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu jobs  %.1f tok/s  ETA %s", fill,
                "##############################", WIDTH - fill, "", p->done, p->total, tok_s,
                eta);
        if (p->failed)
            fprintf(stderr, "  %zu failed", p->failed);
        fputs(final ? "\033[K\n" : "\033[K", stderr);
    } else {
        fprintf(stderr, "llmq-submit: %zu/%zu jobs done, %zu failed, %.1f tok/s, ETA %s\n",
                p->done, p->total, p->failed, tok_s, eta);
    }
    fflush(stderr);
}

/* ---- submit and wait ---------------------------------------------------------------------- */

typedef struct by_id {
    uint64_t job_id;
    size_t index;
} by_id;

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = ((const by_id *)a)->job_id, y = ((const by_id *)b)->job_id;
    return x < y ? -1 : x > y;
}

static int submit(llmq_client *c, const options *o, const char *batch, jobfile *jf, bool *existing)
{
    llmq_job *jobs = calloc(jf->n, sizeof *jobs);
    uint64_t *ids = calloc(jf->n, sizeof *ids);
    int rc = -1;
    llmq_error err;
    if (!jobs || !ids) {
        fprintf(stderr, "llmq-submit: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < jf->n; i++)
        jobs[i] = jf->entries[i].job;
    if (llmq_submit(c, batch, o->meta, jobs, jf->n, ids, existing, &err) < 0) {
        fprintf(stderr, "llmq-submit: submit to %s failed (%s): %s\n", o->broker,
                llmq_code_name(err.code), err.message);
        goto out;
    }
    for (size_t i = 0; i < jf->n; i++)
        jf->entries[i].job_id = ids[i];
    rc = 0;
out:
    free(jobs);
    free(ids);
    return rc;
}

static void report_failure(const jobfile_entry *e, const llmq_result *r)
{
    fprintf(stderr, "%sllmq-submit: line %zu (job %" PRIu64 ") %s: %s\n", isatty(2) ? "\r" : "",
            e->line, r->id, llmq_state_name(r->state), r->error ? r->error : "no reason given");
}

/* Writes each result as it comes; returns the number of jobs not done, or -1. */
static long wait_all(llmq_client *c, const options *o, const jobfile *jf, FILE *out)
{
    by_id *index = calloc(jf->n, sizeof *index);
    uint64_t *ids = calloc(jf->n, sizeof *ids);
    if (!index || !ids) {
        free(index);
        free(ids);
        fprintf(stderr, "llmq-submit: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < jf->n; i++) {
        index[i] = (by_id){jf->entries[i].job_id, i};
        ids[i] = jf->entries[i].job_id;
    }
    qsort(index, jf->n, sizeof *index, cmp_id);
    progress p = {.total = jf->n, .tty = isatty(2), .t0_ms = clock_mono_ms_f()};
    llmq_select sel = {.ids = ids, .n_ids = jf->n};
    llmq_wait *w = NULL;
    llmq_error err;
    long not_done = -1;
    time_t created = time(NULL);
    if (llmq_wait_begin(c, &sel, o->timeout_s < 0 ? -1 : (int)(o->timeout_s * 1e3), &w, &err) < 0)
        goto out;
    for (;;) {
        llmq_result r;
        int ev = llmq_wait_next(w, p.tty ? STEP_MS : LOG_EVERY_MS, &r, &err);
        if (ev < 0)
            goto out;
        if (ev == LLMQ_WAIT_END)
            break;
        if (ev == LLMQ_WAIT_RESULT) {
            by_id key = {.job_id = r.id};
            const by_id *hit = bsearch(&key, index, jf->n, sizeof *index, cmp_id);
            if (!hit)
                continue;   /* not a job of this file: nothing to write it to */
            const jobfile_entry *e = &jf->entries[hit->index];
            jobfile_write_result(out, e, &r, created);
            fflush(out);
            p.done++;
            p.tokens += r.gen_tokens;
            if (r.state != LLMQ_STATE_DONE) {
                p.failed++;
                report_failure(e, &r);
            }
        }
        show(&p, false);
    }
    show(&p, true);
    size_t pending;
    bool timed_out;
    llmq_wait_summary(w, NULL, &pending, &timed_out);
    if (pending)
        fprintf(stderr, "llmq-submit: %zu jobs unfinished%s\n", pending,
                timed_out ? " when the wait timed out" : "");
    not_done = (long)(p.failed + pending);
out:
    if (not_done < 0)
        fprintf(stderr, "%sllmq-submit: waiting for results from %s failed (%s): %s\n",
                p.tty ? "\n" : "", o->broker, llmq_code_name(err.code), err.message);
    llmq_wait_free(w);
    free(index);
    free(ids);
    return not_done;
}

/* ---- main ---------------------------------------------------------------------------------- */

static int read_jobs(const options *o, const char *batch, jobfile *jf)
{
    FILE *in = strcmp(o->in, "-") == 0 ? stdin : fopen(o->in, "r");
    if (!in) {
        fprintf(stderr, "llmq-submit: cannot open %s: %m\n", o->in);
        return -1;
    }
    llmq_err err;
    int rc = jobfile_read(in, strcmp(o->in, "-") == 0 ? "stdin" : o->in, batch, jf, &err);
    if (in != stdin)
        fclose(in);
    if (rc < 0)
        fprintf(stderr, "llmq-submit: %s (nothing was submitted)\n", err.msg);
    return rc;
}

static int run(const options *o, const char *batch, jobfile *jf, FILE *out)
{
    llmq_client *c;
    llmq_error err;
    llmq_curve keys;
    bool curve = o->curve_secret != NULL;
    if ((curve && llmq_curve_load(&keys, o->broker_key, o->curve_secret, &err) < 0) ||
        llmq_connect_curve(&c, o->broker, curve ? &keys : NULL, &err) < 0) {
        fprintf(stderr, "llmq-submit: %s\n", err.message);
        return EXIT_BROKER;
    }
    bool *existing = calloc(jf->n, sizeof *existing);
    int status = EXIT_BROKER;
    if (existing && submit(c, o, batch, jf, existing) == 0) {
        size_t old = 0;
        for (size_t i = 0; i < jf->n; i++)
            old += existing[i];
        fprintf(stderr, "llmq-submit: batch %s: %zu jobs submitted%s", batch, jf->n - old,
                old ? "" : "\n");
        if (old)
            fprintf(stderr, ", %zu already known from an earlier submit\n", old);
        if (o->no_wait) {
            for (size_t i = 0; i < jf->n; i++)
                jobfile_write_ack(out, &jf->entries[i], existing[i]);
            status = 0;
        } else {
            long not_done = wait_all(c, o, jf, out);
            status = not_done < 0 ? EXIT_BROKER : not_done > 0 ? EXIT_FAILED : 0;
        }
    }
    free(existing);
    llmq_close(c);
    return status;
}

int main(int argc, char **argv)
{
    options o;
    const int parsed = parse_options(argc, argv, &o);
    if (parsed != CLI_RUN)
        return parsed;
    char batch_buf[96];
    if (!o.batch) {
        char stamp[32];
        time_t t = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", gmtime(&t));
        snprintf(batch_buf, sizeof batch_buf, "llmq-submit-%s-%ld", stamp, (long)getpid());
        o.batch = batch_buf;
    }
    jobfile jf;
    if (read_jobs(&o, o.batch, &jf) < 0)
        return EXIT_USAGE;
    FILE *out = strcmp(o.out, "-") == 0 ? stdout : fopen(o.out, "w");
    if (!out) {
        fprintf(stderr, "llmq-submit: cannot create %s: %m\n", o.out);
        jobfile_free(&jf);
        return EXIT_USAGE;
    }
    int status = run(&o, o.batch, &jf, out);
    if (fclose(out) != 0) {
        fprintf(stderr, "llmq-submit: writing %s: %m\n", o.out);
        status = status ? status : EXIT_FAILED;
    }
    jobfile_free(&jf);
    return status;
}
