/* test-broker: llmq-broker's client side, as a real process on loopback.
 *
 * Pins: every acknowledged submit survives kill -9 of the broker (acks read
 * from the socket after the kill included) and resubmitting the same keys
 * after the restart returns the same jobs; client keys are idempotent inside
 * one submit too, and a key of another batch is refused (naming both
 * batches) rather than answered with a job outside this submit's batch;
 * backpressure refuses a submit whole, stores nothing, counts a submit's
 * new jobs against the room left, and lifts when the queue drains; cancel of queued jobs (state,
 * pushed result, idempotent second cancel); and a table of bad inputs, each answered with its typed
 * error naming the field, while another client's jobs stay intact and both clients keep being
 * served.
 *
 * And the database file is never silently replaced: a missing file is
 * created, but a 0-byte file (truncated) or a SQLite file without tables
 * is refused at start unless --init, and left as it was; a database of
 * another program is refused even with --init; a damaged index is found by
 * the quick_check at start (exit 1, naming it) instead of by a fatal error
 * at the first submit that reaches it, and --skip-check starts anyway. */
#include <math.h>
#include <msgpack.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "tests/integration/harness.h"
#include "tests/unit/check.h"

#define T_REPLY 5000 /* ms a reply may take */

static harness H;

static int submit_jobs(void *c, uint64_t req, const char *batch,
                       const wire_job *jobs, uint32_t n)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.req = req;
    m.submit.batch = batch;
    m.submit.jobs = jobs;
    m.submit.n_jobs = n;
    return h_send(c, &m);
}

static int submit_one(void *c, uint64_t req, const char *key)
{
    wire_job j;
    h_job(&j, key, "Once upon a time");
    return submit_jobs(c, req, NULL, &j, 1);
}

static int send_select(void *c, wire_type t, uint64_t req, const uint64_t *ids,
                       uint32_t n, const char *batch)
{
    wire_msg m;
    wire_msg_init(&m, t);
    m.req = req;
    wire_select *sel = t == WIRE_T_WAIT ? &m.wait.sel : &m.select;
    sel->ids = ids;
    sel->n_ids = n;
    sel->batch = batch;
    return h_send(c, &m);
}

/* ---- durability across kill -9 ------------------------------------------------ */

#define N_DURABLE 3000

typedef struct acked {
    uint64_t id[N_DURABLE + 1]; /* by req (= key number + 1); 0: not acked */
    int n;
} acked;

static void note_ack(acked *a, const wire_msg *m)
{
    if (m->type == WIRE_T_SUBMIT_OK && m->req >= 1 && m->req <= N_DURABLE &&
        m->submit_ok.n == 1 && !a->id[m->req]) {
        a->id[m->req] = m->submit_ok.ids[0];
        a->n++;
    }
}

/* Acks already in the client's queue when the broker died count too: the
 * broker sent them, so they must be durable. */
static void collect_acks(void *c, acked *a, int until, bool kill_then)
{
    wire_msg m;
    while (a->n < until && h_recv(c, T_REPLY, &m) == 0) {
        note_ack(a, &m);
        wire_msg_free(&m);
    }
    if (kill_then)
        h_kill9(&H);
    while (h_recv(c, 200, &m) == 0) {
        note_ack(a, &m);
        wire_msg_free(&m);
    }
}

static int count_present(const acked *a)
{
    int ok = 0;
    for (int r = 1; r <= N_DURABLE; r++) {
        if (!a->id[r])
            continue;
        char sql[128];
        snprintf(sql, sizeof sql,
                 "SELECT id FROM jobs WHERE client_key = 'k%d'", r - 1);
        ok += h_sql(&H, sql) == (int64_t)a->id[r];
    }
    return ok;
}

/* Resubmits every key; counts acked ones answered with their old id. */
static int resubmit_all(void *c, const acked *a, int *same)
{
    char key[32];
    for (int r = 1; r <= N_DURABLE; r++) {
        snprintf(key, sizeof key, "k%d", r - 1);
        submit_one(c, (uint64_t)r, key);
    }
    int answered = 0;
    *same = 0;
    wire_msg m;
    while (answered < N_DURABLE && h_recv(c, T_REPLY, &m) == 0) {
        if (m.type == WIRE_T_SUBMIT_OK && m.req >= 1 && m.req <= N_DURABLE) {
            answered++;
            uint64_t old = a->id[m.req];
            *same += old && m.submit_ok.existing[0] && m.submit_ok.ids[0] == old;
        }
        wire_msg_free(&m);
    }
    return answered;
}

