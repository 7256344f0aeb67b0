/* test-wire: every message type survives encode -> decode -> encode byte for
 * byte, defaults are the documented ones, and every kind of bad body is
 * refused with its typed error naming the field and, for a number out of
 * range, the number as sent; a failed or cancelled result carries no token
 * counts or timings.  A wait without heartbeats encodes without the
 * heartbeat_ms key, and a job_result without cached prompt tokens without
 * the cached_prompt_tokens key, so that brokers older than them (which
 * refuse unknown keys) read them as before; a job_result without the key
 * reads as 0 cached tokens.  A refusal names the type, job id and attempt
 * of the message when they read (given once, in range). */
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "proto/wire.h"
#include "tests/unit/check.h"

/* ---- helpers: JSON text -> msgpack, so bad bodies read as what they are ---- */

static void pack_json(msgpack_packer *pk, const json_value *v)
{
    switch (v->type) {
    case JSON_NULL: msgpack_pack_nil(pk); break;
    case JSON_BOOL: v->boolean ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case JSON_NUMBER:
        if (v->num.is_int)
            msgpack_pack_int64(pk, v->num.i);
        else
            msgpack_pack_double(pk, v->num.d);
        break;
    case JSON_STRING:
        msgpack_pack_str(pk, v->str.len);
        msgpack_pack_str_body(pk, v->str.s, v->str.len);
        break;
    case JSON_ARRAY:
        msgpack_pack_array(pk, v->arr.n);
        for (size_t i = 0; i < v->arr.n; i++)
            pack_json(pk, &v->arr.items[i]);
        break;
    case JSON_OBJECT:
        msgpack_pack_map(pk, v->obj.n);
        for (size_t i = 0; i < v->obj.n; i++) {
            msgpack_pack_str(pk, v->obj.members[i].key_len);
            msgpack_pack_str_body(pk, v->obj.members[i].key, v->obj.members[i].key_len);
            pack_json(pk, &v->obj.members[i].value);
        }
        break;
    }
}

/* Decodes the msgpack form of a JSON text; returns wire_decode's result. */
static int decode_json(const char *text, unsigned dirs, wire_msg *m, wire_error *e)
{
    json_value *v;
    llmq_err jerr;
    if (json_parse(text, strlen(text), &v, &jerr) < 0) {
        fprintf(stderr, "bad test JSON: %s: %s\n", text, jerr.msg);
        exit(2);
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_json(&pk, v);
    json_free(v);
    int rc = wire_decode(sb.data, sb.size, dirs, m, e);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* encode -> decode -> encode: equal bytes mean every field survived. */
static void check_round_trip(const wire_msg *m, unsigned dirs, wire_msg *back)
{
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    wire_error e;
    int rc = wire_encode(m, &a, &na, &e);
    CHECK(rc == 0, "%s encodes%s%s", wire_type_name(m->type), rc ? ": " : "",
          rc ? e.err.msg : "");
    rc = rc == 0 ? wire_decode(a, na, dirs, back, &e) : -1;
    CHECK(rc == 0, "%s decodes%s%s", wire_type_name(m->type), rc ? ": " : "",
          rc ? e.err.msg : "");
    if (rc == 0)
        rc = wire_encode(back, &b, &nb, &e);
    CHECK(rc == 0 && na == nb && memcmp(a, b, na) == 0,
          "%s re-encodes to the same %zu bytes", wire_type_name(m->type), na);
    CHECK(back->type == m->type && back->req == m->req, "%s keeps its type and req",
          wire_type_name(m->type));
    free(a);
    free(b);
}

/* ---- round trips ---------------------------------------------------------- */

static void test_submit(void)
{
    static const char *const stops[] = {"\n\n", "The end"};
    static const uint32_t toks[] = {1, 2, 2147483647u};
    static const wire_message chat[] = {
        {"system", "Be brief."}, {"user", "Hi <|im_start|>system \xc3\xa9"}, {"assistant", ""}};
    wire_job jobs[3] = {
        {.key = "a-1",
         .prompt = "Once upon a time, \xc3\xa9t\xc3\xa9",
         .priority = -5,
         .model = "stories260K",
         .params = job_params_default()},
        {.tokens = toks, .n_tokens = 3, .priority = 1000, .params = job_params_default()},
        {.messages = chat, .n_messages = 3, .params = job_params_default()}};
    jobs[0].params.temperature = 0.7f;
    jobs[0].params.top_p = 0.9f;
    jobs[0].params.seed = UINT64_MAX;
    jobs[0].params.stop = stops;
    jobs[0].params.n_stop = 2;
    jobs[1].params.repeat_last_n = -1;
    jobs[1].params.ignore_eos = true;
    jobs[1].params.max_tokens = WIRE_MAX_GEN_TOKENS;
    wire_msg m, back;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.req = 42;
    m.submit = (wire_submit){.batch = "b1", .meta = "{\"owner\":\"x\"}", .jobs = jobs, .n_jobs = 3};
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    const wire_job *j = back.submit.jobs;
    CHECK(back.submit.n_jobs == 3 && strcmp(j[0].prompt, jobs[0].prompt) == 0 &&
              j[0].params.n_stop == 2 && strcmp(j[0].params.stop[1], "The end") == 0 &&
              j[0].params.temperature == 0.7f && j[0].params.seed == UINT64_MAX &&
              j[1].tokens[2] == 2147483647u && j[1].prompt == NULL &&
              j[1].params.repeat_last_n == -1 && j[1].params.ignore_eos &&
              strcmp(back.submit.meta, "{\"owner\":\"x\"}") == 0,
          "submit: prompt, tokens, stop strings, seed 2^64-1 and meta come back");
    CHECK(j[2].n_messages == 3 && !j[2].prompt && !j[2].tokens && !j[0].messages &&
              strcmp(j[2].messages[1].role, "user") == 0 &&
              strcmp(j[2].messages[1].content, chat[1].content) == 0 &&
              strcmp(j[2].messages[2].content, "") == 0,
          "submit: a chat job's messages come back, roles and contents (empty ones too)");
    wire_msg_free(&back);
    wire_msg_free(&back);   /* a second free is harmless */
}

static void test_defaults(void)
{
    wire_msg m;
    wire_error e;
    int rc = decode_json("{\"v\":1,\"type\":\"submit\",\"jobs\":[{\"prompt\":\"hi\"}]}",
                         WIRE_DIR_CLIENT_TO_BROKER, &m, &e);
    CHECK(rc == 0, "a job with only a prompt decodes");
    if (rc < 0)
        return;
    const job_params *s = &m.submit.jobs[0].params;
    CHECK(m.req == 0 && s->max_tokens == 256 && s->temperature == 0.0f && s->top_k == 0 &&
              s->top_p == 1.0f && s->min_p == 0.0f && s->repeat_penalty == 1.0f &&
              s->repeat_last_n == 64 && s->presence_penalty == 0.0f &&
              s->frequency_penalty == 0.0f && s->seed == 0 && !s->ignore_eos &&
              s->n_stop == 0 && m.submit.jobs[0].priority == 0 && !m.submit.batch,
          "omitted fields take the documented defaults");
    wire_msg_free(&m);
    rc = decode_json("{\"v\":1,\"type\":\"wait\",\"batch\":\"b\"}", WIRE_DIR_CLIENT_TO_BROKER,
                     &m, &e);
    CHECK(rc == 0 && m.wait.stream && m.wait.timeout_ms == 0 && strcmp(m.wait.sel.batch, "b") == 0,
          "wait defaults: stream true, timeout 0");
    wire_msg_free(&m);
    rc = decode_json("{\"v\":1,\"type\":\"submit\",\"jobs\":[{\"prompt\":\"\",\"temperature\":1,"
                     "\"top_p\":1}]}", WIRE_DIR_CLIENT_TO_BROKER, &m, &e);
    CHECK(rc == 0 && m.submit.jobs[0].params.temperature == 1.0f &&
              m.submit.jobs[0].prompt[0] == '\0',
          "integers are accepted for float fields; an empty prompt is allowed");
    wire_msg_free(&m);
}

static void test_client_messages(void)
{
    static const uint64_t ids[] = {1, 7, UINT64_MAX};
    static const bool existing[] = {false, true, false};
    wire_msg m, back;

    wire_msg_init(&m, WIRE_T_STATUS);
    m.req = 1;
    m.select = (wire_select){.ids = ids, .n_ids = 3};
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    CHECK(back.select.n_ids == 3 && back.select.ids[2] == UINT64_MAX, "status: ids come back");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_CANCEL);
    m.select = (wire_select){.batch = "nightly"};
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_WAIT);
    m.req = UINT64_MAX;
    m.wait = (wire_wait){.sel = {.ids = ids, .n_ids = 2}, .timeout_ms = UINT32_MAX, .stream = false};
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    CHECK(!back.wait.stream && back.wait.timeout_ms == UINT32_MAX, "wait: stream false and timeout come back");
    wire_msg_free(&back);

    m.wait = (wire_wait){.sel = {.batch = "b"}, .stream = true, .heartbeat_ms = 1000};
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    CHECK(back.wait.heartbeat_ms == 1000, "wait: heartbeat_ms comes back");
    wire_msg_free(&back);
    m.wait.heartbeat_ms = 0;
    char *buf;
    size_t len;
    wire_error e;
    CHECK(wire_encode(&m, &buf, &len, &e) == 0 && !memmem(buf, len, "heartbeat_ms", 12),
          "a wait without heartbeats is sent without the heartbeat_ms key");
    free(buf);

    wire_msg_init(&m, WIRE_T_STATS);
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_SUBMIT_OK);
    m.submit_ok = (wire_submit_ok){.ids = ids, .existing = existing, .n = 3};
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.submit_ok.n == 3 && back.submit_ok.existing[1] && !back.submit_ok.existing[0],
          "submit_ok: existing flags come back");
    wire_msg_free(&back);
}

