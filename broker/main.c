/* llmq-broker: command line, signals, and the broker's loop.
 *
 * SIGTERM and SIGINT arrive through a signalfd in the broker's poll set, so
 * no handler runs asynchronously and no global flag is needed. */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "broker/broker.h"
#include "common/cli.h"
#include "proto/wire.h"

static const char USAGE[] = "Usage: llmq-broker [OPTION]...\n"
                            "Receive LLM jobs from clients, keep them in "
                            "SQLite, hand them to workers.\n";

static const char EPILOG[] =
    "Endpoints bind to loopback by default; use tcp://0.0.0.0:PORT to accept "
    "remote\n"
    "peers, which needs --curve-secret (or --insecure).  With CURVE, each "
    "side\n"
    "needs its allow-list or --allow-any-*; refused keys are logged.\n"
    "SIGTERM/SIGINT stop gracefully; a second one stops at once.\n"
    "Exit status: 0 after a clean stop, 1 on a runtime error, 2 on bad "
    "usage.\n";

static int parse_sync(void *sync, const char *text, llmq_err *err)
{
    store_sync *out = sync;
    if (strcmp(text, "full") == 0)
        *out = STORE_SYNC_FULL;
    else if (strcmp(text, "normal") == 0)
        *out = STORE_SYNC_NORMAL;
    else
        return llmq_errf(err, "'%s' is neither full nor normal", text);
    return 0;
}

/* The flags that need each other. */
static int check_config(void *config, llmq_err *err)
{
    const broker_config *c = config;
    if ((c->allow_workers || c->allow_clients || c->admin_clients ||
         c->any_workers || c->any_clients) &&
        !c->curve_secret)
        return llmq_errf(err, "--allow-workers, --allow-clients,"
                              " --admin-clients and --allow-any-* need"
                              " --curve-secret");
    if ((c->allow_workers && c->any_workers) ||
        (c->allow_clients && c->any_clients))
        return llmq_errf(err, "--allow-workers FILE and --allow-any-workers"
                              " (or --allow-clients and --allow-any-clients)"
                              " contradict each other");
    if (c->heartbeat_ms >= c->dead_after_ms)
        return llmq_errf(err,
                         "--worker-timeout-ms (%u) must exceed"
                         " --heartbeat-ms (%u)",
                         c->dead_after_ms, c->heartbeat_ms);
    return 0;
}