static void test_durability(void)
{
    h_start(&H, NULL);
    void *c = h_peer(&H, H.clients);
    char key[32];
    for (int i = 0; i < N_DURABLE; i++) {
        snprintf(key, sizeof key, "k%d", i);
        submit_one(c, (uint64_t)i + 1, key);
    }
    static acked a;
    collect_acks(c, &a, N_DURABLE / 2, true);
    h_close(c);
    CHECK(a.n >= N_DURABLE / 2, "%d submits acknowledged before kill -9", a.n);
    h_start(&H, NULL);
    c = h_peer(&H, H.clients);
    wire_msg m;
    wire_msg_init(&m, WIRE_T_STATS);
    h_send(c, &m);
    int up = h_recv_type(c, T_REPLY, WIRE_T_STATS_OK, &m);
    if (up == 0)
        wire_msg_free(&m);
    CHECK(up == 0, "the broker restarts on the same database");
    int present = count_present(&a);
    CHECK(present == a.n, "every acknowledged job is in the database after"
                          " the crash (%d of %d)", present, a.n);
    int same = 0, answered = resubmit_all(c, &a, &same);
    CHECK(answered == N_DURABLE && same == a.n,
          "resubmitting all %d keys after the crash returns the acked jobs"
          " (%d of %d same id, existing)", N_DURABLE, same, a.n);
    CHECK(h_sql(&H, "SELECT count(*) FROM jobs") == N_DURABLE,
          "no key stored twice: %d jobs", N_DURABLE);
    h_close(c);
    int st = h_stop(&H, 10000);
    CHECK(st == 0, "SIGTERM stops the idle broker with status 0");
}

/* ---- idempotency, backpressure, cancel ------------------------------------------------ */

/* Three text jobs (prompt = key); 0 with their submit_ok in *ok, or -1. */
static int submit3(void *c, uint64_t req, const char *batch,
                   const char *const keys[3], wire_msg *ok)
{
    wire_job j[3];
    for (int i = 0; i < 3; i++)
        h_job(&j[i], keys[i], keys[i]);
    submit_jobs(c, req, batch, j, 3);
    return h_recv_type(c, T_REPLY, WIRE_T_SUBMIT_OK, ok);
}

static void test_keys_in_one_submit(void *c)
{
    static const char *const keys[3] = {"dup:x", "dup:y", "dup:x"};
    wire_msg m;
    int rc = submit3(c, 10, "dups", keys, &m);
    CHECK(rc == 0 && m.submit_ok.n == 3 &&
              m.submit_ok.ids[0] == m.submit_ok.ids[2] &&
              m.submit_ok.ids[1] != m.submit_ok.ids[0] &&
              !m.submit_ok.existing[0] && !m.submit_ok.existing[1] &&
              m.submit_ok.existing[2],
          "a key repeated inside one submit names one job, marked existing");
    if (rc == 0)
        wire_msg_free(&m);
}

static void test_key_of_another_batch(void *c)
{
    static const char *const batches[2] = {"other", NULL};
    for (int i = 0; i < 2; i++) {
        wire_job j[2];
        h_job(&j[0], "fresh:1", "new");
        h_job(&j[1], "dup:x", "again");
        submit_jobs(c, 11, batches[i], j, 2);
        wire_msg m;
        int rc = h_recv(c, T_REPLY, &m);
        bool refused = rc == 0 && m.type == WIRE_T_ERROR && m.error.code == WIRE_E_BAD_VALUE &&
                       strcmp(m.error.field, "jobs[1].key") == 0 &&
                       strstr(m.error.message, "batch 'dups'") &&
                       strstr(m.error.message, i == 0 ? "batch 'other'" : "no batch");
        CHECK(refused && h_sql(&H, "SELECT count(*) FROM jobs WHERE client_key = 'fresh:1'") == 0,
              "a key of batch 'dups' resubmitted under %s is refused, nothing stored: %s",
              i == 0 ? "batch 'other'" : "no batch",
              rc == 0 && m.type == WIRE_T_ERROR ? m.error.message : "(not refused)");
        if (rc == 0)
            wire_msg_free(&m);
    }
}

