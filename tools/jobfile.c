#include "tools/jobfile.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/grow.h"
#include "engine/jsonschema.h"
#include "proto/job_params.h"
#include "proto/wire.h"

/* ---- job fields ------------------------------------------------------------------ */

typedef struct numfield {
    const char *name;
    openai_kind kind;
    size_t off;
} numfield;

/* The job parameters (proto/job_params.h), then the job's own numbers. */
#define PARAM_NUM(name, kind, lo, hi, lo_open, dflt, engine) \
    {#name, OPENAI_##kind, offsetof(llmq_job, name)},

static const numfield NUMS[] = {
    JOB_PARAMS(PARAM_NUM){"priority", OPENAI_I32, offsetof(llmq_job, priority)},
};

static const numfield *num_named(const char *name)
{
    for (size_t i = 0; i < sizeof NUMS / sizeof NUMS[0]; i++)
        if (strcmp(name, NUMS[i].name) == 0)
            return &NUMS[i];
    return NULL;
}

static int parse_stop(jobfile_entry *e, const json_value *v, openai_err *err)
{
    if (openai_want_strings(v, "stop", &e->stop, &e->job.n_stop, err) < 0)
        return -1;
    e->job.stop = e->stop;
    return 0;
}

static int parse_tokens(jobfile_entry *e, const json_value *v, openai_err *err)
{
    if (v->type != JSON_ARRAY)
        return openai_errf(err, OPENAI_INVALID_VALUE, "tokens", "must be an array of integers");
    e->tokens = calloc(v->arr.n ? v->arr.n : 1, sizeof *e->tokens);
    if (!e->tokens)
        return openai_errf(err, OPENAI_INVALID_VALUE, "tokens", "out of memory");
    for (size_t i = 0; i < v->arr.n; i++) {
        char name[32];
        int64_t t;
        snprintf(name, sizeof name, "tokens[%zu]", i);
        if (openai_want_int(&v->arr.items[i], name, 0, INT32_MAX, &t, err) < 0)
            return -1;
        e->tokens[i] = (uint32_t)t;
    }
    e->job.tokens = e->tokens;
    e->job.n_tokens = v->arr.n;
    return 0;
}

/* A schema as an object (kept as its compact text) or as JSON text. */
static int parse_schema(jobfile_entry *e, const json_value *v, openai_err *err)
{
    if (v->type == JSON_STRING)
        return openai_want_string(v, "json_schema", &e->job.json_schema, err);
    if (v->type != JSON_OBJECT)
        return openai_errf(err, OPENAI_INVALID_VALUE, "json_schema",
                           "must be an object (or its JSON text), not %s", json_type_name(v->type));
    json_buf b = {0};
    if (json_buf_value(&b, v) < 0) {
        free(b.p);
        return openai_errf(err, OPENAI_INVALID_VALUE, "json_schema", "out of memory");
    }
    e->schema = b.p;
    e->job.json_schema = e->schema;
    return 0;
}

/* ---- a chat's messages ----------------------------------------------------------------- */

/* A message's content: a string, or OpenAI's list of text parts, joined by
 * newlines into *owned (as vLLM joins them).  A part of another type (an
 * image, audio, a file) asks for what the models llmq runs cannot take. */
static int message_content(const json_value *c, const char *name, const char **out, char **owned,
                           openai_err *err)
{
    if (c->type == JSON_STRING)
        return openai_want_string(c, name, out, err);
    if (c->type != JSON_ARRAY || c->arr.n == 0)
        return openai_errf(err, OPENAI_INVALID_VALUE, name,
                           "must be a string or a non-empty list of text parts");
    size_t len = 0;
    FILE *f = open_memstream(owned, &len);
    if (!f)
        return openai_errf(err, OPENAI_INVALID_VALUE, name, "out of memory");
    int rc = 0;
    for (size_t k = 0; k < c->arr.n && rc == 0; k++) {
        const json_value *part = &c->arr.items[k];
        const json_value *type = json_get(part, "type"), *text = json_get(part, "text");
        char at[128];
        snprintf(at, sizeof at, "%s[%zu]", name, k);
        if (part->type != JSON_OBJECT || !type || type->type != JSON_STRING)
            rc = openai_errf(err, OPENAI_INVALID_VALUE, at, "must be an object with a \"type\"");
        else if (strcmp(type->str.s, "text") != 0)
            rc = openai_errf(err, OPENAI_UNSUPPORTED_VALUE, at,
                             "a part of type \"%s\": only text parts are supported (the models"
                             " llmq runs read text)",
                             type->str.s);
        else if (!text || text->type != JSON_STRING || part->obj.n != 2)
            rc = openai_errf(err, OPENAI_INVALID_VALUE, at,
                             "a text part is {\"type\": \"text\", \"text\": \"...\"}");
        else if ((k && fputc('\n', f) == EOF) ||
                 fwrite(text->str.s, 1, text->str.len, f) != text->str.len)
            rc = openai_errf(err, OPENAI_INVALID_VALUE, at, "out of memory");
    }
    fclose(f);
    if (rc == 0 && strlen(*owned) != len)
        rc = openai_errf(err, OPENAI_INVALID_VALUE, name, "contains a NUL character");
    *out = *owned;
    return rc;
}

/* The roles of OpenAI's messages: "developer" is OpenAI's newer name for
 * "system", which is the one the models' templates know; a tool's answer
 * belongs to tool calls, which are refused. */
static int openai_role(const char **role, const char *name, openai_err *err)
{
    static const char *const TAKEN[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof TAKEN / sizeof TAKEN[0]; i++)
        if (strcmp(*role, TAKEN[i]) == 0)
            return 0;
    if (strcmp(*role, "developer") == 0) {
        *role = "system";
        return 0;
    }
    if (strcmp(*role, "tool") == 0 || strcmp(*role, "function") == 0)
        return openai_errf(err, OPENAI_UNSUPPORTED_VALUE, name, "\"%s\": not supported: tool calls",
                           *role);
    return openai_errf(err, OPENAI_INVALID_VALUE, name,
                       "\"%s\" is not system, developer, user or assistant", *role);
}

/* A key of a message besides role and content: null, or tool_calls [], asks
 * for nothing; OpenAI's other message fields cannot be carried (a message
 * is a role and a content); anything else is a typo. */
static int message_extra(const char *key, const json_value *v, const char *name, openai_err *err)
{
    static const char *const OPENAI[] = {"name",          "tool_calls", "tool_call_id",
                                         "function_call", "refusal",    "audio"};
    if (v->type == JSON_NULL ||
        (strcmp(key, "tool_calls") == 0 && v->type == JSON_ARRAY && v->arr.n == 0))
        return 0;
    for (size_t i = 0; i < sizeof OPENAI / sizeof OPENAI[0]; i++)
        if (strcmp(key, OPENAI[i]) == 0)
            return openai_errf(err, OPENAI_UNSUPPORTED_PARAMETER, name,
                               "not supported: a message is a role and a content");
    return openai_errf(err, OPENAI_UNKNOWN_PARAMETER, name, "unknown field of a message");
}

/* One message, at `at` ("messages[2]", "body.messages[2]"): a role (on an
 * OpenAI line one of OpenAI's; on a native line any string, the model's
 * template deciding what it knows) and a content. */
static int parse_message(jobfile_entry *e, const json_value *m, size_t i, const char *at,
                         openai_err *err)
{
    char name[96];
    const json_value *role = json_get(m, "role"), *content = json_get(m, "content");
    if (m->type != JSON_OBJECT || !role || !content || content->type == JSON_NULL)
        return openai_errf(err,
                           m->type == JSON_OBJECT ? OPENAI_MISSING_PARAMETER : OPENAI_INVALID_VALUE,
                           at, "must be an object with \"role\" and \"content\"");
    for (size_t k = 0; k < m->obj.n; k++) {
        const char *key = m->obj.members[k].key;
        snprintf(name, sizeof name, "%s.%s", at, key);
        if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0 &&
            message_extra(key, &m->obj.members[k].value, name, err) < 0)
            return -1;
    }
    snprintf(name, sizeof name, "%s.role", at);
    if (openai_want_string(role, name, &e->messages[i].role, err) < 0 ||
        (e->openai && openai_role(&e->messages[i].role, name, err) < 0))
        return -1;
    snprintf(name, sizeof name, "%s.content", at);
    return message_content(content, name, &e->messages[i].content, &e->contents[i], err);
}

