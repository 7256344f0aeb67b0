#include "tools/jobfile.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/grow.h"
#include "proto/job_params.h"
#include "proto/wire.h"

/* ---- job fields ------------------------------------------------------------------ */

typedef enum ntype { N_U32, N_I32, N_U64, N_F32, N_BOOL } ntype;

typedef struct numfield {
    const char *name;
    ntype t;
    size_t off;
} numfield;

/* The job parameters (proto/job_params.h), then the job's own numbers. */
#define PARAM_NUM(name, kind, lo, hi, lo_open, dflt, engine) \
    {#name, N_##kind, offsetof(llmq_job, name)},

static const numfield NUMS[] = {
    JOB_PARAMS(PARAM_NUM){"priority", N_I32, offsetof(llmq_job, priority)},
};

static const numfield *num_named(const char *name)
{
    for (size_t i = 0; i < sizeof NUMS / sizeof NUMS[0]; i++)
        if (strcmp(name, NUMS[i].name) == 0)
            return &NUMS[i];
    return NULL;
}

static int int_in(const json_value *v, const char *name, int64_t lo, int64_t hi, int64_t *out,
                  llmq_err *err)
{
    if (v->type != JSON_NUMBER || !v->num.is_int)
        return llmq_errf(err, "%s: must be an integer, not %s", name,
                         v->type == JSON_NUMBER ? "a fraction" : json_type_name(v->type));
    if (v->num.i < lo || v->num.i > hi)
        return llmq_errf(err, "%s: %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", name,
                         v->num.i, lo, hi);
    *out = v->num.i;
    return 0;
}

/* Type checks and C-range checks here; the protocol's ranges are judged by
 * llmq_job_check afterwards. */
static int set_number(const json_value *v, const numfield *f, llmq_job *job, llmq_err *err)
{
    char *p = (char *)job + f->off;
    int64_t i;
    switch (f->t) {
    case N_F32: {
        if (v->type != JSON_NUMBER)
            return llmq_errf(err, "%s: must be a number, not %s", f->name,
                             json_type_name(v->type));
        float x = (float)v->num.d;
        memcpy(p, &x, sizeof x);
        return 0;
    }
    case N_BOOL:
        if (v->type != JSON_BOOL)
            return llmq_errf(err, "%s: must be true or false, not %s", f->name,
                             json_type_name(v->type));
        memcpy(p, &v->boolean, sizeof(bool));
        return 0;
    case N_U32:
        if (int_in(v, f->name, 0, UINT32_MAX, &i, err) < 0)
            return -1;
        memcpy(p, &(uint32_t){(uint32_t)i}, sizeof(uint32_t));
        return 0;
    case N_I32:
        if (int_in(v, f->name, INT32_MIN, INT32_MAX, &i, err) < 0)
            return -1;
        memcpy(p, &(int32_t){(int32_t)i}, sizeof(int32_t));
        return 0;
    default:
        if (int_in(v, f->name, 0, INT64_MAX, &i, err) < 0)
            return -1;
        memcpy(p, &(uint64_t){(uint64_t)i}, sizeof(uint64_t));
        return 0;
    }
}

static int str_of(const json_value *v, const char *name, const char **out, llmq_err *err)
{
    if (v->type != JSON_STRING)
        return llmq_errf(err, "%s: must be a string, not %s", name, json_type_name(v->type));
    if (strlen(v->str.s) != v->str.len)
        return llmq_errf(err, "%s: contains a NUL character", name);
    *out = v->str.s;
    return 0;
}

static int parse_stop(jobfile_entry *e, const json_value *v, llmq_err *err)
{
    size_t n = v->type == JSON_ARRAY ? v->arr.n : 1;
    if (v->type != JSON_ARRAY && v->type != JSON_STRING)
        return llmq_errf(err, "stop: must be a string or an array of strings");
    e->stop = calloc(n ? n : 1, sizeof *e->stop);
    if (!e->stop)
        return llmq_errf(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "stop[%zu]", i);
        if (str_of(v->type == JSON_ARRAY ? &v->arr.items[i] : v,
                   v->type == JSON_ARRAY ? name : "stop", &e->stop[i], err) < 0)
            return -1;
    }
    e->job.stop = e->stop;
    e->job.n_stop = n;
    return 0;
}

