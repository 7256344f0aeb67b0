/* wire: one schema table per message drives both encoding and decoding, so
 * the two cannot drift apart and every field gets the same checks. */
#include "proto/wire.h"

#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/utf8.h"

_Static_assert(sizeof(wire_state) == sizeof(int) && sizeof(wire_finish) == sizeof(int) &&
               sizeof(wire_code) == sizeof(int), "enums are stored as int");

/* ---- names -------------------------------------------------------------- */

/* clang-format off */
static const char *const TYPE_NAMES[WIRE_T_COUNT] = {
    [WIRE_T_SUBMIT] = "submit", [WIRE_T_STATUS] = "status", [WIRE_T_WAIT] = "wait",
    [WIRE_T_CANCEL] = "cancel", [WIRE_T_STATS] = "stats",
    [WIRE_T_SUBMIT_OK] = "submit_ok", [WIRE_T_STATUS_OK] = "status_ok",
    [WIRE_T_RESULT] = "result", [WIRE_T_WAIT_END] = "wait_end",
    [WIRE_T_CANCEL_OK] = "cancel_ok", [WIRE_T_STATS_OK] = "stats_ok",
    [WIRE_T_WAIT_ALIVE] = "wait_alive",
    [WIRE_T_ERROR] = "error",
    [WIRE_T_HELLO] = "hello", [WIRE_T_CREDIT] = "credit", [WIRE_T_JOB_RESULT] = "job_result",
    [WIRE_T_JOB_FAILURE] = "job_failure", [WIRE_T_BYE] = "bye",
    [WIRE_T_WELCOME] = "welcome", [WIRE_T_JOB] = "job", [WIRE_T_JOB_CANCEL] = "job_cancel",
    [WIRE_T_SHUTDOWN] = "shutdown", [WIRE_T_HEARTBEAT] = "heartbeat",
};
/* clang-format on */

/* clang-format off */
static const char *const CODE_NAMES[WIRE_E_COUNT] = {
    [WIRE_OK] = "ok", [WIRE_E_MALFORMED] = "malformed", [WIRE_E_VERSION] = "version",
    [WIRE_E_UNKNOWN_TYPE] = "unknown_type", [WIRE_E_MISSING_FIELD] = "missing_field",
    [WIRE_E_UNKNOWN_FIELD] = "unknown_field", [WIRE_E_BAD_TYPE] = "bad_type",
    [WIRE_E_BAD_VALUE] = "bad_value", [WIRE_E_TOO_LARGE] = "too_large",
    [WIRE_E_UNKNOWN_JOB] = "unknown_job", [WIRE_E_UNKNOWN_BATCH] = "unknown_batch",
    [WIRE_E_QUEUE_FULL] = "queue_full", [WIRE_E_UNKNOWN_WORKER] = "unknown_worker",
    [WIRE_E_SHUTTING_DOWN] = "shutting_down", [WIRE_E_INTERNAL] = "internal",
    [WIRE_E_UNAVAILABLE] = "unavailable",
    [WIRE_E_WORKER_IN_USE] = "worker_in_use", [WIRE_E_FORBIDDEN] = "forbidden",
    [WIRE_E_BAD_RESULT] = "bad_result",
};
/* clang-format on */

static const char *const STATE_NAMES[WIRE_STATE_COUNT] = {
    [WIRE_STATE_QUEUED] = "queued", [WIRE_STATE_RUNNING] = "running",
    [WIRE_STATE_DONE] = "done", [WIRE_STATE_FAILED] = "failed",
    [WIRE_STATE_CANCELLED] = "cancelled",
};

static const char *const FINISH_NAMES[WIRE_FINISH_COUNT] = {
    [WIRE_FINISH_STOP] = "stop", [WIRE_FINISH_LENGTH] = "length",
    [WIRE_FINISH_CONTEXT] = "context",
};

/* Index 0 is never a wire name (NONE, or "ok" which no error carries). */
static const char *name_at(const char *const *names, int n, int i)
{
    return i > 0 && i < n ? names[i] : NULL;
}

static int index_of(const char *const *names, int n, const char *name)
{
    for (int i = 1; name && i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0)
            return i;
    return 0;
}

const char *wire_type_name(wire_type t) { return name_at(TYPE_NAMES, WIRE_T_COUNT, (int)t); }
const char *wire_state_name(wire_state s) { return name_at(STATE_NAMES, WIRE_STATE_COUNT, (int)s); }
const char *wire_finish_name(wire_finish f) { return name_at(FINISH_NAMES, WIRE_FINISH_COUNT, (int)f); }
const char *wire_code_name(wire_code c)
{
    return (int)c >= 0 && c < WIRE_E_COUNT ? CODE_NAMES[c] : NULL;
}
wire_type wire_type_from_name(const char *n) { return (wire_type)index_of(TYPE_NAMES, WIRE_T_COUNT, n); }
wire_code wire_code_from_name(const char *n) { return (wire_code)index_of(CODE_NAMES, WIRE_E_COUNT, n); }
wire_state wire_state_from_name(const char *n) { return (wire_state)index_of(STATE_NAMES, WIRE_STATE_COUNT, n); }
wire_finish wire_finish_from_name(const char *n) { return (wire_finish)index_of(FINISH_NAMES, WIRE_FINISH_COUNT, n); }

/* ---- schemas --------------------------------------------------------------- */

typedef enum kind {
    K_U64,
    K_U32,
    K_I32,
    K_F32,
    K_F64,
    K_BOOL,
    K_STR,
    K_U64_ARRAY,
    K_U32_ARRAY,
    K_BOOL_ARRAY,
    K_STR_ARRAY,
    K_STATE,
    K_FINISH,
    K_CODE, /* enums travelling as their names */
    K_OBJ,
    K_OBJ_ARRAY,
    K_BIN, /* bytes, with their count at n_off */
} kind;

enum {
    F_REQ = 1,        /* must be present */
    F_LO_OPEN = 2,    /* lower bound excluded */
    F_SHARED_N = 4,   /* array whose count another array also sets */
    F_DONE = 8,       /* a result's field that only a done job has: not sent otherwise */
    F_OMIT_ZERO = 16, /* a u32 written only when not 0: a field added later, which an
                         older peer (that refuses unknown keys) never sees unless used */
};

struct schema;

/* lo/hi: the value range for numbers, the byte-length range for strings,
 * the element-count range for arrays.  elo/ehi: the range of array elements
 * (numbers) or their byte length (strings). */
typedef struct fdef {
    const char *name;
    kind k;
    unsigned flags;
    size_t off;
    size_t n_off;
    double lo, hi;
    double elo, ehi;
    const struct schema *sub;
} fdef;

typedef struct part {
    const fdef *f;
    size_t n;
    size_t base;
} part;

typedef struct rd rd;

typedef struct schema {
    part parts[2];
    size_t size;                             /* of one element, for K_OBJ_ARRAY */
    void (*init)(void *obj);
    int (*check)(const void *obj, rd *r);    /* cross-field rules, after the fields */
} schema;

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define BIG WIRE_NO_MAX
#define NUM(nm, kd, fl, st, mb, lo_, hi_) \
    {.name = nm, .k = kd, .flags = fl, .off = offsetof(st, mb), .lo = lo_, .hi = hi_}
#define STR(nm, fl, st, mb, lo_, hi_) NUM(nm, K_STR, fl, st, mb, lo_, hi_)
#define ARR(nm, kd, fl, st, mb, nmb, lo_, hi_, elo_, ehi_)                                \
    {.name = nm, .k = kd, .flags = fl, .off = offsetof(st, mb), .n_off = offsetof(st, nmb), \
     .lo = lo_, .hi = hi_, .elo = elo_, .ehi = ehi_}
#define OBJS(nm, fl, st, mb, nmb, lo_, hi_, sc)                                           \
    {.name = nm, .k = K_OBJ_ARRAY, .flags = fl, .off = offsetof(st, mb),                  \
     .n_off = offsetof(st, nmb), .lo = lo_, .hi = hi_, .sub = sc}

