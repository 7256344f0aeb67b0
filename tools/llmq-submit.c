/* llmq-submit: submit a JSONL file of jobs to the broker as one batch, wait
 * for the results (progress on stderr) and write them as JSONL.
 *
 * Input and output shapes: tools/jobfile.h.  A line that cannot run fails
 * alone: its fault goes to stderr and, as its output line, to the results,
 * and the other lines run; with --strict any such line stops the file
 * before anything is sent.  Results are written in the order they complete.
 * A batch larger than the broker's queue has room for goes in parts as room
 * frees.  Exit status: 0 every line done; 1 some line failed, or a job
 * failed, was cancelled or did not finish in time (reasons on stderr); 2 bad
 * usage or bad input (nothing was submitted); 3 the broker could not be
 * reached or refused the submit, or had no room for the rest in time. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
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
    "Submits every line of JOBS.jsonl as one batch (in parts as room frees when\n"
    "the broker's queue has no room for all of it), waits for the results and\n"
    "writes one JSON line per job as it completes.\n";

static const char EPILOG[] =
    "Job lines: {\"id\": ..., \"prompt\": \"...\", \"max_tokens\": N, \"temperature\": T,\n"
    "\"top_k\", \"top_p\", \"min_p\", \"repeat_penalty\", \"repeat_last_n\",\n"
    "\"presence_penalty\", \"frequency_penalty\", \"seed\", \"stop\", \"ignore_eos\",\n"
    "\"logprobs\", \"top_logprobs\", \"json_schema\", \"json_object\", \"priority\", \"model\",\n"
    "\"n\"} (\"tokens\": [ids], or a chat job's \"messages\": [{\"role\", \"content\"}],\n"
    "instead of \"prompt\"), or OpenAI batch lines {\"custom_id\", \"method\", \"url\",\n"
    "\"body\": {\"prompt\" or \"messages\", ...}} (docs/OPENAI.md).  Messages go to the\n"
    "workers as they are: each renders them with its model's chat template.\n"
    "A bad line fails alone (unless --strict): its error goes to stderr and, with\n"
    "its line number, to the results.\n"
    "Exit status: 0 all done, 1 some line or job failed or unfinished, 2 bad input\n"
    "(nothing submitted), 3 broker unreachable, submit refused, or no room in the\n"
    "queue in time.\n";

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
         " file with the same batch id returns the existing jobs instead of running them again;"
         " 1..256 bytes, and BATCH:ID too",
         CLI_TEXT_BYTES(&o->batch, 1, 256)},
        {"meta", 0, "TEXT", "batch metadata stored with the jobs", CLI_TEXT(&o->meta)},
        {"no-wait", 0, NULL, "submit, write {id, index, job_id, existing} lines, exit",
         CLI_SWITCH(&o->no_wait)},
        {"strict", 0, NULL,
         "all or nothing: a bad line stops the whole file before anything is sent (every bad"
         " line is reported); by default it fails alone and the others run",
         CLI_SWITCH(&o->strict)},
        {"timeout", 0, "SECONDS",
         "stop waiting (for a broker to answer the submit, for room in the queue, then for"
         " results) after this long (default: no limit)",
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
    size_t stored;   /* results of jobs final before this run: nothing computed for them */
    uint64_t tokens; /* generated by the jobs computed during this run */
    double t0_ms;    /* monotonic: when this run submitted its first job */
    double last_ms;
    bool tty;
    bool lost; /* the broker went silent: said so, not yet said it is back */
} progress;

/* The shortest time a rate is given over: a few milliseconds of work make
 * any tok/s a figure of noise. */
#define MIN_RATE_MS 1000

static void format_eta(char *buf, size_t size, const progress *p, double ms)
{
    size_t computed = p->done - p->stored;
    if (computed == 0 || p->done >= p->total) {
        snprintf(buf, size, p->done >= p->total ? "0:00" : "?");
        return;
    }
    double left = ms / 1e3 * (double)(p->total - p->done) / (double)computed;
    long s = lround(left);
    snprintf(buf, size, "%ld:%02ld", s / 60, s % 60);
}

/* What was computed, as a rate once there is a second of it: "1234.5
 * tok/s", "24 tokens in 0.07 s", or "nothing computed" for a run whose
 * every result was stored before it. */
