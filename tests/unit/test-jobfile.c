/* test-jobfile: llmq-submit's input lines (native and OpenAI batch shapes)
 * become the intended jobs and keys, bad lines are refused naming the line
 * and the field, and output lines are valid JSON of the documented shapes. */
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

static void test_native(void)
{
    jobfile jf;
    llmq_err err;
    int rc = read_text("{\"id\": \"q1\", \"prompt\": \"Once\", \"max_tokens\": 32, \"temperature\": "
                       "0.5, \"top_k\": 40, \"top_p\": 0.9, \"min_p\": 0.1, \"repeat_penalty\": "
                       "1.1, \"repeat_last_n\": -1, \"presence_penalty\": 0.5, "
                       "\"frequency_penalty\": -0.5, \"seed\": 7, \"stop\": \"\\n\", "
                       "\"ignore_eos\": true, \"priority\": 3, \"model\": \"m\"}\n"
                       "\n"
                       "{\"id\": 2, \"tokens\": [1, 2, 3], \"stop\": [\"a\", \"b\"]}\n"
                       "{\"prompt\": \"no id\"}",
                       &jf, &err);
    CHECK(rc == 0 && jf.n == 3, "three jobs from four lines (a blank one skipped)%s%s",
          rc ? ": " : "", rc ? err.msg : "");
    if (rc < 0)
        return;
    const llmq_job *j = &jf.entries[0].job;
    CHECK(strcmp(j->key, "B:q1") == 0 && strcmp(j->prompt, "Once") == 0 && j->max_tokens == 32 &&
              j->temperature == 0.5f && j->top_k == 40 && j->top_p == 0.9f && j->min_p == 0.1f &&
              j->repeat_penalty == 1.1f && j->repeat_last_n == -1 &&
              j->presence_penalty == 0.5f && j->frequency_penalty == -0.5f && j->seed == 7 &&
              j->n_stop == 1 && strcmp(j->stop[0], "\n") == 0 && j->ignore_eos &&
              j->priority == 3 && strcmp(j->model, "m") == 0 && !jf.entries[0].openai,
          "every native field lands in the job; the key is BATCH:ID");
    j = &jf.entries[1].job;
    CHECK(strcmp(j->key, "B:2") == 0 && !j->prompt && j->n_tokens == 3 && j->tokens[2] == 3 &&
              j->n_stop == 2 && jf.entries[1].line == 3 && j->max_tokens == 256,
          "an integer id, token ids and a stop list; unset fields keep their defaults");
    CHECK(jf.entries[2].job.key == NULL && jf.entries[2].id == NULL,
          "a line without id has no key");
    jobfile_free(&jf);
}