/* The job parameters' fields, from the one table (proto/job_params.h). */
#define PARAM_FIELD(name, kind, lo, hi, lo_open, dflt, engine) \
    NUM(#name, K_##kind, (lo_open) ? F_LO_OPEN : 0, job_params, name, lo, hi),

static const fdef PARAM_FIELDS[] = {
    JOB_PARAMS(PARAM_FIELD) ARR("stop", K_STR_ARRAY, 0, job_params, stop, n_stop, 0, WIRE_MAX_STOP,
                                1, WIRE_MAX_STOP_BYTES),
    STR("json_schema", 0, job_params, json_schema, 1, WIRE_MAX_SCHEMA_BYTES),
};

static const fdef MESSAGE_FIELDS[] = {
    STR("role", F_REQ, wire_message, role, 1, WIRE_MAX_NAME_BYTES),
    STR("content", F_REQ, wire_message, content, 0, WIRE_MAX_PROMPT_BYTES),
};

static const schema MESSAGE = {.parts = {{MESSAGE_FIELDS, N(MESSAGE_FIELDS), 0}},
                               .size = sizeof(wire_message)};

/* clang-format off */
#define PROMPT_FIELDS(st)                                                                   \
    STR("prompt", 0, st, prompt, 0, WIRE_MAX_PROMPT_BYTES),                                 \
    ARR("tokens", K_U32_ARRAY, 0, st, tokens, n_tokens, 1, WIRE_MAX_PROMPT_TOKENS, 0,       \
        WIRE_MAX_TOKEN_ID),                                                                 \
    OBJS("messages", 0, st, messages, n_messages, 1, WIRE_MAX_MESSAGES, &MESSAGE),          \
    STR("model", 0, st, model, 1, WIRE_MAX_NAME_BYTES)
/* clang-format on */

static const fdef SUBMIT_JOB_FIELDS[] = {
    STR("key", 0, wire_job, key, 1, WIRE_MAX_NAME_BYTES),
    NUM("priority", K_I32, 0, wire_job, priority, -1000, 1000),
    PROMPT_FIELDS(wire_job),
};

static const fdef JOB_FIELDS[] = {
    NUM("id", K_U64, F_REQ, wire_job, id, 1, BIG),
    NUM("attempt", K_U32, F_REQ, wire_job, attempt, 1, UINT32_MAX),
    PROMPT_FIELDS(wire_job),
};

static const fdef SELECT_FIELDS[] = {
    ARR("ids", K_U64_ARRAY, 0, wire_select, ids, n_ids, 1, WIRE_MAX_IDS, 1, BIG),
    STR("batch", 0, wire_select, batch, 1, WIRE_MAX_NAME_BYTES),
};

static const fdef WAIT_FIELDS[] = {
    NUM("timeout_ms", K_U32, 0, wire_wait, timeout_ms, 0, UINT32_MAX),
    NUM("stream", K_BOOL, 0, wire_wait, stream, 0, 0),
    NUM("heartbeat_ms", K_U32, F_OMIT_ZERO, wire_wait, heartbeat_ms, 0, WIRE_MAX_WAIT_HEARTBEAT_MS),
};

static const fdef COUNTS_FIELDS[] = {
    NUM("queued", K_U64, F_REQ, wire_counts, queued, 0, BIG),
    NUM("running", K_U64, F_REQ, wire_counts, running, 0, BIG),
    NUM("done", K_U64, F_REQ, wire_counts, done, 0, BIG),
    NUM("failed", K_U64, F_REQ, wire_counts, failed, 0, BIG),
    NUM("cancelled", K_U64, F_REQ, wire_counts, cancelled, 0, BIG),
};

static const fdef JOB_STATE_FIELDS[] = {
    NUM("id", K_U64, F_REQ, wire_job_state, id, 1, BIG),
    NUM("state", K_STATE, F_REQ, wire_job_state, state, 0, 0),
    NUM("attempts", K_U32, 0, wire_job_state, attempts, 0, UINT32_MAX),
    STR("worker", 0, wire_job_state, worker, 1, WIRE_MAX_NAME_BYTES),
};

#define TIMING(nm, fl) NUM(#nm, K_F64, fl, wire_result, timings.nm, 0, BIG)
#define DONE_TIMING(nm) TIMING(nm, F_DONE)

static const fdef LOGPROB_FIELDS[] = {
    NUM("token", K_U32, F_REQ, wire_logprob, token, 0, WIRE_MAX_TOKEN_ID),
    NUM("logprob", K_F32, F_REQ, wire_logprob, logprob, WIRE_LOGPROB_FLOOR, 0),
    {.name = "bytes",
     .k = K_BIN,
     .flags = F_REQ,
     .off = offsetof(wire_logprob, bytes),
     .n_off = offsetof(wire_logprob, n_bytes),
     .lo = 0,
     .hi = WIRE_MAX_TOKEN_BYTES},
};

static const schema LOGPROB = {.parts = {{LOGPROB_FIELDS, N(LOGPROB_FIELDS), 0}},
                               .size = sizeof(wire_logprob)};

static const fdef TOP_LOGPROBS_FIELDS[] = {
    OBJS("top_logprobs", F_REQ, wire_token_logprobs, top, n_top, 0, WIRE_MAX_TOP_LOGPROBS,
         &LOGPROB),
};

/* A generated token's: the token's own fields, then its alternatives. */
static const schema TOKEN_LOGPROBS = {
    .parts = {{LOGPROB_FIELDS, N(LOGPROB_FIELDS), offsetof(wire_token_logprobs, chosen)},
              {TOP_LOGPROBS_FIELDS, N(TOP_LOGPROBS_FIELDS), 0}},
    .size = sizeof(wire_token_logprobs)};

#define LOGPROBS_FIELD \
    OBJS("logprobs", 0, wire_result, logprobs, n_logprobs, 0, WIRE_MAX_GEN_TOKENS, &TOKEN_LOGPROBS)

static const fdef RESULT_FIELDS[] = {
    NUM("id", K_U64, F_REQ, wire_result, id, 1, BIG),
    NUM("state", K_STATE, F_REQ, wire_result, state, 0, 0),
    NUM("attempt", K_U32, 0, wire_result, attempt, 0, UINT32_MAX),
    STR("key", 0, wire_result, key, 1, WIRE_MAX_NAME_BYTES),
    STR("batch", 0, wire_result, batch, 1, WIRE_MAX_NAME_BYTES),
    STR("text", 0, wire_result, text, 0, WIRE_MAX_TEXT_BYTES),
    ARR("tokens", K_U32_ARRAY, 0, wire_result, tokens, n_tokens, 0, WIRE_MAX_GEN_TOKENS, 0,
        WIRE_MAX_TOKEN_ID),
    LOGPROBS_FIELD,
    NUM("finish", K_FINISH, 0, wire_result, finish, 0, 0),
    NUM("prompt_tokens", K_U32, F_DONE, wire_result, prompt_tokens, 0, UINT32_MAX),
    NUM("gen_tokens", K_U32, F_DONE, wire_result, gen_tokens, 0, WIRE_MAX_GEN_TOKENS),
    DONE_TIMING(queue_wait_ms),
    DONE_TIMING(prefill_ms),
    DONE_TIMING(prefill_tok_s),
    DONE_TIMING(decode_ms),
    DONE_TIMING(decode_tok_s),
    DONE_TIMING(total_ms),
    STR("worker", 0, wire_result, worker, 1, WIRE_MAX_NAME_BYTES),
    STR("model", 0, wire_result, model, 1, WIRE_MAX_NAME_BYTES),
    STR("error", 0, wire_result, error, 1, WIRE_MAX_MESSAGE_BYTES),
};

static const fdef JOB_RESULT_FIELDS[] = {
    NUM("id", K_U64, F_REQ, wire_result, id, 1, BIG),
    NUM("attempt", K_U32, F_REQ, wire_result, attempt, 1, UINT32_MAX),
    STR("text", F_REQ, wire_result, text, 0, WIRE_MAX_TEXT_BYTES),
    ARR("tokens", K_U32_ARRAY, F_REQ, wire_result, tokens, n_tokens, 0, WIRE_MAX_GEN_TOKENS, 0,
        WIRE_MAX_TOKEN_ID),
    LOGPROBS_FIELD,
    NUM("finish", K_FINISH, F_REQ, wire_result, finish, 0, 0),
    NUM("prompt_tokens", K_U32, F_REQ, wire_result, prompt_tokens, 0, UINT32_MAX),
    NUM("cached_prompt_tokens", K_U32, F_OMIT_ZERO, wire_result, cached_prompt_tokens, 0,
        UINT32_MAX),
    NUM("gen_tokens", K_U32, F_REQ, wire_result, gen_tokens, 0, WIRE_MAX_GEN_TOKENS),
    TIMING(prefill_ms, F_REQ),
    TIMING(decode_ms, F_REQ),
};

static const fdef WORKER_STAT_FIELDS[] = {
    STR("worker", F_REQ, wire_worker_stat, worker, 1, WIRE_MAX_NAME_BYTES),
    STR("host", F_REQ, wire_worker_stat, host, 1, WIRE_MAX_NAME_BYTES),
    NUM("gpu_index", K_I32, F_REQ, wire_worker_stat, gpu_index, -1, 1023),
    STR("gpu_name", 0, wire_worker_stat, gpu_name, 1, WIRE_MAX_NAME_BYTES),
    STR("engine", F_REQ, wire_worker_stat, engine, 1, 32),
    NUM("slots", K_U32, F_REQ, wire_worker_stat, slots, 0, WIRE_MAX_SLOTS),
    NUM("busy", K_U32, F_REQ, wire_worker_stat, busy, 0, WIRE_MAX_SLOTS),
    NUM("jobs_done", K_U64, F_REQ, wire_worker_stat, jobs_done, 0, BIG),
    NUM("tokens_done", K_U64, F_REQ, wire_worker_stat, tokens_done, 0, BIG),
};

static void init_job(void *obj)
{
    ((wire_job *)obj)->params = job_params_default();
}

static void init_wait(void *obj)
{
    ((wire_wait *)obj)->stream = true;
}

static int check_job(const void *obj, rd *r);
static int check_select(const void *obj, rd *r);
static int check_wait(const void *obj, rd *r);
static int check_result(const void *obj, rd *r);
static int check_job_result(const void *obj, rd *r);

#define PART(a, st) {a, N(a), 0}
#define SCHEMA1(a, st, ...) {.parts = {PART(a, st)}, .size = sizeof(st), __VA_ARGS__}

static const schema COUNTS = SCHEMA1(COUNTS_FIELDS, wire_counts);
static const schema JOB_STATE = SCHEMA1(JOB_STATE_FIELDS, wire_job_state);
static const schema RESULT = SCHEMA1(RESULT_FIELDS, wire_result, .check = check_result);
static const schema WORKER_STAT = SCHEMA1(WORKER_STAT_FIELDS, wire_worker_stat);
static const schema SUBMIT_JOB = {
    .parts = {PART(SUBMIT_JOB_FIELDS, wire_job),
              {PARAM_FIELDS, N(PARAM_FIELDS), offsetof(wire_job, params)}},
    .size = sizeof(wire_job),
    .init = init_job,
    .check = check_job};

static const fdef SUBMIT_FIELDS[] = {
    STR("batch", 0, wire_submit, batch, 1, WIRE_MAX_NAME_BYTES),
    STR("meta", 0, wire_submit, meta, 0, WIRE_MAX_META_BYTES),
    OBJS("jobs", F_REQ, wire_submit, jobs, n_jobs, 1, WIRE_MAX_JOBS_PER_SUBMIT, &SUBMIT_JOB),
};

static const fdef SUBMIT_OK_FIELDS[] = {
    ARR("ids", K_U64_ARRAY, F_REQ | F_SHARED_N, wire_submit_ok, ids, n, 1,
        WIRE_MAX_JOBS_PER_SUBMIT, 1, BIG),
    ARR("existing", K_BOOL_ARRAY, F_REQ | F_SHARED_N, wire_submit_ok, existing, n, 1,
        WIRE_MAX_JOBS_PER_SUBMIT, 0, 0),
};

static const fdef JOBS_REPLY_FIELDS[] = {
    OBJS("jobs", F_REQ, wire_jobs_reply, jobs, n_jobs, 0, WIRE_MAX_IDS, &JOB_STATE),
    {.name = "counts", .k = K_OBJ, .flags = F_REQ, .off = offsetof(wire_jobs_reply, counts),
     .sub = &COUNTS},
};

static const fdef WAIT_END_FIELDS[] = {
    NUM("done", K_U32, F_REQ, wire_wait_end, done, 0, WIRE_MAX_IDS),
    NUM("pending", K_U32, F_REQ, wire_wait_end, pending, 0, WIRE_MAX_IDS),
    NUM("timed_out", K_BOOL, F_REQ, wire_wait_end, timed_out, 0, 0),
    OBJS("results", 0, wire_wait_end, results, n_results, 0, WIRE_MAX_RESULTS, &RESULT),
};

static const fdef STATS_OK_FIELDS[] = {
    {.name = "counts", .k = K_OBJ, .flags = F_REQ, .off = offsetof(wire_stats_ok, counts),
     .sub = &COUNTS},
    OBJS("workers", F_REQ, wire_stats_ok, workers, n_workers, 0, WIRE_MAX_WORKERS, &WORKER_STAT),
};

static const fdef ERROR_FIELDS[] = {
    NUM("code", K_CODE, F_REQ, wire_error_msg, code, 0, 0),
    STR("field", 0, wire_error_msg, field, 1, sizeof(((wire_error *)0)->field) - 1),
    STR("message", F_REQ, wire_error_msg, message, 1, WIRE_MAX_MESSAGE_BYTES),
};

static const fdef HELLO_FIELDS[] = {
    STR("worker", F_REQ, wire_hello, worker, 1, WIRE_MAX_NAME_BYTES),
    STR("host", F_REQ, wire_hello, host, 1, WIRE_MAX_NAME_BYTES),
    NUM("pid", K_U32, F_REQ, wire_hello, pid, 1, UINT32_MAX),
    NUM("gpu_index", K_I32, F_REQ, wire_hello, gpu_index, -1, 1023),
    STR("gpu_name", 0, wire_hello, gpu_name, 1, WIRE_MAX_NAME_BYTES),
    STR("gpu_uuid", 0, wire_hello, gpu_uuid, 1, WIRE_MAX_NAME_BYTES),
    STR("model", F_REQ, wire_hello, model, 1, WIRE_MAX_NAME_BYTES),
    ARR("aliases", K_STR_ARRAY, 0, wire_hello, aliases, n_aliases, 0, WIRE_MAX_ALIASES, 1,
        WIRE_MAX_NAME_BYTES),
    STR("model_hash", 0, wire_hello, model_hash, 1, WIRE_MAX_NAME_BYTES),
    STR("engine", F_REQ, wire_hello, engine, 1, 32),
    NUM("slots", K_U32, F_REQ, wire_hello, slots, 1, WIRE_MAX_SLOTS),
    NUM("n_ctx", K_U32, 0, wire_hello, n_ctx, 0, UINT32_MAX),
};

static const fdef WELCOME_FIELDS[] = {
    NUM("heartbeat_ms", K_U32, F_REQ, wire_welcome, heartbeat_ms, 1, 3600000),
    NUM("dead_after_ms", K_U32, F_REQ, wire_welcome, dead_after_ms, 1, 86400000),
};

static const fdef CREDIT_FIELDS[] = {
    {.name = "n", .k = K_U32, .flags = F_REQ, .off = 0, .lo = 1, .hi = WIRE_MAX_SLOTS},
};

static const fdef FAILURE_FIELDS[] = {
    NUM("id", K_U64, F_REQ, wire_job_failure, id, 1, BIG),
    NUM("attempt", K_U32, F_REQ, wire_job_failure, attempt, 1, UINT32_MAX),
    STR("reason", F_REQ, wire_job_failure, reason, 1, WIRE_MAX_MESSAGE_BYTES),
    NUM("retryable", K_BOOL, F_REQ, wire_job_failure, retryable, 0, 0),
};

static const fdef JOB_CANCEL_FIELDS[] = {
    {.name = "id", .k = K_U64, .flags = F_REQ, .off = 0, .lo = 1, .hi = BIG},
};

static const fdef SHUTDOWN_FIELDS[] = {
    {.name = "grace_ms", .k = K_U32, .flags = F_REQ, .off = 0, .lo = 0, .hi = UINT32_MAX},
};

static const schema EMPTY = {.size = 0};
static const schema SUBMIT = SCHEMA1(SUBMIT_FIELDS, wire_submit);
static const schema SELECT = SCHEMA1(SELECT_FIELDS, wire_select, .check = check_select);
static const schema WAIT = {
    .parts = {PART(WAIT_FIELDS, wire_wait),
              {SELECT_FIELDS, N(SELECT_FIELDS), offsetof(wire_wait, sel)}},
    .size = sizeof(wire_wait), .init = init_wait, .check = check_wait};
/* F_SHARED_N makes the decoder match the counts of "ids" and "existing". */
static const schema SUBMIT_OK = SCHEMA1(SUBMIT_OK_FIELDS, wire_submit_ok);
static const schema JOBS_REPLY = SCHEMA1(JOBS_REPLY_FIELDS, wire_jobs_reply);
static const schema JOB_RESULT = SCHEMA1(JOB_RESULT_FIELDS, wire_result, .check = check_job_result);
static const schema WAIT_END = SCHEMA1(WAIT_END_FIELDS, wire_wait_end);
static const schema STATS_OK = SCHEMA1(STATS_OK_FIELDS, wire_stats_ok);
static const schema ERROR = SCHEMA1(ERROR_FIELDS, wire_error_msg);
static const schema HELLO = SCHEMA1(HELLO_FIELDS, wire_hello);
static const schema WELCOME = SCHEMA1(WELCOME_FIELDS, wire_welcome);
static const schema CREDIT = SCHEMA1(CREDIT_FIELDS, uint32_t);
static const schema JOB = {.parts = {PART(JOB_FIELDS, wire_job),
                                     {PARAM_FIELDS, N(PARAM_FIELDS), offsetof(wire_job, params)}},
                           .size = sizeof(wire_job),
                           .init = init_job,
                           .check = check_job};
static const schema FAILURE = SCHEMA1(FAILURE_FIELDS, wire_job_failure);
static const schema JOB_CANCEL = SCHEMA1(JOB_CANCEL_FIELDS, uint64_t);
static const schema SHUTDOWN = SCHEMA1(SHUTDOWN_FIELDS, uint32_t);

enum { C2B = WIRE_DIR_CLIENT_TO_BROKER, B2C = WIRE_DIR_BROKER_TO_CLIENT,
       W2B = WIRE_DIR_WORKER_TO_BROKER, B2W = WIRE_DIR_BROKER_TO_WORKER };

typedef struct msgdef {
    unsigned dirs;
    const schema *sc;
} msgdef;

/* clang-format off */
static const msgdef MSGS[WIRE_T_COUNT] = {
    [WIRE_T_SUBMIT] = {C2B, &SUBMIT},       [WIRE_T_STATUS] = {C2B, &SELECT},
    [WIRE_T_WAIT] = {C2B, &WAIT},           [WIRE_T_CANCEL] = {C2B, &SELECT},
    [WIRE_T_STATS] = {C2B, &EMPTY},
    [WIRE_T_SUBMIT_OK] = {B2C, &SUBMIT_OK}, [WIRE_T_STATUS_OK] = {B2C, &JOBS_REPLY},
    [WIRE_T_RESULT] = {B2C, &RESULT},       [WIRE_T_WAIT_END] = {B2C, &WAIT_END},
    [WIRE_T_CANCEL_OK] = {B2C, &JOBS_REPLY},[WIRE_T_STATS_OK] = {B2C, &STATS_OK},
    [WIRE_T_WAIT_ALIVE] = {B2C, &EMPTY},
    [WIRE_T_ERROR] = {B2C | B2W, &ERROR},
    [WIRE_T_HELLO] = {W2B, &HELLO},         [WIRE_T_CREDIT] = {W2B, &CREDIT},
    [WIRE_T_JOB_RESULT] = {W2B, &JOB_RESULT}, [WIRE_T_JOB_FAILURE] = {W2B, &FAILURE},
    [WIRE_T_BYE] = {W2B, &EMPTY},
    [WIRE_T_WELCOME] = {B2W, &WELCOME},     [WIRE_T_JOB] = {B2W, &JOB},
    [WIRE_T_JOB_CANCEL] = {B2W, &JOB_CANCEL}, [WIRE_T_SHUTDOWN] = {B2W, &SHUTDOWN},
    [WIRE_T_HEARTBEAT] = {W2B | B2W, &EMPTY},
};
/* clang-format on */

unsigned wire_type_dirs(wire_type t)
{
    return t > WIRE_T_NONE && t < WIRE_T_COUNT ? MSGS[t].dirs : 0;
}

/* "req" belongs to the conversation with clients. */
static bool has_req(wire_type t)
{
    return (MSGS[t].dirs & (C2B | B2C)) != 0;
}

void wire_msg_init(wire_msg *m, wire_type t)
{
    memset(m, 0, sizeof *m);
    m->type = t;
    const schema *sc = wire_type_dirs(t) ? MSGS[t].sc : NULL;
    if (sc && sc->init)
        sc->init(&m->submit);
}

/* ---- errors ------------------------------------------------------------------ */

static int vfail(wire_error *err, wire_code code, const char *field, const char *fmt,
                 va_list ap)
{
    if (!err)
        return -1;
    err->code = code;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    char text[LLMQ_ERR_MAX];
    vsnprintf(text, sizeof text, fmt, ap);
    if (err->field[0])
        llmq_errf(&err->err, "%s: %s", err->field, text);
    else
        llmq_errf(&err->err, "%s", text);
    return -1;
}

int wire_fail(wire_error *err, wire_code code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(err, code, field, fmt, ap);
    va_end(ap);
    return -1;
}

static const struct {
    wire_code wire;
    bool retryable;
} BY_ERR_CODE[LLMQ_ERR_CODE_COUNT] = {
    [LLMQ_ERR_GENERIC] = {WIRE_E_INTERNAL, false},
    [LLMQ_ERR_INVALID] = {WIRE_E_BAD_VALUE, false},
    [LLMQ_ERR_NO_ROOM] = {WIRE_E_QUEUE_FULL, true},
    [LLMQ_ERR_UNAVAILABLE] = {WIRE_E_SHUTTING_DOWN, true},
    [LLMQ_ERR_IO] = {WIRE_E_INTERNAL, true},
    [LLMQ_ERR_INTERNAL] = {WIRE_E_INTERNAL, false},
};

wire_code wire_code_for(llmq_err_code c)
{
    return (unsigned)c < LLMQ_ERR_CODE_COUNT ? BY_ERR_CODE[c].wire : WIRE_E_INTERNAL;
}

bool wire_retryable(llmq_err_code c)
{
    return (unsigned)c < LLMQ_ERR_CODE_COUNT && BY_ERR_CODE[c].retryable;
}

void wire_error_reply(wire_msg *m, const wire_error *err)
{
    wire_msg_init(m, WIRE_T_ERROR);
    m->req = err->req;
    m->error.code = err->code == WIRE_OK ? wire_code_for(err->err.code) : err->code;
    m->error.field = err->field[0] ? err->field : NULL;
    m->error.message = err->err.msg[0] ? err->err.msg : wire_code_name(m->error.code);
}

/* ---- decoding ---------------------------------------------------------------- */

struct rd {
    msgpack_zone *zone;
    wire_error *err;
    char path[128];
    size_t plen;
};

static int rd_fail(rd *r, wire_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int rd_fail(rd *r, wire_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(r->err, code, r->path, fmt, ap);
    va_end(ap);
    return -1;
}

/* Path segments are appended and cut back by saving plen; a path too long for
 * the buffer is truncated, which only shortens error messages. */
static size_t path_push(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static size_t path_push(rd *r, const char *fmt, ...)
{
    size_t saved = r->plen;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->path + r->plen, sizeof r->path - r->plen, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->plen += (size_t)n < sizeof r->path - r->plen ? (size_t)n : sizeof r->path - r->plen - 1;
    return saved;
}

static void path_key(rd *r, const char *name, size_t *saved)
{
    *saved = r->plen ? path_push(r, ".%s", name) : path_push(r, "%s", name);
}

static void path_pop(rd *r, size_t saved)
{
    r->plen = saved;
    r->path[saved] = '\0';
}

static const char *obj_type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "str";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    case MSGPACK_OBJECT_BIN: return "bin";
    default: return "ext";
    }
}

/* msgpack-c leaves the pointer of an empty str NULL, which the mem*
 * functions may not be given even with a zero length. */
static const char *str_ptr(const msgpack_object *o)
{
    return o->via.str.size ? o->via.str.ptr : "";
}

static int bad_type(rd *r, const msgpack_object *o, const char *want)
{
    return rd_fail(r, WIRE_E_BAD_TYPE, "expected %s, got %s", want, obj_type_name(o));
}

/* The shortest text that reads back as v, without an exponent where %g
 * would not need one: a refusal shows the number as it was sent (100.0001,
 * not 100), and a bound as it is written (100, not 1e+02). */
static const char *exact(double v, char buf[32])
{
    const bool plain = fabs(v) < 1e15 && (v == 0 || fabs(v) >= 1e-4);
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, v);
        if (strtod(buf, NULL) == v && !(plain && strchr(buf, 'e')))
            break;
    }
    return buf;
}

