/* llmq-broker: command line, signals, and the broker's loop.
 *
 * SIGTERM and SIGINT arrive through a signalfd in the broker's poll set, so
 * no handler runs asynchronously and no global flag is needed. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "broker/broker.h"
#include "broker/log.h"
#include "common/cli.h"
#include "proto/wire.h"

static const char usage[] =
    "Usage: llmq-broker [OPTION]...\n"
    "Receive LLM jobs from clients, keep them in SQLite, hand them to workers.\n"
    "\n"
    "  --db FILE               SQLite database, created if missing (default llmq.db)\n"
    "  --clients ENDPOINT      ZeroMQ endpoint for clients (default tcp://127.0.0.1:5555)\n"
    "  --workers ENDPOINT      ZeroMQ endpoint for workers (default tcp://127.0.0.1:5556)\n"
    "  --max-queued N          refuse submits while N jobs are queued (default 1000000;\n"
    "                          0: no limit)\n"
    "  --max-attempts N        a job fails after N attempts ended by a worker's loss or\n"
    "                          failure (default 3)\n"
    "  --heartbeat-ms MS       heartbeat period, both ways (default 1000)\n"
    "  --worker-timeout-ms MS  a worker silent this long is presumed dead and its jobs\n"
    "                          are requeued (default 5000)\n"
    "  --grace-ms MS           on SIGTERM, how long running jobs may finish before they\n"
    "                          are put back in the queue (default 10000)\n"
    "  --sync full|normal      full (default): an acknowledged job survives power loss;\n"
    "                          normal: it survives a broker crash only (faster)\n"
    "  --model-window-ms MS    a job naming a model that no worker served in this\n"
    "                          window is refused (default 600000)\n"
    "  --queue-unknown-models  queue such jobs instead, until a worker serves the model\n"
    "  --curve-secret FILE     run with ZeroMQ CURVE: this broker's secret key (from\n"
    "                          llmq-keygen); workers and clients need its public key\n"
    "  --allow-workers FILE    with CURVE: the worker public keys admitted, one Z85 key\n"
    "                          a line, # comments (default: any key)\n"
    "  --allow-clients FILE    the same for clients\n"
    "  --insecure              allow endpoints other hosts can reach without CURVE\n"
    "  -v, --verbose           also log every job event\n"
    "  -h, --help              show this help\n"
    "\n"
    "Endpoints bind to loopback by default; use tcp://0.0.0.0:PORT to accept remote\n"
    "peers, which needs --curve-secret (or --insecure).  Refused keys are logged.\n"
    "SIGTERM/SIGINT stop gracefully; a second one stops at once.\n"
    "Exit status: 0 after a clean stop, 1 on a runtime error, 2 on bad usage.\n";

enum {
    OPT_DB = 256, OPT_CLIENTS, OPT_WORKERS, OPT_MAX_QUEUED, OPT_MAX_ATTEMPTS,
    OPT_HEARTBEAT, OPT_TIMEOUT, OPT_GRACE, OPT_SYNC, OPT_CURVE_SECRET,
    OPT_ALLOW_WORKERS, OPT_ALLOW_CLIENTS, OPT_INSECURE, OPT_MODEL_WINDOW,
    OPT_QUEUE_UNKNOWN,
};

static const struct option options[] = {
    {"db", required_argument, NULL, OPT_DB},
    {"clients", required_argument, NULL, OPT_CLIENTS},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"max-queued", required_argument, NULL, OPT_MAX_QUEUED},
    {"max-attempts", required_argument, NULL, OPT_MAX_ATTEMPTS},
    {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT},
    {"worker-timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"grace-ms", required_argument, NULL, OPT_GRACE},
    {"sync", required_argument, NULL, OPT_SYNC},
    {"curve-secret", required_argument, NULL, OPT_CURVE_SECRET},
    {"allow-workers", required_argument, NULL, OPT_ALLOW_WORKERS},
    {"allow-clients", required_argument, NULL, OPT_ALLOW_CLIENTS},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"model-window-ms", required_argument, NULL, OPT_MODEL_WINDOW},
    {"queue-unknown-models", no_argument, NULL, OPT_QUEUE_UNKNOWN},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_int(const char *flag, const char *text, int64_t lo, int64_t hi,
                     int64_t *out)
{
    llmq_err err;
    if (cli_int(flag, text, lo, hi, out, &err) != 0) {
        fprintf(stderr, "llmq-broker: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int parse_sync(const char *text, store_sync *out)
{
    if (strcmp(text, "full") == 0)
        *out = STORE_SYNC_FULL;
    else if (strcmp(text, "normal") == 0)
        *out = STORE_SYNC_NORMAL;
    else {
        fprintf(stderr, "llmq-broker: --sync: '%s' is neither full nor normal\n",
                text);
        return -1;
    }
    return 0;
}

static int parse_option(int opt, const char *arg, broker_config *c)
{
    int64_t v = 0;
    switch (opt) {
    case OPT_DB: c->db_path = arg; return 0;
    case OPT_CLIENTS: c->clients_endpoint = arg; return 0;
    case OPT_WORKERS: c->workers_endpoint = arg; return 0;
    case OPT_SYNC: return parse_sync(arg, &c->sync);
    case OPT_CURVE_SECRET: c->curve_secret = arg; return 0;
    case OPT_ALLOW_WORKERS: c->allow_workers = arg; return 0;
    case OPT_ALLOW_CLIENTS: c->allow_clients = arg; return 0;
    case OPT_INSECURE: c->insecure = true; return 0;
    case OPT_QUEUE_UNKNOWN: c->queue_unknown_models = true; return 0;
    case OPT_MODEL_WINDOW:
        return parse_int("--model-window-ms", arg, 0, INT64_MAX / 2,
                         &c->model_window_ms);
    case 'v': c->verbose = true; return 0;
    case OPT_MAX_QUEUED:
        return parse_int("--max-queued", arg, 0, INT64_MAX, &c->max_queued);
    case OPT_MAX_ATTEMPTS:
        if (parse_int("--max-attempts", arg, 1, 1000, &v))
            return -1;
        c->max_attempts = (int)v;
        return 0;
    case OPT_HEARTBEAT:
    case OPT_TIMEOUT:
    case OPT_GRACE:
        if (parse_int(opt == OPT_HEARTBEAT ? "--heartbeat-ms"
                      : opt == OPT_TIMEOUT ? "--worker-timeout-ms"
                                           : "--grace-ms",
                      arg, opt == OPT_GRACE ? 0 : 1, 86400000, &v))
            return -1;
        *(opt == OPT_HEARTBEAT ? &c->heartbeat_ms
          : opt == OPT_TIMEOUT ? &c->dead_after_ms
                               : &c->grace_ms) = (uint32_t)v;
        return 0;
    default: return -1;
    }
}

/* 0: run, 1: --help shown, -1: bad usage (message written). */
static int parse_args(int argc, char **argv, broker_config *c)
{
    int opt;
    while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return 1;
        }
        if (opt == '?' || parse_option(opt, optarg, c))
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "llmq-broker: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if ((c->allow_workers || c->allow_clients) && !c->curve_secret) {
        fputs("llmq-broker: --allow-workers and --allow-clients need"
              " --curve-secret\n", stderr);
        return -1;
    }
    if (c->heartbeat_ms >= c->dead_after_ms) {
        fprintf(stderr, "llmq-broker: --worker-timeout-ms (%u) must exceed"
                        " --heartbeat-ms (%u)\n",
                c->dead_after_ms, c->heartbeat_ms);
        return -1;
    }
    return 0;
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
        .model_window_ms = 600000,
    };
    int rc = parse_args(argc, argv, &cfg);
    if (rc > 0)
        return 0;
    if (rc < 0) {
        fputs("Try 'llmq-broker --help'.\n", stderr);
        return 2;
    }
    keep_heap();
    cfg.stop_fd = cli_stop_signals();
    if (cfg.stop_fd < 0) {
        perror("llmq-broker: signalfd");
        return 1;
    }
    broker *b;
    llmq_err err = {0};
    rc = broker_open(&b, &cfg, &err) || broker_run(b, &err);
    if (rc)
        log_line("fatal: %s", err.msg);
    broker_close(b);
    close(cfg.stop_fd);
    return rc ? 1 : 0;
}
