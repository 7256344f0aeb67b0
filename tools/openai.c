#include "tools/openai.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "proto/job_params.h"
#include "proto/wire.h"

/* OpenAI's completions default; chat's is the context, which ends a job
 * before the protocol's largest max_tokens does. */
#define COMPLETIONS_MAX_TOKENS 16
#define CHAT_MAX_TOKENS WIRE_MAX_GEN_TOKENS
#define MAX_LEGACY_LOGPROBS 5

/* ---- faults ---- */

static const char *const FAULT_NAMES[OPENAI_FAULT_COUNT] = {
    [OPENAI_OK] = "ok",
    [OPENAI_INVALID_JSON] = "invalid_json",
    [OPENAI_UNKNOWN_PARAMETER] = "unknown_parameter",
    [OPENAI_UNSUPPORTED_PARAMETER] = "unsupported_parameter",
    [OPENAI_UNSUPPORTED_VALUE] = "unsupported_value",
    [OPENAI_INVALID_VALUE] = "invalid_value",
    [OPENAI_MISSING_PARAMETER] = "missing_required_parameter",
    [OPENAI_DUPLICATE_ID] = "duplicate_id",
    [OPENAI_MODEL_NOT_FOUND] = "model_not_found",
    [OPENAI_REFUSED] = "refused_by_broker",
};

const char *openai_fault_name(openai_fault f)
{
    return (int)f >= 0 && f < OPENAI_FAULT_COUNT ? FAULT_NAMES[f] : "?";
}

int openai_errf(openai_err *err, openai_fault f, const char *field, const char *fmt, ...)
{
    char msg[LLMQ_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err->fault = f;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    if (field)
        return llmq_errc(&err->e, LLMQ_ERR_INVALID, "%s: %s", field, msg);
    return llmq_errc(&err->e, LLMQ_ERR_INVALID, "%s", msg);
}

/* ---- values ---- */

int openai_want_int(const json_value *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                    openai_err *err)
{
    /* An integer past int64's range is no fraction: it is out of range. */
    if (v->type == JSON_NUMBER && !v->num.is_int && isfinite(v->num.d) &&
        v->num.d == trunc(v->num.d))
        return openai_errf(err, OPENAI_INVALID_VALUE, field,
                           "%g is out of range [%" PRId64 ", %" PRId64 "]", v->num.d, lo, hi);
    if (v->type != JSON_NUMBER || !v->num.is_int)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "must be an integer, not %s",
                           v->type == JSON_NUMBER ? "a fraction" : json_type_name(v->type));
    if (v->num.i < lo || v->num.i > hi)
        return openai_errf(err, OPENAI_INVALID_VALUE, field,
                           "%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", v->num.i, lo,
                           hi);
    *out = v->num.i;
    return 0;
}

int openai_want_string(const json_value *v, const char *field, const char **out, openai_err *err)
{
    if (v->type != JSON_STRING)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "must be a string, not %s",
                           json_type_name(v->type));
    if (strlen(v->str.s) != v->str.len)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "contains a NUL character");
    *out = v->str.s;
    return 0;
}

int openai_want_strings(const json_value *v, const char *field, const char ***out, size_t *n,
                        openai_err *err)
{
    *n = v->type == JSON_ARRAY ? v->arr.n : 1;
    if (v->type != JSON_ARRAY && v->type != JSON_STRING)
        return openai_errf(err, OPENAI_INVALID_VALUE, field,
                           "must be a string or an array of strings");
    *out = calloc(*n ? *n : 1, sizeof **out);
    if (!*out)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "out of memory");
    for (size_t i = 0; i < *n; i++) {
        char name[160];
        snprintf(name, sizeof name, v->type == JSON_ARRAY ? "%s[%zu]" : "%s", field, i);
        if (openai_want_string(v->type == JSON_ARRAY ? &v->arr.items[i] : v, name, &(*out)[i],
                               err) < 0)
            return -1;
    }
    return 0;
}