/* text: the value, printed from its own integer type (a double would show
 * 2^64-1 as 18446744073709551616). */
static int range_fail(rd *r, const char *text, double lo, double hi)
{
    char l[32], h[32];
    if (hi >= BIG)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%s is out of range (at least %s)", text, exact(lo, l));
    return rd_fail(r, WIRE_E_BAD_VALUE, "%s is out of range [%s, %s]", text, exact(lo, l),
                   exact(hi, h));
}

/* Integer in [lo, hi]; the bounds are exact for every range in the tables
 * except "no upper bound" (BIG), which UINT64 values meet by construction. */
static int read_int(rd *r, const msgpack_object *o, double lo, double hi,
                    int64_t *si, uint64_t *ui)
{
    char text[32];
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        uint64_t v = o->via.u64;
        snprintf(text, sizeof text, "%" PRIu64, v);
        if ((double)v < lo || (hi < BIG && (double)v > hi))
            return range_fail(r, text, lo, hi);
        *ui = v;
        *si = v > INT64_MAX ? INT64_MAX : (int64_t)v;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        int64_t v = o->via.i64;
        snprintf(text, sizeof text, "%" PRId64, v);
        if ((double)v < lo || (double)v > hi)
            return range_fail(r, text, lo, hi);
        *si = v;
        *ui = 0;
        return 0;
    }
    return bad_type(r, o, "int");
}