static wire_result sample_result(void)
{
    static const uint32_t out[] = {10, 20, 30};
    return (wire_result){
        .id = 9, .attempt = 2, .state = WIRE_STATE_DONE, .key = "k9", .batch = "b",
        .text = " a cat\n", .tokens = out, .n_tokens = 3, .finish = WIRE_FINISH_LENGTH,
        .prompt_tokens = 5, .gen_tokens = 3,
        .timings = {.queue_wait_ms = 0.25, .prefill_ms = 1.5, .prefill_tok_s = 3333.3,
                    .decode_ms = 2.0, .decode_tok_s = 1500.0, .total_ms = 4.0},
        .worker = "host:cpu0"};
}

static void test_broker_replies(void)
{
    static const wire_job_state js[] = {{.id = 3, .state = WIRE_STATE_RUNNING, .attempts = 1,
                                         .worker = "w1"},
                                        {.id = 4, .state = WIRE_STATE_QUEUED}};
    wire_msg m, back;
    wire_msg_init(&m, WIRE_T_STATUS_OK);
    m.jobs_reply = (wire_jobs_reply){.jobs = js, .n_jobs = 2,
                                     .counts = {.queued = 1, .running = 1, .done = UINT64_MAX}};
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.jobs_reply.jobs[0].state == WIRE_STATE_RUNNING && !back.jobs_reply.jobs[1].worker &&
              back.jobs_reply.counts.done == UINT64_MAX,
          "status_ok: job states, optional worker and counts come back");
    wire_msg_free(&back);
    m.type = WIRE_T_CANCEL_OK;
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    wire_msg_free(&back);

    wire_result results[2] = {sample_result(),
                              {.id = 10, .state = WIRE_STATE_FAILED, .error = "attempt 1: boom"}};
    wire_msg_init(&m, WIRE_T_RESULT);
    m.req = 5;
    m.result = results[0];
    m.result.model = "stories260K";
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.result.finish == WIRE_FINISH_LENGTH && back.result.timings.prefill_tok_s == 3333.3 &&
              strcmp(back.result.text, " a cat\n") == 0 &&
              strcmp(back.result.model, "stories260K") == 0,
          "result: finish, timings, text and the model that ran come back");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_WAIT_ALIVE);
    m.req = 12;
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_WAIT_END);
    m.wait_end = (wire_wait_end){.done = 2, .pending = 1, .timed_out = true, .results = results,
                                 .n_results = 2};
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.wait_end.n_results == 2 && back.wait_end.results[1].state == WIRE_STATE_FAILED &&
              strcmp(back.wait_end.results[1].error, "attempt 1: boom") == 0,
          "wait_end: embedded results come back");
    wire_msg_free(&back);

    static const wire_worker_stat ws[] = {{.worker = "h:gpu0", .host = "h", .gpu_index = 0,
                                           .gpu_name = "NVIDIA H200", .engine = "cuda",
                                           .slots = 64, .busy = 3, .jobs_done = 100,
                                           .tokens_done = 12345}};
    wire_msg_init(&m, WIRE_T_STATS_OK);
    m.stats_ok = (wire_stats_ok){.counts = {.done = 100}, .workers = ws, .n_workers = 1};
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.stats_ok.n_workers == 1 && back.stats_ok.workers[0].tokens_done == 12345,
          "stats_ok: worker rows come back");
    wire_msg_free(&back);

    wire_error e;
    wire_fail(&e, WIRE_E_QUEUE_FULL, "jobs", "queue holds %d jobs", 10);
    e.req = 77;
    wire_error_reply(&m, &e);
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.error.code == WIRE_E_QUEUE_FULL && strcmp(back.error.field, "jobs") == 0 &&
              strcmp(back.error.message, "jobs: queue holds 10 jobs") == 0 && back.req == 77,
          "error: code, field, message and req come back");
    wire_msg_free(&back);
}

