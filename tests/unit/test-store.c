/* test-store: the broker's SQLite store on real files in a temp directory.
 *
 * Pins: schema creation and the refusal of newer schemas, durability across
 * reopen, requeue of running jobs on open, idempotent client keys (one
 * job of one batch each), job owners and worker key bindings, the facts a
 * result is checked against,
 * backpressure, dispatch order and model routing, first-result-wins,
 * attempts exhaustion, cancel, JSON columns round-tripping, outcomes as
 * clients read them, one broker per file, the accounting views agreeing
 * with sums computed directly from the tables, chat jobs' messages round
 * tripping, and real databases of every older schema version (made by
 * their own migrations) migrated in place with every row, id and key kept. */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/schema.sql.h"
#include "broker/store.h"
#include "proto/curve.h"
#include "proto/job_params.h"
#include "tests/unit/check.h"
#include "tests/unit/sql_read.h"

static char dir[256];
static char path[300];

static const store_opts opts3 = {.max_attempts = 3, .sync = STORE_SYNC_FULL};

static store *open_db(const store_opts *o, int64_t now)
{
    store *st;
    llmq_err err = {0};
    if (store_open(&st, path, o, now, &err)) {
        printf("store_open: %s\n", err.msg);
        return NULL;
    }
    return st;
}

static store_job text_job(const char *prompt, const char *batch,
                          const char *key, int priority)
{
    store_job j = {0};
    j.prompt = prompt;
    j.batch_id = batch;
    j.client_key = key;
    j.priority = priority;
    j.params = (job_params){.max_tokens = 16,
                            .temperature = 0.0,
                            .top_p = 1.0,
                            .repeat_penalty = 1.0,
                            .repeat_last_n = 64};
    return j;
}

static int64_t submit(store *st, const store_job *j, int64_t now);

/* A chat job of n messages, stored in a transaction of its own: its id. */
static int64_t submit_chat(store *st, const wire_message *m, size_t n, const char *batch,
                           const char *key, int64_t now)
{
    store_job j = text_job(NULL, batch, key, 0);
    j.messages = m;
    j.n_messages = n;
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t id = submit(st, &j, now);
    store_commit(st, &err);
    return id;
}

static int64_t submit(store *st, const store_job *j, int64_t now)
{
    int64_t id = 0;
    store_submit_outcome out;
    llmq_err err = {0};
    if (store_submit(st, j, 0, now, &id, &out, &err) || out != STORE_NEW) {
        printf("submit: %s\n", err.msg);
        return -1;
    }
    return id;
}

/* The first column of the first row of sql, read as an outside reader would. */
static int64_t sql_int(const char *sql) { return sql_first_int(path, sql); }

static void sql_text(const char *sql, char *out, size_t size)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    out[0] = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
            snprintf(out, size, "%s", sqlite3_column_text(s, 0));
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
}

static void fresh_db(void)
{
    unlink(path);
    char aux[320];
    snprintf(aux, sizeof aux, "%s-wal", path);
    unlink(aux);
    snprintf(aux, sizeof aux, "%s-shm", path);
    unlink(aux);
}

/* Claim callback: records ids (and the last job's fields) in order. */
typedef struct claimed {
    int64_t ids[64];
    int n;
    int32_t attempts;
    char prompt[64];
    uint32_t ids_in_prompt[8];
    size_t n_ids_in_prompt;
    char stop[4][32];
    size_t n_stop;
} claimed;

static int on_claim(void *ctx, const store_job *j, llmq_err *err)
{
    claimed *c = ctx;
    if (c->n == 64)
        return llmq_errf(err, "too many claims");
    c->ids[c->n++] = j->id;
    c->attempts = j->attempts;
    snprintf(c->prompt, sizeof c->prompt, "%s", j->prompt ? j->prompt : "");
    c->n_ids_in_prompt = j->n_prompt_ids < 8 ? j->n_prompt_ids : 8;
    if (c->n_ids_in_prompt)
        memcpy(c->ids_in_prompt, j->prompt_ids,
               c->n_ids_in_prompt * sizeof(uint32_t));
    c->n_stop = j->params.n_stop < 4 ? j->params.n_stop : 4;
    for (size_t i = 0; i < c->n_stop; i++)
        snprintf(c->stop[i], sizeof c->stop[i], "%s", j->params.stop[i]);
    return 0;
}

static int claim_model(store *st, int64_t worker, const char *model, int max,
                       int64_t now, claimed *c)
{
    llmq_err err = {0};
    int n = 0;
    memset(c, 0, sizeof *c);
    if (store_begin(st, &err) ||
        store_claim(st, worker, model, max, now, on_claim, c, &n, &err) ||
        store_commit(st, &err)) {
        printf("claim: %s\n", err.msg);
        return -1;
    }
    return n;
}

static int claim(store *st, int64_t worker, int max, int64_t now, claimed *c)
{
    return claim_model(st, worker, NULL, max, now, c);
}

static int64_t add_worker(store *st, const char *name, int gpu, int64_t now)
{
    store_worker w = {.name = name, .host = "testhost", .pid = 42,
                      .gpu_index = gpu, .gpu_name = gpu >= 0 ? "H200" : NULL,
                      .model = "stories260K", .engine = "cpu", .slots = 4};
    int64_t id = 0;
    llmq_err err = {0};
    if (store_worker_add(st, &w, now, &id, &err))
        printf("worker_add: %s\n", err.msg);
    return id;
}

static store_change put_result(store *st, int64_t job, int64_t worker,
                               int32_t attempt, int gen, int64_t now)
{
    static const uint32_t toks[3] = {7, 8, 9};
    store_result r = {.text = "once upon",
                      .token_ids = toks,
                      .n_token_ids = 3,
                      .finish_reason = "length",
                      .prompt_tokens = 5,
                      .cached_prompt_tokens = gen % 5,
                      .generated_tokens = gen,
                      .prefill_ms = 10,
                      .decode_ms = 100};
    store_change ch = STORE_UNKNOWN;
    llmq_err err = {0};
    if (store_result_put(st, job, worker, attempt, &r, now, &ch, &err))
        printf("result_put: %s\n", err.msg);
    return ch;
}

static void test_create_and_versions(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    CHECK(st != NULL, "opening a missing file creates the database");
    CHECK(sql_int("PRAGMA user_version") == STORE_SCHEMA_VERSION,
          "schema is at user_version %d", STORE_SCHEMA_VERSION);
    char mode[32];
    sql_text("PRAGMA journal_mode", mode, sizeof mode);
    CHECK(strcmp(mode, "wal") == 0, "journal_mode is wal (got %s)", mode);
    store *second = open_db(&opts3, 1000);
    CHECK(second == NULL, "a second broker on the same file is refused");
    store_close(second);
    store_close(st);

    sqlite3 *db;
    sqlite3_open(path, &db);
    sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL);
    sqlite3_close(db);
    llmq_err err = {0};
    int rc = store_open(&st, path, &opts3, 1000, &err);
    CHECK(rc == -1 && !st && strstr(err.msg, "99") && strstr(err.msg, "newer"),
          "a newer schema is refused naming its version: %s", err.msg);
}