/* A chat job's messages, carried as they are: the worker renders them with
 * its model's chat template. */
static int parse_messages(jobfile_entry *e, const json_value *msgs, const char *field,
                          openai_err *err)
{
    if (msgs->type != JSON_ARRAY || msgs->arr.n == 0)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "must be a non-empty array");
    e->messages = calloc(msgs->arr.n, sizeof *e->messages);
    e->contents = calloc(msgs->arr.n, sizeof *e->contents);
    if (!e->messages || !e->contents)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "out of memory");
    e->n_contents = msgs->arr.n;
    for (size_t i = 0; i < msgs->arr.n; i++) {
        char at[48];
        snprintf(at, sizeof at, "%s[%zu]", field, i);
        if (parse_message(e, &msgs->arr.items[i], i, at, err) < 0)
            return -1;
    }
    e->job.messages = e->messages;
    e->job.n_messages = msgs->arr.n;
    return 0;
}

/* A native job field: 1 if it was one, 0 if not, -1 on error. */
static int job_field(jobfile_entry *e, const char *key, const json_value *v, openai_err *err)
{
    const numfield *f = num_named(key);
    int64_t n;
    if (f)
        return openai_set_scalar(&e->job, f->off, f->kind, v, f->name, err) < 0 ? -1 : 1;
    if (strcmp(key, "stop") == 0)
        return parse_stop(e, v, err) < 0 ? -1 : 1;
    if (strcmp(key, "tokens") == 0)
        return parse_tokens(e, v, err) < 0 ? -1 : 1;
    if (strcmp(key, "prompt") == 0)
        return openai_want_string(v, "prompt", &e->job.prompt, err) < 0 ? -1 : 1;
    if (strcmp(key, "model") == 0)
        return openai_want_string(v, "model", &e->job.model, err) < 0 ? -1 : 1;
    if (strcmp(key, "json_schema") == 0)
        return parse_schema(e, v, err) < 0 ? -1 : 1;
    if (strcmp(key, "messages") == 0)
        return parse_messages(e, v, "messages", err) < 0 ? -1 : 1;
    if (strcmp(key, "n") == 0) {
        if (openai_want_int(v, "n", 1, OPENAI_MAX_CHOICES, &n, err) < 0)
            return -1;
        e->req.n = (uint32_t)n;
        return 1;
    }
    return 0;
}