static int read_float(rd *r, const msgpack_object *o, const fdef *f, double *out)
{
    double v;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        v = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = (double)o->via.i64;
    else
        return bad_type(r, o, "float");
    if (isnan(v))
        return rd_fail(r, WIRE_E_BAD_VALUE, "NaN is not allowed");
    if (isinf(v))
        return rd_fail(r, WIRE_E_BAD_VALUE, "infinity is not allowed");
    const double given = v;
    if (f->k == K_F32)
        v = (double)(float)v;   /* judge the value the engine will see */
    bool low = (f->flags & F_LO_OPEN) ? v <= f->lo : v < f->lo;
    char t[32], l[32], h[32];
    if (low || v > f->hi)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%s is out of range %c%s, %s]", exact(given, t),
                       (f->flags & F_LO_OPEN) ? '(' : '[', exact(f->lo, l), exact(f->hi, h));
    *out = v;
    return 0;
}

/* A str object, checked and copied NUL-terminated into the arena. */
static int read_str(rd *r, const msgpack_object *o, double lo, double hi, const char **out)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return bad_type(r, o, "str");
    size_t n = o->via.str.size;
    const char *s = str_ptr(o);
    if ((double)n > hi)
        return rd_fail(r, WIRE_E_TOO_LARGE, "%zu bytes, at most %.0f allowed", n, hi);
    if ((double)n < lo)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%zu bytes, at least %.0f required", n, lo);
    size_t ok = utf8_valid_prefix(s, n);
    if (ok != n)
        return rd_fail(r, WIRE_E_BAD_VALUE, "invalid UTF-8 at byte %zu", ok);
    if (memchr(s, '\0', n))
        return rd_fail(r, WIRE_E_BAD_VALUE, "NUL byte at offset %zu",
                       (size_t)((const char *)memchr(s, '\0', n) - s));
    char *copy = msgpack_zone_malloc(r->zone, n + 1);
    if (!copy)
        return rd_fail(r, WIRE_E_INTERNAL, "out of memory");
    memcpy(copy, s, n);
    copy[n] = '\0';
    *out = copy;
    return 0;
}

