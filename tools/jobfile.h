/* jobfile: llmq-submit's input and output lines (JSONL).
 *
 * Input: one JSON object per line (blank lines are skipped; a UTF-8 byte
 * order mark at the start of the file is too), in one of two shapes, told
 * apart by the presence of "custom_id":
 *
 *  native  {"id": "q1", "prompt": "Once upon a time", "max_tokens": 32,
 *           "temperature": 0.8, "seed": 1, ...} with every job field of
 *           docs/PROTOCOL.md §4 under its wire name ("tokens" or "messages"
 *           instead of "prompt"; "stop" may be one string; "json_schema" an
 *           object or its JSON text), the protocol's defaults, and "n": that many
 *           samples of the prompt, sampled with seed, seed + 1, ...; "id"
 *           (string or integer) is optional.
 *  OpenAI  {"custom_id": "q1", "method": "POST", "url": "/v1/completions",
 *           "body": {"model": "...", "prompt": "...", "max_tokens": 32, ...}}
 *           with "messages" instead of "prompt" for /v1/chat/completions:
 *           every field of both bodies is honoured, ignored as harmless or
 *           refused (tools/openai.h, docs/OPENAI.md), with OpenAI's
 *           defaults; body.model routes the job.
 *
 * Messages (both shapes: "messages" instead of "prompt") are carried into
 * the job as they are, for the worker to render with its model's chat
 * template: each a "role" and a "content", a string or OpenAI's list of
 * text parts (joined by newlines).  On an OpenAI line the role is one of
 * OpenAI's ("developer" becomes "system", the name the templates know;
 * "tool" is refused with tool calls); on a native line any string.
 *
 * A line fails alone: one that cannot become jobs (not JSON, an unknown
 * field, a value out of range, a field llmq cannot honour, the id of an
 * earlier line, a JSON schema llmq cannot enforce) is kept with its fault
 * (code, field, message, line number) and the file's other lines run.
 * Every job is checked exactly as the broker will check it (llmq_job_check),
 * so a fault is known before anything is sent.
 *
 * A line's jobs: n choices (of each prompt of a completions line), each with
 * the client key "BATCH:ID" (n = 1) or "BATCH:ID#i", so that submitting the
 * same file again with the same batch id returns the existing jobs instead
 * of running them twice.
 *
 * Ownership: a jobfile owns every entry and job; each entry owns its parsed
 * line, which the llmq_jobs point into.  jobfile_free releases everything. */
#ifndef LLMQ_TOOLS_JOBFILE_H
#define LLMQ_TOOLS_JOBFILE_H

#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "common/err.h"
#include "common/json.h"
#include "proto/llmq.h"
#include "tools/openai.h"

/* One job of a line: a choice of its (prompt, n). */
typedef struct jobfile_job {
    size_t entry;    /* its line's entry */
    uint32_t index;  /* its choice's index (OpenAI's: prompt * n + choice) */
    uint32_t prompt; /* which prompt of a completions line */
    llmq_job job;    /* points into its entry */
    char *key;       /* owned */
    size_t order;    /* its place in the last jobfile_jobs list */
    uint64_t job_id; /* set once submitted */
    bool final;
    /* OpenAI lines wait for all their choices: */
    llmq_state state;
    char *choice; /* the choice, as JSON text (owned) */
    char *llmq;   /* llmq's account of it (owned) */
    char *error;  /* not done: why (owned) */
    char *model;  /* the model that ran it (owned) */
    uint32_t prompt_tokens, gen_tokens;
} jobfile_job;

typedef struct jobfile_entry {
    size_t line;          /* 1-based line number in the input */
    const json_value *id; /* "id" / "custom_id", or NULL when absent */
    bool openai;          /* OpenAI batch line: output in OpenAI's shape */
    llmq_job job;         /* the template of its jobs */
    openai_req req;       /* n, prompts, ... (native lines: n only) */
    openai_err fault;     /* fault.fault != OPENAI_OK: the line failed alone */
    size_t first, n_jobs; /* its jobs in the file's list */
    size_t n_final;
    /* owned */
    json_value *doc;
    llmq_message *messages;
    char **contents; /* joined text parts, per message (NULL: a string of doc) */
    size_t n_contents;
    char *schema; /* native json_schema given as an object */
    const char **stop;
    uint32_t *tokens;
} jobfile_entry;