/* ---- native lines -------------------------------------------------------------------- */

static int parse_native(jobfile_entry *e, const json_value *doc, openai_err *err)
{
    llmq_job_init(&e->job);
    e->req.n = 1;
    for (size_t i = 0; i < doc->obj.n; i++) {
        const char *key = doc->obj.members[i].key;
        const json_value *v = &doc->obj.members[i].value;
        if (strcmp(key, "id") == 0) {
            if (v->type != JSON_STRING && !(v->type == JSON_NUMBER && v->num.is_int))
                return openai_errf(err, OPENAI_INVALID_VALUE, "id",
                                   "must be a string or an integer");
            e->id = v;
            continue;
        }
        int rc = job_field(e, key, v, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return openai_errf(err, OPENAI_UNKNOWN_PARAMETER, key, "unknown field");
    }
    return 0;
}

/* ---- OpenAI lines ----------------------------------------------------------------------- */

/* The body's fields: "messages" carried into the job here, every other one
 * judged by tools/openai.c. */
static int parse_body(jobfile_entry *e, const json_value *body, const char *custom_id,
                      openai_err *err)
{
    if (body->type != JSON_OBJECT)
        return openai_errf(err, OPENAI_INVALID_VALUE, "body", "must be an object");
    for (size_t i = 0; i < body->obj.n; i++) {
        const char *key = body->obj.members[i].key;
        const json_value *v = &body->obj.members[i].value;
        if (strcmp(key, "messages") != 0) {
            if (openai_body_field(&e->req, &e->job, key, v, err) < 0)
                return -1;
            continue;
        }
        if (parse_messages(e, v, "body.messages", err) < 0)
            return -1;
    }
    return openai_body_done(&e->req, &e->job, body, custom_id, err);
}

static const char *const URLS[] = {"/v1/completions", "/v1/chat/completions"};

/* Whether the line is a chat completion: its url says, or else its body. */
static int kind_of(const json_value *url, const json_value *body, bool *chat, openai_err *err)
{
    *chat = json_get(body, "messages") != NULL;
    if (!url)
        return 0;
    if (url->type != JSON_STRING)
        return openai_errf(err, OPENAI_INVALID_VALUE, "url", "must be a string");
    for (size_t i = 0; i < 2; i++)
        if (strcmp(url->str.s, URLS[i]) == 0) {
            if (*chat != (i == 1))
                return openai_errf(err, OPENAI_INVALID_VALUE, "url", "\"%s\" takes a body with %s",
                                   URLS[i], i ? "messages" : "a prompt");
            return 0;
        }
    return openai_errf(err, OPENAI_UNSUPPORTED_VALUE, "url",
                       "\"%s\": /v1/chat/completions and /v1/completions are supported",
                       url->str.s);
}

static int parse_openai(jobfile_entry *e, const json_value *doc, openai_err *err)
{
    const json_value *url = NULL, *method = NULL, *body = NULL;
    const char *custom_id = NULL;
    e->openai = true;
    for (size_t i = 0; i < doc->obj.n; i++) {
        const char *key = doc->obj.members[i].key;
        const json_value *v = &doc->obj.members[i].value;
        if (strcmp(key, "custom_id") == 0) {
            if (openai_want_string(v, "custom_id", &custom_id, err) < 0)
                return -1;
            e->id = v;
        } else if (strcmp(key, "url") == 0) {
            url = v;
        } else if (strcmp(key, "method") == 0) {
            method = v;
        } else if (strcmp(key, "body") == 0) {
            body = v;
        } else {
            return openai_errf(err, OPENAI_UNKNOWN_PARAMETER, key, "unknown field");
        }
    }
    if (!body)
        return openai_errf(err, OPENAI_MISSING_PARAMETER, "body",
                           "required in an OpenAI batch line");
    if (method && (method->type != JSON_STRING || strcmp(method->str.s, "POST") != 0))
        return openai_errf(err, OPENAI_INVALID_VALUE, "method", "must be \"POST\"");
    bool chat;
    if (kind_of(url, body, &chat, err) < 0)
        return -1;
    openai_req_init(&e->req, &e->job, chat);
    return parse_body(e, body, custom_id, err);
}

/* ---- lines ------------------------------------------------------------------------------ */

/* A schema is compiled once per distinct text, to know before anything is
 * sent whether llmq can enforce it. */
typedef struct schema_seen {
    char *text;
    char *why; /* NULL: it compiles */
} schema_seen;

typedef struct reader {
    const char *name, *batch;
    schema_seen *schemas;
    size_t n_schemas, cap_schemas, cap_entries, cap_jobs;
} reader;

static const char *schema_fault(reader *rd, const char *text)
{
    for (size_t i = 0; i < rd->n_schemas; i++)
        if (strcmp(rd->schemas[i].text, text) == 0)
            return rd->schemas[i].why;
    grammar *g = NULL;
    llmq_err why;
    int rc = jsonschema_compile(&g, text, strlen(text), &why);
    grammar_free(g);
    if (grow_reserve(&rd->schemas, &rd->cap_schemas, rd->n_schemas + 1, sizeof *rd->schemas))
        return rc ? "cannot be compiled (and memory ran out)" : NULL;
    schema_seen *s = &rd->schemas[rd->n_schemas++];
    *s = (schema_seen){.text = strdup(text), .why = rc ? strdup(why.msg) : NULL};
    return s->why;
}

/* The protocol's own checks, and the schema's: the field named as the line
 * names it. */
static int check_job(reader *rd, jobfile_entry *e, openai_err *err)
{
    const char *pre = e->openai ? "body." : "";
    llmq_error le;
    if (llmq_job_check(&e->job, &le) < 0) {
        char field[160];
        const size_t n = strlen(le.field);
        const char *msg = le.message;
        if (n && strncmp(msg, le.field, n) == 0 && msg[n] == ':')
            msg += n + 2;
        snprintf(field, sizeof field, "%s%s", pre, le.field);
        return openai_errf(
            err, le.code == LLMQ_E_MISSING_FIELD ? OPENAI_MISSING_PARAMETER : OPENAI_INVALID_VALUE,
            n ? field : NULL, "%s", msg);
    }
    const char *why = e->job.json_schema ? schema_fault(rd, e->job.json_schema) : NULL;
    if (why)
        return openai_errf(err, OPENAI_UNSUPPORTED_VALUE,
                           e->openai ? "body.response_format.json_schema.schema" : "json_schema",
                           "%s", why);
    return 0;
}

static int parse_line(reader *rd, jobfile_entry *e, const char *text, size_t len, openai_err *err)
{
    llmq_err jerr;
    if (json_parse(text, len, &e->doc, &jerr) < 0) {
        /* A line is one JSON text: its "line 1, " says nothing. */
        static const char L1[] = "line 1, ";
        const char *msg = jerr.msg +
                          (strncmp(jerr.msg, L1, sizeof L1 - 1) == 0 ? sizeof L1 - 1 : 0);
        return openai_errf(err, OPENAI_INVALID_JSON, NULL, "%s", msg);
    }
    if (e->doc->type != JSON_OBJECT)
        return openai_errf(err, OPENAI_INVALID_JSON, NULL,
                           "a job line must be a JSON object, not %s",
                           json_type_name(e->doc->type));
    int rc = json_get(e->doc, "custom_id") ? parse_openai(e, e->doc, err)
                                           : parse_native(e, e->doc, err);
    return rc < 0 ? -1 : check_job(rd, e, err);
}

/* ---- a line's jobs ---------------------------------------------------------------------- */

static int key_of(jobfile_entry *e, const char *batch, uint32_t index, char **key)
{
    *key = NULL;
    if (!e->id)
        return 0;
    char id[32];
    const char *s = e->id->type == JSON_STRING ? e->id->str.s : id;
    if (e->id->type != JSON_STRING)
        snprintf(id, sizeof id, "%" PRId64, e->id->num.i);
    /* One job keeps the key it always had; choices are told apart. */
    int n = e->n_jobs == 1 ? asprintf(key, "%s:%s", batch, s)
                           : asprintf(key, "%s:%s#%" PRIu32, batch, s, index);
    if (n < 0)
        *key = NULL;
    return n < 0 ? -1 : 0;
}

/* The line's n choices of each prompt, each sampled with seed + its index. */
static int expand(jobfile *jf, reader *rd, size_t idx, llmq_err *err)
{
    jobfile_entry *e = &jf->entries[idx];
    const uint32_t prompts = e->req.n_prompts ? e->req.n_prompts : 1;
    e->first = jf->n_jobs;
    e->n_jobs = (size_t)prompts * e->req.n;
    if (grow_reserve(&jf->jobs, &rd->cap_jobs, jf->n_jobs + e->n_jobs, sizeof *jf->jobs))
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for the jobs of line %zu", e->line);
    for (uint32_t p = 0; p < prompts; p++)
        for (uint32_t c = 0; c < e->req.n; c++) {
            jobfile_job *j = &jf->jobs[jf->n_jobs++];
            *j = (jobfile_job){.entry = idx, .index = p * e->req.n + c, .prompt = p, .job = e->job};
            j->job.seed = e->job.seed + j->index;
            if (e->req.n_prompts)
                j->job.prompt = e->req.prompts[p];
            if (key_of(e, rd->batch, j->index, &j->key) < 0)
                return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory");
            j->job.key = j->key;
        }
    return 0;
}

static void entry_free(jobfile_entry *e)
{
    json_free(e->doc);
    for (size_t i = 0; i < e->n_contents; i++)
        free(e->contents[i]);
    free(e->contents);
    free(e->messages);
    free(e->schema);
    free(e->stop);
    free(e->tokens);
    openai_req_free(&e->req);
}

static void job_free(jobfile_job *j)
{
    free(j->key);
    free(j->choice);
    free(j->llmq);
    free(j->error);
    free(j->model);
}

void jobfile_free(jobfile *jf)
{
    for (size_t i = 0; i < jf->n; i++)
        entry_free(&jf->entries[i]);
    for (size_t i = 0; i < jf->n_jobs; i++)
        job_free(&jf->jobs[i]);
    free(jf->entries);
    free(jf->jobs);
    free(jf->submitted);
    free(jf->by_id);
    *jf = (jobfile){0};
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

static void fail_entry(jobfile *jf, jobfile_entry *e, const openai_err *why)
{
    if (e->fault.fault == OPENAI_OK)
        jf->n_faults++;
    e->fault = *why;
}

/* A key longer than the protocol takes would fail at the broker: the
 * line fails here, saying what to shorten. */
static int check_keys(jobfile *jf, size_t idx, const char *batch)
{
    jobfile_entry *e = &jf->entries[idx];
    for (size_t i = e->first; i < e->first + e->n_jobs; i++) {
        const size_t len = jf->jobs[i].key ? strlen(jf->jobs[i].key) : 0;
        if (len <= WIRE_MAX_NAME_BYTES)
            continue;
        const char *shape = e->n_jobs > 1 ? "BATCH:ID#INDEX" : "BATCH:ID";
        const size_t id = e->id->type == JSON_STRING
                              ? e->id->str.len
                              : (size_t)snprintf(NULL, 0, "%" PRId64, e->id->num.i);
        openai_err why;
        openai_errf(&why, OPENAI_INVALID_VALUE, e->openai ? "custom_id" : "id",
                    "the job's key %s would be %zu bytes, at most %u: a shorter --batch (%zu"
                    " bytes) or id (%zu)",
                    shape, len, WIRE_MAX_NAME_BYTES, strlen(batch), id);
        fail_entry(jf, e, &why);
        break;
    }
    return 0;
}

static int add_line(jobfile *jf, reader *rd, size_t lineno, const char *text, size_t len,
                    llmq_err *err)
{
    if (grow_reserve(&jf->entries, &rd->cap_entries, jf->n + 1, sizeof *jf->entries))
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "%s:%zu: out of memory", rd->name, lineno);
    jobfile_entry *e = &jf->entries[jf->n++];
    memset(e, 0, sizeof *e);
    e->line = lineno;
    openai_err why = {0};
    if (parse_line(rd, e, text, len, &why) < 0) {
        fail_entry(jf, e, &why);
        return 0;
    }
    if (!jf->shape_openai && jf->n - jf->n_faults == 1)
        jf->shape_openai = e->openai;
    if (expand(jf, rd, jf->n - 1, err) < 0)
        return -1;
    return check_keys(jf, jf->n - 1, rd->batch);
}

typedef struct keyed {
    const char *key;
    size_t line, entry;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Two lines with one id would be one job: the later line fails. */
static int check_unique(jobfile *jf, llmq_err *err)
{
    keyed *k = calloc(jf->n_jobs ? jf->n_jobs : 1, sizeof *k);
    if (!k)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < jf->n_jobs; i++)
        if (jf->jobs[i].key)
            k[n++] = (keyed){jf->jobs[i].key, jf->entries[jf->jobs[i].entry].line,
                             jf->jobs[i].entry};
    qsort(k, n, sizeof *k, cmp_keyed);
    for (size_t i = 1; i < n; i++) {
        jobfile_entry *later = &jf->entries[k[i].entry];
        if (strcmp(k[i - 1].key, k[i].key) != 0 || k[i].line == k[i - 1].line ||
            later->fault.fault != OPENAI_OK)
            continue;
        openai_err why;
        openai_errf(&why, OPENAI_DUPLICATE_ID, later->openai ? "custom_id" : "id",
                    "repeats the id of line %zu (job key %s)", k[i - 1].line, k[i].key);
        fail_entry(jf, later, &why);
    }
    free(k);
    return 0;
}

/* A UTF-8 byte order mark, which some editors write first. */
static size_t bom(const char *s, size_t n)
{
    return n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}

int jobfile_read(FILE *in, const char *name, const char *batch, jobfile *out, llmq_err *err)
{
    *out = (jobfile){0};
    reader rd = {.name = name, .batch = batch};
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
        const size_t skip = ++lineno == 1 ? bom(line, (size_t)len) : 0;
        if (!blank(line + skip, (size_t)len - skip))
            rc = add_line(out, &rd, lineno, line + skip, (size_t)len - skip, err);
    }
    if (rc == 0 && ferror(in))
        rc = llmq_errc(err, LLMQ_ERR_IO, "%s: read error", name);
    free(line);
    for (size_t i = 0; i < rd.n_schemas; i++) {
        free(rd.schemas[i].text);
        free(rd.schemas[i].why);
    }
    free(rd.schemas);
    if (rc == 0 && out->n == 0)
        rc = llmq_errc(err, LLMQ_ERR_INVALID, "%s: no jobs", name);
    if (rc == 0)
        rc = check_unique(out, err);
    for (size_t i = 0; rc == 0 && i < out->n; i++)
        if (out->entries[i].fault.fault == OPENAI_INVALID_JSON)
            out->entries[i].openai = out->shape_openai;
    if (rc < 0)
        jobfile_free(out);
    return rc;
}