static int want_bool(const json_value *v, const char *field, bool *out, openai_err *err)
{
    if (v->type != JSON_BOOL)
        return openai_errf(err, OPENAI_INVALID_VALUE, field, "must be true or false, not %s",
                           json_type_name(v->type));
    *out = v->boolean;
    return 0;
}

/* ---- the fields ---- */

typedef struct field field;
typedef int (*take_fn)(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                       openai_err *err);

enum { CHAT = 1, COMPLETIONS = 2, BOTH = 3 };

struct field {
    const char *name; /* "body.NAME" */
    unsigned bodies;  /* CHAT, COMPLETIONS or BOTH */
    take_fn take;     /* NULL: ignored, it changes nothing of the output */
    size_t off;       /* take_scalar: the llmq_job field, and its kind */
    openai_kind kind;
    /* refused fields: the values that ask for nothing (JSON, compact: "[]"),
     * what llmq lacks, and whether it lacks the field or only those values */
    const char *harmless, *why;
    openai_fault fault;
};

#define JOB(member) offsetof(llmq_job, member)

/* The job parameters' ranges (proto/job_params.h), by llmq_job field. */
typedef struct param_range {
    size_t off;
    double lo, hi;
} param_range;

#define PARAM_RANGE(name, kind, lo, hi, lo_open, dflt, engine) {JOB(name), lo, hi},
static const param_range PARAM_RANGES[] = {JOB_PARAMS(PARAM_RANGE)};

/* [*lo, *hi], a C type's range, narrowed to the range of the job parameter
 * at off when it is one: a value out of range is refused naming the range
 * the parameter takes (max_tokens -4: [1, 1048576]), not its C type's. */
static void narrow_to_param(size_t off, int64_t *lo, int64_t *hi)
{
    for (size_t i = 0; i < sizeof PARAM_RANGES / sizeof PARAM_RANGES[0]; i++) {
        const param_range *r = &PARAM_RANGES[i];
        if (r->off != off)
            continue;
        if (r->lo > (double)*lo)
            *lo = (int64_t)r->lo;
        if (r->hi < (double)*hi)
            *hi = (int64_t)r->hi;
    }
}

int openai_set_scalar(llmq_job *job, size_t off, openai_kind k, const json_value *v,
                      const char *name, openai_err *err)
{
    char *p = (char *)job + off;
    int64_t i = 0, lo = 0, hi = INT64_MAX; /* U64: what a JSON integer holds */
    if (k == OPENAI_I32) {
        lo = INT32_MIN;
        hi = INT32_MAX;
    } else if (k == OPENAI_U32) {
        hi = UINT32_MAX;
    }
    narrow_to_param(off, &lo, &hi);
    if (k == OPENAI_F32) {
        if (v->type != JSON_NUMBER)
            return openai_errf(err, OPENAI_INVALID_VALUE, name, "must be a number, not %s",
                               json_type_name(v->type));
        memcpy(p, &(float){(float)v->num.d}, sizeof(float));
    } else if (k == OPENAI_BOOL) {
        if (v->type != JSON_BOOL)
            return openai_errf(err, OPENAI_INVALID_VALUE, name, "must be true or false, not %s",
                               json_type_name(v->type));
        memcpy(p, &v->boolean, sizeof(bool));
    } else if (k == OPENAI_I32) {
        if (openai_want_int(v, name, lo, hi, &i, err) < 0)
            return -1;
        memcpy(p, &(int32_t){(int32_t)i}, sizeof(int32_t));
    } else if (k == OPENAI_U32) {
        if (openai_want_int(v, name, lo, hi, &i, err) < 0)
            return -1;
        memcpy(p, &(uint32_t){(uint32_t)i}, sizeof(uint32_t));
    } else {
        if (openai_want_int(v, name, lo, hi, &i, err) < 0)
            return -1;
        memcpy(p, &(uint64_t){(uint64_t)i}, sizeof(uint64_t));
    }
    return 0;
}