static void test_openai(void)
{
    jobfile jf;
    llmq_err err;
    int rc = read_text(
        "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
        "{\"model\": \"gpt-x\", \"prompt\": [\"Tell me\"], \"max_completion_tokens\": 9, "
        "\"temperature\": 1, \"n\": 1, \"stream\": false, \"user\": \"u\"}}\n"
        "{\"custom_id\": \"r2\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": ["
        "{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
        "[{\"type\": \"text\", \"text\": \"Hi\"}, {\"type\": \"text\", \"text\": \" there\"}]}, "
        "{\"role\": \"assistant\", \"content\": \"Hello.\"}, {\"role\": \"user\", \"content\": "
        "\"Go on\"}], \"stop\": [\"\\n\"]}}\n",
        &jf, &err);
    CHECK(rc == 0 && jf.n == 2, "two OpenAI batch lines%s%s", rc ? ": " : "", rc ? err.msg : "");
    if (rc < 0)
        return;
    const jobfile_entry *e = &jf.entries[0];
    CHECK(e->openai && !e->chat && strcmp(e->model, "gpt-x") == 0 &&
              strcmp(e->job.prompt, "Tell me") == 0 && e->job.max_tokens == 9 &&
              e->job.temperature == 1.0f && strcmp(e->job.key, "B:r1") == 0,
          "a completion line: prompt, max_completion_tokens, model echoed not routed");
    e = &jf.entries[1];
    const llmq_message *m = e->job.messages;
    CHECK(e->chat && !e->job.prompt && e->job.n_messages == 4 && strcmp(m[0].role, "system") == 0 &&
              strcmp(m[0].content, "Be brief.") == 0 && strcmp(m[1].role, "user") == 0 &&
              strcmp(m[1].content, "Hi\n there") == 0 && strcmp(m[2].role, "assistant") == 0 &&
              strcmp(m[3].content, "Go on") == 0,
          "chat messages pass through unflattened, text parts joined by newlines");
    CHECK(e->job.model == NULL, "OpenAI model names do not route jobs");
    jobfile_free(&jf);
}

/* Messages in a native line, and roles the template decides about. */
static void test_native_messages(void)
{
    jobfile jf;
    llmq_err err;
    int rc = read_text("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": "
                       "\"<|im_start|>hi\"}, {\"role\": \"tool\", \"content\": \"\"}], "
                       "\"max_tokens\": 4}\n",
                       &jf, &err);
    const llmq_job *j = rc == 0 ? &jf.entries[0].job : NULL;
    CHECK(j && !jf.entries[0].openai && j->n_messages == 2 &&
              strcmp(j->messages[0].content, "<|im_start|>hi") == 0 &&
              strcmp(j->messages[1].role, "tool") == 0 && strcmp(j->messages[1].content, "") == 0 &&
              j->max_tokens == 4,
          "a native line carries messages as they are, any role%s%s", rc ? ": " : "",
          rc ? err.msg : "");
    if (rc == 0)
        jobfile_free(&jf);
}

/* Reads text, which must give n jobs (what says which). */
static bool read_jobs(const char *text, size_t n, jobfile *jf, const char *what)
{
    llmq_err err;
    int rc = read_text(text, jf, &err);
    CHECK(rc == 0 && jf->n == n, "%s%s%s", what, rc ? ": " : "", rc ? err.msg : "");
    return rc == 0;
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
    CHECK(jf.entries[0].job.logprobs && jf.entries[0].job.top_logprobs == 3,
          "native: logprobs and top_logprobs by their wire names");
    CHECK(jf.entries[1].job.logprobs && jf.entries[1].job.top_logprobs == 20,
          "chat: logprobs true and top_logprobs, before \"messages\" in the body");
    CHECK(jf.entries[2].job.logprobs && jf.entries[2].job.top_logprobs == 5,
          "completions: logprobs is the number of alternatives");
    CHECK(!jf.entries[3].job.logprobs, "logprobs null is no logprobs");
    jobfile_free(&jf);
}

typedef struct bad_line {
    const char *text;
    const char *want;
} bad_line;

static const bad_line BAD[] = {
    {"{\"id\":1,\"prompt\":\"a\"}\n[1]\n", "jobs.jsonl:2: a job line must be a JSON object"},
    {"{\"id\":1,\"prompt\":\"a\",}\n", "jobs.jsonl:1: column 22: expected a string key"},
    {"{\"id\":1,\"prompt\":\"a\",\"temperature\":\"hot\"}\n",
     "jobs.jsonl:1: temperature: must be a number"},
    {"{\"id\":1,\"prompt\":\"a\",\"temperature\":-1}\n",
     "jobs.jsonl:1: temperature: -1 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":1.5}\n",
     "max_tokens: must be an integer, not a fraction"},
    {"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":0}\n",
     "max_tokens: 0 is out of range [1, 1048576]"},
    {"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":99999999999}\n",
     "max_tokens: 99999999999 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"seed\":-1}\n", "seed: -1 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"top_p\":0}\n", "top_p: 0 is out of range (0, 1]"},
    {"{\"id\":1,\"prompt\":\"a\",\"stop\":[\"x\",3]}\n", "stop[1]: must be a string"},
    {"{\"id\":1,\"tokens\":[1,-2]}\n", "tokens[1]: -2 is out of range"},
    {"{\"id\":1,\"prompt\":\"a\",\"tokens\":[1]}\n", "mutually exclusive"},
    {"{\"id\":1}\n", "one of \"prompt\", \"tokens\" or \"messages\" is required"},
    {"{\"id\":1.5,\"prompt\":\"a\"}\n", "id: must be a string or an integer"},
    {"{\"id\":1,\"prompt\":\"a\\u0000b\"}\n", "prompt: contains a NUL character"},
    {"{\"id\":1,\"prompt\":\"a\",\"temprature\":1}\n", "temprature: unknown field"},
    {"{\"id\":\"x\",\"prompt\":\"a\"}\n{\"id\":\"y\",\"prompt\":\"a\"}\n{\"id\":\"x\",\"prompt\":"
     "\"b\"}\n",
     "jobs.jsonl:3: id: repeats the id of line 1"},
    {"", "jobs.jsonl: no jobs"},
    {"{\"custom_id\":\"r\"}\n", "body: required"},
    {"{\"custom_id\":\"r\",\"body\":{\"prompt\":\"a\",\"response_format\":{}}}\n",
     "body.response_format: unknown field"},
    {"{\"custom_id\":\"r\",\"body\":{\"prompt\":\"a\",\"n\":2}}\n", "body.n: only 1 is supported"},
    {"{\"custom_id\":\"r\",\"body\":{\"prompt\":\"a\",\"logprobs\":6}}\n",
     "body.logprobs: completions take the number of alternatives, 0..5"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"logprobs\":2}}\n",
     "body.logprobs: chat completions take true or false"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"top_logprobs\":2}}\n",
     "body.top_logprobs: 2 alternatives need \"logprobs\": true"},
    {"{\"id\":1,\"prompt\":\"a\",\"logprobs\":true,\"top_logprobs\":21}\n",
     "top_logprobs: 21 is out of range [0, 20]"},
    {"{\"custom_id\":\"r\",\"body\":{\"prompt\":\"a\",\"temperature\":101}}\n",
     "body.temperature: 101 is out of range"},
    {"{\"custom_id\":\"r\",\"body\":{\"max_tokens\":3}}\n",
     "body: \"prompt\" or \"messages\" is required"},
    {"{\"custom_id\":\"r\",\"url\":\"/v1/chat/completions\",\"body\":{\"prompt\":\"a\"}}\n",
     "url: must be \"/v1/completions\""},
    {"{\"custom_id\":\"r\",\"method\":\"GET\",\"body\":{\"prompt\":\"a\"}}\n",
     "method: must be \"POST\""},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\","
     "\"name\":\"bob\"}]}}\n",
     "body.messages[0].name: not supported (a message is a role and a content)"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"assistant\",\"content\":null}]}}\n",
     "body.messages[0].content: must be a string or a non-empty list of text parts"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"\",\"content\":\"x\"}]}}\n",
     "body.messages[0].role: 0 bytes, at least 1 required"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[]}}\n",
     "body.messages: must be a non-empty array"},
    {"{\"id\":1,\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}\n",
     "\"prompt\" and \"messages\" are mutually exclusive"},
    {"{\"custom_id\":\"r\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"image_url\"}]}]}}\n",
     "body.messages[0].content[0]: only"},
    {"{\"custom_id\":7,\"body\":{\"prompt\":\"a\"}}\n", "custom_id: must be a string"},
};