static uint64_t queued_now(void *c)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_STATS);
    m.req = 99;
    h_send(c, &m);
    if (h_recv_type(c, T_REPLY, WIRE_T_STATS_OK, &m) != 0)
        return UINT64_MAX;
    uint64_t n = m.stats_ok.counts.queued;
    wire_msg_free(&m);
    return n;
}

static wire_code reply_code(void *c, uint64_t *first_id)
{
    wire_msg m;
    if (h_recv(c, T_REPLY, &m) != 0)
        return WIRE_E_COUNT;
    wire_code code = m.type == WIRE_T_ERROR ? m.error.code : WIRE_OK;
    if (first_id && m.type == WIRE_T_SUBMIT_OK)
        *first_id = m.submit_ok.ids[0];
    wire_msg_free(&m);
    return code;
}

/* On a database of its own: the other tests leave thousands queued. */
static void test_backpressure(void)
{
    harness bp;
    h_init(&bp, "test-broker-bp", 240);
    const char *const flags[] = {"--max-queued", "5", NULL};
    h_start(&bp, flags);
    void *c = h_peer(&bp, bp.clients);
    char key[16];
    uint64_t first = 0;
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "bp%d", i);
        submit_one(c, (uint64_t)i + 1, key);
        ok += reply_code(c, i == 0 ? &first : NULL) == WIRE_OK;
    }
    CHECK(ok == 5, "5 submits fit a queue of 5");
    wire_job two[2];
    h_job(&two[0], "bp5", "x");
    h_job(&two[1], "bp6", "y");
    submit_jobs(c, 6, NULL, two, 2);
    wire_msg m;
    int rc = h_recv(c, T_REPLY, &m);
    CHECK(rc == 0 && m.type == WIRE_T_ERROR && m.error.code == WIRE_E_QUEUE_FULL &&
              m.req == 6 && strstr(m.error.message, "limit 5"),
          "over the limit the submit is refused as queue_full: %s",
          rc == 0 && m.type == WIRE_T_ERROR ? m.error.message : "(no error)");
    CHECK(rc == 0 && m.type == WIRE_T_ERROR &&
              strstr(m.error.message, "0 new jobs fit now and no submit of more than 5 ever does"),
          "the refusal says what would succeed: how many fit now, and at most 5 in one submit");
    if (rc == 0)
        wire_msg_free(&m);
    uint64_t queued = queued_now(c);
    CHECK(queued == 5 && h_sql(&bp, "SELECT count(*) FROM jobs") == 5,
          "nothing of the refused submit was stored");
    submit_one(c, 7, "bp0");
    wire_code known = reply_code(c, NULL);
    CHECK(known == WIRE_OK,
          "a known key is still answered while the queue is full");
    send_select(c, WIRE_T_CANCEL, 8, &first, 1, NULL);
    wire_code cc = reply_code(c, NULL);
    submit_jobs(c, 9, NULL, two, 1);
    wire_code again = reply_code(c, NULL);
    CHECK(cc == WIRE_OK && again == WIRE_OK,
          "once a queued job is cancelled, a new submit fits again");
    /* What counts is a submit's new jobs against the room left: with 4
     * queued of 5, two new jobs are refused, one new and one known fit. */
    uint64_t bp1 = 0;
    submit_one(c, 10, "bp1");
    reply_code(c, &bp1);
    send_select(c, WIRE_T_CANCEL, 11, &bp1, 1, NULL);
    wire_code freed = reply_code(c, NULL);
    wire_job pair[2];
    h_job(&pair[0], "bp7", "p");
    h_job(&pair[1], "bp8", "q");
    submit_jobs(c, 12, NULL, pair, 2);
    wire_code two_new = reply_code(c, NULL);
    h_job(&pair[1], "bp2", "known");
    submit_jobs(c, 13, NULL, pair, 2);
    wire_code one_new = reply_code(c, NULL);
    CHECK(freed == WIRE_OK && two_new == WIRE_E_QUEUE_FULL && one_new == WIRE_OK &&
              queued_now(c) == 5,
          "with 4 of 5 queued, 2 new jobs are refused; 1 new and 1 known key fit");
    h_close(c);
    h_done(&bp, check_state.failed > 0);
}

