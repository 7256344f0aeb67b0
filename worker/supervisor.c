#include "worker/supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/log.h"

#define BACKOFF_MAX_MS ((int64_t)SUPER_BACKOFF_MAX_S * 1000)
/* How often the loop looks for dead children and due restarts. */
#define TICK_MS 100

static int add_index(super_gpus *g, const char *text, const char *item, llmq_err *err)
{
    int64_t v;
    if (cli_int("--gpus", item, 0, SUPER_MAX_GPUS - 1, &v, err) != 0)
        return -1;
    for (int i = 0; i < g->n; i++)
        if (g->index[i] == v)
            return llmq_errf(err, "--gpus %s: GPU %d is named twice", text, (int)v);
    g->index[g->n++] = (int)v;
    return 0;
}

int super_parse_gpus(const char *text, super_gpus *g, llmq_err *err)
{
    memset(g, 0, sizeof *g);
    if (strcmp(text, "all") == 0) {
        g->all = true;
        return 0;
    }
    char *copy = strdup(text);
    if (!copy)
        return llmq_errf(err, "out of memory");
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0;
         item = strtok_r(NULL, ",", &save))
        rc = add_index(g, text, item, err);
    free(copy);
    if (rc == 0 && g->n == 0)
        return llmq_errf(err, "--gpus '%s': expected 'all' or a list such as 0,1", text);
    return rc;
}

int super_resolve_gpus(super_gpus *g, int n_visible, llmq_err *err)
{
    if (g->all) {
        if (n_visible <= 0)
            return llmq_errf(err, "--gpus all: no GPU is visible");
        g->all = false;
        g->n = n_visible < SUPER_MAX_GPUS ? n_visible : SUPER_MAX_GPUS;
        for (int i = 0; i < g->n; i++)
            g->index[i] = i;
        return 0;
    }
    for (int i = 0; i < g->n; i++)
        if (g->index[i] >= n_visible && n_visible <= 0)
            return llmq_errf(err, "--gpus: GPU %d is not visible (no GPU is)", g->index[i]);
        else if (g->index[i] >= n_visible)
            return llmq_errf(err, "--gpus: GPU %d is not visible (%d GPU%s: indices 0..%d)",
                             g->index[i], n_visible, n_visible == 1 ? "" : "s", n_visible - 1);
    return 0;
}

unsigned super_backoff(unsigned last_s, int64_t uptime_ms)
{
    if (last_s == 0 || uptime_ms >= BACKOFF_MAX_MS)
        return 1;
    return last_s * 2 < SUPER_BACKOFF_MAX_S ? last_s * 2 : SUPER_BACKOFF_MAX_S;
}

int super_child_init(super_child *c, const char *label, const char *const *argv, int argc,
                     llmq_err *err)
{
    *c = (super_child){.label = label, .restart_at_ms = -1};
    c->argv = calloc((size_t)argc + 1, sizeof *c->argv);
    for (int i = 0; c->argv && i < argc; i++)
        if (!(c->argv[i] = strdup(argv[i]))) {
            super_child_free(c);
            break;
        }
    return c->argv ? 0 : llmq_errf(err, "out of memory");
}

void super_child_free(super_child *c)
{
    for (int i = 0; c->argv && c->argv[i]; i++)
        free(c->argv[i]);
    free(c->argv);
    c->argv = NULL;
}

int super_spawn(super_child *c, int64_t now_ms, llmq_err *err)
{
    pid_t pid = fork();
    if (pid < 0)
        return llmq_errf(err, "%s: fork: %s", c->label, strerror(errno));
    if (pid == 0) {
        /* The supervisor blocks SIGTERM/SIGINT for its signalfd; a blocked
         * mask survives exec, and the child must be able to take them. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(c->argv[0], c->argv);
        log_line("llmq-worker", NULL, "%s: cannot run %s: %s", c->label, c->argv[0],
                 strerror(errno));
        _exit(127);
    }
    c->pid = pid;
    c->started_ms = now_ms;
    c->restart_at_ms = -1;
    return 0;
}

static void describe(int status, char *buf, size_t n)
{
    if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
}

bool super_reaped(super_child *c, int status, int64_t now_ms, bool stopping)
{
    pid_t pid = c->pid;
    c->pid = 0;
    c->status = status;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (stopping || clean)
        return false;
    c->backoff_s = super_backoff(c->backoff_s, now_ms - c->started_ms);
    c->restart_at_ms = now_ms + (int64_t)c->backoff_s * 1000;
    char how[96];
    describe(status, how, sizeof how);
    log_line("llmq-worker", NULL, "%s worker (pid %ld) %s; restarting it in %u s", c->label,
             (long)pid, how, c->backoff_s);
    return true;
}

static void forward(super_child *kids, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (kids[i].pid > 0)
            kill(kids[i].pid, sig);
}

static void reap_all(super_child *kids, int n, bool stopping)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; i < n; i++)
            if (kids[i].pid == pid)
                super_reaped(&kids[i], status, clock_mono_ms(), stopping);
}

/* Starts the children whose time has come; false when one cannot be forked
 * (the machine is out of processes: stop rather than spin). */
static bool start_due(super_child *kids, int n)
{
    int64_t now = clock_mono_ms();
    for (int i = 0; i < n; i++) {
        if (kids[i].restart_at_ms < 0 || kids[i].restart_at_ms > now)
            continue;
        llmq_err err;
        if (super_spawn(&kids[i], now, &err) != 0) {
            log_line("llmq-worker", NULL, "%s", err.msg);
            return false;
        }
    }
    return true;
}

static bool all_stopped(const super_child *kids, int n)
{
    for (int i = 0; i < n; i++)
        if (kids[i].pid > 0 || kids[i].restart_at_ms >= 0)
            return false;
    return true;
}

int super_run(super_child *kids, int n, int sigfd)
{
    bool stopping = false;
    for (int i = 0; i < n; i++)
        kids[i].restart_at_ms = 0; /* due now */
    if (!start_due(kids, n))
        stopping = true;
    while (!all_stopped(kids, n)) {
        struct pollfd pfd = {.fd = sigfd, .events = POLLIN};
        struct signalfd_siginfo si;
        if (poll(&pfd, 1, TICK_MS) > 0 && read(sigfd, &si, sizeof si) == sizeof si) {
            stopping = true;
            forward(kids, n, (int)si.ssi_signo);
        }
        if (stopping)
            for (int i = 0; i < n; i++)
                kids[i].restart_at_ms = -1;
        reap_all(kids, n, stopping);
        if (!stopping && !start_due(kids, n)) {
            stopping = true;
            forward(kids, n, SIGTERM);
        }
    }
    for (int i = 0; i < n; i++)
        if (kids[i].status != 0)
            return 1;
    return 0;
}