/* Keys are BATCH:ID, at most 256 bytes like every name on the wire: one
 * that would be longer is refused naming what makes it so. */
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
            CHECK(rc == 0 && strlen(jf.entries[0].job.key) == 256,
                  "a 250-byte batch and a 5-byte id make a 256-byte key");
        else
            CHECK(rc < 0 && strstr(err.msg, "jobs.jsonl:1: id: the job's key BATCH:ID would be"
                                            " 257 bytes, at most 256: a shorter --batch (250"
                                            " bytes) or id (6)"),
                  "one byte more is refused naming --batch and the id: %s", err.msg);
        if (rc == 0)
            jobfile_free(&jf);
    }
}

static void test_bad_lines(void)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        jobfile jf;
        llmq_err err = {0};
        int rc = read_text(BAD[i].text, &jf, &err);
        CHECK(rc < 0 && strstr(err.msg, BAD[i].want) && jf.n == 0 && !jf.entries,
              "refused with \"%s\" (got \"%s\")", BAD[i].want, err.msg);
        if (rc == 0)
            jobfile_free(&jf);
    }
}

/* Writes one result line with fn and parses it back. */
static json_value *written(const jobfile_entry *e, const llmq_result *r, bool ack)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (ack)
        jobfile_write_ack(f, e, true);
    else
        jobfile_write_result(f, e, r, 1700000000);
    fclose(f);
    json_value *v = NULL;
    llmq_err err;
    bool one_line = len > 0 && buf[len - 1] == '\n' && memchr(buf, '\n', len) == buf + len - 1;
    if (!one_line || json_parse(buf, len, &v, &err) < 0)
        printf("  not one JSON line: %s\n", buf);
    free(buf);
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