static void test_cancel_queued(void *c)
{
    wire_job j;
    h_job(&j, "cq", "to be cancelled");
    submit_jobs(c, 20, "cq-batch", &j, 1);
    wire_msg m;
    uint64_t id = 0;
    if (h_recv_type(c, T_REPLY, WIRE_T_SUBMIT_OK, &m) == 0) {
        id = m.submit_ok.ids[0];
        wire_msg_free(&m);
    }
    send_select(c, WIRE_T_CANCEL, 21, &id, 1, NULL);
    int rc = h_recv_type(c, T_REPLY, WIRE_T_CANCEL_OK, &m);
    CHECK(rc == 0 && m.jobs_reply.n_jobs == 1 &&
              m.jobs_reply.jobs[0].state == WIRE_STATE_CANCELLED &&
              m.jobs_reply.counts.cancelled == 1,
          "cancel of a queued job answers cancelled at once");
    if (rc == 0)
        wire_msg_free(&m);
    wire_msg w;
    wire_msg_init(&w, WIRE_T_WAIT);
    w.req = 22;
    w.wait.sel.batch = "cq-batch";
    w.wait.timeout_ms = 1000;
    h_send(c, &w);
    rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && m.result.id == id && m.result.state == WIRE_STATE_CANCELLED &&
              m.result.error && m.req == 22,
          "a wait on its batch gets the cancelled result pushed");
    if (rc == 0)
        wire_msg_free(&m);
    rc = h_recv_type(c, T_REPLY, WIRE_T_WAIT_END, &m);
    CHECK(rc == 0 && m.wait_end.done == 1 && m.wait_end.pending == 0 &&
              !m.wait_end.timed_out,
          "then wait_end: 1 done, 0 pending, not timed out");
    if (rc == 0)
        wire_msg_free(&m);
    send_select(c, WIRE_T_CANCEL, 23, &id, 1, NULL);
    rc = h_recv_type(c, T_REPLY, WIRE_T_CANCEL_OK, &m);
    CHECK(rc == 0 && m.jobs_reply.jobs[0].state == WIRE_STATE_CANCELLED,
          "cancelling it again reports it as it is");
    if (rc == 0)
        wire_msg_free(&m);
}

/* ---- bad inputs ---------------------------------------------------------------------------- */

/* A map of n_extra fields after "v", "type", "req" (each optional). */
static void head(h_body *b, int v, const char *type, int n_extra)
{
    h_body_start(b);
    msgpack_pack_map(&b->pk, (v ? 1 : 0) + (type ? 1 : 0) + 1 + n_extra);
    if (v) {
        h_pk_str(&b->pk, "v");
        msgpack_pack_int(&b->pk, v);
    }
    if (type) {
        h_pk_str(&b->pk, "type");
        h_pk_str(&b->pk, type);
    }
    h_pk_str(&b->pk, "req");
    msgpack_pack_int(&b->pk, 42);
}

/* "jobs": [ {prompt..., <one more field from fn>} ] */
typedef void (*field_fn)(msgpack_packer *pk);

static void submit_with(h_body *b, bool with_prompt, field_fn extra)
{
    head(b, 1, "submit", 1);
    h_pk_str(&b->pk, "jobs");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_map(&b->pk, (with_prompt ? 1 : 0) + (extra ? 1 : 0));
    if (with_prompt) {
        h_pk_str(&b->pk, "prompt");
        h_pk_str(&b->pk, "hello");
    }
    if (extra)
        extra(&b->pk);
}