static int read_enum(rd *r, const msgpack_object *o, kind k, int *out)
{
    const char *name;
    if (read_str(r, o, 1, 64, &name) < 0)
        return -1;
    int v = k == K_STATE    ? (int)wire_state_from_name(name)
            : k == K_FINISH ? (int)wire_finish_from_name(name)
                            : (int)wire_code_from_name(name);
    if (v == 0)
        return rd_fail(r, WIRE_E_BAD_VALUE, "unknown value \"%s\"", name);
    *out = v;
    return 0;
}

static int read_obj(rd *r, const msgpack_object *o, const schema *sc, void *obj);

/* An array whose count is in [f->lo, f->hi]; elements are read by read_elem. */
static void *alloc_array(rd *r, const msgpack_object *o, const fdef *f, size_t elem,
                         uint32_t *n)
{
    if (o->type != MSGPACK_OBJECT_ARRAY) {
        bad_type(r, o, "array");
        return NULL;
    }
    uint32_t count = o->via.array.size;
    if ((double)count > f->hi) {
        rd_fail(r, WIRE_E_TOO_LARGE, "%u elements, at most %.0f allowed", count, f->hi);
        return NULL;
    }
    if ((double)count < f->lo) {
        rd_fail(r, WIRE_E_BAD_VALUE, "%u elements, at least %.0f required", count, f->lo);
        return NULL;
    }
    *n = count;
    void *p = msgpack_zone_malloc(r->zone, count ? (size_t)count * elem : 1);
    if (!p)
        rd_fail(r, WIRE_E_INTERNAL, "out of memory");
    else
        memset(p, 0, count ? (size_t)count * elem : 1);
    return p;
}

static int read_elem(rd *r, const msgpack_object *e, const fdef *f, char *arr, uint32_t i)
{
    int64_t si = 0;
    uint64_t ui = 0;
    switch (f->k) {
    case K_U64_ARRAY:
        if (read_int(r, e, f->elo, f->ehi, &si, &ui) < 0)
            return -1;
        ((uint64_t *)(void *)arr)[i] = ui;
        return 0;
    case K_U32_ARRAY:
        if (read_int(r, e, f->elo, f->ehi, &si, &ui) < 0)
            return -1;
        ((uint32_t *)(void *)arr)[i] = (uint32_t)ui;
        return 0;
    case K_BOOL_ARRAY:
        if (e->type != MSGPACK_OBJECT_BOOLEAN)
            return bad_type(r, e, "bool");
        ((bool *)(void *)arr)[i] = e->via.boolean;
        return 0;
    case K_STR_ARRAY:
        return read_str(r, e, f->elo, f->ehi, &((const char **)(void *)arr)[i]);
    default: /* K_OBJ_ARRAY */
        return read_obj(r, e, f->sub, arr + (size_t)i * f->sub->size);
    }
}

static size_t elem_size(const fdef *f)
{
    switch (f->k) {
    case K_U64_ARRAY: return sizeof(uint64_t);
    case K_U32_ARRAY: return sizeof(uint32_t);
    case K_BOOL_ARRAY: return sizeof(bool);
    case K_STR_ARRAY: return sizeof(const char *);
    default: return f->sub->size;
    }
}

static int read_array(rd *r, const msgpack_object *o, const fdef *f, char *base)
{
    uint32_t n = 0;
    char *arr = alloc_array(r, o, f, elem_size(f), &n);
    if (!arr)
        return -1;
    uint32_t *np = (uint32_t *)(void *)(base + f->n_off);
    if ((f->flags & F_SHARED_N) && *np != 0 && *np != n)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%u elements where the other array has %u", n,
                       *np);
    for (uint32_t i = 0; i < n; i++) {
        size_t saved = path_push(r, "[%u]", i);
        int rc = read_elem(r, &o->via.array.ptr[i], f, arr, i);
        if (rc < 0)
            return -1;
        path_pop(r, saved);
    }
    memcpy(base + f->off, &arr, sizeof arr);
    *np = n;
    return 0;
}

static int read_bin(rd *r, const msgpack_object *o, const fdef *f, char *base)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return bad_type(r, o, "bin");
    uint32_t n = o->via.bin.size;
    if ((double)n > f->hi)
        return rd_fail(r, WIRE_E_TOO_LARGE, "%u bytes, at most %.0f allowed", n, f->hi);
    if ((double)n < f->lo)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%u bytes, at least %.0f required", n, f->lo);
    uint8_t *copy = msgpack_zone_malloc(r->zone, n ? n : 1);
    if (!copy)
        return rd_fail(r, WIRE_E_INTERNAL, "out of memory");
    if (n)
        memcpy(copy, o->via.bin.ptr, n);
    memcpy(base + f->off, &copy, sizeof copy);
    memcpy(base + f->n_off, &n, sizeof n);
    return 0;
}

static int read_scalar(rd *r, const msgpack_object *o, const fdef *f, char *p)
{
    int64_t si = 0;
    uint64_t ui = 0;
    double d = 0;
    int e = 0;
    switch (f->k) {
    case K_U64:
        if (read_int(r, o, f->lo, f->hi, &si, &ui) < 0)
            return -1;
        memcpy(p, &ui, sizeof ui);
        return 0;
    case K_U32: {
        if (read_int(r, o, f->lo, f->hi, &si, &ui) < 0)
            return -1;
        uint32_t v = (uint32_t)ui;
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case K_I32: {
        if (read_int(r, o, f->lo, f->hi, &si, &ui) < 0)
            return -1;
        int32_t v = (int32_t)si;
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case K_F32: {
        if (read_float(r, o, f, &d) < 0)
            return -1;
        float v = (float)d;
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case K_F64:
        if (read_float(r, o, f, &d) < 0)
            return -1;
        memcpy(p, &d, sizeof d);
        return 0;
    case K_BOOL:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return bad_type(r, o, "bool");
        memcpy(p, &o->via.boolean, sizeof(bool));
        return 0;
    case K_STR:
        return read_str(r, o, f->lo, f->hi, (const char **)(void *)p);
    case K_STATE:
    case K_FINISH:
    case K_CODE:
        if (read_enum(r, o, f->k, &e) < 0)
            return -1;
        memcpy(p, &e, sizeof e);
        return 0;
    case K_OBJ:
        return read_obj(r, o, f->sub, p);
    case K_BIN: return read_bin(r, o, f, p - f->off);
    default:
        return read_array(r, o, f, p - f->off);
    }
}

/* Finds a key among the schema's fields; *index counts across parts. */
static const fdef *find_field(const schema *sc, const char *key, size_t klen, size_t *base,
                               unsigned *index)
{
    unsigned idx = 0;
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < sc->parts[p].n; i++, idx++) {
            const fdef *f = &sc->parts[p].f[i];
            if (strlen(f->name) == klen && memcmp(f->name, key, klen) == 0) {
                *base = sc->parts[p].base;
                *index = idx;
                return f;
            }
        }
    }
    return NULL;
}

static int key_name(rd *r, const msgpack_object *k, char *buf, size_t size)
{
    if (k->type != MSGPACK_OBJECT_STR)
        return rd_fail(r, WIRE_E_BAD_TYPE, "map key is %s, expected str", obj_type_name(k));
    size_t n = k->via.str.size;
    if (n >= size || utf8_valid_prefix(str_ptr(k), n) != n || memchr(str_ptr(k), '\0', n))
        return rd_fail(r, WIRE_E_UNKNOWN_FIELD, "unknown key (%zu bytes)", n);
    memcpy(buf, str_ptr(k), n);
    buf[n] = '\0';
    return 0;
}

static bool is_common_key(const char *k)
{
    return strcmp(k, "v") == 0 || strcmp(k, "type") == 0 || strcmp(k, "req") == 0;
}

static int check_required(rd *r, const schema *sc, uint64_t seen)
{
    unsigned idx = 0;
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sc->parts[p].n; i++, idx++)
            if ((sc->parts[p].f[i].flags & F_REQ) && !(seen >> idx & 1)) {
                size_t saved;
                path_key(r, sc->parts[p].f[i].name, &saved);
                return rd_fail(r, WIRE_E_MISSING_FIELD, "required field is missing");
            }
    return 0;
}