static void test_worker_messages(void)
{
    wire_msg m, back;
    wire_msg_init(&m, WIRE_T_HELLO);
    m.hello = (wire_hello){.worker = "h:cpu", .host = "h", .pid = 1234, .gpu_index = -1,
                           .model = "stories260K", .model_hash = "abc", .engine = "cpu",
                           .slots = 8, .n_ctx = 512};
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.hello.gpu_index == -1 && back.hello.slots == 8 && !back.hello.gpu_name &&
              back.hello.n_aliases == 0,
          "hello: fields come back, absent optional ones stay NULL");
    wire_msg_free(&back);
    static const char *const aliases[] = {"gpt-4o-mini", "tiny"};
    m.hello.aliases = aliases;
    m.hello.n_aliases = 2;
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.hello.n_aliases == 2 && strcmp(back.hello.aliases[1], "tiny") == 0,
          "hello: a worker's aliases come back");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_WELCOME);
    m.welcome = (wire_welcome){.heartbeat_ms = WIRE_HEARTBEAT_MS, .dead_after_ms = WIRE_DEAD_AFTER_MS};
    check_round_trip(&m, WIRE_DIR_BROKER_TO_WORKER, &back);
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_CREDIT);
    m.credit = 4;
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.credit == 4, "credit: n comes back");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_JOB);
    m.job.id = 12;
    m.job.attempt = 3;
    m.job.prompt = "Hello";
    m.job.params.min_p = 0.05f;
    check_round_trip(&m, WIRE_DIR_BROKER_TO_WORKER, &back);
    CHECK(back.job.id == 12 && back.job.attempt == 3 && back.job.params.min_p == 0.05f &&
              back.job.params.max_tokens == 256,
          "job: id, attempt and sampling come back");
    wire_msg_free(&back);
    static const wire_message chat[] = {{"user", "Hello"}};
    m.job.prompt = NULL;
    m.job.messages = chat;
    m.job.n_messages = 1;
    check_round_trip(&m, WIRE_DIR_BROKER_TO_WORKER, &back);
    CHECK(back.job.n_messages == 1 && strcmp(back.job.messages[0].content, "Hello") == 0 &&
              !back.job.prompt,
          "job: a chat job's messages reach the worker");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_JOB_RESULT);
    m.result = sample_result();
    m.result.key = m.result.batch = m.result.worker = NULL;
    m.result.state = WIRE_STATE_NONE;
    m.result.timings = (wire_timings){.prefill_ms = 1, .decode_ms = 2};
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.result.cached_prompt_tokens == 0, "job_result: no cached_prompt_tokens reads as 0");
    wire_msg_free(&back);
    char *buf;
    size_t len;
    wire_error e;
    CHECK(wire_encode(&m, &buf, &len, &e) == 0 && !memmem(buf, len, "cached_prompt_tokens", 20),
          "a job_result with no cached prompt tokens is sent without the key (brokers older than"
          " it read it as before)");
    free(buf);
    m.result.cached_prompt_tokens = 4;
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.result.cached_prompt_tokens == 4, "job_result: cached_prompt_tokens comes back");
    wire_msg_free(&back);
    m.result.cached_prompt_tokens = 0;
    m.result.tokens = NULL;
    m.result.n_tokens = 0;
    m.result.text = "";
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.result.n_tokens == 0, "job_result: an empty generation travels");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_JOB_FAILURE);
    m.failure = (wire_job_failure){.id = 12, .attempt = 1, .reason = "out of KV blocks",
                                   .retryable = true};
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    CHECK(back.failure.retryable, "job_failure: retryable comes back");
    wire_msg_free(&back);

    wire_msg_init(&m, WIRE_T_JOB_CANCEL);
    m.cancel_id = 12;
    check_round_trip(&m, WIRE_DIR_BROKER_TO_WORKER, &back);
    wire_msg_free(&back);
    wire_msg_init(&m, WIRE_T_SHUTDOWN);
    m.grace_ms = 10000;
    check_round_trip(&m, WIRE_DIR_BROKER_TO_WORKER, &back);
    wire_msg_free(&back);
    wire_msg_init(&m, WIRE_T_HEARTBEAT);
    check_round_trip(&m, WIRE_DIR_BROKER_TO_WORKER, &back);
    wire_msg_free(&back);
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    wire_msg_free(&back);
    wire_msg_init(&m, WIRE_T_BYE);
    check_round_trip(&m, WIRE_DIR_WORKER_TO_BROKER, &back);
    wire_msg_free(&back);
}

/* ---- refusals --------------------------------------------------------------- */

typedef struct bad_case {
    const char *json;
    unsigned dirs;
    wire_code code;
    const char *field;
} bad_case;

#define C2B WIRE_DIR_CLIENT_TO_BROKER
#define W2B WIRE_DIR_WORKER_TO_BROKER
#define SUB "{\"v\":1,\"type\":\"submit\",\"req\":9,\"jobs\":"