/* A field that is one scalar of the job (f->off, f->kind). */
static int take_scalar(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                       openai_err *err)
{
    return openai_set_scalar(job, f->off, f->kind, v, f->name, err);
}

/* OpenAI's top_p 0 keeps the likeliest token alone: so does the least
 * positive float (the protocol's top_p is in (0, 1]). */
static int take_top_p(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                      openai_err *err)
{
    if (take_scalar(q, job, f, v, err) < 0)
        return -1;
    if (job->top_p == 0.0f)
        job->top_p = FLT_MIN;
    return 0;
}

static int take_seed(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                     openai_err *err)
{
    int64_t s = 0;
    /* OpenAI's seed is any integer: a negative one is its two's complement. */
    if (openai_want_int(v, f->name, INT64_MIN, INT64_MAX, &s, err) < 0)
        return -1;
    job->seed = (uint64_t)s;
    q->seed_given = true;
    return 0;
}

static int take_n(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                  openai_err *err)
{
    int64_t n = 0;
    if (openai_want_int(v, f->name, 1, OPENAI_MAX_CHOICES, &n, err) < 0)
        return -1;
    q->n = (uint32_t)n;
    return 0;
}

static int take_model(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                      openai_err *err)
{
    return openai_want_string(v, f->name, &job->model, err);
}

static int take_stop(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                     openai_err *err)
{
    if (openai_want_strings(v, f->name, &q->stop, &job->n_stop, err) < 0)
        return -1;
    job->stop = q->stop;
    return 0;
}

/* Chat: true or false, with top_logprobs for alternatives.  Completions:
 * the number of alternatives, 0..5 (the legacy API's). */
static int take_logprobs(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                         openai_err *err)
{
    if (q->chat)
        return want_bool(v, f->name, &job->logprobs, err);
    int64_t k = 0;
    if (v->type != JSON_NUMBER)
        return openai_errf(err, OPENAI_INVALID_VALUE, f->name,
                           "completions take the number of alternatives, 0..5");
    if (openai_want_int(v, f->name, 0, MAX_LEGACY_LOGPROBS, &k, err) < 0)
        return -1;
    job->logprobs = true;
    job->top_logprobs = (int32_t)k;
    return 0;
}

static int take_echo(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                     openai_err *err)
{
    return want_bool(v, f->name, &q->echo, err);
}

/* A prompt, a list of prompts (each gets n choices), but not token ids:
 * they are ids of OpenAI's tokenizer, not of the model llmq runs. */
static int take_prompt(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                       openai_err *err)
{
    const json_value *first = v->type == JSON_ARRAY && v->arr.n ? &v->arr.items[0] : v;
    if (first->type == JSON_NUMBER || first->type == JSON_ARRAY)
        return openai_errf(err, OPENAI_UNSUPPORTED_VALUE, f->name,
                           "token ids are not supported (they are ids of OpenAI's tokenizer):"
                           " give the text");
    size_t n = 0;
    if (openai_want_strings(v, f->name, &q->prompts, &n, err) < 0)
        return -1;
    if (n == 0 || n > OPENAI_MAX_CHOICES)
        return openai_errf(err, OPENAI_INVALID_VALUE, f->name, "%zu prompts, 1..%d are taken", n,
                           OPENAI_MAX_CHOICES);
    q->n_prompts = (uint32_t)n;
    job->prompt = q->prompts[0];
    return 0;
}

/* {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict", "description"}}: the schema
 * is enforced whether or not strict is set (a stronger promise than
 * OpenAI's non-strict mode makes). */