static void format_rate(char *buf, size_t size, const progress *p, double ms)
{
    if (p->done > 0 && p->done == p->stored)
        snprintf(buf, size, "nothing computed");
    else if (ms >= MIN_RATE_MS)
        snprintf(buf, size, "%.1f tok/s", (double)p->tokens * 1e3 / ms);
    else
        snprintf(buf, size, "%" PRIu64 " tokens in %.2f s", p->tokens, ms / 1e3);
}

static void show(progress *p, bool final)
{
    double ms = clock_mono_ms_f() - p->t0_ms;
    if (!p->tty && !final && ms - p->last_ms < LOG_EVERY_MS)
        return;
    p->last_ms = ms;
    char eta[32], rate[64], stored[48] = "";
    format_eta(eta, sizeof eta, p, ms);
    format_rate(rate, sizeof rate, p, ms);
    if (p->stored)
        snprintf(stored, sizeof stored, " (%zu stored earlier)", p->stored);
    if (p->tty) {
        enum { WIDTH = 30 };
        int fill = p->total ? (int)(WIDTH * p->done / p->total) : WIDTH;
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu jobs%s  %s  ETA %s", fill,
                "##############################", WIDTH - fill, "", p->done, p->total, stored, rate,
                eta);
        if (p->failed)
            fprintf(stderr, "  %zu failed", p->failed);
        fputs(final ? "\033[K\n" : "\033[K", stderr);
    } else {
        fprintf(stderr, "llmq-submit: %zu/%zu jobs done%s, %zu failed, %s, ETA %s\n", p->done,
                p->total, stored, p->failed, rate, eta);
    }
    fflush(stderr);
}

/* The broker's silence and its return, each said once: the library sends
 * the wait again by itself, and results already written are not written
 * twice. */
static void show_broker(progress *p, const llmq_wait *w, const char *broker)
{
    llmq_wait_health h;
    llmq_wait_get_health(w, &h);
    if (h.broker_lost == p->lost)
        return;
    p->lost = h.broker_lost;
    const char *cr = p->tty ? "\r\033[K" : "";
    if (p->lost && h.broker_stopping)
        fprintf(stderr,
                "%sllmq-submit: the broker at %s is stopping: waiting for the next one on its"
                " database (%zu of %zu results in)\n",
                cr, broker, p->done, p->total);
    else if (p->lost)
        fprintf(stderr,
                "%sllmq-submit: no word from the broker at %s for %.0f s: waiting for it to"
                " come back (%zu of %zu results in)\n",
                cr, broker, h.silent_ms / 1e3, p->done, p->total);
    else
        fprintf(stderr,
                "%sllmq-submit: the broker at %s answers again: waiting for the %zu"
                " results left\n",
                cr, broker, p->total - p->done);
    fflush(stderr);
}

/* ---- submit and wait ---------------------------------------------------------------------- */

/* ---- submit, as the queue has room ------------------------------------------------------- */

/* A broker's --max-queued bounds its queue: a batch larger than the room
 * left is sent in parts, each as large as fits, waiting between parts for
 * the workers to take queued jobs.  Each part is atomic (the broker stores
 * all of its jobs or none), so nothing is stored twice, with or without
 * keys. */

#define ROOM_POLL_MIN_MS 50
#define ROOM_POLL_MAX_MS 1000

typedef struct flow {
    llmq_client *c;
    const options *o;
    const char *batch;
    llmq_job *jobs;
    uint64_t *ids; /* 0 until the job is stored */
    bool *existing;
    size_t n, sent;     /* jobs, jobs stored */
    double t0_ms;       /* when the first part was sent */
    double deadline_ms; /* monotonic; 0: none */
    double last_ms;     /* last progress line */
    double pause_ms;    /* before the next try of a refused part of one job */
    bool tty, told;
} flow;

/* "12/40 jobs submitted, waiting for room in the queue", redrawn on a
 * terminal, every LOG_EVERY_MS otherwise; final clears a terminal's line. */
static void flow_show(flow *f, bool final)
{
    double now = clock_mono_ms_f();
    if (final) {
        if (f->tty)
            fputs("\r\033[K", stderr);
        return;
    }
    if (now - f->last_ms < (f->tty ? STEP_MS : LOG_EVERY_MS))
        return;
    f->last_ms = now;
    fprintf(stderr, "%sllmq-submit: %zu/%zu jobs submitted, waiting for room in the queue%s",
            f->tty ? "\r" : "", f->sent, f->n, f->tty ? "\033[K" : "\n");
    fflush(stderr);
}