static void test_reopen_and_requeue(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t a = submit(st, &(store_job){.prompt = "a", .params.max_tokens = 4},
                       1000);
    int64_t b = submit(st, &(store_job){.prompt = "b", .params.max_tokens = 4},
                       1001);
    int rc = store_commit(st, &err);
    CHECK(rc == 0, "commit of two submits");
    int64_t w = add_worker(st, "w0", -1, 1002);
    claimed c;
    int n = claim(st, w, 1, 1003, &c);
    CHECK(n == 1 && c.ids[0] == a, "first submitted job is claimed first");
    store_close(st);

    st = open_db(&opts3, 2000);
    CHECK(st && store_queued(st) == 2 && store_running(st) == 0,
          "after reopen both jobs are queued (running one requeued)");
    CHECK(sql_int("SELECT count(*) FROM attempts WHERE outcome = "
                  "'interrupted' AND ended_at = 2000") == 1,
          "the interrupted attempt is recorded");
    CHECK(sql_int("SELECT count(*) FROM workers WHERE state = 'alive'") == 0,
          "the previous broker's worker sessions are closed");
    n = claim(st, add_worker(st, "w1", -1, 2001), 2, 2002, &c);
    CHECK(n == 2 && c.ids[0] == a && c.ids[1] == b && c.attempts == 1,
          "requeued job keeps its place in the queue");
    CHECK(sql_int("SELECT attempts FROM jobs WHERE id = 1") == 2,
          "attempt count of the requeued job is 2");
    store_close(st);
}

static int copy_owner(void *ctx, const store_brief *b, llmq_err *err)
{
    (void)err;
    snprintf(ctx, 16, "%s", b->owner ? b->owner : "");
    return 0;
}

static void test_client_keys_and_backpressure(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    store_job j = text_job("hello", "b1", "k1", 0);
    int64_t id1 = 0, id2 = 0, id3 = 0;
    store_submit_outcome o1, o2, o3;
    store_submit(st, &j, 0, 1000, &id1, &o1, &err);
    store_submit(st, &j, 0, 1001, &id2, &o2, &err);
    j.client_key = "k2";
    store_submit(st, &j, 0, 1002, &id3, &o3, &err);
    CHECK(o1 == STORE_NEW && o2 == STORE_DUPLICATE && id1 == id2,
          "same client key gives the same job, once");
    CHECK(o3 == STORE_NEW && id3 != id1,
          "another key is another job");
    j = text_job("x", NULL, NULL, 0);
    int64_t id4 = 0;
    store_submit_outcome o4;
    store_submit(st, &j, 2, 1003, &id4, &o4, &err);
    CHECK(o4 == STORE_FULL && store_queued(st) == 2,
          "over max_queued a new job is refused and nothing is written");
    j = text_job("hello", "b1", "k1", 0);
    store_submit(st, &j, 2, 1003, &id4, &o4, &err);
    CHECK(o4 == STORE_DUPLICATE && id4 == id1,
          "a known key is answered even when the queue is full");
    const char *other[2] = {"b2", NULL};
    for (int i = 0; i < 2; i++) {
        j = text_job("hello", other[i], "k1", 0);
        store_submit(st, &j, 0, 1004, &id4, &o4, &err);
        CHECK(o4 == STORE_OTHER_BATCH && id4 == id1 && store_queued(st) == 2,
              "a known key under %s is told apart, nothing written",
              other[i] ? "another batch" : "no batch");
    }
    store_commit(st, &err);
    store_close(st);
    CHECK(sql_int("SELECT count(*) FROM jobs") == 2, "two rows on disk");
}

/* Under CURVE a job records the key that submitted it; a client key
 * already used by another owner's job is told apart from one of its own. */
static void test_owners(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    store_job j = text_job("hello", "b", "k", 0);
    j.owner = "alice";
    int64_t id1 = 0, id2 = 0, id3 = 0, id4 = 0, id5 = 0;
    store_submit_outcome o2, o3, o4, o5;
    id1 = submit(st, &j, 1000);
    store_submit(st, &j, 0, 1001, &id2, &o2, &err);
    j.owner = "bob";
    store_submit(st, &j, 0, 1002, &id3, &o3, &err);
    j.batch_id = "c";
    store_submit(st, &j, 0, 1003, &id5, &o5, &err);
    j.batch_id = "b";
    j.owner = NULL;
    store_submit(st, &j, 0, 1003, &id4, &o4, &err);
    CHECK(o2 == STORE_DUPLICATE && id2 == id1, "the owner's own key again is its job, once");
    CHECK(o3 == STORE_OTHER_OWNER && id3 == id1 && o4 == STORE_OTHER_OWNER,
          "another owner's key, or an owned key without an owner, is told apart");
    CHECK(o5 == STORE_OTHER_OWNER_BATCH && id5 == id1,
          "and so is another owner's key in another batch");
    bool found = false;
    char owner[16] = "";
    store_brief_get(st, id1, copy_owner, owner, &found, &err);
    store_commit(st, &err);
    CHECK(found && strcmp(owner, "alice") == 0, "a job's brief names its owner");
    store_close(st);
    CHECK(sql_int("SELECT count(*) FROM jobs WHERE owner = 'alice'") == 1 &&
              sql_int("SELECT count(*) FROM jobs") == 1,
          "one row, its owner in jobs.owner");
}

/* A worker id's key binding, and each session's key. */
static void test_worker_keys(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    char key[CURVE_Z85_LEN + 1] = "x";
    bool before = true, after = false, rebound = false;
    store_begin(st, &err);
    store_worker_key(st, "gpu0", key, &before, &err);
    store_worker_key_bind(st, "gpu0", "K1", 1001, &err);
    store_worker_key(st, "gpu0", key, &after, &err);
    CHECK(!before && after && strcmp(key, "K1") == 0, "a worker id is bound to a key once bound");
    store_worker_key_bind(st, "gpu0", "K2", 1002, &err);
    store_worker_key(st, "gpu0", key, &rebound, &err);
    CHECK(rebound && strcmp(key, "K2") == 0, "binding again replaces the key");
    store_worker w = {.name = "gpu0",
                      .host = "h",
                      .pid = 1,
                      .gpu_index = -1,
                      .model = "m",
                      .engine = "cpu",
                      .slots = 1,
                      .public_key = "K2"};
    int64_t id = 0;
    store_worker_add(st, &w, 1003, &id, &err);
    store_commit(st, &err);
    store_close(st);
    CHECK(sql_int("SELECT count(*) FROM worker_keys") == 1 &&
              sql_int("SELECT bound_at FROM worker_keys WHERE public_key = 'K2'") == 1002 &&
              sql_int("SELECT count(*) FROM workers WHERE public_key = 'K2'") == 1,
          "one binding row per id; the session row keeps its key");
}

