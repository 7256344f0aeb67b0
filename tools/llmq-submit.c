/* llmq-submit: submit a JSONL file of jobs to the broker as one batch, wait
 * for the results (progress on stderr) and write them as JSONL.
 *
 * Input and output shapes: tools/jobfile.h.  A line that cannot run fails
 * alone: its fault goes to stderr and, as its output line, to the results,
 * and the other lines run; with --strict any such line stops the file
 * before anything is sent.  Results are written in the order they complete.
 * A batch larger than the broker's queue has room for goes in parts as room
 * frees, its results written as they complete while later parts wait.
 * Exit status: 0 every line done; 1 some line failed, or a job failed, was
 * cancelled or did not finish in time (reasons on stderr); 2 bad usage or
 * bad input (nothing was submitted); 3 the broker could not be reached or
 * refused the submit, or had no room for the rest in time. */
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
#include "common/grow.h"
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
    "                   [--batch ID] [--meta TEXT] [--no-wait] [--strict]\n"
    "                   [--timeout SECONDS]\n"
    "\n"
    "Submits every line of JOBS.jsonl as one batch (in parts as room frees when\n"
    "the broker's queue has no room for all of it), waits for the results and\n"
    "writes one JSON line per job as it completes, also while later parts wait.\n";

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
 * the waits again by itself, and results already written are not written
 * twice. */
static void show_broker(progress *p, const llmq_wait_health *h, const char *broker)
{
    if (h->broker_lost == p->lost)
        return;
    p->lost = h->broker_lost;
    const char *cr = p->tty ? "\r\033[K" : "";
    if (p->lost && h->broker_stopping)
        fprintf(stderr,
                "%sllmq-submit: the broker at %s is stopping: waiting for the next one on its"
                " database (%zu of %zu results in)\n",
                cr, broker, p->done, p->total);
    else if (p->lost)
        fprintf(stderr,
                "%sllmq-submit: no word from the broker at %s for %.0f s: waiting for it to"
                " come back (%zu of %zu results in)\n",
                cr, broker, h->silent_ms / 1e3, p->done, p->total);
    else
        fprintf(stderr,
                "%sllmq-submit: the broker at %s answers again: waiting for the %zu"
                " results left\n",
                cr, broker, p->total - p->done);
    fflush(stderr);
}