/* CLI_RUN, or the status to exit with at once (--help, bad usage). */
static int parse_args(int argc, char **argv, broker_config *c)
{
    const cli_flag flags[] = {
        {"db", 0, "FILE",
         "SQLite database, created if missing (default llmq.db); an empty"
         " file is refused unless --init",
         CLI_TEXT(&c->db_path)},
        {"init", 0, NULL,
         "create the schema in an existing file that has none (0 bytes, or"
         " SQLite without tables)",
         CLI_SWITCH(&c->init)},
        {"skip-check", 0, NULL,
         "start without PRAGMA quick_check of the database (it reads every"
         " page: about 3 s per GB cached)",
         CLI_SWITCH(&c->skip_check)},
        {"clients", 0, "ENDPOINT",
         "ZeroMQ endpoint for clients (default tcp://127.0.0.1:5555)",
         CLI_TEXT(&c->clients_endpoint)},
        {"workers", 0, "ENDPOINT",
         "ZeroMQ endpoint for workers (default tcp://127.0.0.1:5556)",
         CLI_TEXT(&c->workers_endpoint)},
        {"max-queued", 0, "N",
         "refuse a submit whose new jobs would take the queued ones (not"
         " running, not known keys) past N (default 1000000; 0: no limit)",
         CLI_INT64(&c->max_queued, 0, INT64_MAX)},
        {"max-db-mb", 0, "MIB",
         "refuse submits and start no job while the database holds MIB or"
         " more (default 0: no limit)",
         CLI_INT64(&c->max_db_mb, 0, INT64_MAX >> 20)},
        {"min-free-mb", 0, "MIB",
         "the same while its file system has less than MIB free, kept for the"
         " results of running jobs (default 256; 0: no limit)",
         CLI_INT64(&c->min_free_mb, 0, INT64_MAX >> 20)},
        {"max-attempts", 0, "N",
         "a job fails after N attempts ended by a worker's loss or failure"
         " (default 3)",
         CLI_INT32(&c->max_attempts, 1, 1000)},
        {"heartbeat-ms", 0, "MS", "heartbeat period, both ways (default 1000)",
         CLI_UINT32(&c->heartbeat_ms, 1, 86400000)},
        {"worker-timeout-ms", 0, "MS",
         "a worker silent this long is presumed dead and its jobs are requeued"
         " (default 5000)",
         CLI_UINT32(&c->dead_after_ms, 1, 86400000)},
        {"grace-ms", 0, "MS",
         "on SIGTERM, how long running jobs may finish before they are put back"
         " in the queue (default 10000)",
         CLI_UINT32(&c->grace_ms, 0, 86400000)},
        {"sync", 0, "full|normal",
         "full (default): an acknowledged job survives power loss; normal: it"
         " survives a broker crash only (faster)",
         CLI_CALL(parse_sync, &c->sync)},
        {"model-window-ms", 0, "MS",
         "a job naming a model that no worker served in this window is refused,"
         " once some worker was heard from in it (default 600000)",
         CLI_INT64(&c->model_window_ms, 0, INT64_MAX / 2)},
        {"queue-unknown-models", 0, NULL,
         "queue such jobs instead, until a worker serves the model",
         CLI_SWITCH(&c->queue_unknown_models)},
        {"curve-secret", 0, "FILE",
         "run with ZeroMQ CURVE: this broker's secret key (from llmq-keygen);"
         " workers and clients need its public key",
         CLI_TEXT(&c->curve_secret)},
        {"allow-workers", 0, "FILE",
         "with CURVE: the worker public keys admitted, one Z85 key a line,"
         " # comments",
         CLI_TEXT(&c->allow_workers)},
        {"allow-clients", 0, "FILE",
         "the same for clients; each sees only the jobs it submitted",
         CLI_TEXT(&c->allow_clients)},
        {"admin-clients", 0, "FILE",
         "client keys (admitted too) that may see and cancel every job",
         CLI_TEXT(&c->admin_clients)},
        {"allow-any-workers", 0, NULL,
         "with CURVE and no --allow-workers: admit any worker key (it gets"
         " prompts)",
         CLI_SWITCH(&c->any_workers)},
        {"allow-any-clients", 0, NULL,
         "with CURVE and no --allow-clients: admit any client key",
         CLI_SWITCH(&c->any_clients)},
        {"insecure", 0, NULL,
         "allow endpoints other hosts can reach without CURVE",
         CLI_SWITCH(&c->insecure)},
        {"verbose", 'v', NULL, "also log every job event",
         CLI_SWITCH(&c->verbose)},
    };
    const cli_spec spec = {.program = "llmq-broker",
                           .usage = USAGE,
                           .epilog = EPILOG,
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags),
                           .check = check_config,
                           .check_ctx = c};
    return cli_read(&spec, argc, argv);
}

/* glibc gives heap memory back whenever the top of the heap frees up more
 * than 128 KiB; the broker's per-iteration allocations (messages, replies)
 * cross that line every iteration, and the brk/munmap round trips showed up
 * as a fifth of its time.  Keep what it had. */
static void keep_heap(void)
{
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
}

int main(int argc, char **argv)
{
    broker_config cfg = {
        .db_path = "llmq.db",
        .clients_endpoint = "tcp://127.0.0.1:5555",
        .workers_endpoint = "tcp://127.0.0.1:5556",
        .max_queued = 1000000,
        .max_attempts = 3,
        .heartbeat_ms = WIRE_HEARTBEAT_MS,
        .dead_after_ms = WIRE_DEAD_AFTER_MS,
        .grace_ms = 10000,
        .sync = STORE_SYNC_FULL,
        .min_free_mb = 256,
        .model_window_ms = 600000,
    };
    const int status = parse_args(argc, argv, &cfg);
    if (status != CLI_RUN)
        return status;
    keep_heap();
    cfg.stop_fd = cli_stop_signals();
    if (cfg.stop_fd < 0) {
        broker_log("signalfd: %s", strerror(errno));
        return 1;
    }
    broker *b;
    llmq_err err = {0};
    const int rc = broker_open(&b, &cfg, &err) || broker_run(b, &err);
    if (rc)
        broker_log("fatal: %s", err.msg);
    broker_close(b);
    close(cfg.stop_fd);
    return rc ? 1 : 0;
}