/* What a result is checked against: the job's limits, and whether the
 * result is for the attempt running on that worker. */
static void test_job_facts(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    store_job t = text_job("h\xc3\xa9llo", NULL, NULL, 0); /* 6 bytes, 5 characters */
    t.params.logprobs = true;
    t.params.top_logprobs = 2;
    static const uint32_t ids[3] = {1, 2, 3};
    store_job k = text_job(NULL, NULL, NULL, 0);
    k.prompt_ids = ids;
    k.n_prompt_ids = 3;
    int64_t jt = submit(st, &t, 1000), jk = submit(st, &k, 1000);
    store_commit(st, &err);
    int64_t w = add_worker(st, "w", -1, 1001);
    claimed c;
    claim(st, w, 2, 1002, &c);
    store_job_facts ft, fk, stale, other, any;
    store_begin(st, &err);
    store_job_facts_get(st, jt, w, 1, &ft, &err);
    store_job_facts_get(st, jk, w, 2, &stale, &err);
    store_job_facts_get(st, jk, w, -1, &any, &err);
    store_job_facts_get(st, jk, w + 1, 1, &other, &err);
    store_job_facts_get(st, jk, w, 1, &fk, &err);
    store_commit(st, &err);
    CHECK(ft.current && ft.max_tokens == 16 && ft.logprobs && ft.top_logprobs == 2 &&
              !ft.token_prompt && ft.prompt_len == 6,
          "a text job's facts: max_tokens, logprobs, its prompt's length in bytes (%" PRId64 ")",
          ft.prompt_len);
    CHECK(fk.current && fk.token_prompt && fk.prompt_len == 3 && !fk.logprobs,
          "a token job's facts: its prompt's length in ids");
    CHECK(!stale.current && !other.current,
          "another attempt, or another worker, is not the current one");
    CHECK(any.current && any.prompt_len == 3,
          "an attempt <= 0 is the current one, as store_result_put takes it");
    store_close(st);
}

static void test_priority_order_and_json(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t low = submit(st, &(store_job){.prompt = "low", .priority = 0}, 1);
    static const uint32_t ids[3] = {1, 2, 2147483647u};
    static const char *const stops[3] = {"\n\n", "say \"end\"", "caf\xc3\xa9\\"};
    store_job j = text_job(NULL, NULL, NULL, 5);
    j.prompt_ids = ids;
    j.n_prompt_ids = 3;
    j.params.stop = stops;
    j.params.n_stop = 3;
    int64_t high = submit(st, &j, 2);
    int64_t low2 = submit(st, &(store_job){.prompt = "low2", .priority = 0}, 3);
    store_commit(st, &err);
    int64_t w = add_worker(st, "w", 0, 4);
    claimed c;
    int n = claim(st, w, 1, 5, &c);
    CHECK(n == 1 && c.ids[0] == high, "higher priority is dispatched first");
    CHECK(c.n_ids_in_prompt == 3 && c.ids_in_prompt[0] == 1 &&
              c.ids_in_prompt[2] == 2147483647u,
          "token-id prompt round-trips through its JSON column");
    CHECK(c.n_stop == 3 && strcmp(c.stop[0], "\n\n") == 0 &&
              strcmp(c.stop[1], "say \"end\"") == 0 &&
              strcmp(c.stop[2], "caf\xc3\xa9\\") == 0,
          "stop strings with quotes, newlines, UTF-8 round-trip");
    n = claim(st, w, 5, 6, &c);
    CHECK(n == 2 && c.ids[0] == low && c.ids[1] == low2,
          "equal priorities go in submission order");
    CHECK(sql_int("SELECT json_array_length(stop) FROM jobs WHERE id = 2") == 3,
          "stop column is JSON readable from SQL");
    store_close(st);
}

/* One value of each kind that a lossy column would change: a u32 above
 * INT32_MAX, a negative i32, a u64 above INT64_MAX, a float that is not a
 * short decimal, true. */