static void pause_ms(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3), .tv_nsec = (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* What is left of --timeout since t0_ms, for a wait (at most INT_MAX ms,
 * the most libllmq takes: 24 days); -1: no limit. */
static int wait_timeout_ms(const options *o, double t0_ms)
{
    if (o->timeout_s < 0)
        return -1;
    double left = o->timeout_s * 1e3 - (clock_mono_ms_f() - t0_ms);
    return left <= 0 ? 0 : left >= INT_MAX ? INT_MAX : (int)left;
}

/* ---- results, as they come ---------------------------------------------------------------- */

/* Results are waited for as their jobs are stored, not once the whole
 * batch is: each is written as soon as it is final, also while later parts
 * of a large batch wait for room in the queue, so that the output grows
 * from the start and a run stopped half-way keeps every result it saw.
 * The jobs stored since the last wait began get a wait of their own, at
 * most one each GROUP_MS while parts go in (each wait holds a lease on the
 * broker, heard from every second: parts of one job each must not open a
 * wait each), and the rest one more once the last part is in.  A wait
 * ends when all its jobs are final. */

#define GROUP_MS 1000
#define POLL_MS 50 /* the longest one wait blocks while others may have results */

typedef struct sink {
    llmq_client *c;
    const options *o;
    jobfile *jf;
    FILE *out;
    progress p;
    time_t created;    /* stamped in OpenAI bodies */
    llmq_wait **waits; /* open, oldest first */
    size_t n_waits, cap_waits;
    bool *waited;    /* per jf->jobs: in a wait already */
    bool *earlier;   /* per jf->jobs: final before this run (no rate counts it) */
    double began_ms; /* monotonic: when the last wait began; 0: none yet */
    size_t pending;  /* jobs unfinished when their wait ended */
    bool timed_out;
    bool broken; /* a wait failed (err): no more results come */
    llmq_error err;
} sink;

static int sink_init(sink *s, llmq_client *c, const options *o, jobfile *jf, FILE *out)
{
    *s = (sink){.c = c, .o = o, .jf = jf, .out = out, .created = time(NULL)};
    s->p.tty = isatty(2);
    s->waited = calloc(jf->n_jobs ? jf->n_jobs : 1, sizeof *s->waited);
    s->earlier = calloc(jf->n_jobs ? jf->n_jobs : 1, sizeof *s->earlier);
    if (!s->waited || !s->earlier) {
        fprintf(stderr, "llmq-submit: out of memory for %zu jobs\n", jf->n_jobs);
        return -1;
    }
    return 0;
}

static void sink_free(sink *s)
{
    for (size_t i = 0; i < s->n_waits; i++)
        llmq_wait_free(s->waits[i]);
    free(s->waits);
    free(s->waited);
    free(s->earlier);
}

static int sink_fail(sink *s, llmq_code code, const char *what)
{
    s->broken = true;
    s->err.code = code;
    s->err.field[0] = '\0';
    snprintf(s->err.message, sizeof s->err.message, "%s", what);
    return -1;
}

/* Which of ids (jobs known from an earlier submit) are final already:
 * their results were computed before this run and count in no rate of
 * it.  0, or -1 with s->err. */
static int mark_earlier(sink *s, const uint64_t *ids, size_t n)
{
    enum { IDS_PER_REQUEST = 100000 }; /* docs/PROTOCOL.md: status selects at most this many */
    for (size_t at = 0; at < n; at += IDS_PER_REQUEST) {
        llmq_select sel = {.ids = ids + at,
                           .n_ids = n - at < IDS_PER_REQUEST ? n - at : IDS_PER_REQUEST};
        llmq_status *st;
        if (llmq_get_status(s->c, &sel, &st, &s->err) < 0) {
            s->broken = true;
            return -1;
        }
        for (size_t k = 0; k < st->n_jobs; k++) {
            llmq_state state = st->jobs[k].state;
            const jobfile_job *j = jobfile_job_of(s->jf, st->jobs[k].id);
            if (j && (state == LLMQ_STATE_DONE || state == LLMQ_STATE_FAILED ||
                      state == LLMQ_STATE_CANCELLED))
                s->earlier[j - s->jf->jobs] = true;
        }
        llmq_status_free(st);
    }
    return 0;
}

/* Opens a wait for the m jobs of ids: 0, or -1 with s->err. */
static int begin_wait(sink *s, const uint64_t *ids, size_t m)
{
    const llmq_select sel = {.ids = ids, .n_ids = m};
    if (grow_reserve(&s->waits, &s->cap_waits, s->n_waits + 1, sizeof *s->waits) < 0)
        return sink_fail(s, LLMQ_E_INTERNAL, "out of memory for a wait");
    if (llmq_wait_begin(s->c, &sel, wait_timeout_ms(s->o, s->p.t0_ms), &s->waits[s->n_waits],
                        &s->err) < 0) {
        s->broken = true;
        return -1;
    }
    s->n_waits++;
    s->began_ms = clock_mono_ms_f();
    return 0;
}

/* A wait for the jobs of the last jobfile_jobs list that are stored (ids[k]
 * not 0; existing[k]: known from an earlier submit) and in no wait yet,
 * unless one began within GROUP_MS and this is not the last part.  0, or -1
 * with s->err. */
static int sink_open(sink *s, const uint64_t *ids, const bool *existing, bool last)
{
    jobfile *jf = s->jf;
    llmq_err lerr;
    if (s->broken)
        return -1;
    if (!last && s->began_ms > 0 && clock_mono_ms_f() - s->began_ms < GROUP_MS)
        return 0;
    if (jobfile_set_ids(jf, ids, &lerr) < 0)
        return sink_fail(s, LLMQ_E_INTERNAL, lerr.msg);
    const size_t n = jf->n_submitted;
    uint64_t *group = malloc((n ? n : 1) * sizeof *group);
    uint64_t *known = malloc((n ? n : 1) * sizeof *known);
    if (!group || !known) {
        free(group);
        free(known);
        return sink_fail(s, LLMQ_E_INTERNAL, "out of memory for a wait");
    }
    size_t m = 0, n_known = 0;
    for (size_t k = 0; k < n; k++) {
        if (ids[k] == 0 || s->waited[jf->submitted[k]])
            continue;
        group[m++] = jf->jobs[jf->submitted[k]].job_id;
        if (existing[k])
            known[n_known++] = group[m - 1];
    }
    int rc = 0;
    if (m > 0 && ((n_known && mark_earlier(s, known, n_known) < 0) || begin_wait(s, group, m) < 0))
        rc = -1;
    for (size_t k = 0; rc == 0 && k < n; k++)
        s->waited[jf->submitted[k]] |= ids[k] != 0;
    s->p.total = n;
    free(group);
    free(known);
    return rc;
}

static void report_failure(const jobfile_job *j, const jobfile *jf, const llmq_result *r)
{
    fprintf(stderr, "%sllmq-submit: line %zu (job %" PRIu64 ") %s: %s\n", isatty(2) ? "\r" : "",
            jf->entries[j->entry].line, r->id, llmq_state_name(r->state),
            r->error ? r->error : "no reason given");
}

/* A result: its line written (flushed, so that the output file holds it
 * at once) and counted. */
static void sink_take(sink *s, const llmq_result *r)
{
    const jobfile_job *j = jobfile_take(s->jf, r, s->out, s->created);
    if (!j)
        return; /* not a job of this file: nothing to write it to */
    fflush(s->out);
    s->p.done++;
    if (s->earlier[j - s->jf->jobs])
        s->p.stored++;
    else
        s->p.tokens += r->gen_tokens;
    if (r->state != LLMQ_STATE_DONE) {
        s->p.failed++;
        report_failure(j, s->jf, r);
    }
}

/* Wait i's events within step_ms, then what has arrived for it: 1 when
 * it ended (it is closed, the later ones move up), 0, or -1 with s->err. */
static int sink_poll(sink *s, size_t i, int step_ms)
{
    llmq_wait *w = s->waits[i];
    for (;;) {
        llmq_result r;
        int ev = llmq_wait_next(w, step_ms, &r, &s->err);
        if (ev < 0) {
            s->broken = true;
            return -1;
        }
        if (ev == LLMQ_WAIT_IDLE)
            return 0;
        if (ev == LLMQ_WAIT_END) {
            size_t pending;
            bool timed_out;
            llmq_wait_summary(w, NULL, &pending, &timed_out);
            s->pending += pending;
            s->timed_out |= timed_out;
            llmq_wait_free(w);
            memmove(&s->waits[i], &s->waits[i + 1], (s->n_waits - i - 1) * sizeof *s->waits);
            s->n_waits--;
            return 1;
        }
        sink_take(s, &r);
        step_ms = 0;
    }
}

/* The broker's health for the progress output: lost while any wait is. */
static void sink_health(sink *s)
{
    llmq_wait_health all = {0}, h;
    for (size_t i = 0; i < s->n_waits; i++) {
        llmq_wait_get_health(s->waits[i], &h);
        all.broker_lost |= h.broker_lost;
        all.broker_stopping |= h.broker_stopping;
        all.silent_ms = fmax(all.silent_ms, h.silent_ms);
    }
    if (s->n_waits)
        show_broker(&s->p, &all, s->o->broker);
}

/* Every open wait's events for ms (0: only what has arrived), or until
 * the last one ends; results written as they come.  Blocks on the oldest
 * wait, at most POLL_MS at a time while others are open (their messages
 * are kept for them meanwhile).  0, or -1 with s->err. */
static int sink_pump(sink *s, double ms)
{
    const double end = clock_mono_ms_f() + ms;
    const bool had = s->n_waits > 0;
    if (s->broken)
        return -1;
    for (;;) {
        for (size_t i = 0; i < s->n_waits;) {
            int rc = sink_poll(s, i, 0);
            if (rc < 0)
                return -1;
            i += rc == 0;
        }
        sink_health(s);
        double left = end - clock_mono_ms_f();
        if (left <= 0 || (had && s->n_waits == 0))
            return 0;
        if (s->n_waits == 0)
            pause_ms(left);
        else if (sink_poll(s, 0, (int)(s->n_waits == 1 ? left : fmin(left, POLL_MS))) < 0)
            return -1;
    }
}

/* After the last part: every result, with progress; the number of jobs not
 * done, or -1. */
static long sink_drain(sink *s)
{
    while (s->n_waits > 0 && sink_pump(s, s->p.tty ? STEP_MS : LOG_EVERY_MS) == 0)
        show(&s->p, false);
    if (s->broken) {
        fprintf(stderr, "%sllmq-submit: waiting for results from %s failed (%s): %s\n",
                s->p.tty ? "\n" : "", s->o->broker, llmq_code_name(s->err.code), s->err.message);
        return -1;
    }
    show(&s->p, true);
    if (s->pending)
        fprintf(stderr, "llmq-submit: %zu jobs unfinished%s\n", s->pending,
                s->timed_out ? " when the wait timed out" : "");
    return (long)(s->p.failed + s->pending);
}

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
    sink *s; /* NULL: no results are waited for (--no-wait) */
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

/* "12/40 jobs submitted, 5 results in, waiting for room in the queue",
 * redrawn on a terminal, every LOG_EVERY_MS otherwise; final clears a
 * terminal's line. */
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
    char results[48] = "";
    if (f->s)
        snprintf(results, sizeof results, ", %zu results in", f->s->p.done);
    fprintf(stderr, "%sllmq-submit: %zu/%zu jobs submitted%s, waiting for room in the queue%s",
            f->tty ? "\r" : "", f->sent, f->n, results, f->tty ? "\033[K" : "\n");
    fflush(stderr);
}