static int take_schema(openai_req *q, llmq_job *job, const json_value *js, openai_err *err)
{
    static const char F[] = "body.response_format.json_schema";
    if (js->type != JSON_OBJECT)
        return openai_errf(err, OPENAI_INVALID_VALUE, F, "must be an object");
    const json_value *schema = NULL, *name = NULL;
    for (size_t i = 0; i < js->obj.n; i++) {
        const char *k = js->obj.members[i].key;
        const json_value *v = &js->obj.members[i].value;
        if (strcmp(k, "schema") == 0)
            schema = v;
        else if (strcmp(k, "name") == 0)
            name = v;
        else if (strcmp(k, "strict") != 0 && strcmp(k, "description") != 0)
            return openai_errf(err, OPENAI_UNKNOWN_PARAMETER, F, "'%s' is not a field of it", k);
    }
    if (!name || name->type != JSON_STRING)
        return openai_errf(err, OPENAI_MISSING_PARAMETER, F, "'name' (a string) is required");
    /* OpenAI takes a json_schema without a schema as the empty one. */
    if (schema && schema->type != JSON_OBJECT)
        return openai_errf(err, OPENAI_INVALID_VALUE, "body.response_format.json_schema.schema",
                           "must be an object");
    json_buf b = {0};
    if (schema ? json_buf_value(&b, schema) < 0 : json_buf_put(&b, "{}", 2) < 0) {
        free(b.p);
        return openai_errf(err, OPENAI_INVALID_VALUE, F, "out of memory");
    }
    q->schema = b.p;
    job->json_schema = q->schema;
    return 0;
}

static int take_response_format(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                                openai_err *err)
{
    const json_value *type = json_get(v, "type");
    if (v->type != JSON_OBJECT || !type || type->type != JSON_STRING)
        return openai_errf(err, OPENAI_INVALID_VALUE, f->name, "must be an object with a \"type\"");
    const char *t = type->str.s;
    const size_t extra = v->obj.n - 1;
    if (strcmp(t, "json_schema") == 0 && extra == 1 && json_get(v, "json_schema"))
        return take_schema(q, job, json_get(v, "json_schema"), err);
    if ((strcmp(t, "text") == 0 || strcmp(t, "json_object") == 0) && extra == 0) {
        job->json_object = strcmp(t, "json_object") == 0;
        return 0;
    }
    if (strcmp(t, "text") != 0 && strcmp(t, "json_object") != 0 && strcmp(t, "json_schema") != 0)
        return openai_errf(err, OPENAI_UNSUPPORTED_VALUE, f->name,
                           "type \"%s\": text, json_object and json_schema are supported", t);
    return openai_errf(err, OPENAI_INVALID_VALUE, f->name, "type \"%s\" takes %s", t,
                       strcmp(t, "json_schema") == 0 ? "\"json_schema\" and nothing else"
                                                     : "no other field");
}

/* A refused field is taken when its value asks for nothing llmq lacks
 * (stream false, tools [], tool_choice "none", ...). */
static int refuse(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                  openai_err *err)
{
    json_buf b = {0};
    bool harmless = json_buf_value(&b, v) == 0 && strcmp(b.p, f->harmless) == 0;
    free(b.p);
    if (harmless)
        return 0;
    return openai_errf(err, f->fault, f->name, "not supported: %s", f->why);
}

static int stream_options(openai_req *q, llmq_job *job, const field *f, const json_value *v,
                          openai_err *err)
{
    return openai_errf(err, OPENAI_INVALID_VALUE, f->name, "only with \"stream\": true");
}

/* Every field of OpenAI's two request bodies (openai-python's
 * completion_create_params, 2026-08), then llmq's own.  docs/OPENAI.md is
 * this table in words. */
