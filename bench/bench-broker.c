/* bench-broker: durable submits per second and ack latency through a real
 * llmq-broker, and end-to-end jobs per second with instant workers.
 *
 * Starts llmq-broker on a fresh database in a temp dir (ipc:// endpoints),
 * then drives it from K DEALER clients with W submits in flight each, every
 * submit carrying B jobs with distinct client keys (as llmq-submit sends
 * them).  Latency is per submit: send to submit_ok, which the broker sends
 * only after the fsync of the transaction holding the jobs.
 *
 * With --workers N, N scripted workers (S slots each) answer every job at
 * once with a one-token result, and a client waits on the batch: that is
 * the broker's own cost per job (claim, dispatch, result row, push), with
 * the engine taken out.  Not a test: prints figures, exits 0. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/cli.h"
#include "common/clock.h"
#include "proto/wire.h"
#include "tests/integration/harness.h"

#define MAX_CLIENTS 64
#define MAX_WORKERS 64

typedef struct opts {
    const char *broker;
    int64_t jobs, clients, inflight, batch, workers, slots;
    const char *sync;
} opts;

typedef struct bench {
    opts o;
    harness h; /* the broker process, its files and the ZeroMQ context */
    void *c[MAX_CLIENTS], *w[MAX_WORKERS];
    double *lat_ms;  /* per submit */
    double *sent_at; /* per submit, by req - 1 */
    long n_submits, next_submit, acked_jobs, n_lat;
    long results;    /* results pushed to the waiting client */
    bool wait_over;
} bench;

static void die(const char *what)
{
    fprintf(stderr, "bench-broker: %s\n", what);
    exit(1);
}

/* ---- the broker process ----------------------------------------------------- */

/* CPU seconds (user + system) the broker used so far, from /proc. */
static double broker_cpu_s(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    char *p = ok ? strrchr(line, ')') : NULL;
    unsigned long ut, st;
    /* After "pid (comm)": state and 10 more fields, then utime and stime. */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                     &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void start_broker(bench *b)
{
    if (!getenv("LLMQ_BUILDDIR"))
        setenv("LLMQ_BUILDDIR", ".", 0);
    h_init(&b->h, "bench-broker", 0);
    if (b->o.broker)
        snprintf(b->h.exe, sizeof b->h.exe, "%s", b->o.broker);
    const char *const flags[] = {"--sync", b->o.sync, "--max-queued", "0", NULL};
    h_start(&b->h, flags);
}

/* ---- sending -------------------------------------------------------------------- */

static void send_msg(void *sock, const wire_msg *m)
{
    if (h_send(sock, m) != 0)
        die("cannot send");
}

/* Submit number k (0-based) carries jobs k*B .. k*B+B-1, keys "j<n>". */
/* The clock starts once every client is connected and answered: the
 * broker's start-up (and ZeroMQ's reconnect interval) is not a submit's
 * latency. */
static void wait_ready(void *sock)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_STATS);
    send_msg(sock, &m);
    if (h_recv_type(sock, 10000, WIRE_T_STATS_OK, &m) != 0)
        die("the broker does not answer");
    wire_msg_free(&m);
}

static void send_submit(bench *b, void *sock, long k)
{
    wire_job jobs[1000];
    char keys[1000][24];
    for (long i = 0; i < b->o.batch; i++) {
        snprintf(keys[i], sizeof keys[i], "j%" PRId64, k * b->o.batch + i);
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].key = keys[i];
        jobs[i].prompt = "Once upon a time";
        jobs[i].params = job_params_default();
        jobs[i].params.max_tokens = 1;
    }
    wire_msg m;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.req = (uint64_t)k + 1;
    m.submit = (wire_submit){.batch = "bench", .jobs = jobs,
                             .n_jobs = (uint32_t)b->o.batch};
    b->sent_at[k] = clock_mono_ms_f();
    send_msg(sock, &m);
}

static void send_next(bench *b, void *sock)
{
    if (b->next_submit < b->n_submits)
        send_submit(b, sock, b->next_submit++);
}

static void send_wait(bench *b)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WAIT);
    m.req = UINT64_MAX;
    m.wait.sel.batch = "bench";
    m.wait.timeout_ms = 600000;
    send_msg(b->c[0], &m);
}

/* ---- instant workers ------------------------------------------------------------------ */

