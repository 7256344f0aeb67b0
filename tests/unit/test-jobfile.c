/* test-jobfile: llmq-submit's input lines (native and OpenAI batch shapes)
 * become the intended jobs and keys, with each shape's defaults; a bad line
 * fails alone with its code, field and line number (a value out of range
 * naming the range the field takes) while the others stand
 * (every one of them reported); a UTF-8 BOM is skipped; every field of
 * OpenAI's two request bodies is honoured, ignored as harmless or refused
 * naming the field; n choices and lists of prompts become jobs with their
 * index and seed; output lines are valid JSON of the documented shapes, an
 * OpenAI line written once every choice is in, naming the model that ran. */
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "tests/unit/check.h"
#include "tools/jobfile.h"

static int read_text(const char *text, jobfile *jf, llmq_err *err)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    int rc = jobfile_read(f, "jobs.jsonl", "B", jf, err);
    fclose(f);
    return rc;
}

/* Reads text, which must give n lines, none bad (what says which). */
static bool read_jobs(const char *text, size_t n, jobfile *jf, const char *what)
{
    llmq_err err;
    int rc = read_text(text, jf, &err);
    CHECK(rc == 0 && jf->n == n && jf->n_faults == 0, "%s%s%s%s", what, rc ? ": " : "",
          rc ? err.msg : "", rc == 0 && jf->n_faults ? jf->entries[0].fault.e.msg : "");
    if (rc == 0 && (jf->n != n || jf->n_faults))
        jobfile_free(jf);
    return rc == 0 && jf->n == n && jf->n_faults == 0;
}

static void test_native(void)
{
    jobfile jf;
    if (!read_jobs("{\"id\": \"q1\", \"prompt\": \"Once\", \"max_tokens\": 32, \"temperature\": "
                   "0.5, \"top_k\": 40, \"top_p\": 0.9, \"min_p\": 0.1, \"repeat_penalty\": "
                   "1.1, \"repeat_last_n\": -1, \"presence_penalty\": 0.5, "
                   "\"frequency_penalty\": -0.5, \"seed\": 7, \"stop\": \"\\n\", "
                   "\"ignore_eos\": true, \"priority\": 3, \"model\": \"m\"}\n"
                   "\n"
                   "{\"id\": 2, \"tokens\": [1, 2, 3], \"stop\": [\"a\", \"b\"]}\n"
                   "{\"prompt\": \"no id\"}",
                   3, &jf, "three jobs from four lines (a blank one skipped)"))
        return;
    const llmq_job *j = &jf.jobs[0].job;
    CHECK(strcmp(j->key, "B:q1") == 0 && strcmp(j->prompt, "Once") == 0 && j->max_tokens == 32 &&
              j->temperature == 0.5f && j->top_k == 40 && j->top_p == 0.9f && j->min_p == 0.1f &&
              j->repeat_penalty == 1.1f && j->repeat_last_n == -1 &&
              j->presence_penalty == 0.5f && j->frequency_penalty == -0.5f && j->seed == 7 &&
              j->n_stop == 1 && strcmp(j->stop[0], "\n") == 0 && j->ignore_eos &&
              j->priority == 3 && strcmp(j->model, "m") == 0 && !jf.entries[0].openai,
          "every native field lands in the job; the key is BATCH:ID");
    j = &jf.jobs[1].job;
    CHECK(strcmp(j->key, "B:2") == 0 && !j->prompt && j->n_tokens == 3 && j->tokens[2] == 3 &&
              j->n_stop == 2 && jf.entries[1].line == 3,
          "an integer id, token ids and a stop list");
    j = &jf.jobs[2].job;
    llmq_job d;
    llmq_job_init(&d);
    CHECK(j->key == NULL && jf.entries[2].id == NULL && j->max_tokens == d.max_tokens &&
              j->temperature == d.temperature && j->top_k == d.top_k && j->top_p == d.top_p &&
              j->min_p == d.min_p && j->seed == d.seed && j->temperature == 0.0f,
          "a line without id has no key, and unset fields the protocol's defaults (greedy)");
    jobfile_free(&jf);
}

static void test_native_extras(void)
{
    jobfile jf;
    if (!read_jobs("{\"id\": \"s\", \"prompt\": \"a\", \"n\": 3, \"seed\": 10, \"temperature\": 1,"
                   " \"json_schema\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\":"
                   " \"integer\"}}, \"required\": [\"x\"]}}\n"
                   "{\"id\": \"t\", \"prompt\": \"b\", \"json_schema\": \"{\\\"type\\\":"
                   " \\\"array\\\"}\"}\n"
                   "{\"id\": \"o\", \"prompt\": \"c\", \"json_object\": true}\n",
                   3, &jf, "native lines with n, a schema object, a schema text, json_object"))
        return;
    CHECK(jf.n_jobs == 5 && jf.entries[0].n_jobs == 3 && strcmp(jf.jobs[0].key, "B:s#0") == 0 &&
              strcmp(jf.jobs[2].key, "B:s#2") == 0 && jf.jobs[1].index == 1 &&
              jf.jobs[0].job.seed == 10 && jf.jobs[2].job.seed == 12,
          "n 3: three jobs keyed BATCH:ID#i, sampled with seed, seed + 1, seed + 2");
    CHECK(strcmp(jf.jobs[0].job.json_schema, "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
                                             "\"integer\"}},\"required\":[\"x\"]}") == 0 &&
              strcmp(jf.jobs[3].job.json_schema, "{\"type\": \"array\"}") == 0 &&
              strcmp(jf.jobs[3].key, "B:t") == 0 && jf.jobs[4].job.json_object,
          "a schema object travels as its compact text, a schema text as it is");
    jobfile_free(&jf);
}

