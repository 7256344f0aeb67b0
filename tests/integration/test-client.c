/* test-client: the C client library, llmq-submit and the Python client
 * against a real llmq-broker (no worker: these checks are about the client
 * side of the wire; results produced by workers are covered end to end
 * elsewhere).
 *
 * Pins: submit acks ids in order and is idempotent by key; a bad job is
 * refused with its typed error naming jobs[i].field and nothing is stored;
 * batches over one message's limit are split transparently; status, cancel,
 * wait (pushed result for a cancelled job, timeout with pending count) and
 * stats; an unknown id is refused by name; an absent broker is a timeout,
 * not a hang; llmq-submit with --strict refuses a file with a bad line
 * before submitting, without it submits the good lines and writes the bad
 * one's error with its line number, and resubmits idempotently; a job
 * submitted from Python is seen from C; chat jobs' messages from C and from
 * Python reach the database as given, and a chat job with a prompt too, or
 * a message without a role, is refused.
 *
 * And the wait's lease, against a broker the test plays message by message
 * (the cases a real broker does not produce on demand; test-recovery.sh has
 * the real one killed and restarted): a broker older than leases refuses
 * heartbeat_ms and the wait goes on without; a result sent twice is handed
 * out once; a broker silent past the lease gets the wait again, on a fresh
 * connection, for the jobs not reported yet; a stopping broker's wait_end
 * with jobs pending does not end the wait. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <zmq.h>

#include "common/clock.h"
#include "proto/llmq.h"
#include "tests/integration/harness.h"
#include "tests/unit/check.h"

/* Runs a shell command line, returns its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint64_t queued(llmq_client *c)
{
    llmq_stats *s;
    llmq_error err;
    if (llmq_get_stats(c, &s, &err) < 0)
        return UINT64_MAX;
    uint64_t n = s->counts.queued;
    llmq_stats_free(s);
    return n;
}

static void test_submit(llmq_client *c, uint64_t ids[3])
{
    static const char *const stops[] = {"\n"};
    llmq_job jobs[3];
    const char *keys[3] = {"t:a", "t:b", "t:c"};
    for (int i = 0; i < 3; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].key = keys[i];
        jobs[i].prompt = "Once upon a time";
        jobs[i].max_tokens = 8;
    }
    jobs[1].stop = stops;
    jobs[1].n_stop = 1;
    jobs[2].priority = 7;
    bool existing[3] = {true, true, true};
    llmq_error err;
    int rc = llmq_submit(c, "batch-t", "{\"test\":1}", jobs, 3, ids, existing, &err);
    CHECK(rc == 0 && ids[0] && ids[1] > ids[0] && ids[2] > ids[1] && !existing[0] &&
              !existing[1] && !existing[2],
          "submit acks 3 new jobs with ids in submit order%s%s", rc ? ": " : "",
          rc ? err.message : "");
    uint64_t again[3];
    rc = llmq_submit(c, "batch-t", NULL, jobs, 3, again, existing, &err);
    CHECK(rc == 0 && memcmp(again, ids, sizeof again) == 0 && existing[0] && existing[2],
          "resubmitting the same keys returns the same ids, marked existing");

    llmq_job bad[2];
    llmq_job_init(&bad[0]);
    llmq_job_init(&bad[1]);
    bad[0].prompt = bad[1].prompt = "x";
    bad[1].temperature = NAN;
    uint64_t before = queued(c), bad_ids[2];
    rc = llmq_submit(c, NULL, NULL, bad, 2, bad_ids, NULL, &err);
    CHECK(rc < 0 && err.code == LLMQ_E_BAD_VALUE && strcmp(err.field, "jobs[1].temperature") == 0,
          "a NaN temperature is refused as bad_value at jobs[1].temperature (%s)", err.message);
    CHECK(queued(c) == before, "nothing of the refused submit was stored");
    CHECK(llmq_job_check(&bad[1], &err) < 0 && strcmp(err.field, "temperature") == 0,
          "llmq_job_check finds the same fault locally (%s)", err.message);
}

static void test_big_batch(llmq_client *c)
{
    enum { N = 10001 };   /* one over the jobs one submit message may carry */
    llmq_job *jobs = calloc(N, sizeof *jobs);
    uint64_t *ids = calloc(N, sizeof *ids);
    for (int i = 0; i < N; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].prompt = "p";
        jobs[i].max_tokens = 1;
        jobs[i].priority = -1000;
    }
    llmq_error err;
    int rc = llmq_submit(c, "big", NULL, jobs, N, ids, NULL, &err);
    int ascending = rc == 0;
    for (int i = 1; i < N && ascending; i++)
        ascending = ids[i] > ids[i - 1];
    CHECK(ascending, "a batch of %d jobs is split into messages and acked in order%s%s", N,
          rc ? ": " : "", rc ? err.message : "");
    llmq_select sel = {.batch = "big"};
    llmq_status *st;
    rc = llmq_cancel(c, &sel, &st, &err);
    CHECK(rc == 0 && st->counts.cancelled == N && st->n_jobs == N,
          "cancel by batch id reaches all %d jobs", N);
    if (rc == 0)
        llmq_status_free(st);
    free(jobs);
    free(ids);
}