typedef struct jobfile {
    jobfile_entry *entries;
    size_t n;
    jobfile_job *jobs; /* every line's, in file order */
    size_t n_jobs;
    size_t n_faults; /* entries that failed */
    /* jobfile_jobs' order: submitted[i] is the job the i-th llmq_job is */
    size_t *submitted;
    size_t n_submitted;
    struct jobfile_by_id *by_id; /* sorted job ids (jobfile_set_ids) */
    size_t n_by_id;
    bool shape_openai; /* the shape of the file's first good line */
} jobfile;

/* Reads every line of `in` (called `name` in messages) into entries, with
 * keys under `batch`; bad lines are entries with their fault.  -1 (and *out
 * empty) only when `in` cannot be read, holds no line, or memory runs out. */
int jobfile_read(FILE *in, const char *name, const char *batch, jobfile *out, llmq_err *err);

void jobfile_free(jobfile *jf);

/* "NAME:LINE: field: problem (code)" for a failed entry. */
void jobfile_fault_text(const jobfile_entry *e, const char *name, char *buf, size_t size);

/* The output line of a failed entry: OpenAI's batch error line
 * {"custom_id", "response": null, "error": {"code", "message", "param",
 * "line"}}, or for a native one {"id", "line", "state": "rejected",
 * "error", "code", "field"}. */
void jobfile_write_fault(FILE *out, const jobfile_entry *e);

/* The jobs of the lines that have not failed, in file order, as the array
 * llmq_submit takes (*jobs: malloc'd, the caller frees it). */
int jobfile_jobs(jobfile *jf, llmq_job **jobs, size_t *n, llmq_err *err);

/* The broker refused job k of the last jobfile_jobs list (llmq_submit's
 * jobs[k]): its line fails with why.  Returns that line's entry. */
jobfile_entry *jobfile_refuse(jobfile *jf, size_t k, const llmq_error *why);

/* Records llmq_submit's ids for the last jobfile_jobs list (ids[k] is job
 * k's; 0: not stored yet) and indexes them for jobfile_take.  Called again
 * as more of the list is stored (a batch that goes in parts), it indexes
 * the jobs stored since; a job keeps the id it was first given. */
int jobfile_set_ids(jobfile *jf, const uint64_t *ids, llmq_err *err);

/* The submitted job of that id (after jobfile_set_ids), or NULL. */
jobfile_job *jobfile_job_of(const jobfile *jf, uint64_t job_id);

/* One output line per submitted job when not waiting:
 * {"id", "index", "job_id", "existing"}. */
void jobfile_write_acks(FILE *out, const jobfile *jf, const bool *existing);

/* A result arrived: writes its line (a native job's at once; an OpenAI
 * line's once every choice is final) and returns its job, or NULL when it
 * is no job of this file, came already, or is of a line that failed.  `created` is the Unix time
 * stamped in OpenAI bodies.
 *
 * Native lines: {"id", "index", "job_id", "state", "text", "finish_reason",
 * "prompt_tokens", "completion_tokens", "tokens", "logprobs", "timings":
 * {...}, "worker", "model", "attempt"} (or "error" instead of text for a job
 * that failed; "logprobs" only for a job that asked: [{"id", "token",
 * "logprob", "bytes", "top_logprobs": [...]}] per token).  OpenAI lines:
 * OpenAI's batch output line (custom_id, response.status_code,
 * response.body with one choice per job, usage and the model that ran;
 * error), with llmq's account per choice under response.body.llmq, and
 * logprobs as OpenAI writes them: choices[i].logprobs.content for chat, the
 * legacy tokens / token_logprobs / top_logprobs lists for completions. */
const jobfile_job *jobfile_take(jobfile *jf, const llmq_result *r, FILE *out, time_t created);

#endif