static void test_openai(void)
{
    jobfile jf;
    if (!read_jobs(
            "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\":"
            " {\"model\": \"gpt-x\", \"prompt\": [\"Tell me\"], \"max_tokens\": 9, \"n\": 1,"
            " \"stream\": false, \"user\": \"u\"}}\n"
            "{\"custom_id\": \"r2\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": ["
            "{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\","
            " \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}, {\"type\": \"text\","
            " \"text\": \" there\"}]}, {\"role\": \"assistant\", \"content\": \"Hello.\"},"
            " {\"role\": \"user\", \"content\": \"Go on\"}], \"stop\": [\"\\n\"]}}\n"
            "{\"custom_id\": \"r3\", \"body\": {\"prompt\": \"x\", \"top_p\": 0}}\n",
            3, &jf, "three OpenAI batch lines"))
        return;
    const jobfile_entry *e = &jf.entries[0];
    const llmq_job *j = &jf.jobs[0].job;
    CHECK(e->openai && !e->req.chat && strcmp(j->model, "gpt-x") == 0 &&
              strcmp(j->prompt, "Tell me") == 0 && j->max_tokens == 9 && j->temperature == 1.0f &&
              j->top_p == 1.0f && j->top_k == 0 && j->min_p == 0.0f && strcmp(j->key, "B:r1") == 0,
          "a completion line: OpenAI's defaults (temperature 1, top_p 1), body.model routes");
    e = &jf.entries[1];
    j = &jf.jobs[1].job;
    const llmq_message *m = j->messages;
    CHECK(!j->prompt && j->n_messages == 4 && strcmp(m[0].role, "system") == 0 &&
              strcmp(m[0].content, "Be brief.") == 0 && strcmp(m[1].role, "user") == 0 &&
              strcmp(m[1].content, "Hi\n there") == 0 && strcmp(m[2].role, "assistant") == 0 &&
              strcmp(m[3].content, "Go on") == 0,
          "chat messages pass through unflattened, text parts joined by newlines");
    CHECK(j->model == NULL && j->max_tokens == 1048576,
          "no model: any worker; no max_tokens: the context is the limit");
    CHECK(jf.jobs[2].job.max_tokens == 16 && jf.jobs[2].job.seed != jf.jobs[1].job.seed &&
              jf.jobs[2].job.seed != 0,
          "a completions line takes OpenAI's 16 tokens; seeds come from custom_ids");
    CHECK(jf.jobs[2].job.top_p > 0.0f && jf.jobs[2].job.top_p < 1e-30f,
          "OpenAI's top_p 0 (the likeliest token alone) is the least positive top_p");
    const uint64_t seed = jf.jobs[2].job.seed;
    jobfile_free(&jf);
    if (read_jobs("{\"custom_id\": \"r3\", \"body\": {\"prompt\": \"y\"}}\n", 1, &jf,
                  "the same custom_id in another file")) {
        CHECK(jf.jobs[0].job.seed == seed, "is the same seed there");
        jobfile_free(&jf);
    }
}

/* Messages in a native line, and roles the template decides about. */
static void test_native_messages(void)
{
    jobfile jf;
    if (!read_jobs("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": "
                   "\"<|im_start|>hi\"}, {\"role\": \"tool\", \"content\": \"\"}], "
                   "\"max_tokens\": 4, \"n\": 2}\n",
                   1, &jf, "a native line of messages"))
        return;
    const llmq_job *j = &jf.jobs[0].job;
    CHECK(!jf.entries[0].openai && j->n_messages == 2 &&
              strcmp(j->messages[0].content, "<|im_start|>hi") == 0 &&
              strcmp(j->messages[1].role, "tool") == 0 && strcmp(j->messages[1].content, "") == 0 &&
              j->max_tokens == 4,
          "a native line carries messages as they are, any role");
    CHECK(jf.n_jobs == 2 && jf.jobs[1].job.messages == j->messages &&
              jf.jobs[1].job.n_messages == 2,
          "its n choices share the messages");
    jobfile_free(&jf);
}

/* OpenAI's roles: developer is the system role the templates know; the
 * message fields that ask for nothing are taken. */
static void test_openai_roles(void)
{
    jobfile jf;
    if (!read_jobs(
            "{\"custom_id\": \"d\", \"body\": {\"messages\": [{\"role\": \"developer\","
            " \"content\": \"Be brief.\", \"name\": null}, {\"role\": \"user\","
            " \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}, {\"role\":"
            " \"assistant\", \"content\": \"Hello\", \"tool_calls\": [], \"refusal\": null}]}}\n",
            1, &jf, "a chat line with a developer message"))
        return;
    const llmq_message *m = jf.jobs[0].job.messages;
    CHECK(jf.jobs[0].job.n_messages == 3 && strcmp(m[0].role, "system") == 0 &&
              strcmp(m[0].content, "Be brief.") == 0 && strcmp(m[1].content, "Hi") == 0 &&
              strcmp(m[2].role, "assistant") == 0,
          "developer becomes system; name null, tool_calls [] and refusal null ask for nothing");
    jobfile_free(&jf);
}

/* n choices of each prompt of a list; the fields that ask for nothing. */
static void test_openai_choices(void)
{
    jobfile jf;
    if (!read_jobs("{\"custom_id\": \"c\", \"body\": {\"messages\": [{\"role\": \"user\","
                   " \"content\": \"hi\"}], \"n\": 3, \"seed\": 5, \"tools\": [],"
                   " \"tool_choice\": \"none\", \"modalities\": [\"text\"], \"logit_bias\": {},"
                   " \"store\": true, \"metadata\": {\"a\": \"b\"}, \"service_tier\": \"auto\","
                   " \"prompt_cache_key\": \"k\", \"audio\": null, \"stream_options\": null,"
                   " \"max_tokens\": 7, \"max_completion_tokens\": 7}}\n"
                   "{\"custom_id\": \"p\", \"body\": {\"prompt\": [\"one\", \"two\"], \"n\": 2,"
                   " \"best_of\": 1, \"suffix\": \"\", \"echo\": true}}\n",
                   2, &jf, "a chat line of 3 choices, a completions line of 2 prompts x 2"))
        return;
    CHECK(jf.entries[0].n_jobs == 3 && jf.jobs[2].job.seed == 7 && jf.jobs[2].index == 2 &&
              strcmp(jf.jobs[2].key, "B:c#2") == 0 && jf.jobs[0].job.max_tokens == 7,
          "n 3: three jobs, seeds 5, 6, 7; max_tokens equal to max_completion_tokens is taken");
    const jobfile_job *p = &jf.jobs[3];
    CHECK(jf.entries[1].n_jobs == 4 && strcmp(p[0].job.prompt, "one") == 0 &&
              strcmp(p[1].job.prompt, "one") == 0 && strcmp(p[2].job.prompt, "two") == 0 &&
              p[2].index == 2 && p[2].prompt == 1 && p[3].job.seed == p[0].job.seed + 3,
          "two prompts x n 2: choice index prompt * n + i, each prompt's text");
    jobfile_free(&jf);
}

/* logprobs as each line shape spells them. */
static void test_logprobs_in(void)
{
    jobfile jf;
    if (!read_jobs("{\"id\": 1, \"prompt\": \"a\", \"logprobs\": true, \"top_logprobs\": 3}\n"
                   "{\"custom_id\": \"c\", \"body\": {\"logprobs\": true, \"top_logprobs\": 20,"
                   " \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}}\n"
                   "{\"custom_id\": \"p\", \"body\": {\"logprobs\": 5, \"prompt\": \"a\"}}\n"
                   "{\"custom_id\": \"q\", \"body\": {\"prompt\": \"a\", \"logprobs\": null}}\n",
                   4, &jf, "four lines with logprobs"))
        return;
    CHECK(jf.jobs[0].job.logprobs && jf.jobs[0].job.top_logprobs == 3,
          "native: logprobs and top_logprobs by their wire names");
    CHECK(jf.jobs[1].job.logprobs && jf.jobs[1].job.top_logprobs == 20,
          "chat: logprobs true and top_logprobs, before \"messages\" in the body");
    CHECK(jf.jobs[2].job.logprobs && jf.jobs[2].job.top_logprobs == 5,
          "completions: logprobs is the number of alternatives");
    CHECK(!jf.jobs[3].job.logprobs, "logprobs null is no logprobs");
    jobfile_free(&jf);
}

static void test_response_format(void)
{
    jobfile jf;
    if (!read_jobs("{\"custom_id\": \"s\", \"body\": {\"messages\": [{\"role\": \"user\","
                   " \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\","
                   " \"json_schema\": {\"name\": \"pt\", \"strict\": true, \"schema\": {\"type\":"
                   " \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}, \"required\":"
                   " [\"x\"], \"additionalProperties\": false}}}}}\n"
                   "{\"custom_id\": \"o\", \"body\": {\"messages\": [{\"role\": \"user\","
                   " \"content\": \"x\"}], \"response_format\": {\"type\": \"json_object\"}}}\n"
                   "{\"custom_id\": \"t\", \"body\": {\"messages\": [{\"role\": \"user\","
                   " \"content\": \"x\"}], \"response_format\": {\"type\": \"text\"}}}\n",
                   3, &jf, "response_format json_schema, json_object and text"))
        return;
    CHECK(strcmp(jf.jobs[0].job.json_schema,
                 "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"required\":"
                 "[\"x\"],\"additionalProperties\":false}") == 0 &&
              !jf.jobs[0].job.json_object,
          "json_schema: the job carries the schema's text");
    CHECK(jf.jobs[1].job.json_object && !jf.jobs[1].job.json_schema &&
              !jf.jobs[2].job.json_object && !jf.jobs[2].job.json_schema,
          "json_object: any object; text: free text");
    jobfile_free(&jf);
}

typedef struct bad_line {
    const char *text;
    openai_fault fault;
    const char *field; /* "" when none */
    const char *want;  /* in the message */
} bad_line;

#define CHAT_BODY(extra) \
    "{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]" extra "}}"
#define PROMPT_BODY(extra) "{\"custom_id\":\"r\",\"body\":{\"prompt\":\"a\"" extra "}}"

static const bad_line BAD[] = {
    {"[1]", OPENAI_INVALID_JSON, "", "a job line must be a JSON object"},
    {"{\"id\":1,\"prompt\":\"a\",}", OPENAI_INVALID_JSON, "", "column 22: expected a string key"},
    {"{\"id\":1,\"prompt\":\"a\",\"temperature\":\"hot\"}", OPENAI_INVALID_VALUE, "temperature",
     "temperature: must be a number"},
    {"{\"id\":1,\"prompt\":\"a\",\"temperature\":-1}", OPENAI_INVALID_VALUE, "temperature",
     "temperature: -1 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":1.5}", OPENAI_INVALID_VALUE, "max_tokens",
     "max_tokens: must be an integer, not a fraction"},
    {"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":0}", OPENAI_INVALID_VALUE, "max_tokens",
     "max_tokens: 0 is out of range [1, 1048576]"},
    {"{\"id\":1,\"prompt\":\"a\",\"seed\":-1}", OPENAI_INVALID_VALUE, "seed",
     "seed: -1 is out of range"},
    /* Past the C type's range, the parameter's range is named, not the type's;
     * an integer past int64's is out of range, not a fraction. */
    {"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":-4}", OPENAI_INVALID_VALUE, "max_tokens",
     "max_tokens: -4 is out of range [1, 1048576]"},
    {"{\"id\":1,\"prompt\":\"a\",\"top_k\":3000000000}", OPENAI_INVALID_VALUE, "top_k",
     "top_k: 3000000000 is out of range [0, 1048576]"},
    {"{\"id\":1,\"prompt\":\"a\",\"seed\":18446744073709551615}", OPENAI_INVALID_VALUE, "seed",
     "seed: 1.84467e+19 is out of range [0, 9223372036854775807]"},
    {PROMPT_BODY(",\"max_tokens\":-4"), OPENAI_INVALID_VALUE, "body.max_tokens",
     "body.max_tokens: -4 is out of range [1, 1048576]"},
    {"{\"id\":1,\"prompt\":\"a\",\"top_p\":0}", OPENAI_INVALID_VALUE, "top_p",
     "top_p: 0 is out of range (0, 1]"},
    {"{\"id\":1,\"prompt\":\"a\",\"stop\":[\"x\",3]}", OPENAI_INVALID_VALUE, "stop[1]",
     "stop[1]: must be a string"},
    {"{\"id\":1,\"tokens\":[1,-2]}", OPENAI_INVALID_VALUE, "tokens[1]", "-2 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"tokens\":[1]}", OPENAI_INVALID_VALUE, "", "mutually exclusive"},
    {"{\"id\":1}", OPENAI_MISSING_PARAMETER, "",
     "one of \"prompt\", \"tokens\" or \"messages\" is required"},
    {"{\"id\":1.5,\"prompt\":\"a\"}", OPENAI_INVALID_VALUE, "id", "id: must be a string or an"},
    {"{\"id\":1,\"prompt\":\"a\\u0000b\"}", OPENAI_INVALID_VALUE, "prompt",
     "prompt: contains a NUL character"},
    {"{\"id\":1,\"prompt\":\"a\",\"temprature\":1}", OPENAI_UNKNOWN_PARAMETER, "temprature",
     "temprature: unknown field"},
    {"{\"id\":1,\"prompt\":\"a\",\"n\":0}", OPENAI_INVALID_VALUE, "n", "n: 0 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"json_schema\":{\"type\":\"integer\",\"minimum\":1}}",
     OPENAI_UNSUPPORTED_VALUE, "json_schema", "'minimum' is not supported"},
    {"{\"id\":1,\"prompt\":\"a\",\"json_schema\":[1]}", OPENAI_INVALID_VALUE, "json_schema",
     "must be an object"},
    {"{\"custom_id\":\"r\"}", OPENAI_MISSING_PARAMETER, "body", "body: required"},
    {"{\"custom_id\":7,\"body\":{\"prompt\":\"a\"}}", OPENAI_INVALID_VALUE, "custom_id",
     "custom_id: must be a string"},
    {"{\"custom_id\":\"r\",\"extra\":1,\"body\":{\"prompt\":\"a\"}}", OPENAI_UNKNOWN_PARAMETER,
     "extra", "extra: unknown field"},
    {"{\"custom_id\":\"r\",\"url\":\"/v1/chat/completions\",\"body\":{\"prompt\":\"a\"}}",
     OPENAI_INVALID_VALUE, "url", "\"/v1/chat/completions\" takes a body with messages"},
    {"{\"custom_id\":\"r\",\"url\":\"/v1/embeddings\",\"body\":{\"input\":\"a\"}}",
     OPENAI_UNSUPPORTED_VALUE, "url", "/v1/chat/completions and /v1/completions are supported"},
    {"{\"custom_id\":\"r\",\"method\":\"GET\",\"body\":{\"prompt\":\"a\"}}", OPENAI_INVALID_VALUE,
     "method", "method: must be \"POST\""},
    {PROMPT_BODY(",\"n\":129"), OPENAI_INVALID_VALUE, "body.n", "129 is out of range [1, 128]"},
    {PROMPT_BODY(",\"logprobs\":6"), OPENAI_INVALID_VALUE, "body.logprobs",
     "body.logprobs: 6 is out of range [0, 5]"},
    {PROMPT_BODY(",\"logprobs\":true"), OPENAI_INVALID_VALUE, "body.logprobs",
     "completions take the number of alternatives"},
    {CHAT_BODY(",\"logprobs\":2"), OPENAI_INVALID_VALUE, "body.logprobs", "must be true or false"},
    {CHAT_BODY(",\"top_logprobs\":2"), OPENAI_INVALID_VALUE, "body.top_logprobs",
     "2 alternatives need \"logprobs\": true"},
    {PROMPT_BODY(",\"temperature\":101"), OPENAI_INVALID_VALUE, "body.temperature",
     "body.temperature: 101 is out of range"},
    {"{\"custom_id\":\"r\",\"body\":{\"max_tokens\":3}}", OPENAI_MISSING_PARAMETER, "body.prompt",
     "body.prompt: required"},
    {CHAT_BODY(",\"max_tokens\":5,\"max_completion_tokens\":6"), OPENAI_INVALID_VALUE,
     "body.max_completion_tokens", "differs from \"max_tokens\""},
    {CHAT_BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"),
     OPENAI_UNSUPPORTED_PARAMETER, "body.tools", "body.tools: not supported: tool calls"},
    {CHAT_BODY(",\"tool_choice\":\"auto\""), OPENAI_UNSUPPORTED_PARAMETER, "body.tool_choice",
     "tool calls"},
    {CHAT_BODY(",\"logit_bias\":{\"50256\":-100}"), OPENAI_UNSUPPORTED_PARAMETER, "body.logit_bias",
     "per-token logit biases"},
    {CHAT_BODY(",\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}"), OPENAI_UNSUPPORTED_PARAMETER,
     "body.audio", "audio output"},
    {CHAT_BODY(",\"modalities\":[\"text\",\"audio\"]"), OPENAI_UNSUPPORTED_VALUE, "body.modalities",
     "outputs other than text"},
    {CHAT_BODY(",\"stream\":true"), OPENAI_UNSUPPORTED_VALUE, "body.stream", "streaming"},
    {CHAT_BODY(",\"stream_options\":{\"include_usage\":true}"), OPENAI_INVALID_VALUE,
     "body.stream_options", "only with \"stream\": true"},
    {CHAT_BODY(",\"reasoning_effort\":\"high\""), OPENAI_UNSUPPORTED_VALUE, "body.reasoning_effort",
     "reasoning"},
    {CHAT_BODY(",\"web_search_options\":{}"), OPENAI_UNSUPPORTED_PARAMETER,
     "body.web_search_options", "web search"},
    {CHAT_BODY(",\"echo\":true"), OPENAI_UNKNOWN_PARAMETER, "body.echo",
     "not a field of /v1/chat/completions"},
    {PROMPT_BODY(",\"top_logprobs\":2"), OPENAI_UNKNOWN_PARAMETER, "body.top_logprobs",
     "not a field of /v1/completions"},
    {PROMPT_BODY(",\"best_of\":3,\"n\":1"), OPENAI_UNSUPPORTED_VALUE, "body.best_of",
     "best_of above 1"},
    {PROMPT_BODY(",\"suffix\":\" the end\""), OPENAI_UNSUPPORTED_PARAMETER, "body.suffix",
     "insertion"},
    {PROMPT_BODY(",\"echo\":true,\"logprobs\":1"), OPENAI_UNSUPPORTED_VALUE, "body.echo",
     "the prompt's log-probabilities are not computed"},
    {"{\"custom_id\":\"r\",\"body\":{\"prompt\":[1,2,3]}}", OPENAI_UNSUPPORTED_VALUE, "body.prompt",
     "token ids are not supported"},
    {PROMPT_BODY(",\"temprature\":1"), OPENAI_UNKNOWN_PARAMETER, "body.temprature",
     "unknown field"},
    {CHAT_BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
               "\"schema\":{\"type\":\"string\",\"pattern\":\"^a\"}}}"),
     OPENAI_UNSUPPORTED_VALUE, "body.response_format.json_schema.schema",
     "'pattern' is not supported"},
    {CHAT_BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}"),
     OPENAI_MISSING_PARAMETER, "body.response_format.json_schema", "'name' (a string) is required"},
    {CHAT_BODY(",\"response_format\":{\"type\":\"yaml\"}"), OPENAI_UNSUPPORTED_VALUE,
     "body.response_format", "type \"yaml\""},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}}",
     OPENAI_UNSUPPORTED_VALUE, "body.messages[0].role", "\"tool\": not supported: tool calls"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"narrator\",\"content\":\"x\"}]}}",
     OPENAI_INVALID_VALUE, "body.messages[0].role",
     "\"narrator\" is not system, developer, user or assistant"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\","
     "\"name\":\"bob\"}]}}",
     OPENAI_UNSUPPORTED_PARAMETER, "body.messages[0].name",
     "not supported: a message is a role and a content"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\","
     "\"mood\":1}]}}",
     OPENAI_UNKNOWN_PARAMETER, "body.messages[0].mood", "unknown field of a message"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"assistant\",\"content\":null}]}}",
     OPENAI_MISSING_PARAMETER, "body.messages[0]",
     "must be an object with \"role\" and \"content\""},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[\"hi\"]}}", OPENAI_INVALID_VALUE,
     "body.messages[0]", "must be an object with \"role\" and \"content\""},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":[]}]}}",
     OPENAI_INVALID_VALUE, "body.messages[0].content",
     "must be a string or a non-empty list of text parts"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[]}}", OPENAI_INVALID_VALUE, "body.messages",
     "must be a non-empty array"},
    {"{\"id\":1,\"messages\":[{\"role\":\"\",\"content\":\"x\"}]}", OPENAI_INVALID_VALUE,
     "messages[0].role", "0 bytes, at least 1 required"},
    {"{\"id\":1,\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     OPENAI_INVALID_VALUE, "", "\"prompt\" and \"messages\" are mutually exclusive"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"image_url\",\"image_url\":{\"url\":\"https://x/a.png\"}}]}]}}",
     OPENAI_UNSUPPORTED_VALUE, "body.messages[0].content[0]",
     "a part of type \"image_url\": only text parts are supported"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"text\",\"text\":1}]}]}}",
     OPENAI_INVALID_VALUE, "body.messages[0].content[0]", "a text part is"},
};

