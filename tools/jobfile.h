/* jobfile: llmq-submit's input and output lines (JSONL).
 *
 * Input: one JSON object per line (blank lines are skipped), in one of two
 * shapes, told apart by the presence of "custom_id":
 *
 *  native  {"id": "q1", "prompt": "Once upon a time", "max_tokens": 32,
 *           "temperature": 0.8, "seed": 1, ...} with every job field of
 *           docs/PROTOCOL.md §4 under its wire name ("tokens" or "messages"
 *           instead of "prompt"; "stop" may be one string); "id" (string or
 *           integer) is optional.
 *  OpenAI  {"custom_id": "q1", "method": "POST", "url": "/v1/completions",
 *           "body": {"model": "...", "prompt": "...", "max_tokens": 32, ...}}
 *           with "messages" instead of "prompt" for /v1/chat/completions;
 *           "max_completion_tokens" is an alias of "max_tokens"; "n" must be
 *           1 and "stream" false; "user" is ignored; body.model is echoed in
 *           the output, not used for routing; "logprobs" is true/false in a
 *           chat body (with "top_logprobs" 0..20), and in a completions body
 *           the legacy API's number of alternatives, 0..5.
 *
 * Messages (both shapes: "messages" instead of "prompt") are passed on as
 * they are, to be rendered by the worker's chat template: each exactly a
 * "role" (any string) and a "content", a string or OpenAI's list of text
 * parts (joined by newlines).
 *
 * Unknown fields are errors (a typo must not silently change a job).  Every
 * job is checked exactly as the broker will check it (llmq_job_check), so a
 * bad line is reported as "NAME:LINE: field: problem" before anything is sent.
 *
 * The id becomes the job's client key "BATCH:ID", so submitting the same file
 * again with the same batch id returns the existing jobs instead of running
 * them twice; ids must be unique within a file.
 *
 * Ownership: a jobfile owns every entry, and each entry owns its parsed line;
 * the llmq_job inside points into it.  jobfile_free releases everything. */
#ifndef LLMQ_TOOLS_JOBFILE_H
#define LLMQ_TOOLS_JOBFILE_H

#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "common/err.h"
#include "common/json.h"
#include "proto/llmq.h"

typedef struct jobfile_entry {
    size_t line;                 /* 1-based line number in the input */
    const json_value *id;        /* "id" / "custom_id", or NULL when absent */
    bool openai;                 /* OpenAI batch line: output in OpenAI's shape */
    bool chat;                   /* OpenAI "messages" (chat completion) */
    const char *model;           /* OpenAI body.model, echoed, or NULL */
    llmq_job job;
    uint64_t job_id;             /* set once submitted */
    /* owned */
    json_value *doc;
    llmq_message *messages;
    char **contents; /* joined text parts, per message (NULL: a string of doc) */
    size_t n_contents;
    char *key;
    const char **stop;
    uint32_t *tokens;
} jobfile_entry;

typedef struct jobfile {
    jobfile_entry *entries;
    size_t n;
} jobfile;

/* Reads every line of `in` (called `name` in messages) and builds the jobs,
 * with keys under `batch`.  On the first bad line: -1 and err names the
 * line and the field; *out is left empty. */
int jobfile_read(FILE *in, const char *name, const char *batch, jobfile *out, llmq_err *err);

void jobfile_free(jobfile *jf);

/* One output line for a submitted job when not waiting:
 * {"id":..., "job_id":N, "existing":bool}. */
void jobfile_write_ack(FILE *out, const jobfile_entry *e, bool existing);

/* One output line for a result.  Native input gives
 * {"id", "job_id", "state", "text", "finish_reason", "prompt_tokens",
 *  "completion_tokens", "tokens", "logprobs", "timings": {...}, "worker",
 *  "attempt"} (or "error" instead of text for a failed job; "logprobs" only
 * for a job that asked: [{"id", "token", "logprob", "bytes",
 * "top_logprobs": [...]}] per token); OpenAI input gives OpenAI's batch
 * output line (custom_id, response.status_code, response.body with choices
 * and usage; error), plus our timings under response.body.llmq, with
 * logprobs as OpenAI writes them: choices[0].logprobs.content for chat, the
 * legacy tokens / token_logprobs / top_logprobs lists for completions.
 * `created` is the Unix time stamped in OpenAI bodies. */
void jobfile_write_result(FILE *out, const jobfile_entry *e, const llmq_result *r, time_t created);

#endif
