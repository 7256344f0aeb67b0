/* wire: the llmq messages and their msgpack encoding (protocol version 1).
 *
 * Every message body is one msgpack map with "v" (the protocol version),
 * "type" (a string naming the message) and "req" (a number the client chooses,
 * echoed in every reply to that request).  docs/PROTOCOL.md is the contract;
 * this module is its only implementation in C: broker, worker and client
 * library all encode and decode through it.
 *
 * Decoding validates everything: msgpack well-formedness, the version, the
 * type and the direction it may travel, every field's msgpack type, length
 * and range, unknown and duplicate keys, and the cross-field rules (one of
 * prompt, tokens and messages, ids XOR batch, ...).  A failure yields a typed wire_error whose
 * message names the field ("jobs[3].temperature: NaN is not allowed").
 *
 * Ownership: a decoded wire_msg owns all its strings and arrays (they live in
 * one arena released by wire_msg_free); the input buffer may be freed right
 * after wire_decode.  For encoding, the caller fills a wire_msg with pointers
 * to memory it owns; wire_encode copies nothing it keeps and returns a fresh
 * malloc'd buffer the caller frees with free().
 *
 * Strings on the wire are msgpack str, valid UTF-8, without NUL bytes; in C
 * they are NUL-terminated.  NULL means "absent" for optional strings. */
#ifndef LLMQ_PROTO_WIRE_H
#define LLMQ_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/job_params.h"

/* ---- limits (all inclusive) ------------------------------------------------ */
#define WIRE_VERSION 1
#define WIRE_MAX_BODY_BYTES (64u << 20)      /* one message body */
#define WIRE_MAX_PROMPT_BYTES (1u << 20)     /* prompt text */
#define WIRE_MAX_PROMPT_TOKENS 262144u       /* prompt token ids */
#define WIRE_MAX_MESSAGES 4096u              /* messages of a chat job */
#define WIRE_MAX_GEN_TOKENS 1048576u         /* max_tokens, and generated tokens */
#define WIRE_MAX_TEXT_BYTES (16u << 20)      /* generated text in a result */
#define WIRE_MAX_STOP 16u                    /* stop strings per job */
#define WIRE_MAX_STOP_BYTES 256u             /* one stop string */
#define WIRE_MAX_JOBS_PER_SUBMIT 10000u      /* jobs in one submit */
#define WIRE_MAX_IDS 100000u                 /* job ids in one request or reply */
#define WIRE_MAX_RESULTS 10000u              /* results in one wait_end */
#define WIRE_MAX_WORKERS 4096u               /* workers listed in stats_ok */
#define WIRE_MAX_NAME_BYTES 256u             /* key, batch, model, worker, host, gpu names, ... */
#define WIRE_MAX_META_BYTES 65536u           /* batch metadata */
#define WIRE_MAX_MESSAGE_BYTES 4096u         /* error messages, failure reasons */
#define WIRE_MAX_SLOTS 4096u                 /* worker capacity, credits per message */
#define WIRE_MAX_TOKEN_ID 2147483647u        /* token ids are non-negative int32 */
#define WIRE_MAX_TOP_LOGPROBS 20u            /* top_logprobs, alternatives per token */
#define WIRE_MAX_TOKEN_BYTES 1024u           /* the bytes of one token in logprobs */
#define WIRE_MAX_SCHEMA_BYTES (256u << 10)   /* a job's json_schema, JSON text */
#define WIRE_MAX_ALIASES 16u                 /* other model names a worker answers to */
#define WIRE_LOGPROB_FLOOR -9999.0           /* the least logprob: "as good as impossible" */
#define WIRE_MAX_DEPTH 8                     /* msgpack nesting accepted at all */
#define WIRE_NO_MAX 1e300                    /* a range without an upper bound */

/* Defaults for liveness (the broker announces its own in "welcome"; a
 * client asks for its waits' heartbeats in "wait"). */
#define WIRE_HEARTBEAT_MS 1000u
#define WIRE_DEAD_AFTER_MS 5000u
/* The range of wait.heartbeat_ms when it is not 0 (off). */
#define WIRE_MIN_WAIT_HEARTBEAT_MS 100u
#define WIRE_MAX_WAIT_HEARTBEAT_MS 3600000u

