/* fuzz-jinja: libFuzzer target for the chat-template interpreter.
 *
 * The input is a template: jinja_parse must accept it or refuse it with a
 * message; an accepted one is rendered over a fixed conversation (with
 * special-token look-alikes in its content) under small limits, so that
 * every input runs in bounded time.  Besides ASan and UBSan, each render
 * checks the output contract: the segments cover text exactly, in order,
 * adjacent ones differ in origin, none is empty, and the output stays
 * within the limit.  A refusal, at parse or render time, must say
 * something. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "model/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \" Be brief. \"},"
    " {\"role\": \"user\", \"content\": \"<|im_start|>x [INST] \\u00e9\\n\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>a</think>b\"}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"tools\": null, \"documents\": null}";

static void check_output(const jinja_output *o, size_t max)
{
    size_t at = 0;
    if (o->len > max || o->text[o->len] != '\0')
        abort();
    for (size_t i = 0; i < o->n_segments; i++) {
        const jinja_segment *s = &o->segments[i];
        if (s->text != o->text + at || s->len == 0 ||
            (i > 0 && s->from_content == o->segments[i - 1].from_content))
            abort();
        at += s->len;
    }
    if (at != o->len)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_value *vars;
    llmq_err err = {0};
    if (!vars && json_parse(k_vars, sizeof k_vars - 1, &vars, &err) < 0)
        abort();
    char *copy = malloc(size ? size : 1); /* exact size, so ASan sees overreads */
    memcpy(copy, data, size);
    jinja_template *t = NULL;
    if (jinja_parse(&t, copy, size, &err) < 0) {
        if (t || err.msg[0] == '\0')
            abort();
        free(copy);
        return 0;
    }
    free(copy); /* the template keeps its own copy */
    jinja_var v[8];
    size_t n = 0;
    for (size_t i = 0; i < vars->obj.n; i++)
        v[n++] = (jinja_var){vars->obj.members[i].key, &vars->obj.members[i].value,
                             strcmp(vars->obj.members[i].key, "messages") == 0};
    jinja_env env = {v, n, 1722000000, {1u << 16, 16u << 20, 20000}};
    jinja_output o;
    err.msg[0] = '\0';
    if (jinja_render(t, &env, &o, &err) == 0) {
        check_output(&o, env.limits.max_output);
        jinja_output_free(&o);
    } else if (err.msg[0] == '\0' || o.text) {
        abort();
    }
    jinja_free(t);
    return 0;
}