/* clang-format off */
static void f_prompt_int(msgpack_packer *pk) { h_pk_str(pk, "prompt"); msgpack_pack_int(pk, 5); }
static void f_neg_max(msgpack_packer *pk) { h_pk_str(pk, "max_tokens"); msgpack_pack_int(pk, -1); }
static void f_nan_temp(msgpack_packer *pk) { h_pk_str(pk, "temperature"); msgpack_pack_double(pk, NAN); }
static void f_neg_top_p(msgpack_packer *pk) { h_pk_str(pk, "top_p"); msgpack_pack_double(pk, -0.5); }
static void f_typo(msgpack_packer *pk) { h_pk_str(pk, "temprature"); msgpack_pack_double(pk, 0.5); }
/* clang-format on */
static void f_tokens_too(msgpack_packer *pk)
{
    h_pk_str(pk, "tokens");
    msgpack_pack_array(pk, 1);
    msgpack_pack_int(pk, 1);
}

static void f_long_key(msgpack_packer *pk)
{
    char key[301];
    memset(key, 'k', 300);
    key[300] = 0;
    h_pk_str(pk, "key");
    h_pk_str(pk, key);
}

static void f_bad_utf8(msgpack_packer *pk)
{
    h_pk_str(pk, "prompt");
    msgpack_pack_str_with_body(pk, "caf\xc3", 4);
}

static void f_huge_prompt(msgpack_packer *pk)
{
    size_t n = WIRE_MAX_PROMPT_BYTES + 1;
    char *p = malloc(n);
    memset(p, 'a', n);
    h_pk_str(pk, "prompt");
    msgpack_pack_str_with_body(pk, p, n);
    free(p);
}

static void f_many_tokens(msgpack_packer *pk)
{
    h_pk_str(pk, "tokens");
    msgpack_pack_array(pk, WIRE_MAX_PROMPT_TOKENS + 1);
    for (uint32_t i = 0; i <= WIRE_MAX_PROMPT_TOKENS; i++)
        msgpack_pack_uint32(pk, 1);
}

typedef struct bad_case {
    const char *what;
    int kind; /* how the body is built, see build_case */
    field_fn extra;
    wire_code code;
    const char *field; /* expected field, "" for none */
} bad_case;

enum { K_RAW_GARBAGE, K_ARRAY, K_VERSION2, K_NO_VERSION, K_UNKNOWN_TYPE,
       K_WORKER_TYPE, K_NO_JOBS, K_JOBS_STR, K_JOBS_EMPTY, K_JOB_WITH,
       K_JOB_ONLY, K_STATUS_UNKNOWN, K_WAIT_NO_BATCH, K_CANCEL_UNKNOWN,
       K_REQ_STR };

static const bad_case cases[] = {
    {"not msgpack", K_RAW_GARBAGE, NULL, WIRE_E_MALFORMED, ""},
    {"not a map", K_ARRAY, NULL, WIRE_E_MALFORMED, ""},
    {"wrong protocol version", K_VERSION2, NULL, WIRE_E_VERSION, "v"},
    {"no protocol version", K_NO_VERSION, NULL, WIRE_E_VERSION, "v"},
    {"unknown message type", K_UNKNOWN_TYPE, NULL, WIRE_E_UNKNOWN_TYPE, "type"},
    {"a worker message on the client socket", K_WORKER_TYPE, NULL,
     WIRE_E_UNKNOWN_TYPE, "type"},
    {"req of the wrong type", K_REQ_STR, NULL, WIRE_E_BAD_TYPE, "req"},
    {"missing jobs", K_NO_JOBS, NULL, WIRE_E_MISSING_FIELD, "jobs"},
    {"jobs of the wrong type", K_JOBS_STR, NULL, WIRE_E_BAD_TYPE, "jobs"},
    {"no job at all", K_JOBS_EMPTY, NULL, WIRE_E_BAD_VALUE, "jobs"},
    {"prompt of the wrong type", K_JOB_ONLY, f_prompt_int, WIRE_E_BAD_TYPE,
     "jobs[0].prompt"},
    {"negative max_tokens", K_JOB_WITH, f_neg_max, WIRE_E_BAD_VALUE,
     "jobs[0].max_tokens"},
    {"NaN temperature", K_JOB_WITH, f_nan_temp, WIRE_E_BAD_VALUE,
     "jobs[0].temperature"},
    {"negative top_p", K_JOB_WITH, f_neg_top_p, WIRE_E_BAD_VALUE, "jobs[0].top_p"},
    {"misspelt field", K_JOB_WITH, f_typo, WIRE_E_UNKNOWN_FIELD,
     "jobs[0].temprature"},
    {"prompt and tokens both", K_JOB_WITH, f_tokens_too, WIRE_E_BAD_VALUE,
     "jobs[0]"},
    {"huge key string", K_JOB_WITH, f_long_key, WIRE_E_TOO_LARGE, "jobs[0].key"},
    {"invalid UTF-8 prompt", K_JOB_ONLY, f_bad_utf8, WIRE_E_BAD_VALUE,
     "jobs[0].prompt"},
    {"oversize prompt text", K_JOB_ONLY, f_huge_prompt, WIRE_E_TOO_LARGE,
     "jobs[0].prompt"},
    {"oversize prompt tokens", K_JOB_ONLY, f_many_tokens, WIRE_E_TOO_LARGE,
     "jobs[0].tokens"},
    {"unknown job id", K_STATUS_UNKNOWN, NULL, WIRE_E_UNKNOWN_JOB, "ids[1]"},
    {"unknown batch", K_WAIT_NO_BATCH, NULL, WIRE_E_UNKNOWN_BATCH, "batch"},
    {"cancel of an unknown job", K_CANCEL_UNKNOWN, NULL, WIRE_E_UNKNOWN_JOB,
     "ids[0]"},
};