/* ---- names ------------------------------------------------------------------ */
/* clang-format off */
typedef enum wire_type {
    WIRE_T_NONE = 0,
    /* client -> broker */
    WIRE_T_SUBMIT, WIRE_T_STATUS, WIRE_T_WAIT, WIRE_T_CANCEL, WIRE_T_STATS,
    /* broker -> client */
    WIRE_T_SUBMIT_OK, WIRE_T_STATUS_OK, WIRE_T_RESULT, WIRE_T_WAIT_END,
    WIRE_T_CANCEL_OK, WIRE_T_STATS_OK, WIRE_T_WAIT_ALIVE,
    /* broker -> client and broker -> worker */
    WIRE_T_ERROR,
    /* worker -> broker */
    WIRE_T_HELLO, WIRE_T_CREDIT, WIRE_T_JOB_RESULT, WIRE_T_JOB_FAILURE, WIRE_T_BYE,
    /* broker -> worker */
    WIRE_T_WELCOME, WIRE_T_JOB, WIRE_T_JOB_CANCEL, WIRE_T_SHUTDOWN,
    /* both ways between worker and broker */
    WIRE_T_HEARTBEAT,
    WIRE_T_COUNT
} wire_type;
/* clang-format on */

/* Where a message may travel; wire_decode refuses a type outside the mask. */
enum {
    WIRE_DIR_CLIENT_TO_BROKER = 1,
    WIRE_DIR_BROKER_TO_CLIENT = 2,
    WIRE_DIR_WORKER_TO_BROKER = 4,
    WIRE_DIR_BROKER_TO_WORKER = 8,
    WIRE_DIR_ANY = 15
};

/* clang-format off */
typedef enum wire_code {
    WIRE_OK = 0,
    WIRE_E_MALFORMED,       /* not msgpack, trailing bytes, not a map, too deep */
    WIRE_E_VERSION,         /* "v" missing or not WIRE_VERSION */
    WIRE_E_UNKNOWN_TYPE,    /* "type" unknown, or not allowed in this direction */
    WIRE_E_MISSING_FIELD,   /* a required field is absent */
    WIRE_E_UNKNOWN_FIELD,   /* a key this message does not have (typos are caught) */
    WIRE_E_BAD_TYPE,        /* a field has the wrong msgpack type */
    WIRE_E_BAD_VALUE,       /* out of range, NaN, negative, bad UTF-8, NUL, duplicate key, conflicts */
    WIRE_E_TOO_LARGE,       /* a string, array or the body exceeds its limit */
    WIRE_E_UNKNOWN_JOB,     /* a job id that does not exist (broker) */
    WIRE_E_UNKNOWN_BATCH,   /* a batch id that does not exist (broker) */
    WIRE_E_QUEUE_FULL,      /* backpressure: the submit was refused, nothing stored */
    WIRE_E_UNKNOWN_WORKER,  /* a worker message before hello: send hello again */
    WIRE_E_SHUTTING_DOWN,   /* the broker is stopping and accepts no new work */
    WIRE_E_INTERNAL,        /* the broker failed (database error, ...) */
    WIRE_E_UNAVAILABLE,     /* the broker cannot take new work now (database full): retry later */
    WIRE_E_WORKER_IN_USE,   /* hello: a live session of another process has this worker id */
    WIRE_E_FORBIDDEN,       /* hello: this worker id is bound to another CURVE key */
    WIRE_E_BAD_RESULT,      /* job_result contradicts its job: refused, the job runs elsewhere */
    WIRE_E_COUNT
} wire_code;
/* clang-format on */

typedef enum wire_state {
    WIRE_STATE_NONE = 0,
    WIRE_STATE_QUEUED, WIRE_STATE_RUNNING, WIRE_STATE_DONE,
    WIRE_STATE_FAILED, WIRE_STATE_CANCELLED,
    WIRE_STATE_COUNT
} wire_state;

typedef enum wire_finish {
    WIRE_FINISH_NONE = 0,   /* not done (failed or cancelled) */
    WIRE_FINISH_STOP,       /* end-of-sequence token or a stop string */
    WIRE_FINISH_LENGTH,     /* max_tokens generated */
    WIRE_FINISH_CONTEXT,    /* the model's context window is full */
    WIRE_FINISH_COUNT
} wire_finish;