static int parse_tokens(jobfile_entry *e, const json_value *v, llmq_err *err)
{
    if (v->type != JSON_ARRAY)
        return llmq_errf(err, "tokens: must be an array of integers");
    e->tokens = calloc(v->arr.n ? v->arr.n : 1, sizeof *e->tokens);
    if (!e->tokens)
        return llmq_errf(err, "out of memory");
    for (size_t i = 0; i < v->arr.n; i++) {
        char name[32];
        int64_t t;
        snprintf(name, sizeof name, "tokens[%zu]", i);
        if (int_in(&v->arr.items[i], name, 0, INT32_MAX, &t, err) < 0)
            return -1;
        e->tokens[i] = (uint32_t)t;
    }
    e->job.tokens = e->tokens;
    e->job.n_tokens = v->arr.n;
    return 0;
}

/* A message's content: a string, or OpenAI's list of text parts, joined by
 * newlines into *owned (as vLLM joins them). */
static int message_content(const json_value *c, size_t i, const char **out, char **owned,
                           llmq_err *err)
{
    char name[48];
    snprintf(name, sizeof name, "messages[%zu].content", i);
    if (c->type == JSON_STRING)
        return str_of(c, name, out, err);
    if (c->type != JSON_ARRAY || c->arr.n == 0)
        return llmq_errf(err, "%s: must be a string or a non-empty list of text parts", name);
    size_t len = 0;
    FILE *f = open_memstream(owned, &len);
    if (!f)
        return llmq_errf(err, "out of memory");
    int rc = 0;
    for (size_t k = 0; k < c->arr.n && rc == 0; k++) {
        const json_value *type = json_get(&c->arr.items[k], "type");
        const json_value *text = json_get(&c->arr.items[k], "text");
        if (!type || type->type != JSON_STRING || strcmp(type->str.s, "text") != 0 || !text ||
            text->type != JSON_STRING || c->arr.items[k].obj.n != 2)
            rc = llmq_errf(err,
                           "%s[%zu]: only {\"type\": \"text\", \"text\": ...} parts are "
                           "supported",
                           name, k);
        else if ((k && fputc('\n', f) == EOF) ||
                 fwrite(text->str.s, 1, text->str.len, f) != text->str.len)
            rc = llmq_errf(err, "out of memory");
    }
    fclose(f);
    if (rc == 0 && strlen(*owned) != len)
        rc = llmq_errf(err, "%s: contains a NUL character", name);
    *out = *owned;
    return rc;
}

/* One message: exactly a role (any string: the model's template decides
 * what it knows) and a content. */
static int parse_message(jobfile_entry *e, const json_value *m, size_t i, llmq_err *err)
{
    const json_value *role = json_get(m, "role");
    const json_value *content = json_get(m, "content");
    if (m->type != JSON_OBJECT || !role || !content)
        return llmq_errf(err, "messages[%zu]: must be an object with \"role\" and \"content\"", i);
    for (size_t k = 0; k < m->obj.n; k++)
        if (strcmp(m->obj.members[k].key, "role") != 0 &&
            strcmp(m->obj.members[k].key, "content") != 0)
            return llmq_errf(err,
                             "messages[%zu].%s: not supported (a message is a role and a "
                             "content)",
                             i, m->obj.members[k].key);
    char name[48];
    snprintf(name, sizeof name, "messages[%zu].role", i);
    if (str_of(role, name, &e->messages[i].role, err) < 0)
        return -1;
    return message_content(content, i, &e->messages[i].content, &e->contents[i], err);
}

/* A chat job's messages, passed on as they are: the worker renders them
 * with its model's chat template. */
static int parse_messages(jobfile_entry *e, const json_value *msgs, llmq_err *err)
{
    if (msgs->type != JSON_ARRAY || msgs->arr.n == 0)
        return llmq_errf(err, "messages: must be a non-empty array");
    e->messages = calloc(msgs->arr.n, sizeof *e->messages);
    e->contents = calloc(msgs->arr.n, sizeof *e->contents);
    if (!e->messages || !e->contents)
        return llmq_errf(err, "out of memory");
    e->n_contents = msgs->arr.n;
    for (size_t i = 0; i < msgs->arr.n; i++)
        if (parse_message(e, &msgs->arr.items[i], i, err) < 0)
            return -1;
    e->job.messages = e->messages;
    e->job.n_messages = msgs->arr.n;
    e->chat = true;
    return 0;
}

