/* test-identity: who a peer is and what it may do (issue 13 items 2 and 3),
 * with real llmq-broker and llmq-worker processes (the CPU engine on
 * stories260K) and clients through the public C library, on ipc://
 * endpoints in a temp dir.
 *
 * Pins: a second llmq-worker started under the --id of a live one is
 * refused (worker_in_use, naming the live session's pid) while the first
 * runs a batch, and no job of the batch is charged an attempt; once the
 * first is killed (kill -9) and presumed dead, the second gets in by itself
 * and runs jobs.  Under CURVE: a broker with no allow-list for a side
 * refuses to start unless told --allow-any-*, and its start line says when
 * any key is admitted; a worker id is bound to the key it first connected
 * with, so another admitted key cannot take it, not even once its first
 * worker has left; a job belongs to the client key that submitted it:
 * another key gets unknown_job and unknown_batch for it (status, wait,
 * cancel), cannot cancel it and cannot take its key, while an admin key
 * sees it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/clock.h"
#include "common/file.h"
#include "tests/integration/fleet.h"
#include "tests/unit/check.h"

static const char *const BROKER_FAST[] = {"--heartbeat-ms", "100", "--worker-timeout-ms", "1500",
                                          NULL};

/* Times text occurs in the file at path. */
static int occurrences(const char *path, const char *text)
{
    char *buf;
    size_t len;
    llmq_err err;
    if (file_read_all(path, &buf, &len, &err) != 0)
        return 0;
    int n = 0;
    for (const char *p = strstr(buf, text); p; p = strstr(p + 1, text))
        n++;
    free(buf);
    return n;
}

/* Polls until text occurs in path more than `than` times. */
static bool log_grows(const char *path, const char *text, int than, int timeout_ms)
{
    for (int64_t end = clock_mono_ms() + timeout_ms; clock_mono_ms() < end; h_sleep_ms(20))
        if (occurrences(path, text) > than)
            return true;
    return false;
}

static size_t submit_and_wait(harness *h, const char *batch, size_t n, int timeout_ms)
{
    char **prompts = fleet_prompts(n);
    llmq_job *jobs = fleet_jobs(prompts, n, 16, true);
    uint64_t *ids = calloc(n, sizeof *ids);
    llmq_state *st = calloc(n, sizeof *st);
    llmq_client *c = fleet_client(h, 10000);
    llmq_error err;
    size_t done = 0;
    if (llmq_submit(c, batch, NULL, jobs, n, ids, NULL, &err) == 0) {
        fleet_wait(c, ids, n, timeout_ms, st, NULL);
        for (size_t i = 0; i < n; i++)
            done += st[i] == LLMQ_STATE_DONE;
    } else {
        fprintf(stderr, "submit: %s\n", err.message);
    }
    llmq_close(c);
    free(st);
    free(ids);
    free(jobs);
    fleet_strings_free(prompts, n);
    return done;
}

/* ---- two workers under one --id ---------------------------------------------------- */