static void test_output(void)
{
    jobfile jf;
    llmq_err err;
    if (read_text("{\"id\":\"q\\\"1\",\"prompt\":\"a\"}\n"
                  "{\"custom_id\":\"c1\",\"body\":{\"model\":\"gpt-x\",\"messages\":[{\"role\":"
                  "\"user\",\"content\":\"hi\"}]}}\n",
                  &jf, &err) < 0) {
        CHECK(0, "output fixtures parse: %s", err.msg);
        return;
    }
    static const uint32_t toks[] = {5, 6};
    llmq_result r = {.id = 41, .state = LLMQ_STATE_DONE, .attempt = 1, .text = "line\n\"q\"",
                     .tokens = toks, .n_tokens = 2, .finish = "context", .prompt_tokens = 3,
                     .gen_tokens = 2, .queue_wait_ms = 1.5, .prefill_ms = 2, .prefill_tok_s = 1500,
                     .decode_ms = 4, .decode_tok_s = 500, .total_ms = 8, .worker = "w0"};
    json_value *v = written(&jf.entries[0], &r, false);
    CHECK(v && strcmp(str(v, "id"), "q\"1") == 0 && num(v, "job_id", NULL) == 41 &&
              strcmp(str(v, "state"), "done") == 0 && strcmp(str(v, "text"), "line\n\"q\"") == 0 &&
              strcmp(str(v, "finish_reason"), "context") == 0 &&
              num(v, "completion_tokens", NULL) == 2 && json_get(v, "tokens")->arr.n == 2 &&
              num(v, "timings", "decode_tok_s") == 500 && num(v, "timings", "queue_wait_ms") == 1.5 &&
              strcmp(str(v, "worker"), "w0") == 0,
          "a native result line carries id, text, finish reason, counts, tokens and timings");
    json_free(v);

    v = written(&jf.entries[1], &r, false);
    const json_value *body = json_get(json_get(v, "response"), "body");
    const json_value *choice = body ? &json_get(body, "choices")->arr.items[0] : NULL;
    CHECK(v && strcmp(str(v, "custom_id"), "c1") == 0 &&
              num(v, "response", "status_code") == 200 && strcmp(str(body, "model"), "gpt-x") == 0 &&
              strcmp(str(body, "object"), "chat.completion") == 0 &&
              strcmp(str(json_get(choice, "message"), "content"), "line\n\"q\"") == 0 &&
              strcmp(str(choice, "finish_reason"), "length") == 0 &&
              num(body, "usage", "total_tokens") == 5 && json_get(v, "error")->type == JSON_NULL,
          "an OpenAI chat result line has OpenAI's shape (context maps to length)");
    json_free(v);

    llmq_result failed = {.id = 42, .state = LLMQ_STATE_FAILED, .error = "attempt 1: boom"};
    v = written(&jf.entries[0], &failed, false);
    CHECK(v && strcmp(str(v, "state"), "failed") == 0 &&
              strcmp(str(v, "error"), "attempt 1: boom") == 0 && !json_get(v, "text"),
          "a failed native line carries the error instead of text");
    json_free(v);
    v = written(&jf.entries[1], &failed, false);
    CHECK(v && json_get(v, "response")->type == JSON_NULL &&
              strcmp(str(json_get(v, "error"), "code"), "job_failed") == 0,
          "a failed OpenAI line has response null and an error object");
    json_free(v);

    static const llmq_logprob alts[2] = {
        {.token = 6, .logprob = -0.25f, .bytes = (const uint8_t *)" b", .n_bytes = 2},
        {.token = 9, .logprob = -2.5f, .bytes = (const uint8_t *)"\xe2", .n_bytes = 1}};
    static const llmq_token_logprobs lps[2] = {
        {.chosen = {.token = 5, .logprob = -0.5f, .bytes = (const uint8_t *)"a", .n_bytes = 1}},
        {.chosen = {.token = 6, .logprob = -0.25f, .bytes = (const uint8_t *)" b", .n_bytes = 2},
         .top = alts,
         .n_top = 2}};
    r.logprobs = lps;
    r.n_logprobs = 2;
    v = written(&jf.entries[0], &r, false);
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
    v = written(&jf.entries[1], &r, false);
    body = json_get(json_get(v, "response"), "body");
    choice = body ? &json_get(body, "choices")->arr.items[0] : NULL;
    const json_value *content = json_get(json_get(choice, "logprobs"), "content");
    CHECK(content && content->arr.n == 2 &&
              strcmp(str(&content->arr.items[0], "token"), "a") == 0 &&
              !json_get(&content->arr.items[0], "id") &&
              json_get(&content->arr.items[1], "top_logprobs")->arr.n == 2,
          "an OpenAI chat line's logprobs are choices[0].logprobs.content, OpenAI's fields only");
    json_free(v);
    jobfile cf;
    if (read_text("{\"custom_id\":\"p\",\"body\":{\"prompt\":\"a\",\"logprobs\":2}}\n", &cf,
                  &err) == 0) {
        v = written(&cf.entries[0], &r, false);
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
        jobfile_free(&cf);
    }

    jf.entries[0].job_id = 41;
    v = written(&jf.entries[0], NULL, true);
    CHECK(v && num(v, "job_id", NULL) == 41 && json_get(v, "existing")->boolean,
          "a --no-wait line carries id, job id and existing");
    json_free(v);
    jobfile_free(&jf);
}

int main(void)
{
    test_native();
    test_openai();
    test_native_messages();
    test_logprobs_in();
    test_key_length();
    test_bad_lines();
    test_output();
    return check_done();
}