/* Wire names ("submit", "bad_value", "queued", "length"); NULL when out of range. */
const char *wire_type_name(wire_type t);
const char *wire_code_name(wire_code c);
const char *wire_state_name(wire_state s);
const char *wire_finish_name(wire_finish f);
/* Inverse lookups; 0 (the NONE / WIRE_OK value) when the name is unknown. */
wire_type wire_type_from_name(const char *name);
wire_code wire_code_from_name(const char *name);
wire_state wire_state_from_name(const char *name);
wire_finish wire_finish_from_name(const char *name);
/* The WIRE_DIR_* bits a type may travel in. */
unsigned wire_type_dirs(wire_type t);

/* ---- a decoding (or broker-side) error ------------------------------------------ */
/* A failed decoding still tells what it had read of the message, so that
 * the receiver can answer for it: the request a client is waiting on, the
 * job attempt a worker's result was about. */
typedef struct wire_error {
    wire_code code;
    char field[128];   /* "jobs[3].temperature"; "" when the error is not about one field */
    llmq_err err;      /* full message, starting with the field when there is one */
    uint64_t req;      /* the request's "req" when it could be read, else 0 */
    wire_type type;    /* the message's type once read and accepted here, else WIRE_T_NONE */
    uint64_t id;       /* with type: its "id" (>= 1) when given once as an int in range, else 0 */
    uint32_t attempt;  /* with type: its "attempt" (>= 1), the same way, else 0 */
} wire_error;

/* ---- the parts of messages ------------------------------------------------------ */

/* One message of a chat job: the worker's chat template makes the prompt
 * of them (docs/PROTOCOL.md §4). */
typedef struct wire_message {
    const char *role;    /* 1..WIRE_MAX_NAME_BYTES: "system", "user", "assistant", ... */
    const char *content; /* 0..WIRE_MAX_PROMPT_BYTES, all of a job's together too */
} wire_message;

/* One job: an element of submit's "jobs", or the body of a "job" message.
 * Exactly one of prompt, tokens and messages is given. */
typedef struct wire_job {
    uint64_t id;               /* job message: broker job id (>= 1); submit: unused */
    uint32_t attempt;          /* job message: 1 for the first dispatch; submit: unused */
    const char *key;           /* submit: optional client key (idempotent resubmission) */
    const char *prompt;        /* UTF-8 prompt, or NULL */
    const uint32_t *tokens;    /* prompt token ids, or NULL */
    uint32_t n_tokens;         /* 1..WIRE_MAX_PROMPT_TOKENS when tokens are used */
    const wire_message *messages; /* a chat job's, or NULL */
    uint32_t n_messages;          /* 1..WIRE_MAX_MESSAGES when messages are used */
    int32_t priority;          /* submit: -1000..1000, higher first, default 0 */
    const char *model;         /* optional model name, for routing */
    job_params params;         /* proto/job_params.h; ranges and defaults: docs/PROTOCOL.md */
} wire_job;

/* Which jobs a status / wait / cancel is about: ids XOR batch. */
typedef struct wire_select {
    const uint64_t *ids;       /* 1..WIRE_MAX_IDS ids, or NULL when batch is set */
    uint32_t n_ids;
    const char *batch;         /* a batch id, or NULL when ids are set */
} wire_select;

typedef struct wire_timings {
    double queue_wait_ms;      /* submit -> dispatch of the attempt that finished */
    double prefill_ms;         /* worker: prompt processing of this job */
    double prefill_tok_s;      /* prompt_tokens / prefill seconds */
    double decode_ms;          /* worker: first generated token -> last */
    double decode_tok_s;       /* gen_tokens / decode seconds */
    double total_ms;           /* submit -> result recorded */
} wire_timings;

/* A token and its log-probability (docs/PROTOCOL.md: ln of its softmax
 * probability under the model's raw logits). */
typedef struct wire_logprob {
    uint32_t token;
    float logprob;        /* WIRE_LOGPROB_FLOOR..0 */
    const uint8_t *bytes; /* the bytes the token stands for (may be part of a UTF-8
                             character), 0..WIRE_MAX_TOKEN_BYTES */
    uint32_t n_bytes;
} wire_logprob;