static void test_duplicate_id(void)
{
    enum { N = 16, MAX = 40 };
    harness h;
    h_init(&h, "llmq-ident-dup", 160);
    h_start(&h, BROKER_FAST);
    static const char *const flags_a[] = {"--slots", "2", NULL};
    static const char *const flags_b[] = {"--slots", "2", "--id", "dup", NULL};
    fleet_worker a, b;
    /* Paced: the batch takes 8 rounds of 40 steps of 20 ms or more, so it
     * still runs when the second worker comes, however fast the machine. */
    fleet_start_paced(&h, &a, "dup", flags_a, 20);
    bool up = fleet_sql_becomes(&h, 60000,
                                "SELECT count(*) FROM workers WHERE name = 'dup'"
                                " AND pid = %d AND state = 'alive'",
                                (int)a.pid);
    char **prompts = fleet_prompts(N);
    llmq_job *jobs = fleet_jobs(prompts, N, MAX, true);
    uint64_t ids[N];
    llmq_state st[N] = {0};
    llmq_client *c = fleet_client(&h, 10000);
    llmq_error err;
    int rc = up ? llmq_submit(c, "dup", NULL, jobs, N, ids, NULL, &err) : -1;
    bool running = rc == 0 && fleet_sql_becomes(&h, 30000,
                                                "SELECT count(*) > 0 FROM jobs"
                                                " WHERE state = 'running'");
    CHECK(up && running, "a worker under --id dup runs a batch of %d jobs", N);
    fleet_start(&h, &b, "dup-second", flags_b);
    bool refused = log_grows(b.log, "worker_in_use", 0, 30000);
    int64_t left = fleet_sqlf(&h, "SELECT count(*) FROM jobs WHERE state <> 'done'");
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)a.pid);
    CHECK(refused && left > 0 && fleet_log_has(&b, pid) &&
              occurrences(h.log, "refused the hello of host") > 0,
          "a second worker under the same --id, while the batch runs (%lld jobs left), is"
          " refused (worker_in_use), told the live session's %s, and the broker logs it",
          (long long)left, pid);
    size_t final = rc == 0 ? fleet_wait(c, ids, N, 90000, st, NULL) : 0;
    size_t done = 0;
    for (size_t i = 0; i < N; i++)
        done += st[i] == LLMQ_STATE_DONE;
    CHECK(final == N && done == N, "every job of the batch completes (%zu of %d)", done, N);
    int64_t faults = fleet_sqlf(&h, "SELECT sum(faults) FROM jobs WHERE batch_id = 'dup'");
    int64_t lost = fleet_sqlf(&h, "SELECT count(*) FROM attempts WHERE outcome <> 'done'");
    int64_t sessions = fleet_sqlf(&h, "SELECT count(*) FROM workers WHERE name = 'dup'");
    CHECK(faults == 0 && lost == 0 && sessions == 1,
          "no job was charged an attempt (%lld faults, %lld attempts not done) and the first"
          " session was never replaced (%lld sessions)",
          (long long)faults, (long long)lost, (long long)sessions);
    llmq_close(c);
    fleet_kill9(&a);
    bool in = fleet_sql_becomes(&h, 60000,
                                "SELECT count(*) FROM workers WHERE name = 'dup'"
                                " AND pid = %d AND state = 'alive'",
                                (int)b.pid);
    CHECK(in && fleet_sqlf(&h, "SELECT count(*) FROM workers WHERE name = 'dup' AND"
                               " state = 'lost'") == 1,
          "once the first is killed and presumed dead, the second gets in by itself");
    size_t more = in ? submit_and_wait(&h, "after", 4, 60000) : 0;
    CHECK(more == 4 && fleet_sqlf(&h,
                                  "SELECT count(*) FROM results r JOIN workers w ON"
                                  " w.id = r.worker_id WHERE w.pid = %d",
                                  (int)b.pid) == 4,
          "and runs the next jobs (%zu of 4)", more);
    fleet_stop(&b, 10000);
    free(jobs);
    fleet_strings_free(prompts, N);
    h_done(&h, check_state.failed > 0);
}

/* ---- CURVE ---------------------------------------------------------------------------- */

typedef struct keys_dir {
    harness h;
    char allow_workers[300], allow_clients[300], admins[300];
    char broker_secret[300], broker_public[300];
} keys_dir;

static void make_keys(keys_dir *k)
{
    const char *build = getenv("LLMQ_BUILDDIR");
    int rc = fleet_sh("cd '%s' && for n in broker w1 w2 alice bob root; do"
                      " '%s/tools/llmq-keygen' $n >/dev/null || exit 1; done &&"
                      " cat w1.public w2.public > workers.allow &&"
                      " cat alice.public bob.public > clients.allow &&"
                      " cat root.public > admins.allow",
                      k->h.dir, build);
    if (rc != 0) {
        fprintf(stderr, "llmq-keygen failed\n");
        exit(99);
    }
    snprintf(k->allow_workers, sizeof k->allow_workers, "%s/workers.allow", k->h.dir);
    snprintf(k->allow_clients, sizeof k->allow_clients, "%s/clients.allow", k->h.dir);
    snprintf(k->admins, sizeof k->admins, "%s/admins.allow", k->h.dir);
    snprintf(k->broker_secret, sizeof k->broker_secret, "%s/broker.secret", k->h.dir);
    snprintf(k->broker_public, sizeof k->broker_public, "%s/broker.public", k->h.dir);
}