static void pause_ms(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3), .tv_nsec = (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Before a refused part of one job is tried again: a pause, twice as long
 * each time (up to ROOM_POLL_MAX_MS) while the queue stays full; -1 with
 * err when it would pass the deadline. */
static int pause_for_room(flow *f, llmq_error *err)
{
    if (f->deadline_ms && clock_mono_ms_f() + f->pause_ms > f->deadline_ms) {
        err->code = LLMQ_E_TIMEOUT;
        snprintf(err->message, sizeof err->message,
                 "the queue had no room for the remaining %zu jobs within --timeout",
                 f->n - f->sent);
        return -1;
    }
    flow_show(f, false);
    pause_ms(f->pause_ms);
    f->pause_ms = fmin(f->pause_ms * 2, ROOM_POLL_MAX_MS);
    return 0;
}

/* A submit that got no answer may have been stored all the same: it is sent
 * again (to a broker down or restarting) only when every job left has a key,
 * so that nothing is stored twice, and only within --timeout. */
static bool may_send_again(const flow *f, size_t end, const llmq_error *err)
{
    if (err->code != LLMQ_E_TIMEOUT || (f->deadline_ms && clock_mono_ms_f() >= f->deadline_ms))
        return false;
    for (size_t i = f->sent; i < end; i++)
        if (!f->jobs[i].key)
            return false;
    return true;
}

/* Sends jobs [f->sent, f->sent + n): 0 and f->sent advanced past those
 * stored (all of them, or the parts before a refused one: libllmq sends a
 * large part as several atomic messages), or -1 with err. */
static int send_part(flow *f, size_t n, llmq_error *err)
{
    const size_t end = f->sent + n;
    const double t0 = clock_mono_ms_f();
    for (;;) {
        const size_t at = f->sent;
        if (llmq_submit(f->c, f->batch, f->o->meta, f->jobs + at, end - at, f->ids + at,
                        f->existing + at, err) == 0) {
            f->sent = end;
            return 0;
        }
        while (f->sent < end && f->ids[f->sent] != 0)
            f->sent++;
        if (!may_send_again(f, end, err))
            return -1;
        fprintf(stderr,
                "llmq-submit: no answer from the broker at %s for %.0f s: submitting again"
                " (is it running? with CURVE, is this client's key allowed?)\n",
                f->o->broker, (clock_mono_ms_f() - t0) / 1e3);
    }
}

static void tell_full(flow *f, const llmq_error *err)
{
    if (f->told)
        return;
    f->told = true;
    fprintf(stderr,
            "llmq-submit: %s\nllmq-submit: the queue has no room for all %zu jobs: sending"
            " them in parts as room frees\n",
            err->message, f->n);
}

/* Every job into the queue: the whole batch at once where it fits, else
 * in parts, halving a refused part until one fits and doubling after each
 * success, pausing once a part of one job is refused (the workers take
 * queued jobs as their slots free, which makes room). */
static int send_all(flow *f, llmq_error *err)
{
    size_t part = f->n;
    while (f->sent < f->n) {
        size_t n = part < f->n - f->sent ? part : f->n - f->sent;
        size_t before = f->sent;
        if (send_part(f, n, err) == 0) {
            part = n * 2;
            f->pause_ms = ROOM_POLL_MIN_MS;
            if (f->told && f->sent == f->n)
                flow_show(f, true);
            continue;
        }
        if (err->code != LLMQ_E_QUEUE_FULL)
            return -1;
        tell_full(f, err);
        size_t stored = f->sent - before;
        if (stored > 0)
            part = stored;
        else if (n > 1)
            part = (n + 1) / 2;
        else if (pause_for_room(f, err) < 0)
            return -1;
    }
    return 0;
}

/* The input as messages name it. */
static const char *input_name(const options *o)
{
    return strcmp(o->in, "-") == 0 ? "stdin" : o->in;
}

/* A refusal that names one job (jobs[K].field) may be that job's alone. */
static bool names_a_job(const llmq_error *err, size_t *k)
{
    if (strncmp(err->field, "jobs[", 5) != 0 || err->code == LLMQ_E_QUEUE_FULL ||
        err->code == LLMQ_E_SHUTTING_DOWN || err->code == LLMQ_E_INTERNAL ||
        err->code == LLMQ_E_UNAVAILABLE)
        return false;
    *k = strtoul(err->field + 5, NULL, 10);
    return true;
}

/* Every job has a key, so that jobs sent again are not stored twice. */
static bool all_keyed(const llmq_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!jobs[i].key)
            return false;
    return true;
}