/* ---- submitting ------------------------------------------------------------------------- */

void jobfile_fault_text(const jobfile_entry *e, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%zu: %s (%s)", name, e->line, e->fault.e.msg,
             openai_fault_name(e->fault.fault));
}

int jobfile_jobs(jobfile *jf, llmq_job **jobs, size_t *n, llmq_err *err)
{
    free(jf->submitted);
    jf->submitted = calloc(jf->n_jobs ? jf->n_jobs : 1, sizeof *jf->submitted);
    *jobs = calloc(jf->n_jobs ? jf->n_jobs : 1, sizeof **jobs);
    if (!jf->submitted || !*jobs) {
        free(*jobs);
        *jobs = NULL;
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for %zu jobs", jf->n_jobs);
    }
    size_t k = 0;
    for (size_t i = 0; i < jf->n_jobs; i++)
        if (jf->entries[jf->jobs[i].entry].fault.fault == OPENAI_OK) {
            jf->submitted[k] = i;
            jf->jobs[i].order = k;
            (*jobs)[k++] = jf->jobs[i].job;
        }
    jf->n_submitted = *n = k;
    return 0;
}

/* The broker's reason for one job, as its line's: libllmq's "broker:
 * jobs[K].FIELD: " before it (the submit's index, not the line) and the
 * broker's ": none of the N jobs was stored" after it (the other lines are
 * sent again and stored) are left out. */
