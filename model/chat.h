/* chat: a job's messages rendered into a prompt by a chat template.
 *
 * A chat job carries messages (role + content) instead of a prompt; the
 * prompt is what the model's own template (GGUF key tokenizer.chat_template)
 * makes of them, byte for byte as Hugging Face transformers'
 * apply_chat_template(messages, add_generation_prompt=...) makes it: the
 * template runs in model/jinja.h's interpreter with the variables
 * transformers passes (messages, add_generation_prompt, bos_token and
 * eos_token when the caller has them, tools=None, documents=None).
 *
 * The rendered prompt comes as segments: text the template wrote (where
 * special tokens such as <|im_start|> are meant to be control tokens) and
 * text that came from the messages, roles included (to be tokenized as
 * plain text only, so that a message cannot forge a turn: the prompt
 * injection guard).  A value derived from a message (trimmed, sliced,
 * concatenated) stays marked.  The caller should still tokenize runs of
 * plain text across segment boundaries as one text, so that merges match
 * what a tokenizer gives the whole string; only special-token matching is
 * restricted to template segments.
 *
 * Which template: chat_template_open takes what a user passes as
 * --chat-template NAME|FILE: NAME is a built-in copy of a family's
 * template (chat_builtin_names), anything else is read as a Jinja file;
 * NULL means the model's own.  A template the interpreter cannot run is
 * refused when opened, naming the construct and its line and column.
 *
 * Tokenizing: chat_render_for and chat_tokenize are how the worker and
 * llmq-run make a chat job's prompt from a model's vocabulary.
 *
 * Ownership: a chat_template owns its parse and is immutable (shareable by
 * threads); chat_render's output is malloc'd, owned by the caller and freed
 * with chat_prompt_free.  Messages are read during the call only. */
#ifndef LLMQ_MODEL_CHAT_H
#define LLMQ_MODEL_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "model/gguf.h"
#include "model/jinja.h"
#include "model/tokenizer.h"

/* The GGUF key of a model's template. */
#define CHAT_TEMPLATE_KEY "tokenizer.chat_template"

typedef struct chat_message {
    const char *role; /* UTF-8, not NUL-terminated */
    size_t role_len;
    const char *content;
    size_t content_len;
} chat_message;

typedef struct chat_vars {
    bool add_generation_prompt;
    const char *bos_token; /* NUL-terminated; NULL: undefined in the template */
    const char *eos_token;
    int64_t now; /* seconds since the epoch: strftime_now's clock */
} chat_vars;

/* text is the concatenation of the segments (see jinja_output). */
typedef jinja_segment chat_segment;
typedef jinja_output chat_prompt;

typedef struct chat_template chat_template;

/* Parses text[0..len) as a template; `name` (copied) says where it came
 * from in errors and chat_template_name. */
int chat_template_parse(chat_template **out, const char *name, const char *text, size_t len,
                        llmq_err *err);

/* --chat-template's rule: choice NULL (or "") is the model's template (an
 * error names the key when the model has none), a built-in name is that
 * copy, anything else a file to read.  model may be NULL when choice is
 * given. */
int chat_template_open(chat_template **out, const char *choice, const gguf_file *model,
                       llmq_err *err);

const char *chat_template_name(const chat_template *t);
void chat_template_free(chat_template *t);

/* The built-in template called name: 0 and its text, or -1 when unknown. */
int chat_builtin(const char *name, const char **text, size_t *len);
/* "chatml, llama2, ...": every built-in name, for help and errors. */
const char *chat_builtin_names(void);

/* The model's tokenizer.chat_template: 0, 1 when absent, -1 when not a
 * string.  *out points into the model's mapping. */
int chat_model_template(const gguf_file *model, gguf_str *out, llmq_err *err);

/* Renders messages[0..n) with t.  Errors name the message (invalid UTF-8)
 * or the place in the template (raise_exception's message, a limit). */
int chat_render(const chat_template *t, const chat_message *messages, size_t n,
                const chat_vars *vars, chat_prompt *out, llmq_err *err);
void chat_prompt_free(chat_prompt *p);

/* chat_render as a job's prompt is made for the model whose vocabulary is
 * v: with add_generation_prompt (the prompt ends where the assistant's turn
 * begins), bos_token and eos_token the texts of v's BOS and EOS tokens when
 * it has them (as llama.cpp passes them), and the wall clock. */
int chat_render_for(const chat_template *t, const tok_vocab *v, const chat_message *messages,
                    size_t n, chat_prompt *out, llmq_err *err);

/* The token ids of a rendered prompt (malloc'd, the caller frees *ids):
 * control tokens are parsed in the template's segments only, so a message
 * cannot forge one (tok_encode_segments), and no BOS is added: a template
 * writes bos_token where its model wants one, and transformers tokenizes a
 * rendered chat with add_special_tokens=False. */
int chat_tokenize(const chat_prompt *p, const tok_vocab *v, int32_t **ids, size_t *n,
                  llmq_err *err);

#endif