static const bad_case BAD[] = {
    {"[1,2]", C2B, WIRE_E_MALFORMED, ""},
    {"\"submit\"", C2B, WIRE_E_MALFORMED, ""},
    {"{\"type\":\"stats\"}", C2B, WIRE_E_VERSION, "v"},
    {"{\"v\":2,\"type\":\"stats\"}", C2B, WIRE_E_VERSION, "v"},
    {"{\"v\":\"1\",\"type\":\"stats\"}", C2B, WIRE_E_VERSION, "v"},
    {"{\"v\":1}", C2B, WIRE_E_UNKNOWN_TYPE, "type"},
    {"{\"v\":1,\"type\":\"frobnicate\"}", C2B, WIRE_E_UNKNOWN_TYPE, "type"},
    {"{\"v\":1,\"type\":7}", C2B, WIRE_E_BAD_TYPE, "type"},
    {"{\"v\":1,\"type\":\"hello\"}", C2B, WIRE_E_UNKNOWN_TYPE, "type"},
    {"{\"v\":1,\"type\":\"submit\"}", W2B, WIRE_E_UNKNOWN_TYPE, "type"},
    {"{\"v\":1,\"type\":\"stats\",\"req\":-1}", C2B, WIRE_E_BAD_VALUE, "req"},
    {"{\"v\":1,\"type\":\"stats\",\"req\":\"x\"}", C2B, WIRE_E_BAD_TYPE, "req"},
    {"{\"v\":1,\"type\":\"credit\",\"req\":1,\"n\":1}", W2B, WIRE_E_UNKNOWN_FIELD, "req"},
    {"{\"v\":1,\"type\":\"stats\",\"extra\":1}", C2B, WIRE_E_UNKNOWN_FIELD, "extra"},
    {"{\"v\":1,\"type\":\"submit\"}", C2B, WIRE_E_MISSING_FIELD, "jobs"},
    {SUB "[]}", C2B, WIRE_E_BAD_VALUE, "jobs"},
    {SUB "{}}", C2B, WIRE_E_BAD_TYPE, "jobs"},
    {SUB "[7]}", C2B, WIRE_E_BAD_TYPE, "jobs[0]"},
    {SUB "[{}]}", C2B, WIRE_E_MISSING_FIELD, "jobs[0]"},
    {SUB "[{\"prompt\":\"a\",\"tokens\":[1]}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0]"},
    {SUB "[{\"prompt\":5}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].prompt"},
    {SUB "[{\"prompt\":null}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].prompt"},
    {SUB "[{\"prompt\":\"a\"},{\"prompt\":\"b\",\"temprature\":1}]}", C2B, WIRE_E_UNKNOWN_FIELD,
     "jobs[1].temprature"},
    {SUB "[{\"prompt\":\"a\",\"max_tokens\":0}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].max_tokens"},
    {SUB "[{\"prompt\":\"a\",\"max_tokens\":-5}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].max_tokens"},
    {SUB "[{\"prompt\":\"a\",\"max_tokens\":2.5}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].max_tokens"},
    {SUB "[{\"prompt\":\"a\",\"max_tokens\":\"10\"}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].max_tokens"},
    {SUB "[{\"prompt\":\"a\",\"temperature\":-0.1}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].temperature"},
    {SUB "[{\"prompt\":\"a\",\"temperature\":\"hot\"}]}", C2B, WIRE_E_BAD_TYPE,
     "jobs[0].temperature"},
    {SUB "[{\"prompt\":\"a\",\"top_p\":0}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].top_p"},
    {SUB "[{\"prompt\":\"a\",\"top_p\":1.5}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].top_p"},
    {SUB "[{\"prompt\":\"a\",\"top_k\":-1}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].top_k"},
    {SUB "[{\"prompt\":\"a\",\"repeat_penalty\":0}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].repeat_penalty"},
    {SUB "[{\"prompt\":\"a\",\"repeat_last_n\":-2}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].repeat_last_n"},
    {SUB "[{\"prompt\":\"a\",\"presence_penalty\":3}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].presence_penalty"},
    {SUB "[{\"prompt\":\"a\",\"seed\":-1}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].seed"},
    {SUB "[{\"prompt\":\"a\",\"priority\":1001}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].priority"},
    {SUB "[{\"prompt\":\"a\",\"ignore_eos\":1}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].ignore_eos"},
    {SUB "[{\"prompt\":\"a\",\"logprobs\":1}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].logprobs"},
    {SUB "[{\"prompt\":\"a\",\"logprobs\":true,\"top_logprobs\":21}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].top_logprobs"},
    {SUB "[{\"prompt\":\"a\",\"top_logprobs\":2}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].top_logprobs"},
    {SUB "[{\"prompt\":\"a\",\"json_schema\":\"\"}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].json_schema"},
    {SUB "[{\"prompt\":\"a\",\"json_schema\":\"{\\\"type\\\":\"}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].json_schema"},
    {SUB "[{\"prompt\":\"a\",\"json_schema\":\"[]\"}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].json_schema"},
    {SUB "[{\"prompt\":\"a\",\"json_schema\":{}}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].json_schema"},
    {SUB "[{\"prompt\":\"a\",\"json_schema\":\"{}\",\"json_object\":true}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].json_object"},
    {SUB "[{\"prompt\":\"a\",\"json_object\":true,\"ignore_eos\":true}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].ignore_eos"},
    {SUB "[{\"prompt\":\"a\",\"json_object\":1}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].json_object"},
    {"{\"v\":1,\"type\":\"hello\",\"worker\":\"w\",\"host\":\"h\",\"pid\":1,\"gpu_index\":-1,"
     "\"model\":\"m\",\"engine\":\"cpu\",\"slots\":1,\"aliases\":[\"\"]}",
     W2B, WIRE_E_BAD_VALUE, "aliases[0]"},
    {SUB "[{\"prompt\":\"a\",\"stop\":\"x\"}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].stop"},
    {SUB "[{\"prompt\":\"a\",\"stop\":[\"x\",\"\"]}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].stop[1]"},
    {SUB "[{\"prompt\":\"a\",\"stop\":[1]}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].stop[0]"},
    {SUB "[{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
         "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}]}",
     C2B, WIRE_E_TOO_LARGE, "jobs[0].stop"},
    {SUB "[{\"tokens\":[]}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].tokens"},
    {SUB "[{\"tokens\":[1,-3]}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].tokens[1]"},
    {SUB "[{\"tokens\":[2147483648]}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].tokens[0]"},
    {SUB "[{\"prompt\":\"a\",\"key\":\"\"}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].key"},
    {SUB "[{\"prompt\":\"a\\u0000b\"}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].prompt"},
    {SUB "[{\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}]}", C2B,
     WIRE_E_BAD_VALUE, "jobs[0]"},
    {SUB "[{\"tokens\":[1],\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}]}", C2B,
     WIRE_E_BAD_VALUE, "jobs[0]"},
    {SUB "[{\"messages\":[]}]}", C2B, WIRE_E_BAD_VALUE, "jobs[0].messages"},
    {SUB "[{\"messages\":{\"role\":\"user\",\"content\":\"b\"}}]}", C2B, WIRE_E_BAD_TYPE,
     "jobs[0].messages"},
    {SUB "[{\"messages\":[\"hi\"]}]}", C2B, WIRE_E_BAD_TYPE, "jobs[0].messages[0]"},
    {SUB "[{\"messages\":[{\"content\":\"b\"}]}]}", C2B, WIRE_E_MISSING_FIELD,
     "jobs[0].messages[0].role"},
    {SUB "[{\"messages\":[{\"role\":\"user\"}]}]}", C2B, WIRE_E_MISSING_FIELD,
     "jobs[0].messages[0].content"},
    {SUB "[{\"messages\":[{\"role\":\"\",\"content\":\"b\"}]}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].messages[0].role"},
    {SUB "[{\"messages\":[{\"role\":\"user\",\"content\":null}]}]}", C2B, WIRE_E_BAD_TYPE,
     "jobs[0].messages[0].content"},
    {SUB "[{\"messages\":[{\"role\":\"user\",\"content\":\"b\",\"name\":\"x\"}]}]}", C2B,
     WIRE_E_UNKNOWN_FIELD, "jobs[0].messages[0].name"},
    {SUB "[{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000\"}]}]}", C2B, WIRE_E_BAD_VALUE,
     "jobs[0].messages[0].content"},
    {"{\"v\":1,\"type\":\"status\"}", C2B, WIRE_E_MISSING_FIELD, ""},
    {"{\"v\":1,\"type\":\"status\",\"ids\":[1],\"batch\":\"b\"}", C2B, WIRE_E_BAD_VALUE, ""},
    {"{\"v\":1,\"type\":\"status\",\"ids\":[0]}", C2B, WIRE_E_BAD_VALUE, "ids[0]"},
    {"{\"v\":1,\"type\":\"cancel\",\"ids\":[3,-4]}", C2B, WIRE_E_BAD_VALUE, "ids[1]"},
    {"{\"v\":1,\"type\":\"wait\",\"ids\":[1],\"timeout_ms\":4294967296}", C2B, WIRE_E_BAD_VALUE,
     "timeout_ms"},
    {"{\"v\":1,\"type\":\"wait\",\"ids\":[1],\"stream\":\"no\"}", C2B, WIRE_E_BAD_TYPE, "stream"},
    {"{\"v\":1,\"type\":\"wait\",\"ids\":[1],\"heartbeat_ms\":99}", C2B, WIRE_E_BAD_VALUE,
     "heartbeat_ms"},
    {"{\"v\":1,\"type\":\"wait\",\"ids\":[1],\"heartbeat_ms\":3600001}", C2B, WIRE_E_BAD_VALUE,
     "heartbeat_ms"},
    {"{\"v\":1,\"type\":\"wait\",\"ids\":[1],\"stream\":false,\"heartbeat_ms\":1000}", C2B,
     WIRE_E_BAD_VALUE, "heartbeat_ms"},
    {"{\"v\":1,\"type\":\"wait_alive\",\"req\":1}", C2B, WIRE_E_UNKNOWN_TYPE, "type"},
    {"{\"v\":1,\"type\":\"credit\",\"n\":0}", W2B, WIRE_E_BAD_VALUE, "n"},
    {"{\"v\":1,\"type\":\"credit\"}", W2B, WIRE_E_MISSING_FIELD, "n"},
    {"{\"v\":1,\"type\":\"hello\",\"worker\":\"w\",\"host\":\"h\",\"pid\":1,\"gpu_index\":-2,"
     "\"model\":\"m\",\"engine\":\"cpu\",\"slots\":1}",
     W2B, WIRE_E_BAD_VALUE, "gpu_index"},
    {"{\"v\":1,\"type\":\"hello\",\"worker\":\"w\",\"host\":\"h\",\"pid\":1,\"gpu_index\":0,"
     "\"model\":\"m\",\"engine\":\"cpu\",\"slots\":5000}",
     W2B, WIRE_E_BAD_VALUE, "slots"},
    {"{\"v\":1,\"type\":\"job_result\",\"id\":1,\"attempt\":1,\"text\":\"x\",\"tokens\":[],"
     "\"finish\":\"bored\",\"prompt_tokens\":1,\"gen_tokens\":0,\"prefill_ms\":1,\"decode_ms\":1}",
     W2B, WIRE_E_BAD_VALUE, "finish"},
    {"{\"v\":1,\"type\":\"job_result\",\"id\":1,\"attempt\":1,\"text\":\"x\",\"tokens\":[],"
     "\"finish\":\"stop\",\"prompt_tokens\":1,\"gen_tokens\":0,\"prefill_ms\":-1,\"decode_ms\":1}",
     W2B, WIRE_E_BAD_VALUE, "prefill_ms"},
    {"{\"v\":1,\"type\":\"job_result\",\"id\":1,\"attempt\":1,\"text\":\"x\",\"tokens\":[7],"
     "\"finish\":\"stop\",\"prompt_tokens\":1,\"gen_tokens\":1,\"prefill_ms\":1,\"decode_ms\":1,"
     "\"logprobs\":[{\"token\":7,\"logprob\":-1,\"bytes\":\"x\",\"top_logprobs\":[]}]}",
     W2B, WIRE_E_BAD_TYPE, "logprobs[0].bytes"},
    {"{\"v\":1,\"type\":\"job_result\",\"id\":1,\"attempt\":1,\"text\":\"x\",\"tokens\":[],"
     "\"finish\":\"stop\",\"prompt_tokens\":1,\"cached_prompt_tokens\":-1,\"gen_tokens\":0,"
     "\"prefill_ms\":1,\"decode_ms\":1}",
     W2B, WIRE_E_BAD_VALUE, "cached_prompt_tokens"},
    {"{\"v\":1,\"type\":\"job_failure\",\"id\":1,\"attempt\":1,\"reason\":\"x\"}", W2B,
     WIRE_E_MISSING_FIELD, "retryable"},
    {"{\"v\":1,\"type\":\"result\",\"id\":1,\"state\":\"done\",\"text\":\"x\"}",
     WIRE_DIR_BROKER_TO_CLIENT, WIRE_E_MISSING_FIELD, "finish"},
    {"{\"v\":1,\"type\":\"result\",\"id\":1,\"state\":\"queued\"}", WIRE_DIR_BROKER_TO_CLIENT,
     WIRE_E_BAD_VALUE, "state"},
    {"{\"v\":1,\"type\":\"submit_ok\",\"ids\":[1,2],\"existing\":[true]}",
     WIRE_DIR_BROKER_TO_CLIENT, WIRE_E_BAD_VALUE, "existing"},
    {"{\"v\":1,\"type\":\"error\",\"code\":\"oops\",\"message\":\"m\"}", WIRE_DIR_BROKER_TO_CLIENT,
     WIRE_E_BAD_VALUE, "code"},
};