static const char *line_reason(const llmq_error *why, char *out, size_t size)
{
    char prefix[sizeof why->field + 16];
    snprintf(prefix, sizeof prefix, "broker: %s: ", why->field);
    const char *m = why->message;
    if (strncmp(m, prefix, strlen(prefix)) == 0)
        m += strlen(prefix);
    snprintf(out, size, "%s", m);
    static const char tail[] = " jobs was stored";
    char *cut = strstr(out, ": none of the ");
    const size_t n = strlen(out);
    if (cut && n >= sizeof tail - 1 && strcmp(out + n - (sizeof tail - 1), tail) == 0)
        *cut = '\0';
    return out;
}

jobfile_entry *jobfile_refuse(jobfile *jf, size_t k, const llmq_error *why)
{
    jobfile_entry *e = &jf->entries[jf->jobs[jf->submitted[k]].entry];
    /* "jobs[12].model" is the line's "model", or its "body.model". */
    const char *field = strchr(why->field, '.');
    field = field ? field + 1 : "";
    char named[160];
    snprintf(named, sizeof named, "%s%s", e->openai ? "body." : "", field);
    const bool model = strcmp(field, "model") == 0;
    openai_err f;
    char reason[sizeof why->message];
    openai_errf(&f, model ? OPENAI_MODEL_NOT_FOUND : OPENAI_REFUSED, *field ? named : NULL,
                "the broker refused it (%s): %s", llmq_code_name(why->code),
                line_reason(why, reason, sizeof reason));
    fail_entry(jf, e, &f);
    return e;
}