static void worker_hello(bench *b, int i)
{
    char name[32];
    snprintf(name, sizeof name, "bench-w%d", i);
    b->w[i] = h_peer(&b->h, b->h.workers);
    wire_msg m;
    wire_msg_init(&m, WIRE_T_HELLO);
    m.hello = (wire_hello){.worker = name, .host = "bench", .pid = (uint32_t)getpid(),
                           .gpu_index = -1, .model = "bench", .engine = "cpu",
                           .slots = (uint32_t)b->o.slots};
    send_msg(b->w[i], &m);
    wire_msg_init(&m, WIRE_T_CREDIT);
    m.credit = (uint32_t)b->o.slots;
    send_msg(b->w[i], &m);
}

static void answer_job(void *sock, const wire_msg *job)
{
    static const uint32_t tok[1] = {42};
    wire_msg m;
    wire_msg_init(&m, WIRE_T_JOB_RESULT);
    m.result = (wire_result){.id = job->job.id, .attempt = job->job.attempt,
                             .text = "x", .tokens = tok, .n_tokens = 1,
                             .finish = WIRE_FINISH_LENGTH, .prompt_tokens = 5,
                             .gen_tokens = 1, .timings = {.prefill_ms = 0.1,
                                                          .decode_ms = 0.1}};
    send_msg(sock, &m);
    wire_msg_init(&m, WIRE_T_CREDIT);
    m.credit = 1;
    send_msg(sock, &m);
}

static void heartbeat_all(bench *b)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_HEARTBEAT);
    for (long i = 0; i < b->o.workers; i++)
        send_msg(b->w[i], &m);
}

/* ---- receiving ------------------------------------------------------------------------ */

static void on_client_msg(bench *b, void *sock, const wire_msg *m)
{
    if (m->type == WIRE_T_SUBMIT_OK) {
        long k = (long)m->req - 1;
        b->lat_ms[b->n_lat++] = clock_mono_ms_f() - b->sent_at[k];
        b->acked_jobs += m->submit_ok.n;
        send_next(b, sock);
        /* A wait on a batch covers the jobs it has when the wait arrives. */
        if (b->o.workers && b->acked_jobs == b->o.jobs)
            send_wait(b);
    } else if (m->type == WIRE_T_RESULT) {
        b->results++;
    } else if (m->type == WIRE_T_WAIT_END) {
        b->wait_over = true;
    } else if (m->type == WIRE_T_ERROR) {
        die(m->error.message);
    }
}

static void drain(bench *b, zmq_pollitem_t *items, int n_items)
{
    for (int i = 0; i < n_items; i++) {
        wire_msg m;
        while (h_recv(items[i].socket, 0, &m) == 0) {
            if (i < b->o.clients)
                on_client_msg(b, items[i].socket, &m);
            else if (m.type == WIRE_T_JOB)
                answer_job(items[i].socket, &m);
            wire_msg_free(&m);
        }
    }
}

static bool finished(const bench *b)
{
    if (b->acked_jobs < b->o.jobs)
        return false;
    return b->o.workers == 0 || b->wait_over;
}

static void run_loop(bench *b)
{
    zmq_pollitem_t items[MAX_CLIENTS + MAX_WORKERS];
    int n = 0;
    for (long i = 0; i < b->o.clients; i++)
        items[n++] = (zmq_pollitem_t){b->c[i], 0, ZMQ_POLLIN, 0};
    for (long i = 0; i < b->o.workers; i++)
        items[n++] = (zmq_pollitem_t){b->w[i], 0, ZMQ_POLLIN, 0};
    double last_beat = clock_mono_ms_f(), give_up = clock_mono_ms_f() + 600000;
    while (!finished(b)) {
        if (zmq_poll(items, n, 100) < 0 && errno != EINTR)
            die(zmq_strerror(errno));
        drain(b, items, n);
        if (clock_mono_ms_f() - last_beat > 300) {
            heartbeat_all(b);
            last_beat = clock_mono_ms_f();
        }
        if (clock_mono_ms_f() > give_up)
            die("no progress for 10 minutes");
    }
}