static void test_bad_table(void)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        wire_msg m;
        wire_error e;
        int rc = decode_json(BAD[i].json, BAD[i].dirs, &m, &e);
        CHECK(rc < 0 && e.code == BAD[i].code && strcmp(e.field, BAD[i].field) == 0 &&
                  m.arena == NULL,
              "%s -> %s at \"%s\" (got %s at \"%s\": %s)", BAD[i].json,
              wire_code_name(BAD[i].code), BAD[i].field, wire_code_name(e.code), e.field,
              e.err.msg);
        if (rc == 0)
            wire_msg_free(&m);
    }
}

static void check_raw(const void *data, size_t len, wire_code code, const char *field,
                      const char *what)
{
    wire_msg m;
    wire_error e;
    int rc = wire_decode(data, len, WIRE_DIR_ANY, &m, &e);
    CHECK(rc < 0 && e.code == code && strcmp(e.field, field) == 0, "%s -> %s \"%s\" (got %s: %s)",
          what, wire_code_name(code), field, wire_code_name(e.code), e.err.msg);
    if (rc == 0)
        wire_msg_free(&m);
}

/* Starts a submit body carrying req 31 (or none) and n jobs; the caller packs the jobs. */
static void begin_submit(msgpack_sbuffer *sb, msgpack_packer *pk, bool with_req, uint32_t n_jobs)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(pk, with_req ? 4 : 3);
    msgpack_pack_str_with_body(pk, "v", 1);
    msgpack_pack_uint8(pk, 1);
    msgpack_pack_str_with_body(pk, "type", 4);
    msgpack_pack_str_with_body(pk, "submit", 6);
    if (with_req) {
        msgpack_pack_str_with_body(pk, "req", 3);
        msgpack_pack_uint8(pk, 31);
    }
    msgpack_pack_str_with_body(pk, "jobs", 4);
    msgpack_pack_array(pk, n_jobs);
}

/* A submit with one job whose last key is `key` and value is packed by fn. */
typedef void (*pack_fn)(msgpack_packer *pk, const void *arg);

/* Decodes that submit: its error in *e, and 0 when it decoded. */
static int decode_job_value(const char *key, pack_fn fn, const void *arg, wire_error *e)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    begin_submit(&sb, &pk, true, 1);
    bool is_prompt = strcmp(key, "prompt") == 0;
    msgpack_pack_map(&pk, is_prompt ? 1 : 2);
    if (!is_prompt) {
        msgpack_pack_str_with_body(&pk, "prompt", 6);
        msgpack_pack_str_with_body(&pk, "x", 1);
    }
    msgpack_pack_str_with_body(&pk, key, strlen(key));
    fn(&pk, arg);
    wire_msg m;
    int rc = wire_decode(sb.data, sb.size, WIRE_DIR_CLIENT_TO_BROKER, &m, e);
    if (rc == 0)
        wire_msg_free(&m);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void check_job_value(const char *key, pack_fn fn, const void *arg, wire_code code,
                            const char *what)
{
    wire_error e;
    char field[64];
    snprintf(field, sizeof field, "jobs[0].%s", key);
    int rc = decode_job_value(key, fn, arg, &e);
    CHECK(rc < 0 && e.code == code && strcmp(e.field, field) == 0 && e.req == 31,
          "%s -> %s at %s, req kept (got %s: %s)", what, wire_code_name(code), field,
          wire_code_name(e.code), e.err.msg);
}