typedef struct jobfile_by_id {
    uint64_t job_id;
    size_t job;
} by_id;

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = ((const by_id *)a)->job_id, y = ((const by_id *)b)->job_id;
    return x < y ? -1 : x > y;
}

/* Merges the sorted run at [at, n) into the sorted run before it. */
static int merge_runs(by_id *a, size_t at, size_t n)
{
    if (at == 0 || at == n || cmp_id(&a[at - 1], &a[at]) < 0)
        return 0; /* the ids a broker assigns grow: usually nothing to merge */
    by_id *tmp = malloc(at * sizeof *tmp);
    if (!tmp)
        return -1;
    memcpy(tmp, a, at * sizeof *tmp);
    size_t i = 0, j = at, k = 0;
    while (i < at && j < n)
        a[k++] = cmp_id(&a[j], &tmp[i]) < 0 ? a[j++] : tmp[i++];
    while (i < at)
        a[k++] = tmp[i++];
    free(tmp);
    return 0;
}

int jobfile_set_ids(jobfile *jf, const uint64_t *ids, llmq_err *err)
{
    if (!jf->by_id && !(jf->by_id = calloc(jf->n_jobs ? jf->n_jobs : 1, sizeof *jf->by_id)))
        return llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for %zu job ids", jf->n_jobs);
    const size_t before = jf->n_by_id;
    for (size_t k = 0; k < jf->n_submitted; k++) {
        jobfile_job *j = &jf->jobs[jf->submitted[k]];
        if (ids[k] == 0 || j->job_id != 0)
            continue; /* not stored yet, or indexed by an earlier call */
        j->job_id = ids[k];
        jf->by_id[jf->n_by_id++] = (by_id){ids[k], jf->submitted[k]};
    }
    qsort(jf->by_id + before, jf->n_by_id - before, sizeof *jf->by_id, cmp_id);
    if (merge_runs(jf->by_id, before, jf->n_by_id) < 0) /* slower, but needs no memory: */
        qsort(jf->by_id, jf->n_by_id, sizeof *jf->by_id, cmp_id);
    return 0;
}

