/* llmq-submit: submit a JSONL file of jobs to the broker as one batch, wait
 * for the results (progress on stderr) and write them as JSONL.
 *
 * Input and output shapes: tools/jobfile.h.  A line that cannot run fails
 * alone: its fault goes to stderr and, as its output line, to the results,
 * and the other lines run; with --strict any such line stops the file
 * before anything is sent.  Results are written in the order they complete.
 * Exit status: 0 every line done; 1 some line failed, or a job failed, was
 * cancelled or did not finish in time (reasons on stderr); 2 bad usage or
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
    bool no_wait, strict;
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
    "\"logprobs\", \"top_logprobs\", \"json_schema\", \"json_object\", \"priority\", \"model\",\n"
    "\"n\"} (\"tokens\": [ids] instead of \"prompt\"), or OpenAI batch lines {\"custom_id\",\n"
    "\"method\", \"url\", \"body\": {\"prompt\" or \"messages\", ...}} (docs/OPENAI.md).\n"
    "A bad line fails alone (unless --strict): its error goes to stderr and, with\n"
    "its line number, to the results.\n"
    "Exit status: 0 all done, 1 some line or job failed or unfinished, 2 bad input\n"
    "(nothing submitted), 3 broker unreachable or submit refused.\n";

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
        {"no-wait", 0, NULL, "submit, write {id, index, job_id, existing} lines, exit",
         CLI_SWITCH(&o->no_wait)},
        {"strict", 0, NULL,
         "all or nothing: a bad line stops the whole file before anything is sent (every bad"
         " line is reported); by default it fails alone and the others run",
         CLI_SWITCH(&o->strict)},
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

/* The input as messages name it. */
static const char *input_name(const options *o)
{
    return strcmp(o->in, "-") == 0 ? "stdin" : o->in;
}

/* A refusal that names one job (jobs[K].field) may be that job's alone. */
static bool names_a_job(const llmq_error *err, size_t *k)
{
    if (strncmp(err->field, "jobs[", 5) != 0 || err->code == LLMQ_E_QUEUE_FULL ||
        err->code == LLMQ_E_SHUTTING_DOWN || err->code == LLMQ_E_INTERNAL)
        return false;
    *k = strtoul(err->field + 5, NULL, 10);
    return true;
}

/* Every job has a key, so that a submit cut in parts and sent again stores
 * none twice. */
static bool all_keyed(const llmq_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!jobs[i].key)
            return false;
    return true;
}

/* Submits the jobs of the lines that have not failed.  A job the broker
 * refuses (a model no worker serves, ...) fails its line alone, unless
 * --strict, and the rest are sent again: they have keys, so whatever of
 * them was stored already is not stored twice.  *n: the jobs submitted. */
static int submit(llmq_client *c, const options *o, const char *batch, jobfile *jf, FILE *out,
                  bool **existing, size_t *n)
{
    llmq_job *jobs = NULL;
    uint64_t *ids = NULL;
    llmq_err lerr;
    llmq_error err;
    size_t k;
    for (;;) {
        free(jobs);
        free(ids);
        free(*existing);
        ids = NULL;
        *existing = NULL;
        if (jobfile_jobs(jf, &jobs, n, &lerr) < 0 || !(ids = calloc(*n ? *n : 1, sizeof *ids)) ||
            !(*existing = calloc(*n ? *n : 1, sizeof **existing))) {
            fprintf(stderr, "llmq-submit: out of memory\n");
            break;
        }
        if (*n == 0)
            break;
        if (llmq_submit(c, batch, o->meta, jobs, *n, ids, *existing, &err) == 0) {
            free(jobs);
            int rc = jobfile_set_ids(jf, ids, &lerr);
            free(ids);
            if (rc < 0)
                fprintf(stderr, "llmq-submit: %s\n", lerr.msg);
            return rc;
        }
        if (o->strict || !names_a_job(&err, &k) || k >= *n || !all_keyed(jobs, *n)) {
            fprintf(stderr, "llmq-submit: submit to %s failed (%s): %s\n", o->broker,
                    llmq_code_name(err.code), err.message);
            break;
        }
        const jobfile_entry *e = jobfile_refuse(jf, k, &err);
        char text[LLMQ_ERR_MAX + 128];
        jobfile_fault_text(e, input_name(o), text, sizeof text);
        fprintf(stderr, "llmq-submit: %s\n", text);
        jobfile_write_fault(out, e);
    }
    free(jobs);
    free(ids);
    return -1;
}