/* A job the broker refused (a model no worker serves, ...) fails its line
 * alone, unless --strict: true when it did, and the rest may be sent again
 * (they have keys: what of them was stored already is not stored twice). */
static bool refuse_line(const options *o, jobfile *jf, const flow *f, const llmq_error *err,
                        FILE *out)
{
    size_t k;
    if (o->strict || !names_a_job(err, &k) || k >= f->n || !all_keyed(f->jobs, f->n))
        return false;
    const jobfile_entry *e = jobfile_refuse(jf, k, err);
    char text[LLMQ_ERR_MAX + 128];
    jobfile_fault_text(e, input_name(o), text, sizeof text);
    fprintf(stderr, "llmq-submit: %s\n", text);
    jobfile_write_fault(out, e);
    return true;
}

/* Submits the jobs of the lines that have not failed; *existing[k] for
 * the k-th of them.  *n: how many. */
static int submit(llmq_client *c, const options *o, const char *batch, jobfile *jf, FILE *out,
                  bool **existing, size_t *n, double *t0_ms)
{
    flow f = {.c = c,
              .o = o,
              .batch = batch,
              .tty = isatty(2),
              .t0_ms = clock_mono_ms_f(),
              .pause_ms = ROOM_POLL_MIN_MS};
    if (o->timeout_s >= 0)
        f.deadline_ms = f.t0_ms + o->timeout_s * 1e3;
    int rc = -1;
    llmq_err lerr;
    llmq_error err;
    for (;;) {
        free(f.jobs);
        free(f.ids);
        free(*existing);
        f.ids = NULL;
        *existing = NULL;
        if (jobfile_jobs(jf, &f.jobs, &f.n, &lerr) < 0 ||
            !(f.ids = calloc(f.n ? f.n : 1, sizeof *f.ids)) ||
            !(*existing = calloc(f.n ? f.n : 1, sizeof **existing))) {
            fprintf(stderr, "llmq-submit: out of memory\n");
            goto out;
        }
        f.existing = *existing;
        f.sent = 0;
        if (f.n == 0 || send_all(&f, &err) == 0)
            break;
        if (!refuse_line(o, jf, &f, &err, out)) {
            fprintf(stderr, "%sllmq-submit: submit to %s failed (%s): %s\n",
                    f.tty && f.told ? "\n" : "", o->broker, llmq_code_name(err.code), err.message);
            if (f.sent)
                fprintf(stderr,
                        "llmq-submit: %zu of the %zu jobs were submitted; the same command"
                        " again sends the rest (lines with an \"id\" are not sent twice)\n",
                        f.sent, f.n);
            goto out;
        }
    }
    *n = f.n;
    if (f.n && jobfile_set_ids(jf, f.ids, &lerr) < 0) {
        fprintf(stderr, "llmq-submit: %s\n", lerr.msg);
        goto out;
    }
    *t0_ms = f.t0_ms;
    rc = 0;
out:
    free(f.jobs);
    free(f.ids);
    return rc;
}

/* Which of the jobs known from an earlier submit are final already: their
 * results were computed before this run and count in no rate of it.  0,
 * or -1 with err. */