static void ids_field(h_body *b, const char *key, uint64_t a, uint64_t c)
{
    h_pk_str(&b->pk, key);
    msgpack_pack_array(&b->pk, c ? 2 : 1);
    msgpack_pack_uint64(&b->pk, a);
    if (c)
        msgpack_pack_uint64(&b->pk, c);
}

static void build_case(h_body *b, const bad_case *k, uint64_t good_id)
{
    switch (k->kind) {
    case K_RAW_GARBAGE:
        msgpack_sbuffer_init(&b->buf);
        msgpack_sbuffer_write(&b->buf, "\xc1\x00\x01", 3);
        return;
    case K_ARRAY:
        h_body_start(b);
        msgpack_pack_array(&b->pk, 2);
        msgpack_pack_int(&b->pk, 1);
        msgpack_pack_int(&b->pk, 2);
        return;
    case K_VERSION2: head(b, 2, "stats", 0); return;
    case K_NO_VERSION: head(b, 0, "stats", 0); return;
    case K_UNKNOWN_TYPE: head(b, 1, "frobnicate", 0); return;
    case K_WORKER_TYPE: head(b, 1, "heartbeat", 0); return;
    case K_NO_JOBS: head(b, 1, "submit", 0); return;
    case K_JOBS_STR:
        head(b, 1, "submit", 1);
        h_pk_str(&b->pk, "jobs");
        h_pk_str(&b->pk, "abc");
        return;
    case K_JOBS_EMPTY:
        head(b, 1, "submit", 1);
        h_pk_str(&b->pk, "jobs");
        msgpack_pack_array(&b->pk, 0);
        return;
    case K_JOB_WITH: submit_with(b, true, k->extra); return;
    case K_JOB_ONLY: submit_with(b, false, k->extra); return;
    case K_STATUS_UNKNOWN:
        head(b, 1, "status", 1);
        ids_field(b, "ids", good_id, 987654321);
        return;
    case K_WAIT_NO_BATCH:
        head(b, 1, "wait", 1);
        h_pk_str(&b->pk, "batch");
        h_pk_str(&b->pk, "no-such-batch");
        return;
    case K_CANCEL_UNKNOWN:
        head(b, 1, "cancel", 1);
        ids_field(b, "ids", 987654321, 0);
        return;
    case K_REQ_STR:
        msgpack_sbuffer_init(&b->buf);
        msgpack_packer_init(&b->pk, &b->buf, msgpack_sbuffer_write);
        msgpack_pack_map(&b->pk, 3);
        h_pk_str(&b->pk, "v");
        msgpack_pack_int(&b->pk, 1);
        h_pk_str(&b->pk, "type");
        h_pk_str(&b->pk, "stats");
        h_pk_str(&b->pk, "req");
        h_pk_str(&b->pk, "seven");
        return;
    }
}