static void test_status_cancel_wait(llmq_client *c, const uint64_t ids[3])
{
    llmq_error err;
    llmq_status *st;
    llmq_select all = {.ids = ids, .n_ids = 3};
    int rc = llmq_get_status(c, &all, &st, &err);
    CHECK(rc == 0 && st->n_jobs == 3 && st->jobs[0].id == ids[0] &&
              st->jobs[0].state == LLMQ_STATE_QUEUED && st->counts.queued == 3,
          "status lists the 3 queued jobs");
    if (rc == 0)
        llmq_status_free(st);

    llmq_select first = {.ids = ids, .n_ids = 1};
    rc = llmq_cancel(c, &first, &st, &err);
    CHECK(rc == 0 && st->n_jobs == 1 && st->jobs[0].state == LLMQ_STATE_CANCELLED,
          "cancel of a queued job leaves it cancelled");
    if (rc == 0)
        llmq_status_free(st);

    llmq_wait *w;
    llmq_select two = {.ids = ids, .n_ids = 2};
    rc = llmq_wait_begin(c, &two, 300, &w, &err);
    int results = 0, cancelled = 0, events = 0;
    llmq_result r;
    while (rc == 0 && (events = llmq_wait_next(w, 100, &r, &err)) != LLMQ_WAIT_END && events >= 0)
        if (events == LLMQ_WAIT_RESULT) {
            results++;
            cancelled += r.id == ids[0] && r.state == LLMQ_STATE_CANCELLED && r.error &&
                         strcmp(r.key, "t:a") == 0;
        }
    size_t done = 0, pending = 0;
    bool timed_out = false;
    if (rc == 0)
        llmq_wait_summary(w, &done, &pending, &timed_out);
    CHECK(events == LLMQ_WAIT_END && results == 1 && cancelled == 1 && done == 1 &&
              pending == 1 && timed_out,
          "wait pushes the cancelled job's result, then ends on its timeout with 1 pending");
    llmq_wait_free(w);

    uint64_t nope[] = {ids[0], 999999999};
    llmq_select unknown = {.ids = nope, .n_ids = 2};
    rc = llmq_get_status(c, &unknown, &st, &err);
    CHECK(rc < 0 && err.code == LLMQ_E_UNKNOWN_JOB && strcmp(err.field, "ids[1]") == 0,
          "status of an unknown id is refused as unknown_job at ids[1] (%s)", err.message);
}

static void test_no_broker(const harness *h)
{
    llmq_client *c;
    llmq_error err;
    char ep[320];
    snprintf(ep, sizeof ep, "ipc://%s/nobody", h->dir);
    int rc = llmq_connect(&c, ep, &err);
    llmq_set_timeout(c, 300);
    llmq_stats *s;
    rc = rc == 0 ? llmq_get_stats(c, &s, &err) : -1;
    CHECK(rc < 0 && err.code == LLMQ_E_TIMEOUT, "no broker: a request times out (%s)",
          err.message);
    llmq_close(c);
    CHECK(llmq_connect(&c, "nonsense://x", &err) < 0 && err.code == LLMQ_E_TRANSPORT,
          "a bad endpoint is a transport error (%s)", err.message);
}