/* Keys are BATCH:ID, at most 256 bytes like every name on the wire: a
 * line whose key would be longer fails alone, naming what makes it so. */
static void test_key_length(void)
{
    char batch[251], line[64];
    memset(batch, 'b', sizeof batch - 1);
    batch[sizeof batch - 1] = 0;
    for (int len = 5; len <= 6; len++) {
        snprintf(line, sizeof line, "{\"id\": \"%.*s\", \"prompt\": \"a\"}\n", len, "123456");
        FILE *f = fmemopen(line, strlen(line), "r");
        jobfile jf;
        llmq_err err = {0};
        int rc = jobfile_read(f, "jobs.jsonl", batch, &jf, &err);
        fclose(f);
        if (len == 5)
            CHECK(rc == 0 && jf.n_faults == 0 && strlen(jf.jobs[0].key) == 256,
                  "a 250-byte batch and a 5-byte id make a 256-byte key");
        else
            CHECK(rc == 0 && jf.n_faults == 1 && strcmp(jf.entries[0].fault.field, "id") == 0 &&
                      strstr(jf.entries[0].fault.e.msg,
                             "id: the job's key BATCH:ID would be 257 bytes, at most 256: a"
                             " shorter --batch (250 bytes) or id (6)"),
                  "one byte more fails the line, naming --batch and the id: %s",
                  rc == 0 ? jf.entries[0].fault.e.msg : err.msg);
        if (rc == 0)
            jobfile_free(&jf);
    }
}