/* Reads a map into obj per sc.  top: the message body, whose common keys
 * (v, type, req) were handled by the caller. */
static int read_fields(rd *r, const msgpack_object *o, const schema *sc, void *obj, bool top)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return bad_type(r, o, "map");
    uint64_t seen = 0;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        char key[64];
        if (key_name(r, &kv->key, key, sizeof key) < 0)
            return -1;
        if (top && is_common_key(key))
            continue;
        size_t base, saved;
        unsigned idx;
        path_key(r, key, &saved);
        const fdef *f = find_field(sc, key, strlen(key), &base, &idx);
        if (!f)
            return rd_fail(r, WIRE_E_UNKNOWN_FIELD, "unknown field");
        if (seen >> idx & 1)
            return rd_fail(r, WIRE_E_BAD_VALUE, "key given twice");
        seen |= (uint64_t)1 << idx;
        if (read_scalar(r, &kv->val, f, (char *)obj + base + f->off) < 0)
            return -1;
        path_pop(r, saved);
    }
    if (check_required(r, sc, seen) < 0)
        return -1;
    return sc->check ? sc->check(obj, r) : 0;
}

static int read_obj(rd *r, const msgpack_object *o, const schema *sc, void *obj)
{
    if (sc->init)
        sc->init(obj);
    return read_fields(r, o, sc, obj, false);
}

/* Exactly one of two alternative fields must be present. */
static int one_of(rd *r, bool a, bool b, const char *na, const char *nb)
{
    if (!a && !b)
        return rd_fail(r, WIRE_E_MISSING_FIELD, "one of \"%s\" or \"%s\" is required", na, nb);
    if (a && b)
        return rd_fail(r, WIRE_E_BAD_VALUE, "\"%s\" and \"%s\" are mutually exclusive", na, nb);
    return 0;
}

/* A job's prompt is its text, its token ids or its messages: one of them. */
static int one_prompt(rd *r, const wire_job *j)
{
    const bool given[] = {j->prompt != NULL, j->tokens != NULL, j->messages != NULL};
    static const char *const names[] = {"prompt", "tokens", "messages"};
    int first = -1;
    for (int i = 0; i < 3; i++) {
        if (given[i] && first >= 0)
            return rd_fail(r, WIRE_E_BAD_VALUE, "\"%s\" and \"%s\" are mutually exclusive",
                           names[first], names[i]);
        if (given[i])
            first = i;
    }
    if (first < 0)
        return rd_fail(r, WIRE_E_MISSING_FIELD,
                       "one of \"prompt\", \"tokens\" or \"messages\" is required");
    return 0;
}

/* A chat job's text is bounded as a prompt is, all of its messages together. */
static int check_messages(rd *r, const wire_job *j)
{
    size_t total = 0;
    for (uint32_t i = 0; i < j->n_messages; i++)
        total += j->messages[i].content ? strlen(j->messages[i].content) : 0;
    if (total <= WIRE_MAX_PROMPT_BYTES)
        return 0;
    size_t saved;
    path_key(r, "messages", &saved);
    return rd_fail(r, WIRE_E_TOO_LARGE, "%zu bytes of content in all, at most %u allowed", total,
                   WIRE_MAX_PROMPT_BYTES);
}

/* A job's output format: a schema that is a JSON object, or any JSON object;
 * either decides where the output ends, so not with ignore_eos.  Whether
 * llmq can honour the schema's keywords is the worker's to say, when it
 * compiles it (engine/jsonschema.h). */
static int check_format(const job_params *p, rd *r)
{
    size_t saved;
    if (p->json_schema && p->json_object) {
        path_key(r, "json_object", &saved);
        return rd_fail(r, WIRE_E_BAD_VALUE, "not with \"json_schema\": one output format");
    }
    if ((p->json_schema || p->json_object) && p->ignore_eos) {
        path_key(r, "ignore_eos", &saved);
        const char *format = p->json_schema ? "json_schema" : "json_object";
        return rd_fail(r, WIRE_E_BAD_VALUE,
                       "not with \"%s\": the format decides where the output ends", format);
    }
    if (!p->json_schema)
        return 0;
    json_value *doc = NULL;
    llmq_err err;
    int rc = json_parse(p->json_schema, strlen(p->json_schema), &doc, &err);
    json_type t = rc == 0 ? doc->type : JSON_NULL;
    json_free(doc);
    if (rc == 0 && t == JSON_OBJECT)
        return 0;
    path_key(r, "json_schema", &saved);
    if (rc != 0)
        return rd_fail(r, WIRE_E_BAD_VALUE, "not JSON: %s", err.msg);
    return rd_fail(r, WIRE_E_BAD_VALUE, "a schema is a JSON object, not %s", json_type_name(t));
}

static int check_job(const void *obj, rd *r)
{
    const wire_job *j = obj;
    if (j->params.top_logprobs > 0 && !j->params.logprobs) {
        size_t saved;
        path_key(r, "top_logprobs", &saved);
        return rd_fail(r, WIRE_E_BAD_VALUE, "%d alternatives need \"logprobs\": true",
                       j->params.top_logprobs);
    }
    if (check_format(&j->params, r) < 0)
        return -1;
    return one_prompt(r, j) < 0 ? -1 : check_messages(r, j);
}

static int check_select(const void *obj, rd *r)
{
    const wire_select *s = obj;
    return one_of(r, s->ids != NULL, s->batch != NULL, "ids", "batch");
}

static int check_wait(const void *obj, rd *r)
{
    const wire_wait *w = obj;
    if (check_select(&w->sel, r) < 0)
        return -1;
    size_t saved;
    if (!w->stream && w->sel.n_ids > WIRE_MAX_RESULTS) {
        path_key(r, "ids", &saved);
        return rd_fail(r, WIRE_E_TOO_LARGE, "%u ids, at most %u without streaming",
                       w->sel.n_ids, WIRE_MAX_RESULTS);
    }
    if (w->heartbeat_ms == 0)
        return 0;
    path_key(r, "heartbeat_ms", &saved);
    /* A REQ client may get one reply only: heartbeats come between results. */
    if (!w->stream)
        return rd_fail(r, WIRE_E_BAD_VALUE, "heartbeats need \"stream\": true");
    if (w->heartbeat_ms < WIRE_MIN_WAIT_HEARTBEAT_MS)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%u is out of range (0, or at least %u)",
                       w->heartbeat_ms, WIRE_MIN_WAIT_HEARTBEAT_MS);
    return 0;
}

/* Logprobs, when there are, are the generated tokens'. */
static int check_job_result(const void *obj, rd *r)
{
    const wire_result *res = obj;
    if (!res->logprobs)
        return 0;
    size_t saved;
    path_key(r, "logprobs", &saved);
    if (res->n_logprobs != res->n_tokens)
        return rd_fail(r, WIRE_E_BAD_VALUE, "%u entries for %u tokens", res->n_logprobs,
                       res->n_tokens);
    for (uint32_t i = 0; i < res->n_logprobs; i++)
        if (res->logprobs[i].chosen.token != res->tokens[i]) {
            path_push(r, "[%u].token", i);
            return rd_fail(r, WIRE_E_BAD_VALUE, "%u where tokens[%u] is %u",
                           res->logprobs[i].chosen.token, i, res->tokens[i]);
        }
    path_pop(r, saved);
    return 0;
}