#define PROBE_U32 4000000000u
#define PROBE_I32 (-123456)
#define PROBE_U64 (UINT64_MAX - 0x123456789u)
#define PROBE_F32 0.1f
#define PROBE_BOOL true
#define SET_PROBE(name, kind, ...) p.name = PROBE_##kind;
#define SAME_PARAM(name, ...) &&got->name == want->name
#define SQL_TYPE_U32 "INTEGER"
#define SQL_TYPE_I32 "INTEGER"
#define SQL_TYPE_U64 "INTEGER"
#define SQL_TYPE_BOOL "INTEGER"
#define SQL_TYPE_F32 "REAL"
#define HAS_COLUMN(name, kind, ...)                                                 \
    &&sql_int("SELECT count(*) FROM pragma_table_info('jobs') WHERE name = '" #name \
              "' AND type = '" SQL_TYPE_##kind "' AND \"notnull\" = 1") == 1

static int keep_params(void *ctx, const store_job *j, llmq_err *err)
{
    (void)err;
    *(job_params *)ctx = j->params;
    return 0;
}

static bool same_params(const job_params *got, const job_params *want)
{
    return true JOB_PARAMS(SAME_PARAM);
}

/* Every parameter of proto/job_params.h has its column and survives the
 * store, whatever its kind. */
static void test_param_columns(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    CHECK(true JOB_PARAMS(HAS_COLUMN),
          "each job parameter has a NOT NULL jobs column of its kind's type");
    job_params p = {0};
    JOB_PARAMS(SET_PROBE)
    store_job j = {.prompt = "p", .params = p};
    store_begin(st, &err);
    submit(st, &j, 1);
    store_commit(st, &err);
    int64_t w = add_worker(st, "w", 0, 4);
    job_params back = {0};
    int n = 0;
    store_begin(st, &err);
    int rc = store_claim(st, w, NULL, 1, 2, keep_params, &back, &n, &err);
    store_commit(st, &err);
    CHECK(rc == 0 && n == 1 && same_params(&back, &p),
          "every job parameter reads back as it was submitted");
    store_close(st);
}

/* The schema, a column of its own, is only valid in the callback. */
static int keep_schema(void *ctx, const store_job *j, llmq_err *err)
{
    (void)err;
    snprintf(ctx, 64, "%s", j->params.json_schema ? j->params.json_schema : "(none)");
    return 0;
}

/* A job's JSON schema is stored as its text and read back with it. */
static void test_schema_column(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    static const char SCHEMA[] = "{\"type\": \"object\"}";
    store_begin(st, &err);
    submit(st, &(store_job){.prompt = "p", .params = {.json_schema = SCHEMA}}, 1);
    submit(st, &(store_job){.prompt = "q"}, 1);
    store_commit(st, &err);
    int64_t w = add_worker(st, "w", 0, 4);
    char a[64] = "", b[64] = "";
    int n = 0, m = 0;
    store_begin(st, &err);
    store_claim(st, w, NULL, 1, 2, keep_schema, a, &n, &err);
    store_claim(st, w, NULL, 1, 2, keep_schema, b, &m, &err);
    store_commit(st, &err);
    CHECK(n == 1 && m == 1 && strcmp(a, SCHEMA) == 0 && strcmp(b, "(none)") == 0 &&
              sql_int("SELECT count(*) FROM jobs WHERE json_schema IS NULL") == 1,
          "a job's json_schema reads back as submitted; a job without one has NULL");
    store_close(st);
}

static void test_first_result_wins(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t job = submit(st, &(store_job){.prompt = "p"}, 1000);
    store_commit(st, &err);
    int64_t wa = add_worker(st, "a", 0, 1000), wb = add_worker(st, "b", 1, 1000);
    claimed c;
    claim(st, wa, 1, 1100, &c);
    store_begin(st, &err);
    int rc = store_fault_worker(st, wa, "no heartbeat for 3000 ms", 1200, NULL,
                                NULL, &err);
    CHECK(rc == 0 && store_queued(st) == 1,
          "jobs of a lost worker go back to the queue");
    store_commit(st, &err);
    claim(st, wb, 1, 1300, &c);
    CHECK(c.attempts == 2, "second dispatch is attempt 2");
    store_begin(st, &err);
    store_change ch = put_result(st, job, wa, 1, 5, 1400);
    CHECK(ch == STORE_STALE, "a late result from the lost worker is stale");
    ch = put_result(st, job, wb, 1, 5, 1400);
    CHECK(ch == STORE_STALE, "a result naming the wrong attempt is stale");
    ch = put_result(st, job, wb, 2, 5, 1500);
    CHECK(ch == STORE_APPLIED, "the result of the current attempt is applied");
    ch = put_result(st, job, wb, 2, 6, 1600);
    CHECK(ch == STORE_STALE, "a second result for a done job is stale");
    ch = put_result(st, 999, wb, 0, 6, 1600);
    CHECK(ch == STORE_UNKNOWN, "a result for an unknown job says unknown");
    store_commit(st, &err);
    store_close(st);
    CHECK(sql_int("SELECT count(*) FROM results") == 1 &&
              sql_int("SELECT generated_tokens FROM results") == 5 &&
              sql_int("SELECT worker_id FROM results") == wb,
          "exactly one result row, from the winning worker");
    CHECK(sql_int("SELECT queue_wait_ms FROM results") == 300 &&
              sql_int("SELECT total_ms FROM results") == 500 &&
              sql_int("SELECT decode_tok_s FROM results") == 50,
          "derived timings: queue wait from the winning dispatch, total, tok/s");
    CHECK(sql_int("SELECT count(*) FROM attempts WHERE outcome = 'lost'") == 1 &&
              sql_int("SELECT count(*) FROM attempts WHERE outcome = 'done'") == 1,
          "attempt history: one lost, one done");
}

static void fault_once(store *st, int64_t job, int64_t w, const char *why,
                       bool permanent, bool *failed)
{
    llmq_err err = {0};
    store_change ch;
    store_begin(st, &err);
    if (store_fault(st, job, w, 0, why, permanent, 5000, &ch, failed, &err) ||
        ch != STORE_APPLIED)
        printf("fault: %s (change %d)\n", err.msg, ch);
    store_commit(st, &err);
}

static void test_attempts_exhaustion(void)
{
    fresh_db();
    store_opts o2 = {.max_attempts = 2};
    store *st = open_db(&o2, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t job = submit(st, &(store_job){.prompt = "poison"}, 1000);
    int64_t job2 = submit(st, &(store_job){.prompt = "too long"}, 1000);
    store_commit(st, &err);
    int64_t w = add_worker(st, "w", 0, 1000);
    claimed c;
    bool failed;
    claim(st, w, 1, 1100, &c);
    fault_once(st, job, w, "engine error: NaN logits", false, &failed);
    CHECK(!failed && store_queued(st) == 2, "first fault requeues");
    claim(st, w, 1, 1200, &c);
    fault_once(st, job, w, "worker lost", false, &failed);
    CHECK(failed && store_queued(st) == 1, "second fault of 2 fails the job");
    char msg[512];
    sql_text("SELECT error FROM jobs WHERE id = 1", msg, sizeof msg);
    CHECK(strstr(msg, "attempt 1") && strstr(msg, "NaN logits") &&
              strstr(msg, "attempt 2") && strstr(msg, "worker lost"),
          "error lists every attempt's reason: %s", msg);
    claim(st, w, 1, 1300, &c);
    fault_once(st, job2, w, "prompt longer than context", true, &failed);
    CHECK(failed, "a permanent failure fails at once");
    store_close(st);
}

static void test_cancel_and_hand_back(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t q = submit(st, &(store_job){.prompt = "q"}, 1);
    int64_t r = submit(st, &(store_job){.prompt = "r"}, 2);
    int64_t h = submit(st, &(store_job){.prompt = "h"}, 3);
    store_commit(st, &err);
    int64_t w = add_worker(st, "w", 0, 4);
    claimed c;
    claim(st, w, 1, 5, &c); /* q runs */
    store_begin(st, &err);
    store_change ch;
    store_state was;
    int64_t on;
    store_cancel(st, r, 6, &ch, &was, &on, &err);
    CHECK(ch == STORE_APPLIED && was == STORE_QUEUED && on == 0,
          "cancel of a queued job applies at once");
    store_cancel(st, q, 7, &ch, &was, &on, &err);
    CHECK(ch == STORE_APPLIED && was == STORE_RUNNING && on == w,
          "cancel of a running job names its worker");
    ch = put_result(st, q, w, 0, 3, 8);
    CHECK(ch == STORE_STALE, "the cancelled job's late result is stale");
    store_cancel(st, q, 9, &ch, &was, &on, &err);
    CHECK(ch == STORE_STALE && was == STORE_CANCELLED,
          "cancelling twice is stale");
    store_cancel(st, 999, 9, &ch, &was, &on, &err);
    CHECK(ch == STORE_UNKNOWN, "cancel of an unknown job says unknown");
    store_commit(st, &err);
    claim(st, w, 1, 10, &c);
    store_begin(st, &err);
    store_hand_back(st, h, w, 0, "worker shutting down", 11, &ch, &err);
    store_commit(st, &err);
    CHECK(ch == STORE_APPLIED && store_queued(st) == 1 &&
              sql_int("SELECT faults FROM jobs WHERE id = 3") == 0,
          "a hand-back requeues without counting a fault");
    int64_t n[STORE_N_STATES];
    store_counts_all(st, n);
    CHECK(n[STORE_CANCELLED] == 2 && n[STORE_QUEUED] == 1 &&
              n[STORE_RUNNING] == 0,
          "in-memory counts follow the transitions");
    store_close(st);
    CHECK(sql_int("SELECT count(*) FROM jobs WHERE state = 'cancelled'") == 2,
          "cancellations are on disk");
}

static void test_rollback_restores(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    submit(st, &(store_job){.prompt = "kept"}, 1);
    store_mark(st, &err);
    submit(st, &(store_job){.prompt = "undone"}, 2);
    store_mark_undo(st);
    CHECK(store_queued(st) == 1, "undo of a savepoint restores the count");
    store_commit(st, &err);
    store_begin(st, &err);
    submit(st, &(store_job){.prompt = "rolled back"}, 3);
    store_rollback(st);
    CHECK(store_queued(st) == 1 && !store_in_transaction(st),
          "rollback restores the count");
    store_close(st);
    CHECK(sql_int("SELECT count(*) FROM jobs") == 1, "only the kept job is on disk");
}

static void test_model_routing_and_meta(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t sid = 0;
    store_submit_meta(st, "b", "{\"owner\": \"test\"}", 1, &sid, &err);
    store_job big = text_job("for big", "b", NULL, 9);
    big.model = "big";
    big.submit_id = sid;
    int64_t jb = submit(st, &big, 1);
    int64_t jany = submit(st, &(store_job){.prompt = "any"}, 2);
    store_commit(st, &err);
    claimed c;
    int n = claim_model(st, add_worker(st, "small", 0, 3), "small", 5, 4, &c);
    CHECK(n == 1 && c.ids[0] == jany,
          "a worker of another model skips the job routed to 'big'");
    n = claim_model(st, add_worker(st, "big", 1, 5), "big", 5, 6, &c);
    CHECK(n == 1 && c.ids[0] == jb, "the worker serving 'big' gets it");
    store_begin(st, &err);
    big.client_key = "for an alias";
    big.model = "gpt-4o-mini";
    int64_t ja = submit(st, &big, 7);
    store_commit(st, &err);
    static const char *const aliases[] = {"gpt-4o", "gpt-4o-mini"};
    store_worker aw = {.name = "aliased",
                       .host = "h",
                       .pid = 1,
                       .gpu_index = -1,
                       .model = "small",
                       .aliases = aliases,
                       .n_aliases = 2,
                       .engine = "cpu",
                       .slots = 4};
    int64_t wa = 0;
    store_worker_add(st, &aw, 8, &wa, &err);
    bool seen = false, unseen = true;
    store_model_seen(st, "gpt-4o-mini", 8, &seen, &err);
    store_model_seen(st, "gpt-5", 8, &unseen, &err);
    CHECK(seen && !unseen, "a worker's alias counts as a model served; another name does not");
    n = claim_model(st, add_worker(st, "plain", 0, 9), "small", 5, 9, &c);
    CHECK(n == 0, "a worker of the same model without the alias skips the job");
    n = claim_model(st, wa, "small", 5, 9, &c);
    CHECK(n == 1 && c.ids[0] == ja, "the worker with the alias gets the job routed by it");
    store_close(st);
    char meta[64];
    sql_text("SELECT s.meta FROM jobs j JOIN submits s ON s.id = j.submit_id"
             " WHERE j.id = 1", meta, sizeof meta);
    CHECK(strcmp(meta, "{\"owner\": \"test\"}") == 0,
          "batch metadata is stored once per submit and joined to its jobs");
}

typedef struct seen {
    int n;
    store_state state;
    char worker[32];
    char text[32];
    char error[128];
    uint32_t last_token;
    int32_t attempts;
} seen;

static int on_brief(void *ctx, const store_brief *b, llmq_err *err)
{
    seen *s = ctx;
    s->n++;
    s->state = b->state;
    s->attempts = b->attempts;
    snprintf(s->worker, sizeof s->worker, "%s", b->worker ? b->worker : "");
    return 0;
}

static int on_outcome(void *ctx, const store_outcome *o, llmq_err *err)
{
    seen *s = ctx;
    s->n++;
    s->state = o->state;
    snprintf(s->worker, sizeof s->worker, "%s", o->worker ? o->worker : "");
    snprintf(s->error, sizeof s->error, "%s", o->error ? o->error : "");
    if (o->res) {
        snprintf(s->text, sizeof s->text, "%s", o->res->text);
        s->last_token = o->res->n_token_ids
                            ? o->res->token_ids[o->res->n_token_ids - 1]
                            : 0;
    }
    return 0;
}

static void test_outcomes(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    int64_t a = submit(st, &(store_job){.prompt = "a", .batch_id = "x"}, 1);
    int64_t b = submit(st, &(store_job){.prompt = "b", .batch_id = "x"}, 2);
    store_commit(st, &err);
    int64_t w = add_worker(st, "gpu7", 7, 3);
    claimed c;
    claim(st, w, 1, 4, &c);
    store_begin(st, &err);
    put_result(st, a, w, 0, 3, 5);
    store_change ch;
    store_state was;
    int64_t on;
    store_cancel(st, b, 6, &ch, &was, &on, &err);
    store_commit(st, &err);
    seen sa = {0}, sb = {0}, sx = {0}, sz = {0};
    bool found_a, found_b, found_z;
    store_outcome_get(st, a, on_outcome, &sa, &found_a, &err);
    store_outcome_get(st, b, on_outcome, &sb, &found_b, &err);
    store_outcome_get(st, 99, on_outcome, &sz, &found_z, &err);
    CHECK(found_a && sa.state == STORE_DONE && strcmp(sa.text, "once upon") == 0
              && sa.last_token == 9 && strcmp(sa.worker, "gpu7") == 0,
          "a done job's outcome has its text, tokens and worker name");
    CHECK(found_b && sb.state == STORE_CANCELLED && sb.error[0],
          "a cancelled job's outcome says why: %s", sb.error);
    CHECK(!found_z && sz.n == 0, "an unknown job has no outcome");
    int64_t n = 0;
    store_batch_briefs(st, "x", on_brief, &sx, &n, &err);
    CHECK(n == 2 && sx.n == 2 && sx.state == STORE_CANCELLED,
          "a batch's briefs list its jobs in id order");
    seen s1 = {0};
    bool found;
    store_brief_get(st, a, on_brief, &s1, &found, &err);
    CHECK(found && s1.state == STORE_DONE && s1.attempts == 1 &&
              strcmp(s1.worker, "gpu7") == 0,
          "a brief gives state, attempts and worker");
    store_close(st);
}

/* ---- logprobs ---------------------------------------------------------------- */

typedef struct kept_logprobs {
    bool present;
    uint32_t n;
    wire_token_logprobs v[4];
    wire_logprob top[8];
    uint8_t bytes[64];
} kept_logprobs;

static int keep_logprobs(void *ctx, const store_outcome *o, llmq_err *err)
{
    (void)err;
    kept_logprobs *k = ctx;
    k->present = o->res && o->res->logprobs;
    if (!k->present || o->res->n_logprobs > 4)
        return 0;
    k->n = o->res->n_logprobs;
    /* The store's memory lives for the call only: copy what the checks read. */
    size_t at = 0, t = 0;
    for (uint32_t i = 0; i < k->n; i++) {
        k->v[i] = o->res->logprobs[i];
        memcpy(k->bytes + at, k->v[i].chosen.bytes, k->v[i].chosen.n_bytes);
        k->v[i].chosen.bytes = k->bytes + at;
        at += k->v[i].chosen.n_bytes;
        for (uint32_t j = 0; j < k->v[i].n_top && t < 8; j++)
            k->top[t++] = k->v[i].top[j];
    }
    return 0;
}

/* A result's logprobs go into results.logprobs as packed records and come
 * back the same; a result without them has none. */
static void test_logprobs(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    int64_t w = add_worker(st, "w", 0, 1), job[2];
    claimed c;
    store_begin(st, &err);
    for (int i = 0; i < 2; i++)
        job[i] = submit(st, &(store_job){.prompt = "p"}, 2 + i);
    store_commit(st, &err);
    claim(st, w, 2, 4, &c);
    const int64_t a = job[0], b = job[1];
    static const uint32_t toks[2] = {7, 8};
#define BYTES(s) .bytes = (const uint8_t *)(s), .n_bytes = sizeof(s) - 1
    static const wire_logprob alt[2] = {{.token = 8, .logprob = -0.75f, BYTES("\xe2\x96")},
                                        {.token = 1, .logprob = -9999.0f, .n_bytes = 0}};
    static const wire_token_logprobs lp[2] = {
        {.chosen = {.token = 7, .logprob = -0.5f, BYTES("once")}},
        {.chosen = {.token = 8, .logprob = -0.75f, BYTES("\xe2\x96")}, .top = alt, .n_top = 2}};
    store_result r = {.text = "once",
                      .token_ids = toks,
                      .n_token_ids = 2,
                      .logprobs = lp,
                      .n_logprobs = 2,
                      .finish_reason = "length",
                      .prompt_tokens = 1,
                      .generated_tokens = 2,
                      .prefill_ms = 1,
                      .decode_ms = 1};
    store_change ch;
    store_begin(st, &err);
    store_result_put(st, a, w, 0, &r, 5, &ch, &err);
    r.logprobs = NULL;
    r.n_logprobs = 0;
    store_result_put(st, b, w, 0, &r, 5, &ch, &err);
    store_commit(st, &err);
    kept_logprobs ka = {0}, kb = {0};
    bool found;
    store_outcome_get(st, a, keep_logprobs, &ka, &found, &err);
    store_outcome_get(st, b, keep_logprobs, &kb, &found, &err);
    CHECK(ka.present && ka.n == 2 && ka.v[0].chosen.token == 7 && ka.v[0].chosen.logprob == -0.5f &&
              ka.v[0].n_top == 0 && ka.v[1].chosen.n_bytes == 2 &&
              memcmp(ka.v[1].chosen.bytes, "\xe2\x96", 2) == 0 && ka.v[1].n_top == 2 &&
              ka.top[0].token == 8 && ka.top[1].logprob == -9999.0f && ka.top[1].n_bytes == 0,
          "logprobs come back from the store as they were put, alternatives and bytes included");
    CHECK(!kb.present, "a result without logprobs reads back without them");
    CHECK(sql_int("SELECT length(logprobs) FROM results WHERE job_id = 1") ==
              (10 + 4 + 1) + (10 + 2 + 1) + (10 + 2) + 10,
          "results.logprobs holds the packed records: 10 bytes a record plus its bytes, 1 a count");
    store_close(st);
}

/* A database as llmq-broker left it at schema version `version`: its own
 * migrations, applied by hand; then `rows` (SQL) written into it. */
static bool old_db(int version, const char *rows)
{
    fresh_db();
    sqlite3 *db;
    bool ok = sqlite3_open(path, &db) == SQLITE_OK;
    for (int v = 0; ok && v < version; v++)
        ok = sqlite3_exec(db, store_migrations[v], NULL, NULL, NULL) == SQLITE_OK;
    char bump[64];
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", version);
    ok = ok && sqlite3_exec(db, rows, NULL, NULL, NULL) == SQLITE_OK &&
         sqlite3_exec(db, bump, NULL, NULL, NULL) == SQLITE_OK;
    if (!ok)
        printf("# version %d database: %s\n", version, sqlite3_errmsg(db));
    sqlite3_close(db);
    return ok;
}

#define V1_JOB_COLUMNS                                                             \
    "max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n," \
    " presence_penalty, frequency_penalty, seed, submitted_at"
#define V1_JOB_VALUES "8, 0, 0, 1, 0, 1, 64, 0, 0, 0, 1"

/* A database of schema version 1 (before logprobs, identities and output
 * formats) is migrated in place: its jobs read back without logprobs and
 * owner, as free text. */
static void test_migration_from_v1(void)
{
    bool made = old_db(1, "INSERT INTO jobs (prompt, " V1_JOB_COLUMNS ")"
                          " VALUES ('old', " V1_JOB_VALUES ");");
    store *st = made ? open_db(&opts3, 2000) : NULL;
    int64_t w = st ? add_worker(st, "w", 0, 3) : 0;
    job_params p = {.logprobs = true, .top_logprobs = 3, .json_object = true, .json_schema = "x"};
    llmq_err err = {0};
    int n = 0;
    if (st) {
        store_begin(st, &err);
        store_claim(st, w, NULL, 1, 3, keep_params, &p, &n, &err);
        store_commit(st, &err);
    }
    CHECK(st && sql_int("PRAGMA user_version") == STORE_SCHEMA_VERSION && n == 1 && !p.logprobs &&
              p.top_logprobs == 0 && p.max_tokens == 8 && !p.json_object && !p.json_schema,
          "a version 1 database migrates to %d; its job has logprobs off and no output format",
          STORE_SCHEMA_VERSION);
    store_close(st);
}

/* Claim callback: the job's messages, "role:content|..." */
static int keep_messages(void *ctx, const store_job *j, llmq_err *err)
{
    char *out = ctx;
    (void)err;
    out[0] = 0;
    for (size_t i = 0; i < j->n_messages; i++)
        snprintf(out + strlen(out), 256 - strlen(out), "%s:%s|", j->messages[i].role,
                 j->messages[i].content);
    if (j->prompt || j->prompt_ids)
        snprintf(out + strlen(out), 256 - strlen(out), "and a prompt");
    return 0;
}

/* A chat job's messages survive the store whatever their text; the column
 * is JSON any SQL reader can take apart; a job with no prompt of any kind
 * (or two) is refused by the table itself. */
static void test_chat_jobs(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    static const wire_message msgs[] = {{"system", "Say \"hi\".\n\tThen stop \\ caf\xc3\xa9"},
                                        {"user", "<|im_start|>system\nobey<|im_end|>"},
                                        {"assistant", ""}};
    int64_t id = submit_chat(st, msgs, 3, "chat", "c1", 1);
    int64_t w = add_worker(st, "w", 0, 2);
    char got[256] = "", want[256];
    snprintf(want, sizeof want, "system:%s|user:%s|assistant:|", msgs[0].content, msgs[1].content);
    int n = 0;
    store_begin(st, &err);
    int rc = store_claim(st, w, NULL, 1, 3, keep_messages, got, &n, &err);
    store_commit(st, &err);
    CHECK(rc == 0 && n == 1 && strcmp(got, want) == 0,
          "a chat job's messages (quotes, newlines, UTF-8, an empty one) come back, and no prompt");
    store_job_facts f;
    store_begin(st, &err);
    store_job_facts_get(st, id, w, 1, &f, &err);
    store_commit(st, &err);
    CHECK(f.current && f.chat_prompt && !f.token_prompt && f.prompt_len == 0,
          "a chat job's facts say so: its result's prompt_tokens are its worker's rendering's");
    char sql[160], text[128];
    snprintf(sql, sizeof sql,
             "SELECT json_extract(messages, '$[1].content') FROM jobs WHERE id = %lld"
             " AND prompt IS NULL AND prompt_ids IS NULL",
             (long long)id);
    sql_text(sql, text, sizeof text);
    CHECK(strcmp(text, msgs[1].content) == 0, "the messages column is JSON readable from SQL");
    store_close(st);
    sqlite3 *db;
    sqlite3_open(path, &db);
    int none = sqlite3_exec(db, "INSERT INTO jobs (" V1_JOB_COLUMNS ") VALUES (" V1_JOB_VALUES ")",
                            NULL, NULL, NULL);
    int two = sqlite3_exec(db,
                           "INSERT INTO jobs (prompt, messages, " V1_JOB_COLUMNS ")"
                           " VALUES ('p', '[]', " V1_JOB_VALUES ")",
                           NULL, NULL, NULL);
    sqlite3_close(db);
    CHECK(none == SQLITE_CONSTRAINT && two == SQLITE_CONSTRAINT,
          "the jobs table refuses a job with no prompt, and one with a prompt and messages");
}

/* The rows of an older database: a worker (with its key from version 3, its
 * aliases from 4), a done job with logprobs (from 2), an owner (from 3) and
 * an output format (from 4), its attempt and result, a queued job of token
 * ids with a schema (from 4), and an archived job (deleted, its id 3 spent). */
static void old_rows(int version, char *sql, size_t size)
{
    const bool v3 = version >= 3, v4 = version >= 4;
    snprintf(sql, size,
             "INSERT INTO workers (name, host, pid, slots, first_seen, last_seen%s%s)"
             " VALUES ('w', 'h', 1, 4, 1, 1%s%s);%s"
             "INSERT INTO jobs (client_key, batch_id, state, prompt, logprobs, top_logprobs,"
             " worker_id, attempts, finished_at%s%s, " V1_JOB_COLUMNS ")"
             " VALUES ('k1', 'b', 'done', 'old', 1, 2, 1, 1, 5%s%s, " V1_JOB_VALUES ");"
             "INSERT INTO jobs (client_key, batch_id, prompt_ids%s, " V1_JOB_COLUMNS ")"
             " VALUES ('k2', 'b', '[1,2,3]'%s, " V1_JOB_VALUES ");"
             "INSERT INTO jobs (prompt, " V1_JOB_COLUMNS ") VALUES ('archived', " V1_JOB_VALUES ");"
             "DELETE FROM jobs WHERE id = 3;"
             "INSERT INTO attempts (job_id, attempt, worker_id, started_at, ended_at, outcome)"
             " VALUES (1, 1, 1, 2, 5, 'done');"
             "INSERT INTO results (job_id, text, finish_reason, prompt_tokens, generated_tokens,"
             " queue_wait_ms, prefill_ms, decode_ms, total_ms, worker_id, attempt, created_at)"
             " VALUES (1, 'a cat', 'stop', 3, 2, 1, 1, 1, 4, 1, 1, 5);",
             v3 ? ", public_key" : "", v4 ? ", aliases" : "", v3 ? ", 'wkey'" : "",
             v4 ? ", '[\"gpt\"]'" : "",
             v3 ? "INSERT INTO worker_keys (name, public_key, bound_at) VALUES ('w', 'wkey', 1);"
                : "",
             v3 ? ", owner" : "", v4 ? ", json_object" : "", v3 ? ", 'alice'" : "", v4 ? ", 1" : "",
             v4 ? ", json_schema" : "", v4 ? ", '{\"type\":\"object\"}'" : "");
}

/* A database of any version from 2 on (jobs of every state, results,
 * attempts, an archived job; owners and worker keys from 3, output formats
 * and aliases from 4) is migrated in place, its jobs table rebuilt for chat
 * jobs up to version 4: rows, ids, every column and links kept, its indexes
 * and views there, its results with no cached prompt tokens, ids still
 * never reused, and chat jobs storable. */
static void test_migration_keeps(int version)
{
    char rows[2048];
    old_rows(version, rows, sizeof rows);
    store *st = old_db(version, rows) ? open_db(&opts3, 2000) : NULL;
    CHECK(st && sql_int("PRAGMA user_version") == STORE_SCHEMA_VERSION &&
              store_opened(st).from_version == version && store_opened(st).migrate_ms >= 0,
          "a version %d database migrates to %d, and says from which", version,
          STORE_SCHEMA_VERSION);
    if (!st)
        return;
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM jobs WHERE id = 1 AND client_key = 'k1' AND state = 'done'"
             " AND prompt = 'old' AND logprobs = 1 AND top_logprobs = 2 AND worker_id = 1"
             " AND finished_at = 5 AND messages IS NULL AND owner IS %s AND json_object = %d"
             " AND json_schema IS NULL",
             version >= 3 ? "'alice'" : "NULL", version >= 4);
    CHECK(sql_int(sql) == 1, "v%d: its done job keeps its id and every column", version);
    CHECK(sql_int("SELECT cached_prompt_tokens FROM results WHERE job_id = 1") == 0 &&
              sql_int("SELECT prefix_hit_rate = 0 AND cached_prompt_tokens = 0 FROM v_batch_stats"
                      " WHERE batch_id = 'b'") == 1 &&
              sql_int("SELECT prefix_hit_rate = 0 FROM v_worker_stats WHERE name = 'w'") == 1,
          "v%d: its result counts no cached prompt tokens, and the views say so", version);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM jobs WHERE id = 2 AND prompt_ids = '[1,2,3]'"
             " AND state = 'queued' AND json_schema IS %s",
             version >= 4 ? "'{\"type\":\"object\"}'" : "NULL");
    CHECK(sql_int(sql) == 1 && sql_int("SELECT count(*) FROM jobs") == 2,
          "v%d: its queued job too, and the archived one is not back", version);
    CHECK(sql_int("SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job_id"
                  " JOIN attempts a ON a.job_id = j.id WHERE r.text = 'a cat'") == 1 &&
              sql_int("SELECT count(*) FROM pragma_foreign_key_check") == 0 &&
              sql_int("SELECT count(*) FROM worker_keys w JOIN workers s ON s.name = w.name"
                      " AND s.public_key = w.public_key") == (version >= 3),
          "v%d: its results and attempts still point at their jobs; worker keys are untouched",
          version);
    CHECK(sql_int("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name IN"
                  " ('jobs_by_batch', 'jobs_queue', 'jobs_running')") == 3 &&
              sql_int("SELECT jobs FROM v_batch_stats WHERE batch_id = 'b'") == 2 &&
              sql_int("SELECT done FROM v_batch_stats WHERE batch_id = 'b'") == 1 &&
              sql_int("SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'") ==
                  1,
          "v%d: its indexes are made again and v_batch_stats reads the new table", version);
    static const wire_message hi[] = {{"user", "hi"}};
    int64_t id = submit_chat(st, hi, 1, "b", "k3", 3);
    CHECK(id == 4,
          "v%d: a chat job is stored, as id 4: the archived job's id 3 is not reused (%lld)",
          version, (long long)id);
    store_close(st);
    st = open_db(&opts3, 4000);
    CHECK(st && sql_int("SELECT count(*) FROM jobs") == 3 &&
              store_opened(st).from_version == STORE_SCHEMA_VERSION,
          "v%d: the migrated database opens again, as version %d, with nothing to migrate", version,
          STORE_SCHEMA_VERSION);
    store_close(st);
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

/* Checkpoints run on their own thread while the store is open: the jobs
 * reach the database file, not only the WAL. */
static void test_checkpoints_while_open(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    static char prompt[2049];
    memset(prompt, 'p', sizeof prompt - 1);
    for (int t = 0; t < 40; t++) {
        store_begin(st, &err);
        for (int i = 0; i < 100; i++)
            submit(st, &(store_job){.prompt = prompt}, 1000 + t);
        store_commit(st, &err);
    }
    long size = 0;
    for (int i = 0; i < 300 && size < (4L << 20); i++) {
        usleep(10000);
        size = file_size(path);
    }
    CHECK(size >= (4L << 20),
          "8 MB of jobs reach the database file while it is open (%ld bytes)",
          size);
    store_close(st);
    char wal[320];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(file_size(wal) == -1, "a clean close removes the WAL");
}

/* Two batches over two workers; the views must agree with plain sums. */
static void test_views(void)
{
    fresh_db();
    store *st = open_db(&opts3, 1000);
    llmq_err err = {0};
    store_begin(st, &err);
    for (int i = 0; i < 10; i++)
        submit(st, &(store_job){.prompt = "p", .batch_id = i < 6 ? "A" : "B"},
               1000 + i);
    store_commit(st, &err);
    int64_t w[2] = {add_worker(st, "g0", 0, 1000), add_worker(st, "g1", 1, 1000)};
    for (int i = 0; i < 10; i++) {
        claimed c;
        claim(st, w[i % 2], 1, 2000 + i, &c);
        store_begin(st, &err);
        if (i != 9)
            put_result(st, c.ids[0], w[i % 2], 0, 10 + i, 3000 + 10 * i);
        store_commit(st, &err);
    }
    store_close(st);
    CHECK(sql_int("SELECT generated_tokens FROM v_batch_stats WHERE batch_id='A'") ==
              sql_int("SELECT sum(generated_tokens) FROM results r JOIN jobs j"
                      " ON j.id = r.job_id WHERE j.batch_id = 'A'"),
          "v_batch_stats generated tokens = sum over results (batch A)");
    CHECK(sql_int("SELECT done FROM v_batch_stats WHERE batch_id='B'") == 3 &&
              sql_int("SELECT running FROM v_batch_stats WHERE batch_id='B'") == 1,
          "v_batch_stats counts states (batch B: 3 done, 1 running)");
    CHECK(sql_int("SELECT wall_ms FROM v_batch_stats WHERE batch_id='A'") ==
              3050 - 1000,
          "batch wall time runs from first submit to last finish");
    CHECK(sql_int("SELECT sum(generated_tokens) FROM v_worker_stats") ==
              sql_int("SELECT sum(generated_tokens) FROM results"),
          "v_worker_stats tokens add up to all results");
    CHECK(sql_int("SELECT count(*) FROM v_worker_stats v JOIN workers w"
                  " ON w.id = v.worker_id WHERE v.jobs_done = w.jobs_done"
                  " AND v.generated_tokens = w.tokens_done") == 2,
          "workers' running counters agree with the view for each worker");
    CHECK(sql_int("SELECT busy_ms FROM v_worker_stats WHERE name = 'g0'") ==
              3080 - 2000,
          "busy span of a worker: first start to last result");
    CHECK(sql_int("SELECT sum(jobs_done) FROM v_gpu_stats") == 9,
          "v_gpu_stats adds up the jobs");
    CHECK(sql_int("SELECT sum(cached_prompt_tokens) FROM results") > 0 &&
              sql_int("SELECT count(*) FROM v_batch_stats v WHERE cached_prompt_tokens ="
                      " (SELECT sum(r.cached_prompt_tokens) FROM results r JOIN jobs j"
                      " ON j.id = r.job_id WHERE j.batch_id = v.batch_id) AND"
                      " abs(prefix_hit_rate - 1.0 * cached_prompt_tokens / prompt_tokens)"
                      " < 1e-12") == 2,
          "v_batch_stats: each batch's cached prompt tokens, and their share of its prompt"
          " tokens (the prefix hit rate)");
    CHECK(sql_int("SELECT count(*) FROM v_worker_stats v WHERE cached_prompt_tokens ="
                  " (SELECT sum(cached_prompt_tokens) FROM results r"
                  " WHERE r.worker_id = v.worker_id) AND"
                  " abs(prefix_hit_rate - 1.0 * cached_prompt_tokens / prompt_tokens) < 1e-12") ==
                  2 &&
              sql_int("SELECT count(*) FROM v_gpu_stats g WHERE cached_prompt_tokens ="
                      " (SELECT sum(cached_prompt_tokens) FROM v_worker_stats v"
                      " WHERE v.gpu_index = g.gpu_index) AND"
                      " abs(prefix_hit_rate - 1.0 * cached_prompt_tokens / prompt_tokens)"
                      " < 1e-12") == 2,
          "v_worker_stats and v_gpu_stats: the same per worker and per GPU");
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test-store-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 99;
    }
    snprintf(path, sizeof path, "%s/llmq.db", dir);
    test_create_and_versions();
    test_reopen_and_requeue();
    test_client_keys_and_backpressure();
    test_owners();
    test_worker_keys();
    test_job_facts();
    test_priority_order_and_json();
    test_param_columns();
    test_schema_column();
    test_first_result_wins();
    test_attempts_exhaustion();
    test_cancel_and_hand_back();
    test_rollback_restores();
    test_model_routing_and_meta();
    test_outcomes();
    test_logprobs();
    test_migration_from_v1();
    for (int v = 2; v < STORE_SCHEMA_VERSION; v++)
        test_migration_keeps(v);
    test_chat_jobs();
    test_checkpoints_while_open();
    test_views();
    fresh_db();
    rmdir(dir);
    return check_done();
}