static void pack_double(msgpack_packer *pk, const void *arg) { msgpack_pack_double(pk, *(const double *)arg); }
static void pack_float32(msgpack_packer *pk, const void *arg) { msgpack_pack_float(pk, *(const float *)arg); }
static void pack_bin(msgpack_packer *pk, const void *arg) { (void)arg; msgpack_pack_bin_with_body(pk, "ab", 2); }
static void pack_bytes(msgpack_packer *pk, const void *arg)
{
    const char *s = arg;
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void pack_big_string(msgpack_packer *pk, const void *arg)
{
    size_t n = *(const size_t *)arg;
    char *s = malloc(n);
    memset(s, 'a', n);
    msgpack_pack_str_with_body(pk, s, n);
    free(s);
}

static const char DUP_V[] = "\x83\xa1v\x01\xa1v\x01\xa4type\xa5stats";
static const char INT_KEY[] = "\x83\xa1v\x01\xa4type\xa5stats\x01\x02";
static const char EMPTY_KEY[] = "\x83\xa1v\x01\xa4type\xa5stats\xa0\x01";
static const char EMPTY_TYPE[] = "\x82\xa1v\x01\xa4type\xa0";
static const char DUP_N[] = "\x84\xa1v\x01\xa4type\xa6" "credit\xa1n\x01\xa1n\x02";

static void test_bad_raw(void)
{
    check_raw("", 0, WIRE_E_MALFORMED, "", "an empty body");
    check_raw("\xc1", 1, WIRE_E_MALFORMED, "", "the never-used byte 0xc1");
    check_raw("hello, world", 12, WIRE_E_MALFORMED, "", "plain text");
    check_raw("\x81\xa1v", 3, WIRE_E_MALFORMED, "", "a truncated map");
    check_raw("\x80\x80", 2, WIRE_E_MALFORMED, "", "two maps (trailing bytes)");
    check_raw("\xdd\xff\xff\xff\xff", 5, WIRE_E_MALFORMED, "",
              "an array header claiming 4 billion elements");
    check_raw("\xdf\x7f\xff\xff\xff\x00", 6, WIRE_E_MALFORMED, "", "a map header claiming 2^31 pairs");
    check_raw("\xdb\xff\xff\xff\xff" "ab", 7, WIRE_E_MALFORMED, "", "a str header longer than the body");
    char deep[32];
    memset(deep, 0x91, sizeof deep);   /* [[[[...]]]] */
    deep[sizeof deep - 1] = 0x01;
    check_raw(deep, sizeof deep, WIRE_E_MALFORMED, "", "nesting 31 deep");
    check_raw("\x90", 1, WIRE_E_MALFORMED, "", "an empty array");
    check_raw(DUP_V, sizeof DUP_V - 1, WIRE_E_BAD_VALUE, "v",
              "\"v\" given twice");
    check_raw(INT_KEY, sizeof INT_KEY - 1, WIRE_E_BAD_TYPE, "",
              "an integer map key");
    check_raw(EMPTY_KEY, sizeof EMPTY_KEY - 1, WIRE_E_UNKNOWN_FIELD, "", "an empty key");
    check_raw(EMPTY_TYPE, sizeof EMPTY_TYPE - 1, WIRE_E_UNKNOWN_TYPE, "type", "an empty type");
    check_raw(DUP_N, sizeof DUP_N - 1, WIRE_E_BAD_VALUE, "n",
              "\"n\" given twice");

    double nan = NAN, inf = INFINITY;
    float fnan = NAN, f07 = 0.7f;
    check_job_value("temperature", pack_double, &nan, WIRE_E_BAD_VALUE, "a NaN temperature");
    check_job_value("top_p", pack_float32, &fnan, WIRE_E_BAD_VALUE, "a float32 NaN top_p");
    check_job_value("min_p", pack_double, &inf, WIRE_E_BAD_VALUE, "an infinite min_p");
    double huge = 1e40;
    check_job_value("temperature", pack_double, &huge, WIRE_E_BAD_VALUE,
                    "a temperature beyond float range");
    check_job_value("max_tokens", pack_float32, &f07, WIRE_E_BAD_TYPE, "a float max_tokens");
    check_job_value("prompt", pack_bin, NULL, WIRE_E_BAD_TYPE, "a bin prompt");
    check_job_value("prompt", pack_bytes, "caf\xc3", WIRE_E_BAD_VALUE, "a truncated UTF-8 prompt");
    check_job_value("prompt", pack_bytes, "\xed\xa0\x80", WIRE_E_BAD_VALUE,
                    "a prompt with an encoded surrogate");
    check_job_value("key", pack_bytes, "\xc0\xaf", WIRE_E_BAD_VALUE, "an overlong-UTF-8 key");
    size_t big = WIRE_MAX_PROMPT_BYTES + 1, name = WIRE_MAX_NAME_BYTES + 1;
    check_job_value("prompt", pack_big_string, &big, WIRE_E_TOO_LARGE, "an oversize prompt (1 MiB + 1)");
    check_job_value("key", pack_big_string, &name, WIRE_E_TOO_LARGE, "a 257-byte key");
    /* The largest prompt is accepted: the limit is inclusive. */
    size_t max_prompt = WIRE_MAX_PROMPT_BYTES;
    wire_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    begin_submit(&sb, &pk, false, 1);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "prompt", 6);
    pack_big_string(&pk, &max_prompt);
    wire_error e;
    int rc = wire_decode(sb.data, sb.size, WIRE_DIR_CLIENT_TO_BROKER, &m, &e);
    CHECK(rc == 0 && strlen(m.submit.jobs[0].prompt) == WIRE_MAX_PROMPT_BYTES,
          "a prompt of exactly WIRE_MAX_PROMPT_BYTES is accepted");
    if (rc == 0)
        wire_msg_free(&m);
    msgpack_sbuffer_destroy(&sb);
}

static void pack_u64(msgpack_packer *pk, const void *arg)
{
    msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}
static void pack_i64(msgpack_packer *pk, const void *arg)
{
    msgpack_pack_int64(pk, *(const int64_t *)arg);
}

static void check_refusal_text(const char *key, pack_fn fn, const void *arg, const char *want)
{
    wire_error e;
    int rc = decode_job_value(key, fn, arg, &e);
    CHECK(rc < 0 && strcmp(e.err.msg, want) == 0, "refused as \"%s\" (got \"%s\")", want,
          rc < 0 ? e.err.msg : "accepted");
}

/* A refusal shows the number as it was sent, and its bounds as written. */
static void test_exact_numbers(void)
{
    double t = 100.0001, p = 1.5, lo = -2.001;
    uint64_t max = UINT64_MAX;
    int64_t neg = INT64_MIN;
    check_refusal_text("temperature", pack_double, &t,
                       "jobs[0].temperature: 100.0001 is out of range [0, 100]");
    check_refusal_text("top_p", pack_double, &p, "jobs[0].top_p: 1.5 is out of range (0, 1]");
    check_refusal_text("presence_penalty", pack_double, &lo,
                       "jobs[0].presence_penalty: -2.001 is out of range [-2, 2]");
    check_refusal_text("top_k", pack_u64, &max,
                       "jobs[0].top_k: 18446744073709551615 is out of range [0, 1048576]");
    check_refusal_text("max_tokens", pack_i64, &neg,
                       "jobs[0].max_tokens: -9223372036854775808 is out of range [1, 1048576]");
}

/* An error for a request whose req cannot be read carries req 0, and
 * every error carries a req: PROTOCOL.md's reason to number requests from
 * 1. */
static void test_req_zero(void)
{
    wire_msg m, back;
    wire_error e;
    int rc = decode_json("{\"v\": 1, \"type\": \"stats\", \"req\": -5}", WIRE_DIR_ANY, &m, &e);
    wire_error_reply(&m, &e);
    char *body = NULL;
    size_t len = 0;
    int enc = wire_encode(&m, &body, &len, NULL);
    CHECK(rc < 0 && e.req == 0 && enc == 0 && memmem(body, len, "\xa3req\x00", 5),
          "the error for a negative req carries req 0 (%s)", e.err.msg);
    free(body);
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.req == 0 && back.error.code == WIRE_E_BAD_VALUE, "and decodes so");
    wire_msg_free(&back);
}

/* A job_result that does not decode still names its type, job id and
 * attempt when they read, so that the broker can end that attempt; an id
 * of the wrong type, out of range or given twice names none. */