/* Each bad line fails with its code, field and message, between two good
 * lines that stand. */
static void test_bad_lines(void)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "{\"id\":\"a\",\"prompt\":\"a\"}\n%s\n{\"custom_id\":\"z\","
                 "\"body\":{\"prompt\":\"z\"}}\n",
                 BAD[i].text);
        jobfile jf;
        llmq_err err = {0};
        int rc = read_text(text, &jf, &err);
        const jobfile_entry *e = rc == 0 && jf.n == 3 ? &jf.entries[1] : NULL;
        CHECK(e && jf.n_faults == 1 && e->line == 2 && e->fault.fault == BAD[i].fault &&
                  strcmp(e->fault.field, BAD[i].field) == 0 &&
                  strstr(e->fault.e.msg, BAD[i].want) && jf.entries[0].fault.fault == OPENAI_OK &&
                  jf.entries[2].fault.fault == OPENAI_OK,
              "line 2 fails alone: %s at '%s', \"%s\" (got %s at '%s': \"%s\")",
              openai_fault_name(BAD[i].fault), BAD[i].field, BAD[i].want,
              e ? openai_fault_name(e->fault.fault) : "?", e ? e->fault.field : "?",
              e ? e->fault.e.msg : err.msg);
        if (rc == 0)
            jobfile_free(&jf);
    }
}

