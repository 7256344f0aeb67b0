/* test-supervisor: llmq-worker --gpus's supervisor (worker/supervisor.c),
 * driven through its API with real child processes (/bin/sh).
 *
 * Pins: the --gpus syntax and its checks against the visible GPUs; the
 * backoff schedule (1, 2, 4 ... capped at 60 s, reset after 60 s up); that
 * an abnormal exit or a signal schedules a restart and a clean exit or a
 * stop does not; that super_run restarts a crashed child after 1 s and
 * returns 0 once it exits 0; that a SIGTERM on the signalfd is forwarded to
 * the children and waited for. */
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/unit/check.h"
#include "worker/supervisor.h"

static void check_parse(void)
{
    super_gpus g;
    llmq_err err;
    CHECK(super_parse_gpus("all", &g, &err) == 0 && g.all, "'all' parses");
    CHECK(super_parse_gpus("2,0", &g, &err) == 0 && !g.all && g.n == 2 && g.index[0] == 2 &&
              g.index[1] == 0,
          "'2,0' is GPUs 2 and 0 in that order");
    CHECK(super_parse_gpus("1,1", &g, &err) != 0 && strstr(err.msg, "GPU 1 is named twice"),
          "a repeated index is refused: %s", err.msg);
    CHECK(super_parse_gpus("x", &g, &err) != 0, "a non-number is refused: %s", err.msg);
    CHECK(super_parse_gpus("", &g, &err) != 0, "an empty list is refused: %s", err.msg);
    CHECK(super_parse_gpus("-1", &g, &err) != 0, "a negative index is refused: %s", err.msg);

    CHECK(super_parse_gpus("all", &g, &err) == 0 && super_resolve_gpus(&g, 3, &err) == 0 &&
              g.n == 3 && g.index[2] == 2,
          "'all' with 3 GPUs visible is 0,1,2");
    CHECK(super_parse_gpus("all", &g, &err) == 0 && super_resolve_gpus(&g, 0, &err) != 0,
          "'all' with no GPU visible is refused: %s", err.msg);
    CHECK(super_parse_gpus("0,2", &g, &err) == 0 && super_resolve_gpus(&g, 2, &err) != 0 &&
              strstr(err.msg, "GPU 2 is not visible"),
          "an index beyond the visible GPUs is named: %s", err.msg);
}

static void check_backoff(void)
{
    unsigned want[] = {1, 2, 4, 8, 16, 32, 60, 60};
    unsigned d = 0;
    int ok = 1;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        d = super_backoff(d, 500);
        ok &= d == want[i];
    }
    CHECK(ok, "quick crashes back off 1, 2, 4, 8, 16, 32, 60, 60 s");
    CHECK(super_backoff(60, 60000) == 1 && super_backoff(8, 59999) == 16,
          "a child up 60 s starts the schedule again, one up less does not");
}

/* Runs child command cmd to its end and returns what super_reaped said. */
static bool run_once(super_child *c, const char *cmd, bool stopping)
{
    const char *argv[] = {"/bin/sh", "-c", cmd};
    llmq_err err;
    if (super_child_init(c, "test child", argv, 3, &err) != 0 ||
        super_spawn(c, clock_mono_ms(), &err) != 0) {
        CHECK(0, "start /bin/sh: %s", err.msg);
        return false;
    }
    int status;
    pid_t pid = c->pid;
    bool waited = waitpid(pid, &status, 0) == pid;
    bool restart = waited && super_reaped(c, status, clock_mono_ms(), stopping);
    super_child_free(c);
    return restart;
}

static void check_reaped(void)
{
    super_child c;
    CHECK(run_once(&c, "exit 3", false) && c.backoff_s == 1 && c.restart_at_ms >= 0 &&
              c.pid == 0,
          "exit 3 schedules a restart in 1 s");
    CHECK(run_once(&c, "kill -KILL $$", false) && WIFSIGNALED(c.status),
          "a child killed by a signal is restarted");
    CHECK(!run_once(&c, "exit 0", false) && c.restart_at_ms < 0, "exit 0 is not restarted");
    CHECK(!run_once(&c, "exit 3", true), "no restart while stopping");
}

/* n children running /bin/sh -c cmd, cmd's $1 being the child's number. */
static int make_kids(super_child *kids, int n, const char *cmd)
{
    llmq_err err;
    for (int i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", i);
        const char *argv[] = {"/bin/sh", "-c", cmd, "sh", num};
        if (super_child_init(&kids[i], "test child", argv, 5, &err) != 0)
            return -1;
    }
    return 0;
}

static void free_kids(super_child *kids, int n)
{
    for (int i = 0; i < n; i++)
        super_child_free(&kids[i]);
}

static void check_run(int sigfd, const char *dir)
{
    /* Each child crashes on its first run (no marker yet) and exits 0 on its
     * second: the supervisor must restart it after 1 s and then end. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "f=%s/ran-$1; [ -e \"$f\" ] && exit 0; : >\"$f\"; exit 3",
             dir);
    super_child kids[2];
    CHECK(make_kids(kids, 2, cmd) == 0, "two children made");
    int64_t t0 = clock_mono_ms();
    int rc = super_run(kids, 2, sigfd);
    int64_t took = clock_mono_ms() - t0;
    CHECK(rc == 0 && took >= 1000 && took < 10000,
          "crashed children restarted after 1 s, then all exit 0: rc %d in %lld ms", rc,
          (long long)took);
    CHECK(kids[0].backoff_s == 1 && kids[1].backoff_s == 1, "one restart each");
    free_kids(kids, 2);

    /* SIGTERM reaches the supervisor (blocked, so only its signalfd sees
     * it); it must kill the children, which would otherwise sleep 30 s. */
    super_child sleepers[2];
    CHECK(make_kids(sleepers, 2, "exec sleep 30") == 0, "two sleeping children made");
    raise(SIGTERM);
    t0 = clock_mono_ms();
    rc = super_run(sleepers, 2, sigfd);
    took = clock_mono_ms() - t0;
    CHECK(took < 5000 && WIFSIGNALED(sleepers[0].status) &&
              WTERMSIG(sleepers[0].status) == SIGTERM && sleepers[0].restart_at_ms < 0,
          "SIGTERM is forwarded, waited for, not restarted (%lld ms)", (long long)took);
    CHECK(rc == 1, "children killed rather than exiting 0 make the status 1");
    free_kids(sleepers, 2);
}

int main(void)
{
    check_parse();
    check_backoff();
    check_reaped();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    char dir[] = "/tmp/test-supervisor-XXXXXX";
    if (sigfd < 0 || !mkdtemp(dir)) {
        CHECK(0, "signalfd and a temporary directory");
        return check_done();
    }
    check_run(sigfd, dir);
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK(system(rm) == 0, "temporary directory removed");
    close(sigfd);
    return check_done();
}