static void test_tools(const harness *e, const char *srcdir, llmq_client *c)
{
    char jobs[320];
    snprintf(jobs, sizeof jobs, "%s/jobs.jsonl", e->dir);
    FILE *f = fopen(jobs, "w");
    fputs("{\"id\": 1, \"prompt\": \"a\", \"max_tokens\": 2}\n"
          "{\"custom_id\": \"r2\", \"body\": {\"prompt\": \"b\", \"max_tokens\": 2}}\n", f);
    fclose(f);
    uint64_t before = queued(c);
    const char *bin = getenv("LLMQ_BUILDDIR");
    int rc = sh("%s/tools/llmq-submit --broker %s -i %s -o %s/ack1 --batch S --no-wait 2>%s/err1",
                bin, e->clients, jobs, e->dir, e->dir);
    int rc2 = sh("%s/tools/llmq-submit --broker %s -i %s -o %s/ack2 --batch S --no-wait 2>/dev/null",
                 bin, e->clients, jobs, e->dir);
    CHECK(rc == 0 && rc2 == 0 && queued(c) == before + 2 &&
              sh("grep -c '\"existing\":true' %s/ack2 | grep -qx 2", e->dir) == 0 &&
              sh("grep -c '\"existing\":false' %s/ack1 | grep -qx 2", e->dir) == 0,
          "llmq-submit --no-wait twice with one batch id submits the jobs once");

    f = fopen(jobs, "a");
    fputs("{\"id\": 3, \"prompt\": \"c\", \"top_p\": 2}\n", f);
    fclose(f);
    rc = sh("%s/tools/llmq-submit --broker %s -i %s --batch S2 --strict --no-wait >/dev/null"
            " 2>%s/err3",
            bin, e->clients, jobs, e->dir);
    CHECK(rc == 2 && queued(c) == before + 2 &&
              sh("grep -q 'jobs.jsonl:3: top_p: 2 is out of range' %s/err3", e->dir) == 0,
          "--strict and a bad line: exit 2, the line and field named, nothing submitted");
    rc = sh("%s/tools/llmq-submit --broker %s -i %s -o %s/ack3 --batch S3 --no-wait 2>%s/err4", bin,
            e->clients, jobs, e->dir, e->dir);
    CHECK(rc == 1 && queued(c) == before + 4 &&
              sh("grep -q 'jobs.jsonl:3: top_p: 2 is out of range' %s/err4", e->dir) == 0 &&
              sh("grep -c '\"existing\":false' %s/ack3 | grep -qx 2", e->dir) == 0 &&
              sh("grep -q '\"line\":3,\"state\":\"rejected\"' %s/ack3", e->dir) == 0,
          "without --strict the bad line fails alone (exit 1, written with its line number) and"
          " the two good ones are submitted");

    rc = sh("/usr/bin/python3 %s/proto/python/llmq_client.py --broker %s submit --prompt hi "
            "--max-tokens 3 --key py:1 --batch py > %s/py.json", srcdir, e->clients, e->dir);
    llmq_select sel = {.batch = "py"};
    llmq_status *st = NULL;
    llmq_error err;
    int src = llmq_get_status(c, &sel, &st, &err);
    CHECK(rc == 0 && src == 0 && st->n_jobs == 1 && st->jobs[0].state == LLMQ_STATE_QUEUED,
          "a job submitted by the Python client is seen by the C client");
    if (src == 0)
        llmq_status_free(st);
    rc = sh("/usr/bin/python3 %s/proto/python/llmq_client.py --broker %s raw "
            "'{\"v\":1,\"type\":\"submit\",\"req\":8,\"jobs\":[{\"prompt\":\"a\",\"top_k\":-3}]}' "
            "| grep -q '\"field\": \"jobs\\[0\\].top_k\"'", srcdir, e->clients);
    CHECK(rc == 0, "a bad body from Python gets its typed error naming the field");
}