/* ---- output ---------------------------------------------------------------------------- */

static void write_str(FILE *f, const char *s)
{
    if (s)
        json_write_string(f, s, strlen(s));
    else
        fputs("null", f);
}

void jobfile_write_fault(FILE *out, const jobfile_entry *e)
{
    const openai_err *f = &e->fault;
    const char *code = openai_fault_name(f->fault);
    if (e->openai) {
        openai_write_error(out, e->id, 0, code, f->e.msg, f->field, e->line);
        return;
    }
    fputs("{\"id\":", out);
    openai_write_id(out, e->id);
    fprintf(out, ",\"line\":%zu,\"state\":\"rejected\",\"error\":", e->line);
    write_str(out, f->e.msg);
    fprintf(out, ",\"code\":\"%s\",\"field\":", code);
    write_str(out, f->field[0] ? f->field : NULL);
    fputs("}\n", out);
}

void jobfile_write_acks(FILE *out, const jobfile *jf, const bool *existing)
{
    for (size_t k = 0; k < jf->n_submitted; k++) {
        const jobfile_job *j = &jf->jobs[jf->submitted[k]];
        fputs("{\"id\":", out);
        openai_write_id(out, jf->entries[j->entry].id);
        fprintf(out, ",\"index\":%" PRIu32 ",\"job_id\":%" PRIu64 ",\"existing\":%s}\n", j->index,
                j->job_id, existing[k] ? "true" : "false");
    }
}

static void write_timings(FILE *f, const llmq_result *r)
{
    fprintf(f, "{\"queue_wait_ms\":%.3f,\"prefill_ms\":%.3f,\"prefill_tok_s\":%.1f,"
               "\"decode_ms\":%.3f,\"decode_tok_s\":%.1f,\"total_ms\":%.3f}",
            r->queue_wait_ms, r->prefill_ms, r->prefill_tok_s, r->decode_ms, r->decode_tok_s,
            r->total_ms);
}

static void write_native(FILE *f, const jobfile_entry *e, const jobfile_job *j,
                         const llmq_result *r)
{
    fputs("{\"id\":", f);
    openai_write_id(f, e->id);
    fprintf(f, ",\"index\":%" PRIu32 ",\"job_id\":%" PRIu64 ",\"state\":\"%s\"", j->index, r->id,
            llmq_state_name(r->state));
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
        openai_write_logprobs(f, r, true);
    }
    fputs(",\"timings\":", f);
    write_timings(f, r);
    fputs(",\"worker\":", f);
    write_str(f, r->worker);
    fputs(",\"model\":", f);
    write_str(f, r->model);
    fprintf(f, ",\"attempt\":%" PRIu32 "}\n", r->attempt);
}

