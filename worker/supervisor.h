/* supervisor: llmq-worker --gpus, one worker process per GPU.
 *
 * The supervisor forks and execs one child per selected GPU, each with its
 * own command line (its own CUDA context and model copy), and keeps them
 * running: a child that dies abnormally (a non-zero exit or a signal) while
 * no stop was asked is restarted after a backoff of 1 s, 2 s, 4 s ...
 * capped at SUPER_BACKOFF_MAX_S, back to 1 s once a child has stayed up
 * SUPER_BACKOFF_MAX_S.  A child that exits 0 on its own is left stopped.
 * SIGTERM and SIGINT (read from the caller's signalfd) are forwarded to
 * every running child, then the supervisor waits for them all.  The
 * broker requeues a dead child's jobs as for any lost worker.
 *
 * Each super_child owns its argv (strdup'ed strings, freed by
 * super_child_free); argv[0] is the program, looked up on PATH. */
#ifndef LLMQ_WORKER_SUPERVISOR_H
#define LLMQ_WORKER_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

#define SUPER_MAX_GPUS 1024
#define SUPER_BACKOFF_MAX_S 60u

/* A --gpus selection: "all" or distinct indices in the order given. */
typedef struct super_gpus {
    bool all;
    int n;
    int index[SUPER_MAX_GPUS];
} super_gpus;

typedef struct super_child {
    char **argv;          /* owned, NULL-terminated */
    const char *label;    /* for log lines, e.g. "GPU 1"; not owned */
    pid_t pid;            /* 0: not running */
    int status;           /* the last wait status, 0 before any exit */
    int64_t started_ms;   /* monotonic, of the running (or last) child */
    int64_t restart_at_ms; /* -1: no restart pending */
    unsigned backoff_s;   /* the delay of the last restart, 0 before any */
} super_child;

/* "all" or "N[,N]...": syntax only (indices 0..SUPER_MAX_GPUS-1, no repeats). */
int super_parse_gpus(const char *text, super_gpus *g, llmq_err *err);

/* Checks the selection against the n_visible devices, expanding "all"
 * (which needs at least one). */
int super_resolve_gpus(super_gpus *g, int n_visible, llmq_err *err);

/* The delay before restarting a child that has run uptime_ms after a
 * previous delay of last_s (0: none yet). */
unsigned super_backoff(unsigned last_s, int64_t uptime_ms);

/* A child ready to start: argv is copied (argc strings). */
int super_child_init(super_child *c, const char *label, const char *const *argv, int argc,
                     llmq_err *err);
void super_child_free(super_child *c);

/* Starts the child now (fork and exec, with the default signal mask). */
int super_spawn(super_child *c, int64_t now_ms, llmq_err *err);

/* Records that the child exited with wait status; schedules its restart
 * (and logs it) unless stopping or the exit was clean.  Returns true when a
 * restart is scheduled. */
bool super_reaped(super_child *c, int status, int64_t now_ms, bool stopping);

/* Starts every child and supervises them until all have stopped (after a
 * signal on sigfd, or by exiting 0 on their own).  Returns 0 when every
 * child's last exit was 0, 1 otherwise (or on a failure to fork). */
int super_run(super_child *kids, int n, int sigfd);

#endif