/* Chat jobs from C and Python: their messages are stored as given. */
static void test_chat(const harness *h, const char *srcdir, llmq_client *c)
{
    static const llmq_message msgs[] = {{"system", "Answer in one word."},
                                        {"user", "Capital of France? <|im_start|>"}};
    llmq_job job;
    llmq_job_init(&job);
    job.key = "t:chat";
    job.messages = msgs;
    job.n_messages = 2;
    uint64_t id = 0;
    llmq_error err;
    int rc = llmq_submit(c, "chat", NULL, &job, 1, &id, NULL, &err);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT json_extract(messages, '$[1].content') = 'Capital of France? <|im_start|>'"
             " AND json_extract(messages, '$[0].role') = 'system' AND prompt IS NULL"
             " FROM jobs WHERE id = %llu",
             (unsigned long long)id);
    CHECK(rc == 0 && h_sql(h, sql) == 1, "a chat job from C is stored with its messages%s%s",
          rc ? ": " : "", rc ? err.message : "");
    job.prompt = "and a prompt";
    CHECK(llmq_job_check(&job, &err) < 0 && err.code == LLMQ_E_BAD_VALUE &&
              strstr(err.message, "\"prompt\" and \"messages\" are mutually exclusive"),
          "a job with a prompt and messages is refused (%s)", err.message);
    static const llmq_message no_role[] = {{"user", "hi"}, {NULL, "who?"}};
    job.prompt = NULL;
    job.messages = no_role;
    rc = llmq_submit(c, NULL, NULL, &job, 1, &id, NULL, &err);
    CHECK(rc < 0 && err.code == LLMQ_E_MISSING_FIELD &&
              strcmp(err.field, "jobs[0].messages[1].role") == 0,
          "a message without a role is refused naming it (%s)", err.message);

    char path[320];
    snprintf(path, sizeof path, "%s/chat.json", h->dir);
    FILE *f = fopen(path, "w");
    fputs("[{\"role\": \"user\", \"content\": \"Bonjour \u00e9\"}]\n", f);
    fclose(f);
    rc = sh("/usr/bin/python3 %s/proto/python/llmq_client.py --broker %s submit --messages %s "
            "--max-tokens 3 --batch pychat > %s/pychat.json",
            srcdir, h->clients, path, h->dir);
    CHECK(rc == 0 && h_sql(h, "SELECT count(*) FROM jobs WHERE batch_id = 'pychat' AND"
                              " json_extract(messages, '$[0].content') = 'Bonjour \xc3\xa9'") == 1,
          "a chat job from the Python client (--messages FILE) is stored with its messages");
    f = fopen(path, "w");
    fputs("{\"role\": \"user\"}\n", f);
    fclose(f);
    rc = sh("/usr/bin/python3 %s/proto/python/llmq_client.py --broker %s submit --messages %s "
            ">/dev/null 2>%s/pyerr",
            srcdir, h->clients, path, h->dir);
    CHECK(rc == 2 && sh("grep -q 'not a JSON array' %s/pyerr", h->dir) == 0,
          "the Python client refuses a messages file that is not an array of messages");
}

/* ---- the lease, against a broker played by the test ---------------------------- */

typedef struct fake {
    void *sock;     /* a ROUTER bound where the client connects */
    char peer[256]; /* the routing id of the last message's sender */
    size_t peer_len;
} fake;

/* The next message from a client: 0, or -1 on timeout. */
static int fake_recv(fake *f, int timeout_ms, wire_msg *m)
{
    zmq_pollitem_t it = {f->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return -1;
    int n = zmq_recv(f->sock, f->peer, sizeof f->peer, 0);
    char body[65536];
    int len = zmq_recv(f->sock, body, sizeof body, 0);
    f->peer_len = n > 0 ? (size_t)n : 0;
    wire_error we;
    return len > 0 && wire_decode(body, (size_t)len, WIRE_DIR_CLIENT_TO_BROKER, m, &we) == 0 ? 0
                                                                                             : -1;
}

static void fake_send(fake *f, wire_msg *m)
{
    char *body;
    size_t len;
    wire_error we;
    if (wire_encode(m, &body, &len, &we) == 0) {
        zmq_send(f->sock, f->peer, f->peer_len, ZMQ_SNDMORE);
        zmq_send(f->sock, body, len, 0);
        free(body);
    }
}

static void fake_result(fake *f, uint64_t req, uint64_t id)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_RESULT);
    m.req = req;
    m.result = (wire_result){.id = id, .state = WIRE_STATE_CANCELLED, .error = "cancelled"};
    fake_send(f, &m);
}

static void fake_wait_end(fake *f, uint64_t req, uint32_t done, uint32_t pending, bool timed_out)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WAIT_END);
    m.req = req;
    m.wait_end = (wire_wait_end){.done = done, .pending = pending, .timed_out = timed_out};
    fake_send(f, &m);
}

/* The answer to the wait m: a result for each of ids, in order, then its
 * end with nothing pending; m is freed. */
static void fake_answer(fake *f, wire_msg *m, const uint64_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        fake_result(f, m->req, ids[i]);
    fake_wait_end(f, m->req, m->wait.sel.n_ids, 0, false);
    wire_msg_free(m);
}

static bool ids_are(const wire_msg *m, const uint64_t *ids, uint32_t n)
{
    return m->type == WIRE_T_WAIT && m->wait.sel.n_ids == n &&
           memcmp(m->wait.sel.ids, ids, n * sizeof *ids) == 0;
}