static void report_failure(const jobfile_job *j, const jobfile *jf, const llmq_result *r)
{
    fprintf(stderr, "%sllmq-submit: line %zu (job %" PRIu64 ") %s: %s\n", isatty(2) ? "\r" : "",
            jf->entries[j->entry].line, r->id, llmq_state_name(r->state),
            r->error ? r->error : "no reason given");
}

/* Writes each result as it comes; returns the number of jobs not done, or -1. */
static long wait_all(llmq_client *c, const options *o, jobfile *jf, FILE *out)
{
    uint64_t *ids = calloc(jf->n_submitted ? jf->n_submitted : 1, sizeof *ids);
    if (!ids) {
        fprintf(stderr, "llmq-submit: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < jf->n_submitted; i++)
        ids[i] = jf->jobs[jf->submitted[i]].job_id;
    progress p = {.total = jf->n_submitted, .tty = isatty(2), .t0_ms = clock_mono_ms_f()};
    llmq_select sel = {.ids = ids, .n_ids = jf->n_submitted};
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
            const jobfile_job *j = jobfile_take(jf, &r, out, created);
            if (!j)
                continue; /* not a job of this file: nothing to write it to */
            fflush(out);
            p.done++;
            p.tokens += r.gen_tokens;
            if (r.state != LLMQ_STATE_DONE) {
                p.failed++;
                report_failure(j, jf, &r);
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
    free(ids);
    return not_done;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* Every bad line on stderr, with its number; without --strict, each also
 * becomes its output line.  0, or -1 when nothing may be submitted. */
static int report_faults(const options *o, const jobfile *jf, FILE *out)
{
    char text[LLMQ_ERR_MAX + 128];
    for (size_t i = 0; i < jf->n; i++) {
        const jobfile_entry *e = &jf->entries[i];
        if (e->fault.fault == OPENAI_OK)
            continue;
        jobfile_fault_text(e, input_name(o), text, sizeof text);
        fprintf(stderr, "llmq-submit: %s\n", text);
        if (!o->strict)
            jobfile_write_fault(out, e);
    }
    if (jf->n_faults && (o->strict || jf->n_faults == jf->n)) {
        fprintf(stderr, "llmq-submit: %zu of %zu lines are bad: nothing was submitted%s\n",
                jf->n_faults, jf->n, o->strict ? " (--strict)" : "");
        return -1;
    }
    if (jf->n_faults)
        fprintf(stderr, "llmq-submit: %zu of %zu lines are bad and fail alone; the others run\n",
                jf->n_faults, jf->n);
    return 0;
}

static int read_jobs(const options *o, const char *batch, jobfile *jf)
{
    FILE *in = strcmp(o->in, "-") == 0 ? stdin : fopen(o->in, "r");
    if (!in) {
        fprintf(stderr, "llmq-submit: cannot open %s: %m\n", o->in);
        return -1;
    }
    llmq_err err;
    int rc = jobfile_read(in, input_name(o), batch, jf, &err);
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
    bool *existing = NULL;
    size_t n = 0;
    int status = EXIT_BROKER;
    if (submit(c, o, batch, jf, out, &existing, &n) == 0) {
        size_t old = 0;
        for (size_t i = 0; i < n; i++)
            old += existing[i];
        fprintf(stderr, "llmq-submit: batch %s: %zu jobs submitted%s", batch, n - old,
                old ? "" : "\n");
        if (old)
            fprintf(stderr, ", %zu already known from an earlier submit\n", old);
        if (o->no_wait) {
            jobfile_write_acks(out, jf, existing);
            status = 0;
        } else {
            long not_done = wait_all(c, o, jf, out);
            status = not_done < 0 ? EXIT_BROKER : not_done > 0 ? EXIT_FAILED : 0;
        }
    } else if (n == 0 && jf->n_faults) {
        fprintf(stderr, "llmq-submit: every line failed: nothing was submitted\n");
        status = EXIT_FAILED;
    }
    if (status == 0 && jf->n_faults)
        status = EXIT_FAILED;
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
    int status = report_faults(&o, &jf, out) < 0 ? EXIT_USAGE : run(&o, o.batch, &jf, out);
    if (fclose(out) != 0) {
        fprintf(stderr, "llmq-submit: writing %s: %m\n", o.out);
        status = status ? status : EXIT_FAILED;
    }
    jobfile_free(&jf);
    return status;
}