/* One generated token's: its own, and the job's top_logprobs best. */
typedef struct wire_token_logprobs {
    wire_logprob chosen;
    const wire_logprob *top; /* 0..WIRE_MAX_TOP_LOGPROBS, most likely first */
    uint32_t n_top;
} wire_token_logprobs;

/* A job's outcome.  "job_result" (worker -> broker) carries id, attempt,
 * text, tokens, finish, prompt_tokens, cached_prompt_tokens, gen_tokens,
 * prefill_ms, decode_ms and logprobs; "result" (broker -> client) carries
 * everything but cached_prompt_tokens, state first. */
typedef struct wire_result {
    uint64_t id;
    uint32_t attempt;
    wire_state state;          /* result: DONE, FAILED or CANCELLED */
    const char *key;           /* result: the client key, or NULL */
    const char *batch;         /* result: the batch id, or NULL */
    const char *text;          /* DONE: generated text (stop string excluded) */
    const uint32_t *tokens;    /* DONE: generated token ids */
    uint32_t n_tokens;
    const wire_token_logprobs *logprobs; /* DONE, when the job asked: one per token, else NULL */
    uint32_t n_logprobs;                 /* = n_tokens */
    wire_finish finish;        /* DONE: why generation ended */
    uint32_t prompt_tokens;
    uint32_t cached_prompt_tokens; /* job_result: of prompt_tokens, those the worker's prefix
                                      cache held (absent: 0) */
    uint32_t gen_tokens;
    wire_timings timings;
    const char *worker;        /* result: the worker that produced it, or NULL */
    const char *model;         /* result: the model that worker serves (its hello's), or NULL */
    const char *error;         /* result: FAILED / CANCELLED reason */
} wire_result;

typedef struct wire_job_state {
    uint64_t id;
    wire_state state;
    uint32_t attempts;
    const char *worker;        /* running or done: which worker, else NULL */
} wire_job_state;

typedef struct wire_counts {
    uint64_t queued, running, done, failed, cancelled;
} wire_counts;

typedef struct wire_worker_stat {
    const char *worker;
    const char *host;
    int32_t gpu_index;         /* -1: CPU */
    const char *gpu_name;
    const char *engine;
    uint32_t slots;
    uint32_t busy;             /* jobs running on it now */
    uint64_t jobs_done;
    uint64_t tokens_done;
} wire_worker_stat;

/* ---- the messages ------------------------------------------------------------------ */
typedef struct wire_submit {
    const char *batch;         /* optional batch id (<= WIRE_MAX_NAME_BYTES) */
    const char *meta;          /* optional batch metadata, opaque text (<= WIRE_MAX_META_BYTES) */
    const wire_job *jobs;      /* 1..WIRE_MAX_JOBS_PER_SUBMIT */
    uint32_t n_jobs;
} wire_submit;

typedef struct wire_wait {
    wire_select sel;
    uint32_t timeout_ms;       /* 0: answer with what is final now */
    bool stream;               /* default true: one "result" per job, then wait_end */
    uint32_t heartbeat_ms;     /* 0 (default): none; else a wait_alive this often (stream only) */
} wire_wait;

typedef struct wire_submit_ok {
    const uint64_t *ids;       /* in submit order */
    const bool *existing;      /* true where the client key already named a job */
    uint32_t n;
} wire_submit_ok;

typedef struct wire_jobs_reply {   /* status_ok and cancel_ok */
    const wire_job_state *jobs;
    uint32_t n_jobs;
    wire_counts counts;        /* over the selection */
} wire_jobs_reply;

typedef struct wire_wait_end {
    uint32_t done;             /* selected jobs in a final state */
    uint32_t pending;          /* selected jobs not final when the wait ended */
    bool timed_out;
    const wire_result *results;/* stream = false only: the final results */
    uint32_t n_results;
} wire_wait_end;

typedef struct wire_stats_ok {
    wire_counts counts;        /* all jobs in the store */
    const wire_worker_stat *workers;   /* connected workers */
    uint32_t n_workers;
} wire_stats_ok;

typedef struct wire_error_msg {
    wire_code code;
    const char *field;         /* optional */
    const char *message;
} wire_error_msg;