static int check_result(const void *obj, rd *r)
{
    const wire_result *res = obj;
    size_t saved;
    switch (res->state) {
    case WIRE_STATE_DONE:
        if (!res->text || res->finish == WIRE_FINISH_NONE) {
            path_key(r, res->text ? "finish" : "text", &saved);
            return rd_fail(r, WIRE_E_MISSING_FIELD, "required when state is \"done\"");
        }
        return check_job_result(obj, r);
    case WIRE_STATE_FAILED:
    case WIRE_STATE_CANCELLED:
        if (!res->error) {
            path_key(r, "error", &saved);
            return rd_fail(r, WIRE_E_MISSING_FIELD, "required when state is \"%s\"",
                           wire_state_name(res->state));
        }
        return 0;
    default:
        path_key(r, "state", &saved);
        return rd_fail(r, WIRE_E_BAD_VALUE, "a result's state is final, not \"%s\"",
                       wire_state_name(res->state));
    }
}

/* ---- structural pre-scan --------------------------------------------------------
 * msgpack-c allocates an array's objects from its header count before reading
 * them, so a 5-byte body could ask for gigabytes.  This walk checks, before
 * msgpack-c sees the bytes, that every container's count fits in the bytes
 * left (each element takes at least one), that nesting stays under
 * WIRE_MAX_DEPTH and that exactly one object fills the buffer. */

static int be_len(const unsigned char *p, size_t w, size_t left, uint64_t *out)
{
    if (left < w)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < w; i++)
        v = v << 8 | p[i];
    *out = v;
    return 0;
}

static int scan(const unsigned char *p, size_t len, size_t *pos, int depth)
{
    if (depth > WIRE_MAX_DEPTH || *pos >= len)
        return -1;
    unsigned char b = p[(*pos)++];
    size_t left = len - *pos;
    uint64_t n = 0, skip = 0, elems = 0;
    static const unsigned char FIXED[] = {   /* payload bytes after 0xc0..0xdf */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 8, 1, 2, 4, 8,
        1, 2, 4, 8, 2, 3, 5, 9, 17, 0, 0, 0, 0, 0, 0, 0};
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b <= 0x8f)
        elems = 2u * (b & 0x0f);
    else if (b <= 0x9f)
        elems = b & 0x0f;
    else if (b <= 0xbf)
        skip = b & 0x1f;
    else if (b == 0xc1)
        return -1;
    else if (b >= 0xc4 && b <= 0xc9) {   /* bin 8/16/32, ext 8/16/32 */
        size_t w = (size_t)1 << ((b - 0xc4) % 3);
        if (be_len(p + *pos, w, left, &n) < 0)
            return -1;
        *pos += w;
        skip = n + (b >= 0xc7);
    } else if (b >= 0xd9 && b <= 0xdb) {  /* str 8/16/32 */
        size_t w = (size_t)1 << (b - 0xd9);
        if (be_len(p + *pos, w, left, &n) < 0)
            return -1;
        *pos += w;
        skip = n;
    } else if (b >= 0xdc) {                /* array/map 16/32 */
        size_t w = (b == 0xdc || b == 0xde) ? 2 : 4;
        if (be_len(p + *pos, w, left, &n) < 0)
            return -1;
        *pos += w;
        elems = b >= 0xde ? 2 * n : n;
    } else {
        skip = FIXED[b - 0xc0];
    }
    if (skip > len - *pos || elems > len - *pos)
        return -1;
    *pos += skip;
    for (uint64_t i = 0; i < elems; i++)
        if (scan(p, len, pos, depth + 1) < 0)
            return -1;
    return 0;
}

/* ---- top level ------------------------------------------------------------------ */

static const msgpack_object *map_get(const msgpack_object *o, const char *key)
{
    size_t klen = strlen(key);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            memcmp(str_ptr(k), key, klen) == 0)
            return &o->via.map.ptr[i].val;
    }
    return NULL;
}

static uint32_t map_count(const msgpack_object *o, const char *key)
{
    size_t klen = strlen(key);
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        n += k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
             memcmp(str_ptr(k), key, klen) == 0;
    }
    return n;
}

/* A positive int in 1..max under a key given once, else 0. */
static uint64_t peek_count(const msgpack_object *o, const char *key, uint64_t max)
{
    const msgpack_object *v = map_count(o, key) == 1 ? map_get(o, key) : NULL;
    return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= max ? v->via.u64 : 0;
}

static int read_header(rd *r, const msgpack_object *o, unsigned dirs, wire_msg *m)
{
    const msgpack_object *req = map_get(o, "req");
    if (req && req->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        r->err->req = req->via.u64;   /* so that even a refusal can name the request */
    const msgpack_object *v = map_get(o, "v");
    size_t saved;
    path_key(r, "v", &saved);
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != WIRE_VERSION)
        return rd_fail(r, WIRE_E_VERSION, "protocol version %d is required", WIRE_VERSION);
    path_pop(r, saved);
    path_key(r, "type", &saved);
    const msgpack_object *t = map_get(o, "type");
    if (!t)
        return rd_fail(r, WIRE_E_UNKNOWN_TYPE, "message type is missing");
    if (t->type != MSGPACK_OBJECT_STR)
        return bad_type(r, t, "str");
    char name[32];
    size_t n = t->via.str.size;
    if (n >= sizeof name || memchr(str_ptr(t), '\0', n))
        return rd_fail(r, WIRE_E_UNKNOWN_TYPE, "unknown message type");
    memcpy(name, str_ptr(t), n);
    name[n] = '\0';
    m->type = wire_type_from_name(name);
    if (m->type == WIRE_T_NONE || utf8_valid_prefix(name, n) != n)
        return rd_fail(r, WIRE_E_UNKNOWN_TYPE, "unknown message type");
    if (!(MSGS[m->type].dirs & dirs))
        return rd_fail(r, WIRE_E_UNKNOWN_TYPE, "\"%s\" is not accepted here", name);
    path_pop(r, saved);
    /* So that a refusal can name the job attempt the message is about. */
    r->err->type = m->type;
    r->err->id = peek_count(o, "id", UINT64_MAX);
    r->err->attempt = (uint32_t)peek_count(o, "attempt", UINT32_MAX);
    if (req) {
        path_key(r, "req", &saved);
        if (!has_req(m->type))
            return rd_fail(r, WIRE_E_UNKNOWN_FIELD, "\"%s\" does not carry a request id", name);
        int64_t si;
        if (read_int(r, req, 0, BIG, &si, &m->req) < 0)
            return -1;
        path_pop(r, saved);
    }
    return 0;
}

/* Duplicate common keys are caught here because read_fields skips them. */
static int check_common_dups(rd *r, const msgpack_object *o)
{
    static const char *const COMMON[] = {"v", "type", "req"};
    for (size_t c = 0; c < N(COMMON); c++) {
        if (map_count(o, COMMON[c]) > 1) {
            size_t saved;
            path_key(r, COMMON[c], &saved);
            return rd_fail(r, WIRE_E_BAD_VALUE, "key given twice");
        }
    }
    return 0;
}

static int decode_body(rd *r, const msgpack_object *o, unsigned dirs, wire_msg *m)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return rd_fail(r, WIRE_E_MALFORMED, "the body is %s, not a map", obj_type_name(o));
    if (check_common_dups(r, o) < 0 || read_header(r, o, dirs, m) < 0)
        return -1;
    const schema *sc = MSGS[m->type].sc;
    if (sc->init)
        sc->init(&m->submit);
    return read_fields(r, o, sc, &m->submit, true);
}

int wire_decode(const void *data, size_t len, unsigned dirs, wire_msg *m, wire_error *err)
{
    wire_error scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    memset(m, 0, sizeof *m);
    if (len == 0)
        return wire_fail(err, WIRE_E_MALFORMED, NULL, "empty body");
    if (len > WIRE_MAX_BODY_BYTES)
        return wire_fail(err, WIRE_E_TOO_LARGE, NULL, "body of %zu bytes, at most %u allowed",
                         len, WIRE_MAX_BODY_BYTES);
    size_t pos = 0;
    if (scan(data, len, &pos, 0) < 0 || pos != len)
        return wire_fail(err, WIRE_E_MALFORMED, NULL,
                         "not one well-formed msgpack object (nesting at most %d)",
                         WIRE_MAX_DEPTH);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len) {
        msgpack_unpacked_destroy(&up);
        return wire_fail(err, WIRE_E_MALFORMED, NULL, "msgpack could not be unpacked");
    }
    rd r = {.zone = msgpack_zone_new(4096), .err = err};
    if (!r.zone) {
        msgpack_unpacked_destroy(&up);
        return wire_fail(err, WIRE_E_INTERNAL, NULL, "out of memory");
    }
    int rc = decode_body(&r, &up.data, dirs, m);
    msgpack_unpacked_destroy(&up);
    if (rc < 0) {
        msgpack_zone_free(r.zone);
        uint64_t req = err->req;
        memset(m, 0, sizeof *m);
        err->req = req;
        return -1;
    }
    m->arena = r.zone;
    err->code = WIRE_OK;
    return 0;
}