/* Runs the wait to its end: the ids handed out, in order, into got; and
 * the jobs it counts done. */
static size_t drain(llmq_wait *w, uint64_t *got, size_t cap, size_t *done)
{
    size_t n = 0;
    llmq_result r;
    llmq_error err;
    int ev;
    int64_t end = clock_mono_ms() + 10000;
    while ((ev = llmq_wait_next(w, 100, &r, &err)) != LLMQ_WAIT_END && ev >= 0 &&
           clock_mono_ms() < end)
        if (ev == LLMQ_WAIT_RESULT && n < cap)
            got[n++] = r.id;
    llmq_wait_summary(w, done, NULL, NULL);
    return n;
}

static llmq_client *lease_client(const char *ep)
{
    llmq_client *c;
    llmq_error err;
    if (llmq_connect(&c, ep, &err) < 0 || llmq_set_wait_lease(c, 200, 1000, &err) < 0) {
        printf("FAIL - connect %s: %s\n", ep, err.message);
        exit(1);
    }
    return c;
}

/* A wait on ids, begun by the client and read by the fake broker: 0 or -1. */
static int begin_wait(fake *f, llmq_client *c, const uint64_t *ids, size_t n, llmq_wait **w,
                      wire_msg *m)
{
    llmq_select sel = {.ids = ids, .n_ids = n};
    llmq_error err;
    if (llmq_wait_begin(c, &sel, 20000, w, &err) < 0) {
        printf("# wait: %s\n", err.message);
        return -1;
    }
    return fake_recv(f, 5000, m);
}

static void test_old_broker(fake *f, const char *ep)
{
    llmq_client *c = lease_client(ep);
    static const uint64_t ids[] = {5, 6};
    llmq_wait *w = NULL;
    llmq_error err;
    wire_msg m = {0};
    int rc = begin_wait(f, c, ids, 2, &w, &m);
    CHECK(rc == 0 && m.wait.heartbeat_ms == 200, "a wait asks for heartbeats (heartbeat_ms 200)");
    if (rc != 0)
        goto out;
    wire_error we;
    /* What brokers before the lease answer. */
    wire_fail(&we, WIRE_E_UNKNOWN_FIELD, "heartbeat_ms", "unknown field");
    we.req = m.req;
    wire_msg refusal;
    wire_error_reply(&refusal, &we);
    fake_send(f, &refusal);
    wire_msg_free(&m);
    llmq_result r;
    rc = rc == 0 ? llmq_wait_next(w, 200, &r, &err) : -1;
    CHECK(rc == LLMQ_WAIT_IDLE && fake_recv(f, 5000, &m) == 0 && m.wait.heartbeat_ms == 0 &&
              ids_are(&m, ids, 2),
          "refused by a broker older than leases, it is sent again without them");
    static const uint64_t twice[] = {5, 5, 6};
    fake_answer(f, &m, twice, 3);
    uint64_t got[8];
    size_t done = 0, n = rc == LLMQ_WAIT_IDLE ? drain(w, got, 8, &done) : 0;
    CHECK(n == 2 && got[0] == 5 && got[1] == 6 && done == 2,
          "a result the broker sends twice is handed out once (%zu results, %zu done)", n, done);
out:
    llmq_wait_free(w);
    llmq_close(c);
}