typedef struct wire_hello {
    const char *worker;        /* worker id, unique per broker */
    const char *host;
    uint32_t pid;
    int32_t gpu_index;         /* -1 for a CPU worker */
    const char *gpu_name;      /* optional */
    const char *gpu_uuid;      /* optional */
    const char *model;         /* model name */
    const char *const *aliases; /* 0..WIRE_MAX_ALIASES other names jobs may route to it by */
    uint32_t n_aliases;
    const char *model_hash;    /* optional, e.g. hex digest of the GGUF file */
    const char *engine;        /* "cpu" or "cuda" */
    uint32_t slots;            /* capacity: 1..WIRE_MAX_SLOTS concurrent jobs */
    uint32_t n_ctx;            /* context length per sequence, 0 when unknown */
} wire_hello;

typedef struct wire_welcome {
    uint32_t heartbeat_ms;
    uint32_t dead_after_ms;
} wire_welcome;

typedef struct wire_job_failure {
    uint64_t id;
    uint32_t attempt;
    const char *reason;
    bool retryable;
} wire_job_failure;

typedef struct wire_msg {
    wire_type type;
    uint64_t req;              /* client requests and their replies; 0 elsewhere */
    union {
        wire_submit submit;            /* WIRE_T_SUBMIT */
        wire_select select;            /* WIRE_T_STATUS, WIRE_T_CANCEL */
        wire_wait wait;                /* WIRE_T_WAIT */
        wire_submit_ok submit_ok;      /* WIRE_T_SUBMIT_OK */
        wire_jobs_reply jobs_reply;    /* WIRE_T_STATUS_OK, WIRE_T_CANCEL_OK */
        wire_result result;            /* WIRE_T_RESULT, WIRE_T_JOB_RESULT */
        wire_wait_end wait_end;        /* WIRE_T_WAIT_END */
        wire_stats_ok stats_ok;        /* WIRE_T_STATS_OK */
        wire_error_msg error;          /* WIRE_T_ERROR */
        wire_hello hello;              /* WIRE_T_HELLO */
        wire_welcome welcome;          /* WIRE_T_WELCOME */
        uint32_t credit;               /* WIRE_T_CREDIT: more free slots, 1..WIRE_MAX_SLOTS */
        wire_job job;                  /* WIRE_T_JOB */
        wire_job_failure failure;      /* WIRE_T_JOB_FAILURE */
        uint64_t cancel_id;            /* WIRE_T_JOB_CANCEL */
        uint32_t grace_ms;             /* WIRE_T_SHUTDOWN */
    };                                 /* STATS, WAIT_ALIVE, HEARTBEAT, BYE: no fields */
    void *arena;               /* decoded messages: owner of the memory above */
} wire_msg;

/* Starts a message of type t with every field at its default. */
void wire_msg_init(wire_msg *m, wire_type t);

/* Encodes m into a new malloc'd buffer (*out, *out_len).  Fails (BAD_VALUE /
 * MISSING_FIELD / TOO_LARGE in err) when m would not decode: a required
 * string is NULL, a count exceeds its limit, prompt and tokens both set. */
int wire_encode(const wire_msg *m, char **out, size_t *out_len, wire_error *err);

/* Decodes and validates one body.  dirs: the WIRE_DIR_* bits accepted.  On
 * success *m owns its memory (release with wire_msg_free); on failure *m is
 * empty and err says what and where. */
int wire_decode(const void *data, size_t len, unsigned dirs, wire_msg *m,
                wire_error *err);

/* Releases a decoded message's memory; harmless on an encoded-by-hand or
 * empty message (arena NULL). */
void wire_msg_free(wire_msg *m);

/* Fills err (code, field, message) and returns -1: for the broker's typed
 * refusals and the client library. field may be NULL. */
int wire_fail(wire_error *err, wire_code code, const char *field,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Builds the "error" reply for err (pointers into err); an err without a
 * wire code carries its llmq_err's (wire_code_for). */
void wire_error_reply(wire_msg *m, const wire_error *err);

/* How the codes of common/err.h reach the wire, in this one place: the
 * error type a reply carries for an error of code c, and whether a job
 * that failed with it may run again (job_failure.retryable: lack of room,
 * a worker that cannot serve it now, I/O) or fails for good (bad input,
 * internal and unclassified errors). */
wire_code wire_code_for(llmq_err_code c);
bool wire_retryable(llmq_err_code c);

#endif
