/* openai: the request bodies of OpenAI batch lines, field by field, and
 * the response lines written back.
 *
 * A body of /v1/chat/completions or /v1/completions becomes a job (and
 * its n choices); docs/OPENAI.md has the table of every field of the two
 * bodies and what llmq does with it.  Each field is one of:
 *   honoured   it becomes the job's parameter of the same meaning;
 *   ignored    accepted and dropped, because dropping it changes nothing
 *              of the output (user, store, metadata, caching hints, ...);
 *   refused    llmq cannot do what it asks (tools, audio, logit_bias, ...):
 *              the line fails alone, unsupported_parameter or
 *              unsupported_value naming the field -- unless its value asks
 *              for nothing (tools [], stream false, null), which is taken.
 * A key neither body has is unknown_parameter, so a typo cannot change a
 * job in silence.  A null value is the field's absence, as in OpenAI's API.
 *
 * Defaults are OpenAI's, not the native set: temperature 1, top_p 1, no
 * penalties, max_tokens 16 for completions and no limit but the context for
 * chat; no top_k or min_p.  A line without seed gets one made from its
 * custom_id (FNV-1a), so identical prompts on different lines give
 * different samples, and the same file gives the same outputs again.
 * Choice i of a line is sampled with seed + i.
 *
 * The body's "messages" are not read here (tools/jobfile.c carries them
 * into the job, for the worker's chat template); everything else is.  All
 * strings stay borrowed from the parsed line. */
#ifndef LLMQ_TOOLS_OPENAI_H
#define LLMQ_TOOLS_OPENAI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common/json.h"
#include "proto/llmq.h"

/* Choices one line may ask for (OpenAI's own bound on n). */
#define OPENAI_MAX_CHOICES 128

/* What is wrong with a line that fails alone; the names are its code in
 * the output ("invalid_json", ...). */
typedef enum openai_fault {
    OPENAI_OK = 0,
    OPENAI_INVALID_JSON,          /* not one JSON object */
    OPENAI_UNKNOWN_PARAMETER,     /* a key neither shape of line has */
    OPENAI_UNSUPPORTED_PARAMETER, /* a field llmq cannot honour */
    OPENAI_UNSUPPORTED_VALUE,     /* a value llmq cannot honour of a field it has */
    OPENAI_INVALID_VALUE,         /* a wrong type, out of range, fields that conflict */
    OPENAI_MISSING_PARAMETER,     /* a required field is absent */
    OPENAI_DUPLICATE_ID,          /* the id of an earlier line */
    OPENAI_MODEL_NOT_FOUND,       /* the broker: no worker serves body.model */
    OPENAI_REFUSED,               /* the broker refused the job otherwise */
    OPENAI_FAULT_COUNT
} openai_fault;

const char *openai_fault_name(openai_fault f);

/* A line's fault: its kind, the field (a path: "body.tools"), a message that
 * starts with the field. */
typedef struct openai_err {
    openai_fault fault;
    char field[128];
    llmq_err e;
} openai_err;

/* Fills err and returns -1; field may be NULL (the message is then the
 * line's). */
int openai_errf(openai_err *err, openai_fault f, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- JSON values into a job's fields ----
 * The type and range checks both shapes of line share: an integer within
 * its job parameter's range (proto/job_params.h) or, for other fields, its C
 * type's; the other ranges are llmq_job_check's.  Each fails naming field. */

typedef enum openai_kind {
    OPENAI_U32,
    OPENAI_I32,
    OPENAI_U64,
    OPENAI_F32,
    OPENAI_BOOL
} openai_kind;

int openai_want_int(const json_value *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                    openai_err *err);
/* A string without NUL characters (borrowed). */
int openai_want_string(const json_value *v, const char *field, const char **out, openai_err *err);
/* A string or an array of them: *out a new array (the caller's to free) of
 * borrowed strings. */
int openai_want_strings(const json_value *v, const char *field, const char ***out, size_t *n,
                        openai_err *err);
/* The llmq_job field at off, of kind k, from v. */
int openai_set_scalar(llmq_job *job, size_t off, openai_kind k, const json_value *v,
                      const char *name, openai_err *err);

/* One OpenAI request: what its jobs and its response need beyond the job
 * template (the caller's llmq_job: every choice is that job, with its seed
 * + index, and its prompt for a completions line of several). */
typedef struct openai_req {
    bool chat; /* /v1/chat/completions */
    bool seed_given;
    uint32_t n;           /* choices per prompt, 1..OPENAI_MAX_CHOICES */
    const char **prompts; /* completions: 1..OPENAI_MAX_CHOICES prompts (owned array) */
    uint32_t n_prompts;
    bool echo;         /* completions: the prompt before the text */
    char *schema;      /* response_format's schema as JSON text (owned), or NULL */
    const char **stop; /* owned array of borrowed strings */
} openai_req;

/* Starts a request for a chat body or not, *job at OpenAI's defaults. */
void openai_req_init(openai_req *q, llmq_job *job, bool chat);
void openai_req_free(openai_req *q);

/* Takes one body field (not "messages"): 0, or -1 with err naming
 * "body.KEY" and the kind of fault. */
int openai_body_field(openai_req *q, llmq_job *job, const char *key, const json_value *v,
                      openai_err *err);

/* After every field: the rules across fields (max_tokens against
 * max_completion_tokens, echo with logprobs, a prompt or messages), and the
 * seed from custom_id when none was given. */
int openai_body_done(openai_req *q, llmq_job *job, const json_value *body, const char *custom_id,
                     openai_err *err);

/* ---- output ---- */

/* One choice, as the response's choices[] holds it, from its result
 * (state done).  index is OpenAI's: prompt * n + choice. */
void openai_write_choice(FILE *f, const openai_req *q, uint32_t index, uint32_t prompt,
                         const llmq_result *r);

/* The parts of a finished line's response. */
typedef struct openai_done {
    const char *choice;     /* openai_write_choice's text */
    const char *llmq;       /* {"index", "job_id", "worker", "timings", ...} */
    uint32_t prompt_tokens; /* counted once per prompt: 0 but for its first choice */
    uint32_t gen_tokens;
} openai_done;

/* {"id", "custom_id", "response": {"status_code": 200, "request_id",
 * "body": {... "model": model, "choices": [...], "usage", "llmq": {...}}},
 * "error": null}: choices in index order. */
void openai_write_response(FILE *f, const openai_req *q, const json_value *custom_id,
                           uint64_t job_id, const char *model, time_t created,
                           const openai_done *done, size_t n);

/* {"id", "custom_id", "response": null, "error": {"code", "message",
 * "param", "line"}}: job_id 0 and param NULL when there are none. */
void openai_write_error(FILE *f, const json_value *custom_id, uint64_t job_id, const char *code,
                        const char *message, const char *param, size_t line);

/* Per generated token {"token", "logprob", "bytes", "top_logprobs": [...]}
 * (chat's logprobs.content), each token with its "id" too when with_id (a
 * native line's logprobs). */
void openai_write_logprobs(FILE *f, const llmq_result *r, bool with_id);

/* A custom_id or native id as JSON (null when absent). */
void openai_write_id(FILE *f, const json_value *id);

#endif