static void check_case(void *bad, const bad_case *k, uint64_t good_id)
{
    h_body b;
    build_case(&b, k, good_id);
    h_body_send(bad, &b);
    wire_msg m;
    int rc = h_recv(bad, T_REPLY, &m);
    bool typed = rc == 0 && m.type == WIRE_T_ERROR;
    const char *field = typed && m.error.field ? m.error.field : "";
    CHECK(typed && m.error.code == k->code && strcmp(field, k->field) == 0,
          "%s: %s at '%s' (%s)", k->what, wire_code_name(k->code), k->field,
          typed ? m.error.message : "no error reply");
    if (rc == 0)
        wire_msg_free(&m);
}

static void check_envelopes(void *bad)
{
    zmq_send(bad, "", 0, 0);
    wire_msg m;
    int rc = h_recv(bad, T_REPLY, &m);
    CHECK(rc == 0 && m.type == WIRE_T_ERROR && m.error.code == WIRE_E_MALFORMED,
          "an empty body is refused as malformed");
    if (rc == 0)
        wire_msg_free(&m);
    for (int i = 0; i < 6; i++)
        zmq_send(bad, "e", 1, ZMQ_SNDMORE);
    zmq_send(bad, "\x80", 1, 0);
    rc = h_recv(bad, T_REPLY, &m);
    CHECK(rc == 0 && m.type == WIRE_T_ERROR && m.error.code == WIRE_E_MALFORMED,
          "more than 4 envelope frames are refused as malformed");
    if (rc == 0)
        wire_msg_free(&m);
}

static uint64_t submit_good(void *c)
{
    static const char *const keys[3] = {"good:0", "good:1", "good:2"};
    wire_msg m;
    uint64_t id = 0;
    if (submit3(c, 30, "good", keys, &m) == 0) {
        id = m.submit_ok.ids[0];
        wire_msg_free(&m);
    }
    return id;
}

static void test_bad_inputs(void *good)
{
    uint64_t good_id = submit_good(good);
    int64_t jobs_before = h_sql(&H, "SELECT count(*) FROM jobs");
    void *bad = h_peer(&H, H.clients);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(bad, &cases[i], good_id);
    check_envelopes(bad);
    CHECK(h_sql(&H, "SELECT count(*) FROM jobs") == jobs_before,
          "no bad request stored anything");
    send_select(good, WIRE_T_STATUS, 31, NULL, 0, "good");
    wire_msg m;
    int rc = h_recv_type(good, T_REPLY, WIRE_T_STATUS_OK, &m);
    CHECK(rc == 0 && m.jobs_reply.n_jobs == 3 && m.jobs_reply.counts.queued == 3,
          "the other client's three jobs are intact and queued");
    if (rc == 0)
        wire_msg_free(&m);
    uint64_t served = queued_now(bad);
    CHECK(served != UINT64_MAX,
          "the client that sent bad requests is still served");
    h_close(bad);
}

/* ---- the database file ------------------------------------------------------------------- */

/* Starts the broker on db's file and waits for it to exit: its exit status,
 * or -1 when it was still running after wait_ms (then it is stopped). */