/* A job field shared by both shapes: 1 if it was one, 0 if not, -1 on error. */
static int job_field(jobfile_entry *e, const char *key, const json_value *v, llmq_err *err)
{
    const numfield *f = num_named(key);
    if (f)
        return set_number(v, f, &e->job, err) < 0 ? -1 : 1;
    if (strcmp(key, "stop") == 0)
        return parse_stop(e, v, err) < 0 ? -1 : 1;
    if (strcmp(key, "tokens") == 0)
        return parse_tokens(e, v, err) < 0 ? -1 : 1;
    if (strcmp(key, "prompt") == 0)
        return str_of(v, "prompt", &e->job.prompt, err) < 0 ? -1 : 1;
    if (strcmp(key, "messages") == 0)
        return parse_messages(e, v, err) < 0 ? -1 : 1;
    return 0;
}

static int unknown(const char *key, llmq_err *err)
{
    return llmq_errf(err, "%s: unknown field", key);
}

/* ---- native lines -------------------------------------------------------------------- */

static int parse_native(jobfile_entry *e, const json_value *doc, llmq_err *err)
{
    for (size_t i = 0; i < doc->obj.n; i++) {
        const char *key = doc->obj.members[i].key;
        const json_value *v = &doc->obj.members[i].value;
        if (strcmp(key, "id") == 0) {
            if (v->type != JSON_STRING && !(v->type == JSON_NUMBER && v->num.is_int))
                return llmq_errf(err, "id: must be a string or an integer");
            e->id = v;
            continue;
        }
        if (strcmp(key, "model") == 0) {
            if (str_of(v, "model", &e->job.model, err) < 0)
                return -1;
            continue;
        }
        int rc = job_field(e, key, v, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return unknown(key, err);
    }
    return 0;
}

/* ---- OpenAI lines ----------------------------------------------------------------------- */

static int body_prompt(jobfile_entry *e, const json_value *v, llmq_err *err)
{
    if (v->type == JSON_ARRAY && v->arr.n == 1)   /* OpenAI allows a list of prompts; n = 1 only */
        v = &v->arr.items[0];
    return str_of(v, "prompt", &e->job.prompt, err);
}

/* Body fields OpenAI has and llmq handles in its own way: 1 handled, 0 not. */
static int body_special(jobfile_entry *e, const char *key, const json_value *v, llmq_err *err)
{
    if (strcmp(key, "prompt") == 0)
        return body_prompt(e, v, err) < 0 ? -1 : 1;
    if (strcmp(key, "model") == 0)
        return str_of(v, "model", &e->model, err) < 0 ? -1 : 1;
    if (strcmp(key, "max_completion_tokens") == 0)
        return set_number(v, num_named("max_tokens"), &e->job, err) < 0 ? -1 : 1;
    if (strcmp(key, "n") == 0) {
        if (v->type != JSON_NUMBER || !v->num.is_int || v->num.i != 1)
            return llmq_errf(err, "n: only 1 is supported");
        return 1;
    }
    if (strcmp(key, "stream") == 0) {
        if (v->type != JSON_BOOL || v->boolean)
            return llmq_errf(err, "stream: only false is supported");
        return 1;
    }
    if (strcmp(key, "user") == 0)
        return 1;
    return 0;
}

/* OpenAI's "logprobs": true/false in a chat body (with "top_logprobs" for
 * alternatives), in a completions body the number of alternatives, 0..5
 * (the legacy API's); null is "no". */
static int body_logprobs(jobfile_entry *e, const json_value *v, llmq_err *err)
{
    if (!v || v->type == JSON_NULL)
        return 0;
    if (e->chat) {
        if (v->type != JSON_BOOL)
            return llmq_errf(err, "logprobs: chat completions take true or false (and "
                                  "\"top_logprobs\" for alternatives)");
        e->job.logprobs = v->boolean;
        return 0;
    }
    if (v->type != JSON_NUMBER || !v->num.is_int || v->num.i < 0 || v->num.i > 5)
        return llmq_errf(err, "logprobs: completions take the number of alternatives, 0..5");
    e->job.logprobs = true;
    e->job.top_logprobs = (int32_t)v->num.i;
    return 0;
}

/* "temperature: ..." becomes "body.temperature: ...". */
static int in_body(llmq_err *err)
{
    char msg[LLMQ_ERR_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return llmq_errf(err, "body.%s", msg);
}

static int parse_body(jobfile_entry *e, const json_value *body, llmq_err *err)
{
    if (body->type != JSON_OBJECT)
        return llmq_errf(err, "body: must be an object");
    for (size_t i = 0; i < body->obj.n; i++) {
        const char *key = body->obj.members[i].key;
        const json_value *v = &body->obj.members[i].value;
        /* Its meaning depends on the kind of body, known once "messages" or
         * "prompt" has been read. */
        if (strcmp(key, "logprobs") == 0)
            continue;
        int rc = body_special(e, key, v, err);
        if (rc == 0)
            rc = job_field(e, key, v, err);
        if (rc == 0)
            rc = unknown(key, err);
        if (rc < 0)
            return in_body(err);
    }
    if (!e->job.prompt && !e->job.tokens && !e->job.messages)
        return llmq_errf(err, "body: \"prompt\" or \"messages\" is required");
    if (body_logprobs(e, json_get(body, "logprobs"), err) < 0)
        return in_body(err);
    return 0;
}

static int check_url(const jobfile_entry *e, const json_value *url, const json_value *method,
                     llmq_err *err)
{
    const char *want = e->chat ? "/v1/chat/completions" : "/v1/completions";
    if (url && (url->type != JSON_STRING || strcmp(url->str.s, want) != 0))
        return llmq_errf(err, "url: must be \"%s\" for a body with %s", want,
                         e->chat ? "messages" : "a prompt");
    if (method && (method->type != JSON_STRING || strcmp(method->str.s, "POST") != 0))
        return llmq_errf(err, "method: must be \"POST\"");
    return 0;
}

static int parse_openai(jobfile_entry *e, const json_value *doc, llmq_err *err)
{
    const json_value *url = NULL, *method = NULL, *body = NULL;
    for (size_t i = 0; i < doc->obj.n; i++) {
        const char *key = doc->obj.members[i].key;
        const json_value *v = &doc->obj.members[i].value;
        if (strcmp(key, "custom_id") == 0) {
            const char *s;
            if (str_of(v, "custom_id", &s, err) < 0)
                return -1;
            e->id = v;
        } else if (strcmp(key, "url") == 0) {
            url = v;
        } else if (strcmp(key, "method") == 0) {
            method = v;
        } else if (strcmp(key, "body") == 0) {
            body = v;
        } else {
            return unknown(key, err);
        }
    }
    if (!body)
        return llmq_errf(err, "body: required in an OpenAI batch line");
    e->openai = true;
    if (parse_body(e, body, err) < 0)
        return -1;
    return check_url(e, url, method, err);
}

/* ---- lines ------------------------------------------------------------------------------ */

static int make_key(jobfile_entry *e, const char *batch, llmq_err *err)
{
    if (!e->id)
        return 0;
    int n = e->id->type == JSON_STRING
                ? asprintf(&e->key, "%s:%s", batch, e->id->str.s)
                : asprintf(&e->key, "%s:%" PRId64, batch, e->id->num.i);
    if (n < 0) {
        e->key = NULL;
        return llmq_errf(err, "out of memory");
    }
    e->job.key = e->key;
    /* The user wrote no key: say what made it too long. */
    if ((size_t)n > WIRE_MAX_NAME_BYTES)
        return llmq_errf(err,
                         "id: the job's key BATCH:ID would be %d bytes, at most %u: a"
                         " shorter --batch (%zu bytes) or id (%zu)",
                         n, WIRE_MAX_NAME_BYTES, strlen(batch), (size_t)n - strlen(batch) - 1);
    return 0;
}

static int parse_line(jobfile_entry *e, const char *text, size_t len, const char *batch,
                      llmq_err *err)
{
    if (json_parse(text, len, &e->doc, err) < 0) {
        /* A line is one JSON text: its "line 1, " says nothing. */
        static const char L1[] = "line 1, ";
        if (strncmp(err->msg, L1, sizeof L1 - 1) == 0)
            memmove(err->msg, err->msg + sizeof L1 - 1, strlen(err->msg) - (sizeof L1 - 2));
        return -1;
    }
    if (e->doc->type != JSON_OBJECT)
        return llmq_errf(err, "a job line must be a JSON object, not %s",
                         json_type_name(e->doc->type));
    llmq_job_init(&e->job);
    int rc = json_get(e->doc, "custom_id") ? parse_openai(e, e->doc, err)
                                           : parse_native(e, e->doc, err);
    if (rc < 0 || make_key(e, batch, err) < 0)
        return -1;
    llmq_error le;
    if (llmq_job_check(&e->job, &le) < 0)
        return llmq_errf(err, "%s%s", e->openai && le.field[0] ? "body." : "", le.message);
    return 0;
}

static void entry_free(jobfile_entry *e)
{
    json_free(e->doc);
    for (size_t i = 0; i < e->n_contents; i++)
        free(e->contents[i]);
    free(e->contents);
    free(e->messages);
    free(e->key);
    free(e->stop);
    free(e->tokens);
}

void jobfile_free(jobfile *jf)
{
    for (size_t i = 0; i < jf->n; i++)
        entry_free(&jf->entries[i]);
    free(jf->entries);
    jf->entries = NULL;
    jf->n = 0;
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

static int cmp_key(const void *a, const void *b)
{
    const jobfile_entry *x = *(const jobfile_entry *const *)a;
    const jobfile_entry *y = *(const jobfile_entry *const *)b;
    return strcmp(x->key, y->key);
}

/* Two lines with one id would be one job: refuse the file instead. */
static int check_unique(jobfile *jf, const char *name, llmq_err *err)
{
    jobfile_entry **keyed = calloc(jf->n ? jf->n : 1, sizeof *keyed);
    if (!keyed)
        return llmq_errf(err, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < jf->n; i++)
        if (jf->entries[i].key)
            keyed[n++] = &jf->entries[i];
    qsort(keyed, n, sizeof *keyed, cmp_key);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if (strcmp(keyed[i - 1]->key, keyed[i]->key) == 0) {
            const jobfile_entry *a = keyed[i - 1], *b = keyed[i];
            if (a->line > b->line) {
                const jobfile_entry *t = a;
                a = b;
                b = t;
            }
            rc = llmq_errf(err, "%s:%zu: id: repeats the id of line %zu", name, b->line, a->line);
        }
    free(keyed);
    return rc;
}

static int add_line(jobfile *jf, size_t *cap, const char *name, size_t lineno, const char *text,
                    size_t len, const char *batch, llmq_err *err)
{
    if (grow_reserve(&jf->entries, cap, jf->n + 1, sizeof *jf->entries))
        return llmq_errf(err, "out of memory");
    jobfile_entry *e = &jf->entries[jf->n++];
    memset(e, 0, sizeof *e);
    e->line = lineno;
    if (parse_line(e, text, len, batch, err) < 0)
        return llmq_err_prefix(err, "%s:%zu", name, lineno);
    return 0;
}

int jobfile_read(FILE *in, const char *name, const char *batch, jobfile *out, llmq_err *err)
{
    *out = (jobfile){0};
    char *line = NULL;
    size_t cap = 0, ecap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (!blank(line, (size_t)len))
            rc = add_line(out, &ecap, name, lineno, line, (size_t)len, batch, err);
    }
    if (rc == 0 && ferror(in))
        rc = llmq_errf(err, "%s: read error", name);
    free(line);
    if (rc == 0 && out->n == 0)
        rc = llmq_errf(err, "%s: no jobs", name);
    if (rc == 0)
        rc = check_unique(out, name, err);
    if (rc < 0)
        jobfile_free(out);
    return rc;
}

/* ---- output ---------------------------------------------------------------------------- */

static void write_str(FILE *f, const char *s)
{
    if (s)
        json_write_string(f, s, strlen(s));
    else
        fputs("null", f);
}

static void write_id(FILE *f, const json_value *id)
{
    if (!id)
        fputs("null", f);
    else if (id->type == JSON_STRING)
        json_write_string(f, id->str.s, id->str.len);
    else
        fprintf(f, "%" PRId64, id->num.i);
}

static void write_timings(FILE *f, const llmq_result *r)
{
    fprintf(f, "{\"queue_wait_ms\":%.3f,\"prefill_ms\":%.3f,\"prefill_tok_s\":%.1f,"
               "\"decode_ms\":%.3f,\"decode_tok_s\":%.1f,\"total_ms\":%.3f}",
            r->queue_wait_ms, r->prefill_ms, r->prefill_tok_s, r->decode_ms, r->decode_tok_s,
            r->total_ms);
}

/* "token" (its bytes as text, a split character's bytes as U+FFFD), "logprob"
 * and "bytes", OpenAI's fields; native output adds the token's "id". */
static void write_logprob_fields(FILE *f, const llmq_logprob *lp, bool with_id)
{
    if (with_id)
        fprintf(f, "\"id\":%" PRIu32 ",", lp->token);
    fputs("\"token\":", f);
    json_write_string(f, (const char *)lp->bytes, lp->n_bytes);
    fprintf(f, ",\"logprob\":%.9g,\"bytes\":[", (double)lp->logprob);
    for (size_t i = 0; i < lp->n_bytes; i++)
        fprintf(f, "%s%u", i ? "," : "", (unsigned)lp->bytes[i]);
    fputc(']', f);
}

/* [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}, ...]:
 * OpenAI chat's logprobs.content, and native output's logprobs. */
static void write_logprobs_content(FILE *f, const llmq_result *r, bool with_id)
{
    fputc('[', f);
    for (size_t i = 0; i < r->n_logprobs; i++) {
        const llmq_token_logprobs *t = &r->logprobs[i];
        fputs(i ? ",{" : "{", f);
        write_logprob_fields(f, &t->chosen, with_id);
        fputs(",\"top_logprobs\":[", f);
        for (size_t k = 0; k < t->n_top; k++) {
            fputs(k ? ",{" : "{", f);
            write_logprob_fields(f, &t->top[k], with_id);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputc(']', f);
}

/* The legacy completions API's logprobs: parallel lists of the tokens, their
 * logprobs and, per token, an object of the likeliest tokens' (text_offset,
 * a character count of the text before each token, is not given). */
static void write_legacy_logprobs(FILE *f, const llmq_result *r)
{
    fputs("{\"tokens\":[", f);
    for (size_t i = 0; i < r->n_logprobs; i++) {
        const llmq_logprob *lp = &r->logprobs[i].chosen;
        fputs(i ? "," : "", f);
        json_write_string(f, (const char *)lp->bytes, lp->n_bytes);
    }
    fputs("],\"token_logprobs\":[", f);
    for (size_t i = 0; i < r->n_logprobs; i++)
        fprintf(f, "%s%.9g", i ? "," : "", (double)r->logprobs[i].chosen.logprob);
    fputs("],\"top_logprobs\":[", f);
    for (size_t i = 0; i < r->n_logprobs; i++) {
        const llmq_token_logprobs *t = &r->logprobs[i];
        fputs(i ? ",{" : "{", f);
        for (size_t k = 0; k < t->n_top; k++) {
            fputs(k ? "," : "", f);
            json_write_string(f, (const char *)t->top[k].bytes, t->top[k].n_bytes);
            fprintf(f, ":%.9g", (double)t->top[k].logprob);
        }
        fputc('}', f);
    }
    fputs("]}", f);
}

void jobfile_write_ack(FILE *out, const jobfile_entry *e, bool existing)
{
    fputs("{\"id\":", out);
    write_id(out, e->id);
    fprintf(out, ",\"job_id\":%" PRIu64 ",\"existing\":%s}\n", e->job_id,
            existing ? "true" : "false");
}

static void write_native(FILE *f, const jobfile_entry *e, const llmq_result *r)
{
    fputs("{\"id\":", f);
    write_id(f, e->id);
    fprintf(f, ",\"job_id\":%" PRIu64 ",\"state\":\"%s\"", r->id, llmq_state_name(r->state));
    if (r->state != LLMQ_STATE_DONE) {
        fputs(",\"error\":", f);
        write_str(f, r->error);
        fputs("}\n", f);
        return;
    }
    fputs(",\"text\":", f);
    write_str(f, r->text);
    fprintf(f, ",\"finish_reason\":\"%s\",\"prompt_tokens\":%" PRIu32
               ",\"completion_tokens\":%" PRIu32 ",\"tokens\":[",
            r->finish ? r->finish : "", r->prompt_tokens, r->gen_tokens);
    for (size_t i = 0; i < r->n_tokens; i++)
        fprintf(f, "%s%" PRIu32, i ? "," : "", r->tokens[i]);
    fputc(']', f);
    if (r->logprobs) {
        fputs(",\"logprobs\":", f);
        write_logprobs_content(f, r, true);
    }
    fputs(",\"timings\":", f);
    write_timings(f, r);
    fputs(",\"worker\":", f);
    write_str(f, r->worker);
    fprintf(f, ",\"attempt\":%" PRIu32 "}\n", r->attempt);
}

static void write_openai_choice(FILE *f, const jobfile_entry *e, const llmq_result *r)
{
    /* OpenAI has no "context": running out of window is a length stop. */
    const char *finish = r->finish && strcmp(r->finish, "stop") == 0 ? "stop" : "length";
    fputs("[{\"index\":0,", f);
    if (e->chat) {
        fputs("\"message\":{\"role\":\"assistant\",\"content\":", f);
        write_str(f, r->text);
        fputs("}", f);
        if (r->logprobs) {
            fputs(",\"logprobs\":{\"content\":", f);
            write_logprobs_content(f, r, false);
            fputs(",\"refusal\":null}", f);
        }
    } else {
        fputs("\"text\":", f);
        write_str(f, r->text);
        fputs(",\"logprobs\":", f);
        if (r->logprobs)
            write_legacy_logprobs(f, r);
        else
            fputs("null", f);
    }
    fprintf(f, ",\"finish_reason\":\"%s\"}]", finish);
}

static void write_openai(FILE *f, const jobfile_entry *e, const llmq_result *r, time_t created)
{
    fprintf(f, "{\"id\":\"batch_req_%" PRIu64 "\",\"custom_id\":", r->id);
    write_id(f, e->id);
    if (r->state != LLMQ_STATE_DONE) {
        fprintf(f, ",\"response\":null,\"error\":{\"code\":\"job_%s\",\"message\":",
                llmq_state_name(r->state));
        write_str(f, r->error);
        fputs("}}\n", f);
        return;
    }
    fprintf(f, ",\"response\":{\"status_code\":200,\"request_id\":\"%" PRIu64 "\",\"body\":{"
               "\"id\":\"%s-%" PRIu64 "\",\"object\":\"%s\",\"created\":%lld,\"model\":",
            r->id, e->chat ? "chatcmpl" : "cmpl", r->id,
            e->chat ? "chat.completion" : "text_completion", (long long)created);
    write_str(f, e->model ? e->model : "llmq");
    fputs(",\"choices\":", f);
    write_openai_choice(f, e, r);
    fprintf(f, ",\"usage\":{\"prompt_tokens\":%" PRIu32 ",\"completion_tokens\":%" PRIu32
               ",\"total_tokens\":%" PRIu64 "},\"llmq\":{\"timings\":",
            r->prompt_tokens, r->gen_tokens, (uint64_t)r->prompt_tokens + r->gen_tokens);
    write_timings(f, r);
    fputs(",\"worker\":", f);
    write_str(f, r->worker);
    fputs("}}},\"error\":null}\n", f);
}

void jobfile_write_result(FILE *out, const jobfile_entry *e, const llmq_result *r, time_t created)
{
    if (e->openai)
        write_openai(out, e, r, created);
    else
        write_native(out, e, r);
}