/* The broker's exit status within wait_ms: its code, or -1 if it ran on. */
static int exit_code(harness *h, int wait_ms)
{
    int st = h_reap(h->broker, wait_ms);
    h->broker = 0;
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_curve_needs_lists(keys_dir *k)
{
    harness *h = &k->h;
    const char *const bare[] = {"--curve-secret", k->broker_secret, NULL};
    h_start(h, bare);
    int code = exit_code(h, 10000);
    CHECK(code == 1 && occurrences(h->log, "--allow-any-workers") > 0,
          "CURVE without allow-lists refuses to start (exit %d), naming --allow-any-workers", code);
    const char *const clients_only[] = {"--curve-secret", k->broker_secret, "--allow-workers",
                                        k->allow_workers, NULL};
    h_start(h, clients_only);
    code = exit_code(h, 10000);
    CHECK(code == 1 && occurrences(h->log, "--allow-any-clients") > 0,
          "and so without a client list (exit %d), naming --allow-any-clients", code);
    const char *const any[] = {"--curve-secret", k->broker_secret, "--allow-any-workers",
                               "--allow-any-clients", NULL};
    int before = occurrences(h->log, "listening:");
    h_start(h, any);
    bool listening = log_grows(h->log, "listening:", before, 30000);
    CHECK(listening && occurrences(h->log, "workers: any key (--allow-any-workers)") == 1 &&
              occurrences(h->log, "clients: any key (--allow-any-clients)") == 1,
          "--allow-any-workers --allow-any-clients start it, and the start line says so");
    h_stop(h, 10000);
}

static void worker_curve(keys_dir *k, fleet_worker *w, const char *log, const char *key)
{
    char secret[320];
    snprintf(secret, sizeof secret, "%s/%s.secret", k->h.dir, key);
    const char *const flags[] = {"--id", "gpu0", "--broker-key", k->broker_public, "--curve-secret",
                                 secret, NULL};
    fleet_start(&k->h, w, log, flags);
}

static void test_worker_key_binding(keys_dir *k)
{
    harness *h = &k->h;
    fleet_worker a, b;
    worker_curve(k, &a, "gpu0-w1", "w1");
    bool up = fleet_sql_becomes(h, 60000,
                                "SELECT count(*) FROM workers WHERE name = 'gpu0'"
                                " AND pid = %d AND state = 'alive'",
                                (int)a.pid);
    CHECK(up, "a worker with an allowed key connects as gpu0");
    worker_curve(k, &b, "gpu0-w2", "w2");
    bool refused = log_grows(b.log, "forbidden", 0, 30000);
    CHECK(refused && occurrences(h->log, "is bound to another CURVE key") > 0,
          "another allowed key's hello as gpu0 is refused (forbidden), and logged");
    fleet_stop(&a, 10000);
    bool gone = fleet_sql_becomes(h, 10000,
                                  "SELECT count(*) FROM workers WHERE name = 'gpu0'"
                                  " AND state = 'gone'");
    int seen = occurrences(b.log, "forbidden");
    bool again = gone && log_grows(b.log, "forbidden", seen, 30000);
    CHECK(again && fleet_sqlf(h, "SELECT count(*) FROM workers WHERE name = 'gpu0'") == 1,
          "and still refused once the first worker has left: the id stays bound to its key");
    fleet_stop(&b, 10000);
}

static llmq_client *client_as(keys_dir *k, const char *who)
{
    char secret[320];
    snprintf(secret, sizeof secret, "%s/%s.secret", k->h.dir, who);
    llmq_curve keys;
    llmq_client *c = NULL;
    llmq_error err;
    if (llmq_curve_load(&keys, k->broker_public, secret, &err) != 0 ||
        llmq_connect_curve(&c, k->h.clients, &keys, &err) != 0) {
        fprintf(stderr, "%s: %s\n", who, err.message);
        exit(99);
    }
    llmq_set_timeout(c, 10000);
    return c;
}

typedef int (*select_fn)(llmq_client *c, const llmq_select *sel, llmq_status **out,
                         llmq_error *err);

/* The reply to a status or cancel (fn) of sel from c: its error code, or
 * LLMQ_OK with *n jobs. */
static llmq_code reply_of(select_fn fn, llmq_client *c, const llmq_select *sel, size_t *n)
{
    llmq_status *s = NULL;
    llmq_error err = {0};
    *n = 0;
    if (fn(c, sel, &s, &err) != 0)
        return err.code;
    *n = s->n_jobs;
    llmq_status_free(s);
    return LLMQ_OK;
}

static llmq_code status_of(llmq_client *c, const llmq_select *sel, size_t *n)
{
    return reply_of(llmq_get_status, c, sel, n);
}

static llmq_code cancel_of(llmq_client *c, const llmq_select *sel)
{
    size_t n;
    return reply_of(llmq_cancel, c, sel, &n);
}

static llmq_code wait_of(llmq_client *c, const llmq_select *sel)
{
    llmq_wait *w;
    llmq_error err = {0};
    llmq_result r;
    if (llmq_wait_begin(c, sel, 0, &w, &err) != 0)
        return err.code;
    int ev;
    while ((ev = llmq_wait_next(w, 1000, &r, &err)) != LLMQ_WAIT_END && ev >= 0)
        ;
    llmq_wait_free(w);
    return ev < 0 ? err.code : LLMQ_OK;
}

static void submit_keyed(llmq_client *c, const char *batch, const char *const *keys, size_t n,
                         uint64_t *ids, llmq_error *err, int *rc)
{
    llmq_job jobs[4];
    for (size_t i = 0; i < n; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].key = keys[i];
        jobs[i].prompt = "Once upon a time";
        jobs[i].max_tokens = 4;
    }
    *rc = llmq_submit(c, batch, NULL, jobs, n, ids, NULL, err);
}

