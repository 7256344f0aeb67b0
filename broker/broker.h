/* broker: llmq-broker's event loop (docs/PROTOCOL.md, docs/SCHEMA.md).
 *
 * One thread, one zmq_poll loop over the client ROUTER, the worker ROUTER
 * and a stop fd.  Each iteration: read everything waiting (up to a budget)
 * inside one store transaction, run the timers (heartbeats, dead workers,
 * wait deadlines, shutdown), hand queued jobs to workers with credits,
 * commit (one fsync: group commit), and only then send the replies, pushed
 * results and jobs collected during the iteration.
 *
 * A database error is fatal: broker_run returns -1 without sending anything
 * of the iteration, so nothing unpersisted is ever acknowledged, and a
 * restart resumes from what is on disk (running jobs requeued).  Bad
 * requests never reach that point: they get a typed error and change
 * nothing.  So that a filling disk does not reach it either, the broker
 * reads the space left (at most every 100 ms): without room for new jobs
 * (max_db_mb, min_free_mb) it refuses submits (unavailable) and starts no
 * job, while everything else, the results of running jobs included, goes on
 * in the room the limits keep, and with min_free_mb in space it holds past
 * the WAL's end (store_reserve) against another program taking the rest.
 *
 * Stopping: each read of stop_fd (e.g. a signalfd for SIGTERM/SIGINT) is one
 * stop request.  The first drains: new submits are refused, workers get
 * shutdown, running jobs may finish until grace_ms; whatever still runs is
 * then put back in the queue, waiting clients get their wait_end, and
 * broker_run returns 0.  A second request skips the grace period. */
#ifndef LLMQ_BROKER_BROKER_H
#define LLMQ_BROKER_BROKER_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/store.h"
#include "common/err.h"
#include "common/log.h"

/* A line of the broker's log (common/log.h's format, no id: there is one
 * broker per database).  Whether it is worth writing is the caller's call. */
#define broker_log(...) log_line("llmq-broker", NULL, __VA_ARGS__)

typedef struct broker_config {
    const char *db_path;
    const char *clients_endpoint;
    const char *workers_endpoint;
    int64_t max_queued; /* queued jobs beyond which submits are refused; 0: no limit */
    int max_attempts;
    uint32_t heartbeat_ms;
    uint32_t dead_after_ms;
    uint32_t grace_ms;
    store_sync sync;
    bool init;       /* an existing file without llmq's schema may get one */
    bool skip_check; /* no PRAGMA quick_check at start */
    /* Room for new jobs: below max_db_mb MiB in the database's pages and
     * above min_free_mb MiB free on its file system (0: no limit).  Without
     * room, submits are refused (unavailable) and no job is started; what
     * runs finishes and its results are stored in the room kept. */
    int64_t max_db_mb, min_free_mb;
    bool verbose; /* a log line per job event too */
    /* CURVE (broker/zap.h): the broker's secret key file, NULL for none;
     * allow-list files of worker and client public keys.  With CURVE each
     * side needs its list or its any_* switch (any key admitted): the
     * broker refuses to open otherwise.  admin_clients: keys that may see
     * and cancel every job (admitted as clients too); any other client key
     * sees only the jobs it submitted.  Without a key, endpoints that other
     * hosts can reach are refused unless insecure is set. */
    const char *curve_secret, *allow_workers, *allow_clients, *admin_clients;
    bool any_workers, any_clients;
    bool insecure;
    /* A job naming a model that no worker served in the last
     * model_window_ms is refused, unless queue_unknown_models. */
    int64_t model_window_ms;
    bool queue_unknown_models;
    int stop_fd;  /* readable on a stop request; -1: none */
} broker_config;

typedef struct broker broker;

/* Opens the store and binds both sockets. */
int broker_open(broker **out, const broker_config *cfg, llmq_err *err);
/* Runs until stopped (0) or a fatal error (-1). */
int broker_run(broker *b, llmq_err *err);
/* Closes sockets (letting final replies out) and the store.  NULL is fine. */
void broker_close(broker *b);

#endif