/* Every bad line is reported, with its number; duplicates and the BOM. */
static void test_many_bad(void)
{
    jobfile jf;
    llmq_err err;
    int rc = read_text("\xEF\xBB\xBF{\"id\":\"x\",\"prompt\":\"a\"}\n"
                       "nonsense\n"
                       "{\"id\":\"y\",\"prompt\":\"a\",\"top_k\":-1}\n"
                       "{\"id\":\"x\",\"prompt\":\"b\"}\n"
                       "{\"id\":\"z\",\"prompt\":\"c\"}\n"
                       "{\"id\":\"w\",\"prompt\":\"c\",\"bogus\":1}\n",
                       &jf, &err);
    CHECK(rc == 0 && jf.n == 6 && jf.n_faults == 4 && jf.entries[0].fault.fault == OPENAI_OK &&
              jf.entries[4].fault.fault == OPENAI_OK,
          "a file of six lines with four bad ones: the two good ones stand (the first after a"
          " UTF-8 BOM)");
    if (rc < 0)
        return;
    char text[LLMQ_ERR_MAX + 128];
    jobfile_fault_text(&jf.entries[1], "jobs.jsonl", text, sizeof text);
    CHECK(strstr(text, "jobs.jsonl:2: column 1: ") && strstr(text, "(invalid_json)"),
          "line 2 is not JSON: %s", text);
    jobfile_fault_text(&jf.entries[2], "jobs.jsonl", text, sizeof text);
    CHECK(strstr(text, "jobs.jsonl:3: top_k: -1 is out of range") != NULL, "line 3's value: %s",
          text);
    jobfile_fault_text(&jf.entries[3], "jobs.jsonl", text, sizeof text);
    CHECK(strstr(text, "jobs.jsonl:4: id: repeats the id of line 1") &&
              strstr(text, "(duplicate_id)"),
          "line 4 repeats line 1's id, and fails, not line 1: %s", text);
    jobfile_fault_text(&jf.entries[5], "jobs.jsonl", text, sizeof text);
    CHECK(strstr(text, "jobs.jsonl:6: bogus: unknown field (unknown_parameter)") != NULL,
          "line 6's unknown field: %s", text);
    llmq_job *jobs;
    size_t n;
    CHECK(jobfile_jobs(&jf, &jobs, &n, &err) == 0 && n == 2 && strcmp(jobs[0].key, "B:x") == 0 &&
              strcmp(jobs[1].key, "B:z") == 0,
          "only the good lines' jobs are submitted");
    free(jobs);
    jobfile_free(&jf);
    CHECK(read_text("", &jf, &err) < 0 && strstr(err.msg, "jobs.jsonl: no jobs"),
          "an empty file is refused: %s", err.msg);
    char line[400];
    snprintf(line, sizeof line, "{\"custom_id\":\"%0300d\",\"body\":{\"prompt\":\"a\",\"n\":2}}\n",
             7);
    if (read_text(line, &jf, &err) == 0) {
        CHECK(jf.n_faults == 1 && strcmp(jf.entries[0].fault.field, "custom_id") == 0 &&
                  strstr(jf.entries[0].fault.e.msg,
                         "key BATCH:ID#INDEX would be 304 bytes, at most 256: a shorter --batch"
                         " (1 bytes) or id (300)"),
              "a custom_id that makes a choice's key too long fails its line, saying so: %s",
              jf.entries[0].fault.e.msg);
        jobfile_free(&jf);
    }
}