static void test_job_ownership(keys_dir *k)
{
    harness *h = &k->h;
    llmq_client *alice = client_as(k, "alice"), *bob = client_as(k, "bob");
    llmq_client *root = client_as(k, "root");
    static const char *const akeys[] = {"shared:1", "shared:2"};
    static const char *const bkeys[] = {"bob:1"}, *const solo[] = {"solo:1"};
    uint64_t aid[2] = {0}, bid[1] = {0};
    llmq_error err;
    int rc, rc_b;
    submit_keyed(alice, "shared", akeys, 2, aid, &err, &rc);
    submit_keyed(bob, "shared", bkeys, 1, bid, &err, &rc_b);
    CHECK(rc == 0 && rc_b == 0, "alice submits 2 jobs and bob 1 in batch 'shared'");
    const llmq_select a_ids = {.ids = aid, .n_ids = 2}, batch = {.batch = "shared"};
    const llmq_select a_batch = {.batch = "alice-only"};
    size_t n = 0;
    CHECK(status_of(bob, &a_ids, &n) == LLMQ_E_UNKNOWN_JOB &&
              wait_of(bob, &a_ids) == LLMQ_E_UNKNOWN_JOB,
          "bob's status and wait of alice's job ids: unknown_job");
    CHECK(cancel_of(bob, &a_ids) == LLMQ_E_UNKNOWN_JOB, "bob's cancel of them: unknown_job");
    CHECK(status_of(bob, &batch, &n) == LLMQ_OK && n == 1,
          "bob's status of the batch lists his own job only (%zu)", n);
    CHECK(status_of(alice, &batch, &n) == LLMQ_OK && n == 2, "alice's lists her 2 (%zu)", n);
    uint64_t solo_id = 0;
    submit_keyed(alice, "alice-only", solo, 1, &solo_id, &err, &rc);
    CHECK(rc == 0 && status_of(bob, &a_batch, &n) == LLMQ_E_UNKNOWN_BATCH &&
              cancel_of(bob, &a_batch) == LLMQ_E_UNKNOWN_BATCH,
          "a batch of alice's jobs only: unknown_batch to bob, for status and cancel");
    uint64_t taken = 0;
    submit_keyed(bob, "shared", akeys, 1, &taken, &err, &rc);
    CHECK(rc != 0 && err.code == LLMQ_E_BAD_VALUE && strcmp(err.field, "jobs[0].key") == 0,
          "bob cannot take alice's key: bad_value on jobs[0].key (%s)", err.message);
    CHECK(fleet_sqlf(h, "SELECT count(*) FROM jobs WHERE state = 'queued'") == 4 &&
              fleet_sqlf(h, "SELECT count(*) FROM jobs") == 4,
          "nothing of alice's was cancelled, nothing of bob's refused submit stored");
    CHECK(status_of(root, &a_ids, &n) == LLMQ_OK && n == 2 &&
              status_of(root, &batch, &n) == LLMQ_OK && n == 3,
          "the admin key sees every job (%zu in the batch)", n);
    CHECK(fleet_sqlf(h, "SELECT count(DISTINCT owner) FROM jobs WHERE owner IS NOT NULL") == 2,
          "jobs.owner holds the two submitters' keys");
    llmq_close(alice);
    llmq_close(bob);
    llmq_close(root);
}

static void test_curve(void)
{
    keys_dir k;
    h_init(&k.h, "llmq-ident-curve", 160);
    make_keys(&k);
    test_curve_needs_lists(&k);
    const char *const flags[] = {"--heartbeat-ms",
                                 "100",
                                 "--worker-timeout-ms",
                                 "1500",
                                 "--curve-secret",
                                 k.broker_secret,
                                 "--allow-workers",
                                 k.allow_workers,
                                 "--allow-clients",
                                 k.allow_clients,
                                 "--admin-clients",
                                 k.admins,
                                 NULL};
    h_start(&k.h, flags);
    test_worker_key_binding(&k);
    test_job_ownership(&k);
    int st = h_stop(&k.h, 10000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the broker stops cleanly");
    h_done(&k.h, check_state.failed > 0);
}

int main(void)
{
    test_duplicate_id();
    test_curve();
    return check_done();
}