static int stored_before(llmq_client *c, const jobfile *jf, const bool *existing, bool *stored,
                         llmq_error *err)
{
    enum { IDS_PER_REQUEST = 100000 }; /* docs/PROTOCOL.md: status selects at most this many */
    const size_t total = jf->n_submitted;
    uint64_t *ids = malloc((total ? total : 1) * sizeof *ids);
    if (!ids) {
        err->code = LLMQ_E_INTERNAL;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    size_t n = 0;
    int rc = 0;
    for (size_t k = 0; k < total; k++)
        if (existing[k])
            ids[n++] = jf->jobs[jf->submitted[k]].job_id;
    for (size_t at = 0; at < n && rc == 0; at += IDS_PER_REQUEST) {
        llmq_select sel = {.ids = ids + at,
                           .n_ids = n - at < IDS_PER_REQUEST ? n - at : IDS_PER_REQUEST};
        llmq_status *st;
        rc = llmq_get_status(c, &sel, &st, err);
        for (size_t k = 0; rc == 0 && k < st->n_jobs; k++) {
            llmq_state s = st->jobs[k].state;
            const jobfile_job *j = jobfile_job_of(jf, st->jobs[k].id);
            if (j && (s == LLMQ_STATE_DONE || s == LLMQ_STATE_FAILED || s == LLMQ_STATE_CANCELLED))
                stored[j->order] = true;
        }
        if (rc == 0)
            llmq_status_free(st);
    }
    free(ids);
    return rc;
}

static void report_failure(const jobfile_job *j, const jobfile *jf, const llmq_result *r)
{
    fprintf(stderr, "%sllmq-submit: line %zu (job %" PRIu64 ") %s: %s\n", isatty(2) ? "\r" : "",
            jf->entries[j->entry].line, r->id, llmq_state_name(r->state),
            r->error ? r->error : "no reason given");
}

/* What is left of --timeout since t0_ms, for the wait (at most INT_MAX ms,
 * the most libllmq takes: 24 days); -1: no limit. */
static int wait_timeout_ms(const options *o, double t0_ms)
{
    if (o->timeout_s < 0)
        return -1;
    double left = o->timeout_s * 1e3 - (clock_mono_ms_f() - t0_ms);
    return left <= 0 ? 0 : left >= INT_MAX ? INT_MAX : (int)left;
}

/* Writes each result as it comes; returns the number of jobs not done, or -1.
 * stored[k]: submitted job k was final before this run (t0_ms: when it
 * submitted). */
static long wait_all(llmq_client *c, const options *o, jobfile *jf, const bool *stored,
                     double t0_ms, FILE *out)
{
    const size_t n = jf->n_submitted;
    uint64_t *ids = calloc(n ? n : 1, sizeof *ids);
    if (!ids) {
        fprintf(stderr, "llmq-submit: out of memory\n");
        return -1;
    }
    for (size_t k = 0; k < n; k++)
        ids[k] = jf->jobs[jf->submitted[k]].job_id;
    progress p = {.total = n, .tty = isatty(2), .t0_ms = t0_ms};
    llmq_select sel = {.ids = ids, .n_ids = n};
    llmq_wait *w = NULL;
    llmq_error err;
    long not_done = -1;
    time_t created = time(NULL);
    if (llmq_wait_begin(c, &sel, wait_timeout_ms(o, t0_ms), &w, &err) < 0)
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
            if (stored[j->order])
                p.stored++;
            else
                p.tokens += r.gen_tokens;
            if (r.state != LLMQ_STATE_DONE) {
                p.failed++;
                report_failure(j, jf, &r);
            }
        }
        show_broker(&p, w, o->broker);
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

/* After the submit: the acks, or the results. */
static int collect(llmq_client *c, const options *o, jobfile *jf, const bool *existing, size_t n,
                   double t0_ms, FILE *out)
{
    size_t old = 0;
    llmq_error err;
    for (size_t i = 0; i < n; i++)
        old += existing[i];
    fprintf(stderr, "llmq-submit: batch %s: %zu jobs submitted%s", o->batch, n - old,
            old ? "" : "\n");
    if (old)
        fprintf(stderr, ", %zu already known from an earlier submit\n", old);
    if (o->no_wait) {
        jobfile_write_acks(out, jf, existing);
        return 0;
    }
    bool *stored = calloc(n ? n : 1, sizeof *stored);
    int status = EXIT_BROKER;
    if (!stored) {
        fprintf(stderr, "llmq-submit: out of memory\n");
    } else if (old && stored_before(c, jf, existing, stored, &err) < 0) {
        fprintf(stderr, "llmq-submit: asking %s for the state of the known jobs failed (%s): %s\n",
                o->broker, llmq_code_name(err.code), err.message);
    } else {
        long not_done = wait_all(c, o, jf, stored, t0_ms, out);
        status = not_done < 0 ? EXIT_BROKER : not_done > 0 ? EXIT_FAILED : 0;
    }
    free(stored);
    return status;
}

static int run(const options *o, jobfile *jf, FILE *out)
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
    double t0_ms = 0;
    int status = EXIT_BROKER;
    if (submit(c, o, o->batch, jf, out, &existing, &n, &t0_ms) == 0) {
        if (n > 0) {
            status = collect(c, o, jf, existing, n, t0_ms, out);
        } else {
            fprintf(stderr, "llmq-submit: every line failed: nothing was submitted\n");
            status = EXIT_FAILED;
        }
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
    int status = report_faults(&o, &jf, out) < 0 ? EXIT_USAGE : run(&o, &jf, out);
    if (fclose(out) != 0) {
        fprintf(stderr, "llmq-submit: writing %s: %m\n", o.out);
        status = status ? status : EXIT_FAILED;
    }
    jobfile_free(&jf);
    return status;
}