/* ---- figures ---------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, long n, double p)
{
    long i = (long)(p * (n - 1) + 0.5);
    return sorted[i];
}

static void report_submits(bench *b, double ms)
{
    qsort(b->lat_ms, (size_t)b->n_lat, sizeof *b->lat_ms, cmp_double);
    printf("submit: %ld jobs in %ld submits, %.2f s: %.0f durable jobs/s, %.0f"
           " submits/s; ack latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           b->acked_jobs, b->n_lat, ms / 1e3, b->acked_jobs / (ms / 1e3),
           b->n_lat / (ms / 1e3), pct(b->lat_ms, b->n_lat, 0.50),
           pct(b->lat_ms, b->n_lat, 0.99), b->lat_ms[b->n_lat - 1]);
}

static const char USAGE[] = "Usage: bench-broker [--broker PATH] [--jobs N] [--clients K]\n"
                            "       [--inflight W] [--batch B] [--sync full|normal]\n"
                            "       [--workers N --slots S]\n";

/* CLI_RUN, or the status to exit with at once (--help, bad usage). */
static int parse(int argc, char **argv, opts *o)
{
    const cli_flag flags[] = {
        {"broker", 0, "PATH", "the llmq-broker to run (default: this build's)",
         CLI_TEXT(&o->broker)},
        {"jobs", 0, "N", "jobs in all, rounded up to whole submits (default 100000)",
         CLI_INT64(&o->jobs, 1, 100000000)},
        {"clients", 0, "K", "client sockets (default 4)", CLI_INT64(&o->clients, 1, MAX_CLIENTS)},
        {"inflight", 0, "W", "submits in flight per client (default 64)",
         CLI_INT64(&o->inflight, 1, 100000)},
        {"batch", 0, "B", "jobs per submit (default 1)", CLI_INT64(&o->batch, 1, 1000)},
        {"sync", 0, "full|normal", "the broker's --sync (default full)", CLI_TEXT(&o->sync)},
        {"workers", 0, "N", "scripted workers that answer every job at once (default 0)",
         CLI_INT64(&o->workers, 0, MAX_WORKERS)},
        {"slots", 0, "S", "slots of each worker (default 64)",
         CLI_INT64(&o->slots, 1, WIRE_MAX_SLOTS)},
    };
    const cli_spec spec = {
        .program = "bench-broker", .usage = USAGE, .flags = flags, .n_flags = CLI_COUNT(flags)};
    const int status = cli_read(&spec, argc, argv);
    if (o->jobs % o->batch)
        o->jobs += o->batch - o->jobs % o->batch;
    return status;
}

int main(int argc, char **argv)
{
    bench b = {.o = {.broker = NULL, .jobs = 100000,
                     .clients = 4, .inflight = 64, .batch = 1, .sync = "full",
                     .workers = 0, .slots = 64}};
    const int status = parse(argc, argv, &b.o);
    if (status != CLI_RUN)
        return status;
    b.n_submits = b.o.jobs / b.o.batch;
    b.lat_ms = calloc((size_t)b.n_submits, sizeof *b.lat_ms);
    b.sent_at = calloc((size_t)b.n_submits, sizeof *b.sent_at);
    if (!b.lat_ms || !b.sent_at)
        die("out of memory");
    start_broker(&b);
    printf("bench-broker: %" PRId64 " jobs, %" PRId64 " per submit, %" PRId64 " clients x %" PRId64
           " in flight, synchronous=%s, %" PRId64 " instant workers x %" PRId64 " slots\n",
           b.o.jobs, b.o.batch, b.o.clients, b.o.inflight, b.o.sync, b.o.workers, b.o.slots);
    for (long i = 0; i < b.o.clients; i++) {
        b.c[i] = h_peer(&b.h, b.h.clients);
        wait_ready(b.c[i]);
    }
    for (long i = 0; i < b.o.workers; i++)
        worker_hello(&b, (int)i);
    double t0 = clock_mono_ms_f(), t_submits = 0;
    for (long i = 0; i < b.o.clients; i++)
        for (long k = 0; k < b.o.inflight; k++)
            send_next(&b, b.c[i]);
    run_loop(&b);
    t_submits = clock_mono_ms_f() - t0;
    report_submits(&b, t_submits);
    double cpu = broker_cpu_s(b.h.broker);
    printf("broker CPU: %.2f s, %.1f us per job\n", cpu, cpu * 1e6 / b.o.jobs);
    if (b.o.workers)
        printf("end-to-end: %ld jobs done and pushed in %.2f s: %.0f jobs/s\n",
               b.results, t_submits / 1e3, b.results / (t_submits / 1e3));
    for (long i = 0; i < b.o.clients; i++)
        zmq_close(b.c[i]);
    for (long i = 0; i < b.o.workers; i++)
        zmq_close(b.w[i]);
    h_done(&b.h, false);
    free(b.lat_ms);
    free(b.sent_at);
    return 0;
}