/* Writes the output of fn into a string and parses it (one line, or
 * several when lines > 1). */
static json_value *parse_line(const char *buf, size_t len)
{
    json_value *v = NULL;
    llmq_err err;
    bool one_line = len > 0 && buf[len - 1] == '\n' && memchr(buf, '\n', len) == buf + len - 1;
    if (!one_line || json_parse(buf, len, &v, &err) < 0)
        printf("  not one JSON line: %s\n", buf);
    return v;
}

typedef struct sink {
    char *buf;
    size_t len;
    FILE *f;
} sink;

static void sink_open(sink *s)
{
    s->buf = NULL;
    s->len = 0;
    s->f = open_memstream(&s->buf, &s->len);
}

static json_value *sink_line(sink *s)
{
    fclose(s->f);
    json_value *v = s->len ? parse_line(s->buf, s->len) : NULL;
    free(s->buf);
    return v;
}

static double num(const json_value *v, const char *a, const char *b)
{
    const json_value *x = json_get(v, a);
    if (b)
        x = json_get(x, b);
    return x && x->type == JSON_NUMBER ? x->num.d : -1;
}

static const char *str(const json_value *v, const char *a)
{
    const json_value *x = json_get(v, a);
    return x && x->type == JSON_STRING ? x->str.s : "";
}

/* Reads text and gives its submitted jobs ids 41, 42, ... */
static bool submitted(const char *text, jobfile *jf)
{
    llmq_err err;
    llmq_job *jobs;
    size_t n;
    if (read_text(text, jf, &err) < 0 || jobfile_jobs(jf, &jobs, &n, &err) < 0) {
        CHECK(0, "output fixtures: %s", err.msg);
        return false;
    }
    uint64_t ids[16];
    for (size_t i = 0; i < n; i++)
        ids[i] = 41 + i;
    free(jobs);
    return jobfile_set_ids(jf, ids, &err) == 0;
}

static const uint32_t TOKS[] = {5, 6};
static const llmq_result DONE = {.id = 41,
                                 .state = LLMQ_STATE_DONE,
                                 .attempt = 1,
                                 .text = "line\n\"q\"",
                                 .tokens = TOKS,
                                 .n_tokens = 2,
                                 .finish = "context",
                                 .prompt_tokens = 3,
                                 .gen_tokens = 2,
                                 .queue_wait_ms = 1.5,
                                 .prefill_ms = 2,
                                 .prefill_tok_s = 1500,
                                 .decode_ms = 4,
                                 .decode_tok_s = 500,
                                 .total_ms = 8,
                                 .worker = "w0",
                                 .model = "stories260K"};

static void test_output_native(void)
{
    jobfile jf;
    if (!submitted("{\"id\":\"q\\\"1\",\"prompt\":\"a\"}\n", &jf))
        return;
    sink s;
    sink_open(&s);
    CHECK(jobfile_take(&jf, &DONE, s.f, 1700000000) != NULL, "a result of the file is taken");
    json_value *v = sink_line(&s);
    CHECK(v && strcmp(str(v, "id"), "q\"1") == 0 && num(v, "job_id", NULL) == 41 &&
              num(v, "index", NULL) == 0 && strcmp(str(v, "state"), "done") == 0 &&
              strcmp(str(v, "text"), "line\n\"q\"") == 0 &&
              strcmp(str(v, "finish_reason"), "context") == 0 &&
              num(v, "completion_tokens", NULL) == 2 && json_get(v, "tokens")->arr.n == 2 &&
              num(v, "timings", "decode_tok_s") == 500 && strcmp(str(v, "worker"), "w0") == 0 &&
              strcmp(str(v, "model"), "stories260K") == 0,
          "a native result line carries id, index, text, finish reason, counts, tokens, timings"
          " and the model that ran");
    json_free(v);
    sink_open(&s);
    CHECK(jobfile_take(&jf, &DONE, s.f, 1) == NULL, "a result taken already is not again");
    json_free(sink_line(&s));
    jobfile_free(&jf);

    if (!submitted("{\"id\":\"f\",\"prompt\":\"a\"}\n", &jf))
        return;
    llmq_result failed = {.id = 41, .state = LLMQ_STATE_FAILED, .error = "attempt 1: boom"};
    sink_open(&s);
    jobfile_take(&jf, &failed, s.f, 1);
    v = sink_line(&s);
    CHECK(v && strcmp(str(v, "state"), "failed") == 0 &&
              strcmp(str(v, "error"), "attempt 1: boom") == 0 && !json_get(v, "text"),
          "a failed native line carries the error instead of text");
    json_free(v);
    jobfile_free(&jf);
}