static int start_exits(harness *h, const char *const *flags, int wait_ms)
{
    truncate(h->log, 0);
    h_start(h, flags);
    int st = h_reap(h->broker, wait_ms);
    h->broker = 0;
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Starts the broker and asks for stats: true when it answers. */
static bool starts_serving(harness *h, const char *const *flags)
{
    truncate(h->log, 0);
    h_start(h, flags);
    void *c = h_peer(h, h->clients);
    bool served = queued_now(c) != UINT64_MAX;
    h_close(c);
    return served && h_stop(h, 10000) == 0;
}

static long size_of(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        fprintf(stderr, "%s: %s: %s\n", path, sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

static void fresh_file(const harness *h)
{
    char aux[300];
    unlink(h->db);
    snprintf(aux, sizeof aux, "%s-wal", h->db);
    unlink(aux);
    snprintf(aux, sizeof aux, "%s-shm", h->db);
    unlink(aux);
}

static void test_empty_files(harness *h)
{
    static const char *const init[] = {"--init", NULL};
    fresh_file(h);
    FILE *f = fopen(h->db, "w");
    if (f)
        fclose(f);
    int st = start_exits(h, NULL, 10000);
    CHECK(st == 1 && h_file_has(h->log, "empty (0 bytes)") && h_file_has(h->log, "--init") &&
              size_of(h->db) == 0,
          "a 0-byte database is refused at start (status %d), naming --init; the file stays"
          " 0 bytes",
          st);
    CHECK(starts_serving(h, init) && h_file_has(h->log, "created in the empty file (--init)") &&
              h_sql(h, "SELECT count(*) FROM jobs") == 0,
          "--init starts an empty queue in it");

    fresh_file(h);
    sql_exec(h->db, "VACUUM");
    st = start_exits(h, NULL, 10000);
    CHECK(st == 1 && h_file_has(h->log, "without llmq's schema") && size_of(h->db) > 0,
          "a SQLite file without tables is refused at start (status %d)", st);
    CHECK(starts_serving(h, init), "and --init gives it the schema");

    fresh_file(h);
    sql_exec(h->db, "CREATE TABLE mine (x); INSERT INTO mine VALUES (42);");
    st = start_exits(h, init, 10000);
    CHECK(st == 1 && h_file_has(h->log, "another program") &&
              h_sql(h, "SELECT x FROM mine") == 42 &&
              h_sql(h, "SELECT count(*) FROM sqlite_master") == 1,
          "another program's database is refused even with --init (status %d), untouched", st);
    fresh_file(h);
    CHECK(starts_serving(h, NULL) && h_file_has(h->log, "database ") &&
              h_sql(h, "SELECT count(*) FROM jobs") == 0,
          "a missing file is created");
}

/* Overwrites the header of index `name`'s root page, as a torn write or
 * a bad sector would. */
static void damage_index(const harness *h, const char *name)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT rootpage FROM sqlite_master WHERE name = '%s'", name);
    int64_t root = h_sql(h, sql), page = h_sql(h, "PRAGMA page_size");
    FILE *f = fopen(h->db, "r+b");
    static const char junk[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    if (!f || root < 2 || fseek(f, (long)((root - 1) * page), SEEK_SET) != 0 ||
        fwrite(junk, sizeof junk, 1, f) != 1)
        fprintf(stderr, "could not damage %s (root page %lld)\n", name, (long long)root);
    if (f)
        fclose(f);
}

static void test_damaged_index(harness *h)
{
    static const char *const skip[] = {"--skip-check", NULL};
    fresh_file(h);
    h_start(h, NULL);
    void *c = h_peer(h, h->clients);
    static const char *const keys[3] = {"dmg:a", "dmg:b", "dmg:c"};
    wire_msg m;
    int rc = submit3(c, 30, "dmg", keys, &m);
    if (rc == 0)
        wire_msg_free(&m);
    h_close(c);
    CHECK(rc == 0 && h_stop(h, 10000) == 0, "three jobs of a batch stored, broker stopped");
    damage_index(h, "jobs_by_batch");
    int st = start_exits(h, NULL, 30000);
    CHECK(st == 1 && h_file_has(h->log, "quick_check") && h_file_has(h->log, "damaged") &&
              h_file_has(h->log, "--skip-check"),
          "a damaged index is found at start (status %d): the broker names it and serves"
          " nothing",
          st);
    CHECK(starts_serving(h, skip) && h_file_has(h->log, "not checked (--skip-check)"),
          "--skip-check starts without the check");
}

static void test_database_file(void)
{
    harness df;
    h_init(&df, "test-broker-db", 240);
    test_empty_files(&df);
    test_damaged_index(&df);
    h_done(&df, check_state.failed > 0);
}

int main(void)
{
    h_init(&H, "test-broker", 240);
    test_database_file();
    test_durability();
    test_backpressure();
    h_start(&H, NULL);
    void *c = h_peer(&H, H.clients);
    test_keys_in_one_submit(c);
    test_key_of_another_batch(c);
    test_cancel_queued(c);
    test_bad_inputs(c);
    h_close(c);
    int st = h_stop(&H, 10000);
    CHECK(st == 0, "the broker stops cleanly after all that");
    h_done(&H, check_state.failed > 0);
    return check_done();
}