/* Before a refused part of one job is tried again: a pause, twice as long
 * each time (up to ROOM_POLL_MAX_MS) while the queue stays full, spent
 * writing the results of the jobs stored so far; -1 with err when it would
 * pass the deadline, or a wait failed. */
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
    if (!f->s) {
        pause_ms(f->pause_ms);
    } else if (sink_open(f->s, f->ids, f->existing, false) < 0 ||
               sink_pump(f->s, f->pause_ms) < 0) {
        *err = f->s->err;
        return -1;
    }
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

/* How long one request waits for its answer: cap_ms, or what is left of
 * --timeout when that is less (at least 1 ms, so that the request goes
 * out), so that a broker that is down ends the run at --timeout, not at
 * libllmq's 30 s. */
static int request_timeout_ms(const flow *f, int cap_ms)
{
    if (!f->deadline_ms)
        return cap_ms;
    const double left = f->deadline_ms - clock_mono_ms_f();
    return left >= cap_ms ? cap_ms : left < 1 ? 1 : (int)ceil(left);
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
        llmq_set_timeout(f->c, request_timeout_ms(f, LLMQ_DEFAULT_TIMEOUT_MS));
        const int rc = llmq_submit(f->c, f->batch, f->o->meta, f->jobs + at, end - at, f->ids + at,
                                   f->existing + at, err);
        llmq_set_timeout(f->c, LLMQ_DEFAULT_TIMEOUT_MS); /* the other requests: status, waits */
        if (rc == 0) {
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

/* A broker that is up answers a status request at once (one indexed
 * lookup of a batch), where a submit to one that is down, or to a mistyped
 * endpoint, waits libllmq's 30 s before anyone hears of it: asked first, a
 * silent broker is named within PING_MS (or what is left of --timeout).
 * Only a word to the user: the submit that follows waits as it always has. */
#define PING_MS 3000

static void ping_broker(flow *f)
{
    const int ms = request_timeout_ms(f, PING_MS);
    llmq_set_timeout(f->c, ms);
    const llmq_select sel = {.batch = f->batch ? f->batch : "-"}; /* any batch: just an answer */
    llmq_status *st = NULL;
    llmq_error err;
    if (llmq_get_status(f->c, &sel, &st, &err) == 0)
        llmq_status_free(st);
    else if (err.code == LLMQ_E_TIMEOUT)
        fprintf(stderr,
                "llmq-submit: no answer from the broker at %s in %.1f s (is it running? with"
                " CURVE, is this client's key allowed?): still trying%s\n",
                f->o->broker, ms / 1e3, f->deadline_ms ? ", until --timeout" : "");
    llmq_set_timeout(f->c, LLMQ_DEFAULT_TIMEOUT_MS);
}

/* Submits the jobs of the lines that have not failed; *existing[k] for
 * the k-th of them.  *n: how many.  With a sink, their results are waited
 * for as they are stored. */
static int submit(llmq_client *c, const options *o, sink *s, jobfile *jf, FILE *out,
                  bool **existing, size_t *n)
{
    flow f = {.c = c,
              .o = o,
              .s = s,
              .batch = o->batch,
              .tty = isatty(2),
              .t0_ms = clock_mono_ms_f(),
              .pause_ms = ROOM_POLL_MIN_MS};
    if (s)
        s->p.t0_ms = f.t0_ms;
    if (o->timeout_s >= 0)
        f.deadline_ms = f.t0_ms + o->timeout_s * 1e3;
    int rc = -1;
    llmq_err lerr;
    llmq_error err;
    ping_broker(&f);
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
            fprintf(stderr, "%sllmq-submit: %s %s failed (%s): %s\n", f.tty && f.told ? "\n" : "",
                    s && s->broken ? "waiting for results from" : "submit to", o->broker,
                    llmq_code_name(err.code), err.message);
            if (f.sent)
                fprintf(stderr,
                        "llmq-submit: %zu of the %zu jobs were submitted; the same command"
                        " again sends the rest (lines with an \"id\" are not sent twice)\n",
                        f.sent, f.n);
            goto out;
        }
    }
    *n = f.n;
    if (f.n && s && sink_open(s, f.ids, f.existing, true) < 0) {
        fprintf(stderr, "llmq-submit: waiting for results from %s failed (%s): %s\n", o->broker,
                llmq_code_name(s->err.code), s->err.message);
        goto out;
    }
    if (f.n && !s && jobfile_set_ids(jf, f.ids, &lerr) < 0) {
        fprintf(stderr, "llmq-submit: %s\n", lerr.msg);
        goto out;
    }
    rc = 0;
out:
    free(f.jobs);
    free(f.ids);
    return rc;
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

/* After the submit: the acks, or the rest of the results. */
static int collect(const options *o, sink *s, jobfile *jf, const bool *existing, size_t n,
                   FILE *out)
{
    size_t old = 0;
    for (size_t i = 0; i < n; i++)
        old += existing[i];
    fprintf(stderr, "llmq-submit: batch %s: %zu jobs submitted%s", o->batch, n - old,
            old ? "" : "\n");
    if (old)
        fprintf(stderr, ", %zu already known from an earlier submit\n", old);
    if (!s) {
        jobfile_write_acks(out, jf, existing);
        return 0;
    }
    long not_done = sink_drain(s);
    return not_done < 0 ? EXIT_BROKER : not_done > 0 ? EXIT_FAILED : 0;
}

/* Submits, then waits for what is left (unless --no-wait): the results of
 * jobs stored early come while later parts wait for room. */
static int submit_and_wait(llmq_client *c, const options *o, jobfile *jf, FILE *out)
{
    sink sk, *s = o->no_wait ? NULL : &sk;
    bool *existing = NULL;
    size_t n = 0;
    int status = EXIT_BROKER;
    if (s && sink_init(s, c, o, jf, out) < 0) {
        sink_free(s);
        return EXIT_BROKER;
    }
    if (submit(c, o, s, jf, out, &existing, &n) < 0) {
        if (s)
            sink_pump(s, 0); /* the results that came before it failed */
    } else if (n > 0) {
        status = collect(o, s, jf, existing, n, out);
    } else {
        fprintf(stderr, "llmq-submit: every line failed: nothing was submitted\n");
        status = EXIT_FAILED;
    }
    if (s)
        sink_free(s);
    free(existing);
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
    int status = submit_and_wait(c, o, jf, out);
    if (status == 0 && jf->n_faults)
        status = EXIT_FAILED;
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
