/* jobconv: between the broker's messages and the engine.
 *
 * A `job` becomes an engine_request: a text prompt is tokenized exactly as
 * llmq-run does (BOS when the model asks for it, special tokens written in
 * the text recognised), so the same prompt gives the same tokens, hence the
 * same output, through the queue and on the command line; token ids are
 * used as given; a chat job's messages are rendered with the model's chat
 * template and tokenized with control tokens from the template's text only
 * (model/chat.h), as llmq-run --messages does.  An output format
 * (json_schema, json_object) becomes the request's constraint, a grammar
 * held in the worker's format table.  A finished sequence becomes a
 * `job_result`: its text repaired into wire-clean UTF-8 (worker/text.h), its
 * timings measured by the engine for this job alone, how many of its
 * prompt tokens the prefix cache held, its logprobs (when asked for) with
 * each token's bytes as the vocabulary has them.
 *
 * Both own their buffers until the matching _free. */
#ifndef LLMQ_WORKER_JOBCONV_H
#define LLMQ_WORKER_JOBCONV_H

#include <stdint.h>

#include "common/err.h"
#include "proto/wire.h"
#include "engine/engine.h"
#include "model/chat.h"
#include "model/tokenizer.h"
#include "worker/formats.h"

/* What a job's prompt is made with: the model's vocabulary and, for chat
 * jobs, its chat template; NULL when there is none, and then no_chat says
 * why (naming the model and --chat-template), for each chat job's error. */
typedef struct jobconv_model {
    const tok_vocab *vocab;
    const chat_template *chat;
    const char *no_chat;
} jobconv_model;

typedef struct jobconv_request {
    engine_request req; /* id = the job id; prompt points into ids; constraint: held in
                           the format table, released by the caller when the job leaves */
    int32_t *ids;
} jobconv_request;

/* Fails, naming the job and the field, when the prompt cannot be tokenized
 * (the tokenizer's error), when messages cannot be rendered (no template,
 * or the template refuses them: LLMQ_ERR_INVALID, the job fails for good),
 * the schema cannot be honoured (LLMQ_ERR_INVALID) or memory runs out
 * (LLMQ_ERR_NO_ROOM); nothing is then held.  What the engine checks itself
 * (length against the context, id range) is left to engine_add. */
int jobconv_request_make(jobconv_request *r, const wire_job *j, const jobconv_model *m,
                         formats *fmt, llmq_err *err);
void jobconv_request_free(jobconv_request *r);

typedef struct jobconv_result {
    wire_msg msg; /* WIRE_T_JOB_RESULT, pointing into the buffers below and v's pieces */
    char *text;
    uint32_t *tokens;
    wire_token_logprobs *logprobs;
    wire_logprob *top;
} jobconv_result;

/* ev is a finished event (not ENGINE_RUNNING, not cancelled); its tokens'
 * bytes in logprobs are v's pieces (v must outlive r).  Fails when the text
 * is over WIRE_MAX_TEXT_BYTES (LLMQ_ERR_INVALID: the job would generate it
 * again) or memory runs out (LLMQ_ERR_NO_ROOM). */
int jobconv_result_make(jobconv_result *r, uint32_t attempt, const engine_event *ev,
                        const tok_vocab *v, llmq_err *err);
void jobconv_result_free(jobconv_result *r);

#endif