void wire_msg_free(wire_msg *m)
{
    if (m->arena)
        msgpack_zone_free(m->arena);
    memset(m, 0, sizeof *m);
}

/* ---- encoding ------------------------------------------------------------------ */

typedef struct wr {
    msgpack_packer pk;
    wire_error *err;
    char path[128];
    size_t plen;
} wr;

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static const void *ptr_at(const char *p)
{
    const void *v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t u32_at(const char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Optional strings and enums are absent when NULL / 0, optional arrays when
 * NULL; required arrays travel even when empty; numbers always travel. */
static bool present(const fdef *f, const char *p)
{
    switch (f->k) {
    case K_STR:
        return ptr_at(p) != NULL;
    case K_U64_ARRAY:
    case K_U32_ARRAY:
    case K_BOOL_ARRAY:
    case K_STR_ARRAY:
    case K_OBJ_ARRAY:
    case K_BIN: return ptr_at(p) != NULL || (f->flags & F_REQ);
    case K_STATE:
    case K_FINISH:
    case K_CODE:
        return u32_at(p) != 0;
    case K_U32: return !(f->flags & F_OMIT_ZERO) || u32_at(p) != 0;
    default:
        return true;
    }
}

/* present, and for a result's F_DONE fields a done state: a cancelled or
 * failed job has no token counts or timings to report, not zeros.  obj: the
 * struct the field is in. */
static bool sent(const fdef *f, const char *obj, const char *p)
{
    if ((f->flags & F_DONE) && ((const wire_result *)(const void *)obj)->state != WIRE_STATE_DONE)
        return false;
    return present(f, p);
}

static int write_obj(wr *w, const schema *sc, const char *obj);

static int write_elem(wr *w, const fdef *f, const char *arr, uint32_t i)
{
    switch (f->k) {
    case K_U64_ARRAY:
        return msgpack_pack_uint64(&w->pk, ((const uint64_t *)(const void *)arr)[i]);
    case K_U32_ARRAY:
        return msgpack_pack_uint32(&w->pk, ((const uint32_t *)(const void *)arr)[i]);
    case K_BOOL_ARRAY:
        return ((const bool *)(const void *)arr)[i] ? msgpack_pack_true(&w->pk)
                                                    : msgpack_pack_false(&w->pk);
    case K_STR_ARRAY: {
        const char *s = ((const char *const *)(const void *)arr)[i];
        if (!s)
            return wire_fail(w->err, WIRE_E_MISSING_FIELD, f->name, "element %u is NULL", i);
        pack_str(&w->pk, s);
        return 0;
    }
    default:
        return write_obj(w, f->sub, arr + (size_t)i * f->sub->size);
    }
}

static int write_value(wr *w, const fdef *f, const char *p, const char *base)
{
    msgpack_packer *pk = &w->pk;
    int32_t i32;
    float f32;
    double f64;
    uint64_t u64;
    switch (f->k) {
    case K_U64: memcpy(&u64, p, sizeof u64); return msgpack_pack_uint64(pk, u64);
    case K_U32: return msgpack_pack_uint32(pk, u32_at(p));
    case K_I32: memcpy(&i32, p, sizeof i32); return msgpack_pack_int32(pk, i32);
    case K_F32: memcpy(&f32, p, sizeof f32); return msgpack_pack_float(pk, f32);
    case K_F64: memcpy(&f64, p, sizeof f64); return msgpack_pack_double(pk, f64);
    case K_BOOL: return *(const bool *)p ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case K_STR: {
        const char *s = ptr_at(p);
        if ((double)strlen(s) > f->hi)
            return wire_fail(w->err, WIRE_E_TOO_LARGE, f->name, "%zu bytes, at most %.0f",
                             strlen(s), f->hi);
        pack_str(pk, s);
        return 0;
    }
    case K_STATE: pack_str(pk, wire_state_name((wire_state)u32_at(p))); return 0;
    case K_FINISH: pack_str(pk, wire_finish_name((wire_finish)u32_at(p))); return 0;
    case K_CODE: pack_str(pk, wire_code_name((wire_code)u32_at(p))); return 0;
    case K_OBJ: return write_obj(w, f->sub, p);
    case K_BIN: {
        const uint8_t *bytes = ptr_at(p);
        uint32_t n = u32_at(base + f->n_off);
        if ((double)n > f->hi || (n && !bytes))
            return wire_fail(w->err, (double)n > f->hi ? WIRE_E_TOO_LARGE : WIRE_E_BAD_VALUE,
                             f->name, "%u bytes (at most %.0f, non-NULL)", n, f->hi);
        msgpack_pack_bin(pk, n);
        return n ? msgpack_pack_bin_body(pk, bytes, n) : 0;
    }
    default: {
        const char *arr = ptr_at(p);
        uint32_t n = u32_at(base + f->n_off);
        if ((double)n > f->hi || (double)n < f->lo || (n && !arr))
            return wire_fail(w->err, (double)n > f->hi ? WIRE_E_TOO_LARGE : WIRE_E_BAD_VALUE,
                             f->name, "%u elements (allowed: %.0f..%.0f, non-NULL)", n,
                             f->lo, f->hi);
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
            if (write_elem(w, f, arr, i) < 0)
                return -1;
        return 0;
    }
    }
}

static bool enum_valid(const fdef *f, const char *p)
{
    int v = (int)u32_at(p);
    return f->k == K_STATE    ? wire_state_name((wire_state)v) != NULL
           : f->k == K_FINISH ? wire_finish_name((wire_finish)v) != NULL
           : f->k == K_CODE   ? wire_code_name((wire_code)v) != NULL && v != 0
                              : true;
}

static uint32_t count_present(const schema *sc, const char *obj)
{
    uint32_t n = 0;
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sc->parts[p].n; i++) {
            const fdef *f = &sc->parts[p].f[i];
            n += sent(f, obj, obj + sc->parts[p].base + f->off);
        }
    return n;
}

static int write_fields(wr *w, const schema *sc, const char *obj)
{
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sc->parts[p].n; i++) {
            const fdef *f = &sc->parts[p].f[i];
            const char *base = obj + sc->parts[p].base;
            if (!sent(f, obj, base + f->off)) {
                if (f->flags & F_REQ)
                    return wire_fail(w->err, WIRE_E_MISSING_FIELD, f->name,
                                     "required field is not set");
                continue;
            }
            if (!enum_valid(f, base + f->off))
                return wire_fail(w->err, WIRE_E_BAD_VALUE, f->name, "value %u has no name",
                                 u32_at(base + f->off));
            pack_str(&w->pk, f->name);
            if (write_value(w, f, base + f->off, base) < 0)
                return -1;
        }
    return 0;
}

/* Cross-field rules are shared with the decoder so that encode refuses what
 * decode would. */
static int check_encoded(wr *w, const schema *sc, const char *obj)
{
    if (!sc->check)
        return 0;
    rd r = {.err = w->err};
    return sc->check(obj, &r);
}

static int write_obj(wr *w, const schema *sc, const char *obj)
{
    if (check_encoded(w, sc, obj) < 0)
        return -1;
    msgpack_pack_map(&w->pk, count_present(sc, obj));
    return write_fields(w, sc, obj);
}

int wire_encode(const wire_msg *m, char **out, size_t *out_len, wire_error *err)
{
    wire_error scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    *out = NULL;
    *out_len = 0;
    if (!wire_type_dirs(m->type))
        return wire_fail(err, WIRE_E_UNKNOWN_TYPE, "type", "message type %d is unknown",
                         (int)m->type);
    const schema *sc = MSGS[m->type].sc;
    const char *payload = (const char *)&m->submit;
    if (check_encoded(&(wr){.err = err}, sc, payload) < 0)
        return -1;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    wr w = {.err = err};
    msgpack_packer_init(&w.pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&w.pk, 2 + has_req(m->type) + count_present(sc, payload));
    pack_str(&w.pk, "v");
    msgpack_pack_uint32(&w.pk, WIRE_VERSION);
    pack_str(&w.pk, "type");
    pack_str(&w.pk, wire_type_name(m->type));
    if (has_req(m->type)) {
        pack_str(&w.pk, "req");
        msgpack_pack_uint64(&w.pk, m->req);
    }
    if (write_fields(&w, sc, payload) < 0 || sb.size > WIRE_MAX_BODY_BYTES) {
        if (err->code == WIRE_OK)
            wire_fail(err, WIRE_E_TOO_LARGE, NULL, "body of %zu bytes, at most %u allowed",
                      sb.size, WIRE_MAX_BODY_BYTES);
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    *out_len = sb.size;
    *out = msgpack_sbuffer_release(&sb);
    return 0;
}