static void test_output_openai(void)
{
    jobfile jf;
    if (!submitted("{\"custom_id\":\"c1\",\"body\":{\"model\":\"gpt-x\",\"n\":2,\"messages\":"
                   "[{\"role\":\"user\",\"content\":\"hi\"}]}}\n",
                   &jf))
        return;
    sink s;
    sink_open(&s);
    llmq_result second = DONE;
    second.id = 42;
    second.text = "two";
    second.finish = "stop";
    jobfile_take(&jf, &second, s.f, 1700000000);
    fflush(s.f);
    CHECK(s.len == 0, "an OpenAI line of 2 choices waits for both");
    jobfile_take(&jf, &DONE, s.f, 1700000000);
    json_value *v = sink_line(&s);
    const json_value *body = json_get(json_get(v, "response"), "body");
    const json_value *choices = json_get(body, "choices");
    const json_value *c0 = choices && choices->arr.n == 2 ? &choices->arr.items[0] : NULL;
    const json_value *c1 = c0 ? &choices->arr.items[1] : NULL;
    CHECK(v && strcmp(str(v, "custom_id"), "c1") == 0 && num(v, "response", "status_code") == 200 &&
              strcmp(str(body, "model"), "stories260K") == 0 &&
              strcmp(str(body, "object"), "chat.completion") == 0 && c0 &&
              num(c0, "index", NULL) == 0 &&
              strcmp(str(json_get(c0, "message"), "content"), "line\n\"q\"") == 0 &&
              strcmp(str(c0, "finish_reason"), "length") == 0 && num(c1, "index", NULL) == 1 &&
              strcmp(str(json_get(c1, "message"), "content"), "two") == 0 &&
              num(body, "usage", "prompt_tokens") == 3 &&
              num(body, "usage", "completion_tokens") == 4 &&
              json_get(json_get(body, "llmq"), "choices")->arr.n == 2 &&
              json_get(v, "error")->type == JSON_NULL,
          "then one line: both choices in index order, the model that ran (not gpt-x), the"
          " prompt counted once (context maps to length)");
    json_free(v);
    jobfile_free(&jf);

    if (!submitted("{\"custom_id\":\"c2\",\"body\":{\"n\":2,\"messages\":[{\"role\":\"user\","
                   "\"content\":\"hi\"}]}}\n",
                   &jf))
        return;
    llmq_result failed = {.id = 42, .state = LLMQ_STATE_FAILED, .error = "attempt 1: boom"};
    sink_open(&s);
    jobfile_take(&jf, &DONE, s.f, 1);
    jobfile_take(&jf, &failed, s.f, 1);
    v = sink_line(&s);
    const json_value *error = json_get(v, "error");
    CHECK(v && json_get(v, "response")->type == JSON_NULL &&
              strcmp(str(error, "code"), "job_failed") == 0 &&
              strstr(str(error, "message"), "choice 1 (job 42) failed: attempt 1: boom") &&
              num(error, "line", NULL) == 1,
          "a choice that failed makes the line an error naming it: %s", str(error, "message"));
    json_free(v);
    jobfile_free(&jf);
}

static void test_output_logprobs(void)
{
    static const llmq_logprob alts[2] = {
        {.token = 6, .logprob = -0.25f, .bytes = (const uint8_t *)" b", .n_bytes = 2},
        {.token = 9, .logprob = -2.5f, .bytes = (const uint8_t *)"\xe2", .n_bytes = 1}};
    static const llmq_token_logprobs lps[2] = {
        {.chosen = {.token = 5, .logprob = -0.5f, .bytes = (const uint8_t *)"a", .n_bytes = 1}},
        {.chosen = {.token = 6, .logprob = -0.25f, .bytes = (const uint8_t *)" b", .n_bytes = 2},
         .top = alts,
         .n_top = 2}};
    llmq_result r = DONE;
    r.logprobs = lps;
    r.n_logprobs = 2;
    jobfile jf;
    if (!submitted(
            "{\"id\":1,\"prompt\":\"a\",\"logprobs\":true,\"top_logprobs\":2}\n"
            "{\"custom_id\":\"c\",\"body\":{\"logprobs\":true,\"messages\":[{\"role\":"
            "\"user\",\"content\":\"hi\"}]}}\n"
            "{\"custom_id\":\"p\",\"body\":{\"prompt\":\"a\",\"logprobs\":2,\"echo\":false}}\n",
            &jf))
        return;
    sink s;
    sink_open(&s);
    jobfile_take(&jf, &r, s.f, 1);
    json_value *v = sink_line(&s);
    const json_value *lp = json_get(v, "logprobs");
    const json_value *second = lp && lp->type == JSON_ARRAY && lp->arr.n == 2 ? &lp->arr.items[1]
                                                                              : NULL;
    const json_value *top = json_get(second, "top_logprobs");
    CHECK(second && num(second, "id", NULL) == 6 && strcmp(str(second, "token"), " b") == 0 &&
              num(second, "logprob", NULL) == -0.25 && json_get(second, "bytes")->arr.n == 2 &&
              top && top->arr.n == 2 &&
              strcmp(str(&top->arr.items[1], "token"), "\xef\xbf\xbd") == 0 &&
              json_get(&top->arr.items[1], "bytes")->arr.items[0].num.i == 0xe2,
          "a native line's logprobs: per token its id, text, logprob, bytes and alternatives (a"
          " split character as U+FFFD in the text, whole in the bytes)");
    json_free(v);
    r.id = 42;
    sink_open(&s);
    jobfile_take(&jf, &r, s.f, 1);
    v = sink_line(&s);
    const json_value *body = json_get(json_get(v, "response"), "body");
    const json_value *choice = body ? &json_get(body, "choices")->arr.items[0] : NULL;
    const json_value *content = json_get(json_get(choice, "logprobs"), "content");
    CHECK(content && content->arr.n == 2 &&
              strcmp(str(&content->arr.items[0], "token"), "a") == 0 &&
              !json_get(&content->arr.items[0], "id") &&
              json_get(&content->arr.items[1], "top_logprobs")->arr.n == 2,
          "an OpenAI chat line's logprobs are choices[0].logprobs.content, OpenAI's fields only");
    json_free(v);
    r.id = 43;
    sink_open(&s);
    jobfile_take(&jf, &r, s.f, 1);
    v = sink_line(&s);
    body = json_get(json_get(v, "response"), "body");
    choice = body ? &json_get(body, "choices")->arr.items[0] : NULL;
    const json_value *legacy = json_get(choice, "logprobs");
    const json_value *tops = json_get(legacy, "top_logprobs");
    CHECK(legacy && json_get(legacy, "tokens")->arr.n == 2 &&
              json_get(legacy, "token_logprobs")->arr.items[1].num.d == -0.25 && tops &&
              tops->arr.n == 2 && tops->arr.items[0].obj.n == 0 &&
              num(&tops->arr.items[1], " b", NULL) == -0.25,
          "an OpenAI completions line's logprobs are the legacy tokens, token_logprobs and"
          " top_logprobs lists");
    json_free(v);
    jobfile_free(&jf);
}