/* clang-format off */
#define TAKEN(name, bodies, take) {name, bodies, take, 0, 0, NULL, NULL, 0}
#define SCALAR(name, bodies, member, kind) \
    {name, bodies, take_scalar, JOB(member), OPENAI_##kind, NULL, NULL, 0}
#define IGNORED(name, bodies) {name, bodies, NULL, 0, 0, NULL, NULL, 0}
#define REFUSED(name, bodies, harmless, why, fault) \
    {name, bodies, refuse, 0, 0, harmless, why, OPENAI_UNSUPPORTED_##fault}
static const field FIELDS[] = {
    TAKEN("body.model", BOTH, take_model),
    TAKEN("body.prompt", COMPLETIONS, take_prompt),
    SCALAR("body.frequency_penalty", BOTH, frequency_penalty, F32),
    SCALAR("body.presence_penalty", BOTH, presence_penalty, F32),
    SCALAR("body.temperature", BOTH, temperature, F32),
    {"body.top_p", BOTH, take_top_p, JOB(top_p), OPENAI_F32, NULL, NULL, 0},
    SCALAR("body.max_tokens", BOTH, max_tokens, U32),
    SCALAR("body.max_completion_tokens", CHAT, max_tokens, U32),
    TAKEN("body.n", BOTH, take_n),
    TAKEN("body.seed", BOTH, take_seed),
    TAKEN("body.stop", BOTH, take_stop),
    TAKEN("body.logprobs", BOTH, take_logprobs),
    SCALAR("body.top_logprobs", CHAT, top_logprobs, I32),
    TAKEN("body.response_format", BOTH, take_response_format),
    TAKEN("body.echo", COMPLETIONS, take_echo),
    /* Ignored: they change nothing of the text, the tokens or their order. */
    IGNORED("body.user", BOTH),
    IGNORED("body.safety_identifier", CHAT),
    IGNORED("body.metadata", CHAT),
    IGNORED("body.store", CHAT),
    IGNORED("body.service_tier", CHAT),
    IGNORED("body.prompt_cache_key", CHAT),
    IGNORED("body.prompt_cache_options", CHAT),
    IGNORED("body.prompt_cache_retention", CHAT),
    IGNORED("body.prediction", CHAT),
    IGNORED("body.parallel_tool_calls", CHAT),
    /* Refused, unless the value asks for nothing. */
    REFUSED("body.stream", BOTH, "false", "streaming (a batch's results come whole)", VALUE),
    TAKEN("body.stream_options", BOTH, stream_options),
    REFUSED("body.tools", CHAT, "[]", "tool calls", PARAMETER),
    REFUSED("body.tool_choice", CHAT, "\"none\"", "tool calls", PARAMETER),
    REFUSED("body.functions", CHAT, "[]", "function calls", PARAMETER),
    REFUSED("body.function_call", CHAT, "\"none\"", "function calls", PARAMETER),
    REFUSED("body.logit_bias", BOTH, "{}", "per-token logit biases", PARAMETER),
    REFUSED("body.audio", CHAT, "", "audio output", PARAMETER),
    REFUSED("body.modalities", CHAT, "[\"text\"]", "outputs other than text", VALUE),
    REFUSED("body.moderation", CHAT, "", "moderation", PARAMETER),
    REFUSED("body.web_search_options", CHAT, "", "web search", PARAMETER),
    REFUSED("body.reasoning_effort", CHAT, "\"none\"", "reasoning (the models llmq runs do not"
            " reason)", VALUE),
    REFUSED("body.verbosity", CHAT, "\"medium\"", "a verbosity other than medium", VALUE),
    REFUSED("body.best_of", COMPLETIONS, "1", "best_of above 1 (ask for n choices)", VALUE),
    REFUSED("body.suffix", COMPLETIONS, "\"\"", "insertion (text after the completion)",
            PARAMETER),
    /* llmq's own, under their protocol names (as vLLM takes its own here). */
    SCALAR("body.top_k", BOTH, top_k, I32),
    SCALAR("body.min_p", BOTH, min_p, F32),
    SCALAR("body.repeat_penalty", BOTH, repeat_penalty, F32),
    SCALAR("body.repeat_last_n", BOTH, repeat_last_n, I32),
    SCALAR("body.ignore_eos", BOTH, ignore_eos, BOOL),
    SCALAR("body.priority", BOTH, priority, I32),
};
/* clang-format on */

void openai_req_init(openai_req *q, llmq_job *job, bool chat)
{
    *q = (openai_req){.chat = chat, .n = 1};
    llmq_job_init(job);
    job->temperature = 1.0f;
    job->top_p = 1.0f;
    job->max_tokens = chat ? CHAT_MAX_TOKENS : COMPLETIONS_MAX_TOKENS;
}

void openai_req_free(openai_req *q)
{
    free(q->prompts);
    free(q->schema);
    free(q->stop);
    memset(q, 0, sizeof *q);
}

int openai_body_field(openai_req *q, llmq_job *job, const char *key, const json_value *v,
                      openai_err *err)
{
    char name[128];
    snprintf(name, sizeof name, "body.%s", key);
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const field *f = &FIELDS[i];
        if (strcmp(f->name, name) != 0)
            continue;
        if (!(f->bodies & (q->chat ? CHAT : COMPLETIONS)))
            return openai_errf(err, OPENAI_UNKNOWN_PARAMETER, name, "not a field of %s",
                               q->chat ? "/v1/chat/completions" : "/v1/completions");
        /* null is the field left out, as in OpenAI's API */
        return v->type == JSON_NULL || !f->take ? 0 : f->take(q, job, f, v, err);
    }
    return openai_errf(err, OPENAI_UNKNOWN_PARAMETER, name, "unknown field");
}

/* FNV-1a, 64 bits: a line's seed when it gives none. */
static uint64_t seed_of(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int openai_body_done(openai_req *q, llmq_job *job, const json_value *body, const char *custom_id,
                     openai_err *err)
{
    const json_value *mt = json_get(body, "max_tokens"),
                     *mct = json_get(body, "max_completion_tokens");
    if (mt && mct && mt->type != JSON_NULL && mct->type != JSON_NULL &&
        !(mt->type == JSON_NUMBER && mct->type == JSON_NUMBER && mt->num.d == mct->num.d))
        return openai_errf(err, OPENAI_INVALID_VALUE, "body.max_completion_tokens",
                           "differs from \"max_tokens\": give one of the two");
    if (!q->chat && !job->prompt)
        return openai_errf(err, OPENAI_MISSING_PARAMETER, "body.prompt", "required");
    if (q->echo && job->logprobs)
        return openai_errf(err, OPENAI_UNSUPPORTED_VALUE, "body.echo",
                           "not with \"logprobs\": the prompt's log-probabilities are not"
                           " computed");
    if (q->chat && job->top_logprobs > 0 && !job->logprobs)
        return openai_errf(err, OPENAI_INVALID_VALUE, "body.top_logprobs",
                           "%d alternatives need \"logprobs\": true", job->top_logprobs);
    if (!q->seed_given && custom_id)
        job->seed = seed_of(custom_id);
    return 0;
}

/* ---- output ---- */

void openai_write_id(FILE *f, const json_value *id)
{
    if (!id)
        fputs("null", f);
    else if (id->type == JSON_STRING)
        json_write_string(f, id->str.s, id->str.len);
    else
        fprintf(f, "%" PRId64, id->num.i);
}

static void write_str(FILE *f, const char *s)
{
    if (s)
        json_write_string(f, s, strlen(s));
    else
        fputs("null", f);
}

/* "token" (its bytes as text, a split character's as U+FFFD), "logprob",
 * "bytes": OpenAI's fields of a token; native lines add its "id". */
static void write_logprob(FILE *f, const llmq_logprob *lp, bool with_id)
{
    if (with_id)
        fprintf(f, "{\"id\":%" PRIu32 ",\"token\":", lp->token);
    else
        fputs("{\"token\":", f);
    json_write_string(f, (const char *)lp->bytes, lp->n_bytes);
    fprintf(f, ",\"logprob\":%.9g,\"bytes\":[", (double)lp->logprob);
    for (size_t i = 0; i < lp->n_bytes; i++)
        fprintf(f, "%s%u", i ? "," : "", (unsigned)lp->bytes[i]);
    fputc(']', f);
}

void openai_write_logprobs(FILE *f, const llmq_result *r, bool with_id)
{
    fputc('[', f);
    for (size_t i = 0; i < r->n_logprobs; i++) {
        const llmq_token_logprobs *t = &r->logprobs[i];
        fputs(i ? "," : "", f);
        write_logprob(f, &t->chosen, with_id);
        fputs(",\"top_logprobs\":[", f);
        for (size_t k = 0; k < t->n_top; k++) {
            fputs(k ? "," : "", f);
            write_logprob(f, &t->top[k], with_id);
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

void openai_write_choice(FILE *f, const openai_req *q, uint32_t index, uint32_t prompt,
                         const llmq_result *r)
{
    /* OpenAI has no "context": running out of window is a length stop. */
    const char *finish = r->finish && strcmp(r->finish, "stop") == 0 ? "stop" : "length";
    fprintf(f, "{\"index\":%" PRIu32 ",", index);
    if (q->chat) {
        fputs("\"message\":{\"role\":\"assistant\",\"content\":", f);
        write_str(f, r->text);
        fputs(",\"refusal\":null},\"logprobs\":", f);
        if (r->logprobs) {
            fputs("{\"content\":", f);
            openai_write_logprobs(f, r, false);
            fputs(",\"refusal\":null}", f);
        } else {
            fputs("null", f);
        }
    } else {
        fputs("\"text\":", f);
        if (q->echo) {
            char *both = NULL;
            int n = asprintf(&both, "%s%s", q->prompts[prompt], r->text ? r->text : "");
            write_str(f, n < 0 ? r->text : both);
            free(both);
        } else {
            write_str(f, r->text);
        }
        fputs(",\"logprobs\":", f);
        if (r->logprobs)
            write_legacy_logprobs(f, r);
        else
            fputs("null", f);
    }
    fprintf(f, ",\"finish_reason\":\"%s\"}", finish);
}

void openai_write_response(FILE *f, const openai_req *q, const json_value *custom_id,
                           uint64_t job_id, const char *model, time_t created,
                           const openai_done *done, size_t n)
{
    uint64_t prompt = 0, gen = 0;
    for (size_t i = 0; i < n; i++) {
        prompt += done[i].prompt_tokens;
        gen += done[i].gen_tokens;
    }
    fprintf(f, "{\"id\":\"batch_req_%" PRIu64 "\",\"custom_id\":", job_id);
    openai_write_id(f, custom_id);
    fprintf(f,
            ",\"response\":{\"status_code\":200,\"request_id\":\"%" PRIu64 "\",\"body\":{"
            "\"id\":\"%s-%" PRIu64 "\",\"object\":\"%s\",\"created\":%lld,\"model\":",
            job_id, q->chat ? "chatcmpl" : "cmpl", job_id,
            q->chat ? "chat.completion" : "text_completion", (long long)created);
    write_str(f, model);
    fputs(",\"choices\":[", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%s", i ? "," : "", done[i].choice);
    fprintf(f,
            "],\"usage\":{\"prompt_tokens\":%" PRIu64 ",\"completion_tokens\":%" PRIu64
            ",\"total_tokens\":%" PRIu64 "},\"system_fingerprint\":null,\"llmq\":{\"choices\":[",
            prompt, gen, prompt + gen);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%s", i ? "," : "", done[i].llmq);
    fputs("]}}},\"error\":null}\n", f);
}

void openai_write_error(FILE *f, const json_value *custom_id, uint64_t job_id, const char *code,
                        const char *message, const char *param, size_t line)
{
    if (job_id)
        fprintf(f, "{\"id\":\"batch_req_%" PRIu64 "\",\"custom_id\":", job_id);
    else
        fputs("{\"id\":null,\"custom_id\":", f);
    openai_write_id(f, custom_id);
    fputs(",\"response\":null,\"error\":{\"code\":", f);
    write_str(f, code);
    fputs(",\"message\":", f);
    write_str(f, message);
    fputs(",\"param\":", f);
    write_str(f, param && *param ? param : NULL);
    fprintf(f, ",\"line\":%zu}}\n", line);
}