static void test_silent_broker(fake *f, const char *ep)
{
    llmq_client *c = lease_client(ep);
    static const uint64_t ids[] = {7, 8, 9};
    llmq_wait *w = NULL;
    llmq_error err;
    wire_msg m = {0};
    int rc = begin_wait(f, c, ids, 3, &w, &m);
    CHECK(rc == 0, "a wait on 3 jobs reaches the broker");
    if (rc != 0)
        goto out;
    char first_peer[256];
    size_t first_len = f->peer_len;
    memcpy(first_peer, f->peer, f->peer_len);
    uint64_t req = m.req;
    wire_msg_free(&m);
    fake_result(f, req, 7);
    llmq_result r;
    int ev = LLMQ_WAIT_IDLE;
    for (int64_t end = clock_mono_ms() + 5000; ev == LLMQ_WAIT_IDLE && clock_mono_ms() < end;)
        ev = llmq_wait_next(w, 100, &r, &err);
    CHECK(ev == LLMQ_WAIT_RESULT && r.id == 7, "the first result arrives");
    /* The broker dies without a word: no heartbeat, no reply. */
    llmq_wait_health h = {0};
    for (int64_t end = clock_mono_ms() + 10000; !h.broker_lost && clock_mono_ms() < end;) {
        ev = llmq_wait_next(w, 100, &r, &err);
        llmq_wait_get_health(w, &h);
    }
    static const uint64_t rest[] = {8, 9};
    CHECK(h.broker_lost && h.rewaits >= 1 && h.silent_ms >= 1000,
          "silent past the lease, the broker is presumed lost (%.0f ms)", h.silent_ms);
    rc = fake_recv(f, 5000, &m);
    CHECK(rc == 0 && ids_are(&m, rest, 2) && m.wait.heartbeat_ms == 200 && m.req != req &&
              (f->peer_len != first_len || memcmp(f->peer, first_peer, first_len) != 0),
          "the wait is sent again on a fresh connection, for the jobs not reported yet");
    fake_answer(f, &m, ids, 3); /* 7, already final, again */
    uint64_t got[8];
    size_t done = 0, n = drain(w, got, 8, &done);
    llmq_wait_get_health(w, &h);
    CHECK(n == 2 && got[0] == 8 && got[1] == 9 && done == 3 && !h.broker_lost,
          "the answering broker's results come, job 7 not again (%zu results, %zu done)", n, done);
out:
    llmq_wait_free(w);
    llmq_close(c);
}

static void test_stopping_broker(fake *f, const char *ep)
{
    llmq_client *c = lease_client(ep);
    static const uint64_t ids[] = {10};
    llmq_wait *w = NULL;
    llmq_error err;
    wire_msg m = {0};
    int rc = begin_wait(f, c, ids, 1, &w, &m);
    CHECK(rc == 0, "a wait on 1 job reaches the broker");
    if (rc != 0)
        goto out;
    fake_wait_end(f, m.req, 0, 1, false); /* what a stopping broker says */
    wire_msg_free(&m);
    llmq_result r;
    int ev = LLMQ_WAIT_IDLE;
    for (int i = 0; i < 3 && ev == LLMQ_WAIT_IDLE; i++)
        ev = llmq_wait_next(w, 100, &r, &err);
    CHECK(rc == 0 && ev == LLMQ_WAIT_IDLE && fake_recv(f, 5000, &m) == 0 && ids_are(&m, ids, 1),
          "a wait_end with jobs pending, not timed out (a stopping broker), does not end the"
          " wait: it is sent again");
    fake_answer(f, &m, ids, 1);
    uint64_t got[4];
    size_t done = 0, pending = 9, n = drain(w, got, 4, &done);
    llmq_wait_summary(w, NULL, &pending, NULL);
    CHECK(n == 1 && got[0] == 10 && done == 1 && pending == 0,
          "and ends with the next broker's result");
out:
    llmq_wait_free(w);
    llmq_close(c);
}

static void test_lease(harness *h)
{
    char ep[320];
    snprintf(ep, sizeof ep, "ipc://%s/fake", h->dir);
    fake f = {.sock = zmq_socket(h->zctx, ZMQ_ROUTER)};
    int linger = 0;
    zmq_setsockopt(f.sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(f.sock, ep) != 0) {
        printf("FAIL - bind %s\n", ep);
        return;
    }
    test_old_broker(&f, ep);
    test_silent_broker(&f, ep);
    test_stopping_broker(&f, ep);
    zmq_close(f.sock);
}

int main(void)
{
    const char *srcdir = getenv("LLMQ_SRCDIR");
    harness h;
    h_init(&h, "test-client", 120);
    if (!srcdir) {
        fprintf(stderr, "LLMQ_SRCDIR is not set: run through `make check`\n");
        return 77;
    }
    h_start(&h, NULL);
    llmq_client *c;
    llmq_error err;
    if (llmq_connect(&c, h.clients, &err) < 0) {
        printf("FAIL - connect: %s\n", err.message);
        h_stop(&h, 5000);
        return 1;
    }
    uint64_t ids[3] = {0};
    test_submit(c, ids);
    test_status_cancel_wait(c, ids);
    test_big_batch(c);
    test_tools(&h, srcdir, c);
    test_chat(&h, srcdir, c);
    test_no_broker(&h);
    test_lease(&h);
    llmq_close(c);
    int st = h_stop(&h, 5000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the broker stops cleanly on SIGTERM");
    h_done(&h, check_state.failed != 0);
    return check_done();
}