static void test_output_faults(void)
{
    jobfile jf;
    llmq_err err;
    if (read_text("{\"custom_id\":\"r\",\"body\":{\"prompt\":\"a\",\"tools\":[{}]}}\n"
                  "{\"id\":\"n\",\"prompt\":\"a\",\"top_p\":2}\n"
                  "{\"custom_id\":\"ok\",\"body\":{\"prompt\":\"a\"}}\n"
                  "garbage\n",
                  &jf, &err) < 0) {
        CHECK(0, "fault fixtures: %s", err.msg);
        return;
    }
    sink s;
    sink_open(&s);
    jobfile_write_fault(s.f, &jf.entries[0]);
    json_value *v = sink_line(&s);
    const json_value *e = json_get(v, "error");
    CHECK(v && json_get(v, "response")->type == JSON_NULL &&
              strcmp(str(v, "custom_id"), "r") == 0 &&
              strcmp(str(e, "code"), "unknown_parameter") == 0 &&
              strcmp(str(e, "param"), "body.tools") == 0 && num(e, "line", NULL) == 1,
          "an OpenAI line that fails: OpenAI's error line with code, message, param and line"
          " (tools is a chat field: %s)",
          str(e, "message"));
    json_free(v);
    sink_open(&s);
    jobfile_write_fault(s.f, &jf.entries[1]);
    v = sink_line(&s);
    CHECK(v && strcmp(str(v, "id"), "n") == 0 && strcmp(str(v, "state"), "rejected") == 0 &&
              num(v, "line", NULL) == 2 && strcmp(str(v, "code"), "invalid_value") == 0 &&
              strcmp(str(v, "field"), "top_p") == 0 && strstr(str(v, "error"), "top_p: 2"),
          "a native line that fails: id, line, state rejected, error, code and field");
    json_free(v);
    sink_open(&s);
    jobfile_write_fault(s.f, &jf.entries[3]);
    v = sink_line(&s);
    CHECK(v && json_get(v, "custom_id")->type == JSON_NULL &&
              strcmp(str(json_get(v, "error"), "code"), "invalid_json") == 0,
          "a line that is not JSON is written in the file's shape (OpenAI's here)");
    json_free(v);
    llmq_job *jobs;
    size_t n;
    jobfile_jobs(&jf, &jobs, &n, &err);
    /* As libllmq reports the broker's refusal of a submit of 3 jobs. */
    llmq_error refused = {.code = LLMQ_E_BAD_VALUE,
                          .field = "jobs[0].model",
                          .message = "broker: jobs[0].model: no worker serves model 'gpt-x' nor"
                                     " served it in the last 600000 ms: none of the 3 jobs was"
                                     " stored"};
    const jobfile_entry *r = n == 1 ? jobfile_refuse(&jf, 0, &refused) : NULL;
    free(jobs);
    CHECK(r && r->fault.fault == OPENAI_MODEL_NOT_FOUND &&
              strcmp(r->fault.field, "body.model") == 0 &&
              jobfile_jobs(&jf, &jobs, &n, &err) == 0 && n == 0,
          "a job the broker refuses for its model fails its line: model_not_found, body.model");
    CHECK(r && strcmp(r->fault.e.msg, "body.model: the broker refused it (bad_value): no worker"
                                      " serves model 'gpt-x' nor served it in the last 600000"
                                      " ms") == 0,
          "its error is the broker's reason for that job alone, not the submit's index or its"
          " 'none of the 3 jobs was stored' (the other lines are sent again): %s",
          r ? r->fault.e.msg : "");
    free(jobs);
    jobfile_free(&jf);
}

/* A batch stored in parts: jobfile_set_ids is called again as each part
 * is stored (ids 0: not yet), indexes the jobs stored since, in whatever
 * order their ids come, and keeps the id a job was first given; the result
 * of a job whose line failed later (the broker refused a sibling) is not
 * taken: that line's output is its fault. */
static void test_ids_in_parts(void)
{
    jobfile jf;
    llmq_err err;
    llmq_job *jobs;
    size_t n;
    const char *text = "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"x\"}\n"
                       "{\"id\":\"c\",\"prompt\":\"x\",\"n\":2}\n";
    if (read_text(text, &jf, &err) < 0 || jobfile_jobs(&jf, &jobs, &n, &err) < 0) {
        CHECK(0, "parts fixtures: %s", err.msg);
        return;
    }
    free(jobs);
    const uint64_t first[] = {0, 0, 70, 71}, all[] = {30, 31, 70, 99};
    CHECK(n == 4 && jobfile_set_ids(&jf, first, &err) == 0 && jobfile_job_of(&jf, 70) &&
              jobfile_job_of(&jf, 71) && !jobfile_job_of(&jf, 30),
          "the first part's jobs are indexed, the others not yet");
    CHECK(jobfile_set_ids(&jf, all, &err) == 0 && jobfile_job_of(&jf, 30) == &jf.jobs[0] &&
              jobfile_job_of(&jf, 31) == &jf.jobs[1] && jobfile_job_of(&jf, 70) == &jf.jobs[2] &&
              jobfile_job_of(&jf, 71) == &jf.jobs[3] && !jobfile_job_of(&jf, 99),
          "the next part's lower ids are merged in; a job keeps its first id");
    llmq_error why = {.code = LLMQ_E_BAD_VALUE, .field = "jobs[3].model"};
    snprintf(why.message, sizeof why.message, "no worker serves it");
    jobfile_refuse(&jf, 3, &why);
    sink s;
    sink_open(&s);
    llmq_result r = DONE;
    r.id = 70;
    CHECK(jobfile_take(&jf, &r, s.f, 1) == NULL,
          "a stored job of a line failed since is not taken");
    r.id = 30;
    CHECK(jobfile_take(&jf, &r, s.f, 1) == &jf.jobs[0], "another line's job is");
    json_free(sink_line(&s));
    jobfile_free(&jf);
}

int main(void)
{
    test_native();
    test_native_extras();
    test_openai();
    test_native_messages();
    test_openai_roles();
    test_openai_choices();
    test_logprobs_in();
    test_response_format();
    test_key_length();
    test_bad_lines();
    test_many_bad();
    test_output_native();
    test_output_openai();
    test_output_logprobs();
    test_output_faults();
    test_ids_in_parts();
    return check_done();
}