/* What an OpenAI line's response needs of one choice, kept until the last
 * one arrives (r is only the caller's until the next result). */
static void keep_choice(const jobfile_entry *e, jobfile_job *j, const llmq_result *r)
{
    j->state = r->state;
    if (r->state != LLMQ_STATE_DONE) {
        j->error = strdup(r->error ? r->error : "no reason given");
        return;
    }
    size_t len;
    FILE *f = open_memstream(&j->choice, &len);
    if (f) {
        openai_write_choice(f, &e->req, j->index, j->prompt, r);
        fclose(f);
    }
    f = open_memstream(&j->llmq, &len);
    if (f) {
        fprintf(f, "{\"index\":%" PRIu32 ",\"job_id\":%" PRIu64 ",\"worker\":", j->index, r->id);
        write_str(f, r->worker);
        fputs(",\"model\":", f);
        write_str(f, r->model);
        fprintf(f, ",\"attempt\":%" PRIu32 ",\"timings\":", r->attempt);
        write_timings(f, r);
        fputc('}', f);
        fclose(f);
    }
    j->model = r->model ? strdup(r->model) : NULL;
    /* A prompt is counted once, whatever its number of choices. */
    j->prompt_tokens = j->index % e->req.n == 0 ? r->prompt_tokens : 0;
    j->gen_tokens = r->gen_tokens;
}

/* Why the choices that are not done failed, "; "-separated; NULL: all done. */
static char *failures(const jobfile_entry *e, const jobfile_job *jobs, const char **code)
{
    char *why = NULL;
    size_t len = 0;
    FILE *f = NULL;
    *code = NULL;
    for (size_t i = 0; i < e->n_jobs; i++) {
        const jobfile_job *j = &jobs[i];
        if (j->state == LLMQ_STATE_DONE && j->choice && j->llmq)
            continue;
        if (!f && !(f = open_memstream(&why, &len)))
            return strdup("out of memory");
        *code = j->state == LLMQ_STATE_CANCELLED && !*code ? "job_cancelled" : "job_failed";
        fprintf(f, "%schoice %" PRIu32 " (job %" PRIu64 ") %s: %s", ftell(f) ? "; " : "", j->index,
                j->job_id, llmq_state_name(j->state), j->error ? j->error : "out of memory");
    }
    if (f)
        fclose(f);
    return why;
}

/* Every choice is in: the response, or an error naming what failed. */
static void write_line(FILE *out, const jobfile_entry *e, const jobfile_job *jobs, time_t created)
{
    const char *code;
    char *why = failures(e, jobs, &code);
    openai_done *done = why ? NULL : calloc(e->n_jobs, sizeof *done);
    if (!why && !done)
        why = strdup("out of memory"), code = "job_failed";
    if (why) {
        openai_write_error(out, e->id, jobs[0].job_id, code, why, NULL, e->line);
        free(why);
        return;
    }
    for (size_t i = 0; i < e->n_jobs; i++)
        done[i] = (openai_done){jobs[i].choice, jobs[i].llmq, jobs[i].prompt_tokens,
                                jobs[i].gen_tokens};
    openai_write_response(out, &e->req, e->id, jobs[0].job_id, jobs[0].model, created, done,
                          e->n_jobs);
    free(done);
}

/* The choices' texts are kept only until their line is written. */
static void forget_choices(jobfile_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(jobs[i].choice);
        free(jobs[i].llmq);
        jobs[i].choice = jobs[i].llmq = NULL;
    }
}

jobfile_job *jobfile_job_of(const jobfile *jf, uint64_t job_id)
{
    by_id key = {.job_id = job_id};
    const by_id *hit = jf->by_id ? bsearch(&key, jf->by_id, jf->n_by_id, sizeof *jf->by_id, cmp_id)
                                 : NULL;
    return hit ? &jf->jobs[hit->job] : NULL;
}

const jobfile_job *jobfile_take(jobfile *jf, const llmq_result *r, FILE *out, time_t created)
{
    jobfile_job *j = jobfile_job_of(jf, r->id);
    /* A line that failed after some of its jobs went in (the broker refused
     * another of them) has its fault as its output line already. */
    if (!j || j->final || jf->entries[j->entry].fault.fault != OPENAI_OK)
        return NULL;
    j->final = true;
    jobfile_entry *e = &jf->entries[j->entry];
    e->n_final++;
    if (!e->openai) {
        write_native(out, e, j, r);
        return j;
    }
    keep_choice(e, j, r);
    if (e->n_final == e->n_jobs) {
        /* A line's jobs are in index order (expand). */
        write_line(out, e, &jf->jobs[e->first], created);
        forget_choices(&jf->jobs[e->first], e->n_jobs);
    }
    return j;
}