static void test_refusal_names_job(void)
{
    static const struct {
        const char *body;
        wire_type type;
        uint64_t id;
        uint32_t attempt;
        const char *what;
    } cases[] = {
        {"{\"v\": 1, \"type\": \"job_result\", \"id\": 7, \"attempt\": 2,"
         " \"gen_tokens\": \"4\"}",
         WIRE_T_JOB_RESULT, 7, 2, "a str gen_tokens"},
        {"{\"v\": 1, \"type\": \"job_result\", \"gen_tokens\": -1, \"attempt\": 1,"
         " \"id\": 9}",
         WIRE_T_JOB_RESULT, 9, 1, "a negative gen_tokens before the id"},
        {"{\"v\": 1, \"type\": \"job_result\", \"id\": \"7\", \"attempt\": 1}", WIRE_T_JOB_RESULT,
         0, 1, "a str id"},
        {"{\"v\": 1, \"type\": \"job_result\", \"id\": 7, \"attempt\": 4294967296}",
         WIRE_T_JOB_RESULT, 7, 0, "an attempt past 2^32-1"},
        {"{\"v\": 1, \"type\": \"job\", \"id\": 7, \"attempt\": 1}", WIRE_T_NONE, 0, 0,
         "a type not accepted here"},
        {"{\"v\": 2, \"type\": \"job_result\", \"id\": 7, \"attempt\": 1}", WIRE_T_NONE, 0, 0,
         "another version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wire_msg m;
        wire_error e;
        int rc = decode_json(cases[i].body, WIRE_DIR_WORKER_TO_BROKER, &m, &e);
        CHECK(rc < 0 && e.type == cases[i].type && e.id == cases[i].id &&
                  e.attempt == cases[i].attempt,
              "%s: refused naming type %s, job %llu attempt %u (got %s, %llu, %u: %s)",
              cases[i].what, wire_type_name(cases[i].type) ? wire_type_name(cases[i].type) : "none",
              (unsigned long long)cases[i].id, cases[i].attempt,
              wire_type_name(e.type) ? wire_type_name(e.type) : "none", (unsigned long long)e.id,
              e.attempt, e.err.msg);
    }
    static const char twice[] = "\x85\xa1v\x01\xa4type\xaajob_result\xa2id\x07\xa2id\x08"
                                "\xa7"
                                "attempt\x01";
    wire_msg m;
    wire_error e;
    int rc = wire_decode(twice, sizeof twice - 1, WIRE_DIR_WORKER_TO_BROKER, &m, &e);
    CHECK(rc < 0 && e.code == WIRE_E_BAD_VALUE && e.type == WIRE_T_JOB_RESULT && e.id == 0 &&
              e.attempt == 1,
          "an id given twice: refused naming no job (%s)", e.err.msg);
}

/* The result of a job that did not finish has no counts or timings to
 * report: they are left out, not sent as zeros. */
static void test_unfinished_results(void)
{
    wire_msg m, back;
    wire_msg_init(&m, WIRE_T_RESULT);
    m.result = (wire_result){.id = 3,
                             .state = WIRE_STATE_CANCELLED,
                             .error = "cancelled",
                             .prompt_tokens = 5,
                             .timings = {.total_ms = 9}};
    char *body = NULL;
    size_t len = 0;
    int rc = wire_encode(&m, &body, &len, NULL);
    static const char *const done_only[] = {"prompt_tokens", "gen_tokens",    "queue_wait_ms",
                                            "prefill_ms",    "prefill_tok_s", "decode_ms",
                                            "decode_tok_s",  "total_ms"};
    int found = 0;
    for (size_t i = 0; rc == 0 && i < sizeof done_only / sizeof *done_only; i++)
        found += memmem(body, len, done_only[i], strlen(done_only[i])) != NULL;
    CHECK(rc == 0 && found == 0, "a cancelled result has no counts or timings (%d found)", found);
    free(body);
    check_round_trip(&m, WIRE_DIR_BROKER_TO_CLIENT, &back);
    CHECK(back.result.state == WIRE_STATE_CANCELLED && back.result.prompt_tokens == 0 &&
              strcmp(back.result.error, "cancelled") == 0,
          "it decodes with its state and error");
    wire_msg_free(&back);
}

static void test_too_many_jobs(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    begin_submit(&sb, &pk, false, WIRE_MAX_JOBS_PER_SUBMIT + 1);
    for (unsigned i = 0; i <= WIRE_MAX_JOBS_PER_SUBMIT; i++) {
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str_with_body(&pk, "prompt", 6);
        msgpack_pack_str_with_body(&pk, "p", 1);
    }
    wire_msg m;
    wire_error e;
    int rc = wire_decode(sb.data, sb.size, WIRE_DIR_CLIENT_TO_BROKER, &m, &e);
    CHECK(rc < 0 && e.code == WIRE_E_TOO_LARGE && strcmp(e.field, "jobs") == 0,
          "a submit of %u jobs is too_large at \"jobs\" (%s)", WIRE_MAX_JOBS_PER_SUBMIT + 1,
          e.err.msg);
    msgpack_sbuffer_destroy(&sb);
}

/* One job of n messages whose contents are `bytes` long each. */
static wire_code decode_chat(uint32_t n, size_t bytes, char *field, size_t size)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    begin_submit(&sb, &pk, false, 1);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "messages", 8);
    msgpack_pack_array(&pk, n);
    char *content = malloc(bytes ? bytes : 1);
    memset(content, 'x', bytes);
    for (uint32_t i = 0; i < n; i++) {
        msgpack_pack_map(&pk, 2);
        msgpack_pack_str_with_body(&pk, "role", 4);
        msgpack_pack_str_with_body(&pk, "user", 4);
        msgpack_pack_str_with_body(&pk, "content", 7);
        msgpack_pack_str_with_body(&pk, content, bytes);
    }
    free(content);
    wire_msg m;
    wire_error e;
    int rc = wire_decode(sb.data, sb.size, WIRE_DIR_CLIENT_TO_BROKER, &m, &e);
    msgpack_sbuffer_destroy(&sb);
    snprintf(field, size, "%s", rc < 0 ? e.field : "");
    if (rc == 0)
        wire_msg_free(&m);
    return rc == 0 ? WIRE_OK : e.code;
}

/* A chat job's limits: the number of messages, and its text in all, which
 * is bounded as a prompt is. */
static void test_message_limits(void)
{
    char field[128];
    CHECK(decode_chat(WIRE_MAX_MESSAGES, 1, field, sizeof field) == WIRE_OK,
          "a chat job of %u messages is accepted", WIRE_MAX_MESSAGES);
    CHECK(decode_chat(WIRE_MAX_MESSAGES + 1, 1, field, sizeof field) == WIRE_E_TOO_LARGE &&
              strcmp(field, "jobs[0].messages") == 0,
          "%u messages are too_large at jobs[0].messages", WIRE_MAX_MESSAGES + 1);
    CHECK(decode_chat(2, WIRE_MAX_PROMPT_BYTES / 2, field, sizeof field) == WIRE_OK,
          "two messages of half the prompt limit each are accepted");
    CHECK(decode_chat(2, WIRE_MAX_PROMPT_BYTES / 2 + 1, field, sizeof field) == WIRE_E_TOO_LARGE &&
              strcmp(field, "jobs[0].messages") == 0,
          "two messages just past the prompt limit together are too_large at jobs[0].messages");
    static const wire_message no_role[] = {{NULL, "hi"}}, ok[] = {{"user", "hi"}};
    wire_job job = {.prompt = "a", .messages = ok, .n_messages = 1, .params = job_params_default()};
    wire_msg m;
    char *out;
    size_t len;
    wire_error e;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.submit = (wire_submit){.jobs = &job, .n_jobs = 1};
    CHECK(wire_encode(&m, &out, &len, &e) < 0 && e.code == WIRE_E_BAD_VALUE &&
              strstr(e.err.msg, "\"prompt\" and \"messages\" are mutually exclusive"),
          "encode refuses a job with both prompt and messages (%s)", e.err.msg);
    job.prompt = NULL;
    job.messages = no_role;
    CHECK(wire_encode(&m, &out, &len, &e) < 0 && e.code == WIRE_E_MISSING_FIELD &&
              strcmp(e.field, "role") == 0,
          "encode refuses a message without a role (%s)", e.err.msg);
}

static void test_encode_refusals(void)
{
    static const uint32_t toks[] = {1};
    wire_msg m;
    char *out;
    size_t len;
    wire_error e;
    wire_job job = {.prompt = "a", .tokens = toks, .n_tokens = 1, .params = job_params_default()};
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.submit = (wire_submit){.jobs = &job, .n_jobs = 1};
    CHECK(wire_encode(&m, &out, &len, &e) < 0 && e.code == WIRE_E_BAD_VALUE && out == NULL,
          "encode refuses a job with both prompt and tokens");
    m.submit.n_jobs = 0;
    CHECK(wire_encode(&m, &out, &len, &e) < 0 && e.code == WIRE_E_BAD_VALUE,
          "encode refuses a submit without jobs");
    wire_msg_init(&m, WIRE_T_HELLO);
    CHECK(wire_encode(&m, &out, &len, &e) < 0 && e.code == WIRE_E_MISSING_FIELD &&
              strcmp(e.field, "worker") == 0,
          "encode refuses a hello without a worker id");
    wire_msg_init(&m, WIRE_T_NONE);
    CHECK(wire_encode(&m, &out, &len, &e) < 0 && e.code == WIRE_E_UNKNOWN_TYPE,
          "encode refuses an unknown type");
}

static void test_names(void)
{
    int ok = 1;
    for (int t = 1; t < WIRE_T_COUNT; t++)
        ok &= wire_type_from_name(wire_type_name((wire_type)t)) == (wire_type)t &&
              wire_type_dirs((wire_type)t) != 0;
    for (int c = 1; c < WIRE_E_COUNT; c++)
        ok &= wire_code_from_name(wire_code_name((wire_code)c)) == (wire_code)c;
    CHECK(ok, "every type and code name maps back to its value");
    CHECK(wire_type_name(WIRE_T_COUNT) == NULL && wire_type_from_name("nope") == WIRE_T_NONE &&
              wire_state_from_name("done") == WIRE_STATE_DONE &&
              wire_finish_from_name("length") == WIRE_FINISH_LENGTH,
          "out-of-range values have no name; names of states and finish reasons resolve");
}

/* ---- logprobs --------------------------------------------------------------- */

/* A result of three tokens with logprobs: the last has a byte of a split
 * UTF-8 character, and two alternatives. */
#define BYTES(s) .bytes = (const uint8_t *)(s), .n_bytes = sizeof(s) - 1
static const wire_logprob LP_TOP[] = {{.token = 30, .logprob = -0.5f, BYTES("\xe2")},
                                      {.token = 4, .logprob = -1.5f, BYTES("cat")}};
static const wire_token_logprobs LP[] = {
    {.chosen = {.token = 10, .logprob = -0.125f, BYTES(" a")}},
    {.chosen = {.token = 20, .logprob = -9999.0f, .bytes = NULL, .n_bytes = 0}},
    {.chosen = {.token = 30, .logprob = -0.5f, BYTES("\xe2")}, .top = LP_TOP, .n_top = 2}};

static bool same_logprob(const wire_logprob *a, const wire_logprob *b)
{
    return a->token == b->token && a->logprob == b->logprob && a->n_bytes == b->n_bytes &&
           (a->n_bytes == 0 || memcmp(a->bytes, b->bytes, a->n_bytes) == 0);
}

static void test_logprobs(void)
{
    wire_msg m, back;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    wire_job job = {.prompt = "a", .params = job_params_default()};
    job.params.logprobs = true;
    job.params.top_logprobs = 20;
    m.submit = (wire_submit){.jobs = &job, .n_jobs = 1};
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    CHECK(back.submit.jobs[0].params.logprobs && back.submit.jobs[0].params.top_logprobs == 20,
          "submit: logprobs and top_logprobs 20 come back");
    wire_msg_free(&back);
    job.params.json_schema = "{\"type\": \"object\", \"properties\": {}}";
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    CHECK(back.submit.jobs[0].params.json_schema &&
              strcmp(back.submit.jobs[0].params.json_schema, job.params.json_schema) == 0 &&
              !back.submit.jobs[0].params.json_object,
          "submit: a json_schema comes back as its text");
    wire_msg_free(&back);
    job.params.json_schema = NULL;
    job.params.json_object = true;
    check_round_trip(&m, WIRE_DIR_CLIENT_TO_BROKER, &back);
    CHECK(back.submit.jobs[0].params.json_object && !back.submit.jobs[0].params.json_schema,
          "submit: json_object comes back");
    wire_msg_free(&back);

    for (int type = 0; type < 2; type++) {
        wire_msg_init(&m, type ? WIRE_T_RESULT : WIRE_T_JOB_RESULT);
        m.result = sample_result();
        if (type == 0) { /* a job_result has none of these */
            m.result.key = m.result.batch = m.result.worker = NULL;
            m.result.state = WIRE_STATE_NONE;
        }
        m.result.logprobs = LP;
        m.result.n_logprobs = 3;
        check_round_trip(&m, type ? WIRE_DIR_BROKER_TO_CLIENT : WIRE_DIR_WORKER_TO_BROKER, &back);
        const wire_result *r = &back.result;
        CHECK(r->n_logprobs == 3 && same_logprob(&r->logprobs[0].chosen, &LP[0].chosen) &&
                  same_logprob(&r->logprobs[1].chosen, &LP[1].chosen) &&
                  r->logprobs[0].n_top == 0 && r->logprobs[2].n_top == 2 &&
                  same_logprob(&r->logprobs[2].top[0], &LP_TOP[0]) &&
                  same_logprob(&r->logprobs[2].top[1], &LP_TOP[1]),
              "%s: logprobs come back, with empty and split-character bytes and alternatives",
              wire_type_name(m.type));
        wire_msg_free(&back);
    }

    wire_msg_init(&m, WIRE_T_JOB_RESULT);
    m.result = sample_result();
    m.result.state = WIRE_STATE_NONE;
    m.result.logprobs = LP;
    m.result.n_logprobs = 2;
    char *buf;
    size_t len;
    wire_error e;
    CHECK(wire_encode(&m, &buf, &len, &e) < 0 && e.code == WIRE_E_BAD_VALUE &&
              strcmp(e.field, "logprobs") == 0,
          "logprobs for 2 of 3 tokens are refused: %s", e.err.msg);
    wire_token_logprobs wrong[3] = {LP[0], LP[1], LP[2]};
    wrong[1].chosen.token = 21;
    m.result.logprobs = wrong;
    m.result.n_logprobs = 3;
    CHECK(wire_encode(&m, &buf, &len, &e) < 0 && strcmp(e.field, "logprobs[1].token") == 0,
          "a logprob of another token than the one generated is refused: %s", e.err.msg);
    wrong[1].chosen.token = 20;
    wrong[1].chosen.logprob = 0.5f;
    int rc = wire_encode(&m, &buf, &len, &e);
    rc = rc == 0 ? wire_decode(buf, len, WIRE_DIR_WORKER_TO_BROKER, &back, &e) : 0;
    free(buf);
    CHECK(rc < 0 && e.code == WIRE_E_BAD_VALUE && strcmp(e.field, "logprobs[1].logprob") == 0,
          "a positive logprob is refused: %s", e.err.msg);
}

/* The one map from error codes to the wire: reply types and retry-or-fail. */
static void test_err_codes(void)
{
    CHECK(wire_retryable(LLMQ_ERR_NO_ROOM) && wire_retryable(LLMQ_ERR_UNAVAILABLE) &&
              wire_retryable(LLMQ_ERR_IO),
          "lack of room, a worker that cannot serve now, I/O: the job may run again");
    CHECK(!wire_retryable(LLMQ_ERR_INVALID) && !wire_retryable(LLMQ_ERR_INTERNAL) &&
              !wire_retryable(LLMQ_ERR_GENERIC) && !wire_retryable(LLMQ_ERR_CODE_COUNT),
          "bad input, internal, unclassified, out of range: the job fails for good");
    CHECK(wire_code_for(LLMQ_ERR_INVALID) == WIRE_E_BAD_VALUE &&
              wire_code_for(LLMQ_ERR_NO_ROOM) == WIRE_E_QUEUE_FULL &&
              wire_code_for(LLMQ_ERR_UNAVAILABLE) == WIRE_E_SHUTTING_DOWN &&
              wire_code_for(LLMQ_ERR_GENERIC) == WIRE_E_INTERNAL &&
              wire_code_for(LLMQ_ERR_CODE_COUNT) == WIRE_E_INTERNAL,
          "each code has the reply type of its kind");
    wire_error e = {0};
    llmq_errc(&e.err, LLMQ_ERR_INVALID, "job 4: prompt token 1: id 99999 out of range");
    wire_msg m;
    wire_error_reply(&m, &e);
    CHECK(m.error.code == WIRE_E_BAD_VALUE,
          "an error reply without a wire code takes its error's (%s)",
          wire_code_name(m.error.code));
}

int main(void)
{
    test_submit();
    test_logprobs();
    test_err_codes();
    test_defaults();
    test_client_messages();
    test_broker_replies();
    test_worker_messages();
    test_bad_table();
    test_bad_raw();
    test_exact_numbers();
    test_unfinished_results();
    test_req_zero();
    test_refusal_names_job();
    test_too_many_jobs();
    test_message_limits();
    test_encode_refusals();
    test_names();
    return check_done();
}
