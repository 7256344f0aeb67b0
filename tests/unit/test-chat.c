/* test-chat: chat templates render prompts byte for byte as Hugging Face
 * transformers renders them, and keep message text apart from template text.
 *
 * Pins: the 56 reference renders of tests/data/reference/chat-templates.jsonl
 * (7 templates x 8 conversations, rendered by jinja2 in transformers'
 * environment); the built-in templates are those reference files byte for
 * byte; Jinja semantics templates lean on (whitespace control, trim_blocks
 * and lstrip_blocks, loops, scopes, namespaces, macros, slices, filters,
 * tests, tojson, Python's str/repr of values), each expected string produced by
 * jinja2 3.1 in the same environment; segments: text from messages, even
 * text that looks like special tokens, is marked content and template text
 * is not; errors name the construct and its line and column; hostile
 * templates are stopped by the limits; --chat-template resolution; the
 * reference renders tokenized with their families' real vocabularies:
 * control tokens only from template text (the injection guard), otherwise
 * the ids of the whole string, and one BOS where the template writes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "common/json.h"
#include "model/chat.h"
#include "model/gguf_writer.h"
#include "model/jinja.h"
#include "model/tokenizer.h"
#include "tests/unit/check.h"

/* ---- helpers ---- */

static char *read_fixture(const char *rel, size_t *len)
{
    char path[1024];
    char *text = NULL;
    llmq_err err;
    check_data_path(path, sizeof path, rel);
    if (file_read_all(path, &text, len, &err) < 0)
        CHECK(0, "read %s: %s", rel, err.msg);
    return text;
}

/* Renders tmpl with the variables of the JSON object vars ("messages" is
 * content, the rest template-side) under limits. */
static int render_with(const char *tmpl, const char *vars, jinja_limits limits, jinja_output *out,
                       llmq_err *err)
{
    json_value *v = NULL;
    jinja_template *t = NULL;
    jinja_var list[32];
    size_t n = 0;
    memset(out, 0, sizeof *out);
    if (json_parse(vars, strlen(vars), &v, err) < 0)
        return -1;
    for (size_t i = 0; i < v->obj.n && n < 32; i++) {
        const json_member *m = &v->obj.members[i];
        list[n++] = (jinja_var){m->key, &m->value, strcmp(m->key, "messages") == 0};
    }
    jinja_env env = {list, n, 1722000000, limits};
    int rc = jinja_parse(&t, tmpl, strlen(tmpl), err);
    if (rc == 0)
        rc = jinja_render(t, &env, out, err);
    jinja_free(t);
    json_free(v);
    return rc;
}

static int render(const char *tmpl, const char *vars, jinja_output *out, llmq_err *err)
{
    return render_with(tmpl, vars, JINJA_DEFAULT_LIMITS, out, err);
}

/* The content segments' text joined, and the template segments' text joined. */
static void split_segments(const jinja_output *o, char *content, char *tmpl, size_t size)
{
    size_t nc = 0, nt = 0;
    for (size_t i = 0; i < o->n_segments; i++) {
        const jinja_segment *s = &o->segments[i];
        char *dst = s->from_content ? content : tmpl;
        size_t *at = s->from_content ? &nc : &nt;
        size_t k = s->len < size - 1 - *at ? s->len : size - 1 - *at;
        memcpy(dst + *at, s->text, k);
        *at += k;
    }
    content[nc] = '\0';
    tmpl[nt] = '\0';
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* s on one line, for a check's description. */
static const char *oneline(const char *s, char *buf, size_t size)
{
    size_t n = 0;
    for (; *s && n + 3 < size; s++) {
        if (*s == '\n') {
            buf[n++] = '\\';
            buf[n++] = 'n';
        } else {
            buf[n++] = *s;
        }
    }
    buf[n] = '\0';
    return buf;
}

/* ---- the reference renders ---- */

typedef struct ref_case {
    char *name, *conversation;
    chat_message *messages;
    size_t n;
    chat_vars vars;
    const char *want;
    size_t want_len;
} ref_case;

static bool read_case(const json_value *line, ref_case *c)
{
    const json_value *name = json_get(line, "template_name");
    const json_value *conv = json_get(line, "conversation");
    const json_value *msgs = json_get(line, "messages");
    const json_value *want = json_get(line, "rendered");
    const json_value *bos = json_get(line, "bos_token"), *eos = json_get(line, "eos_token");
    if (!name || !conv || !msgs || msgs->type != JSON_ARRAY || !want)
        return false;
    c->name = name->str.s;
    c->conversation = conv->str.s;
    c->n = msgs->arr.n;
    c->messages = calloc(c->n, sizeof *c->messages);
    for (size_t i = 0; i < c->n; i++) {
        const json_value *role = json_get(&msgs->arr.items[i], "role");
        const json_value *content = json_get(&msgs->arr.items[i], "content");
        c->messages[i] = (chat_message){role->str.s, role->str.len, content->str.s,
                                        content->str.len};
    }
    c->vars = (chat_vars){true, bos ? bos->str.s : NULL, eos ? eos->str.s : NULL, 0};
    c->want = want->str.s;
    c->want_len = want->str.len;
    return true;
}

static chat_template *reference_template(const char *name)
{
    char rel[256];
    size_t len;
    snprintf(rel, sizeof rel, "reference/chat-templates/%s.jinja", name);
    char *text = read_fixture(rel, &len);
    chat_template *t = NULL;
    llmq_err err;
    if (text && chat_template_parse(&t, name, text, len, &err) < 0)
        CHECK(0, "%s parses (%s)", name, err.msg);
    free(text);
    return t;
}

/* Calls fn on every reference case; returns how many lines there were. */
static size_t each_case(void (*fn)(const ref_case *c, const chat_prompt *p, void *ctx), void *ctx)
{
    size_t len, n = 0;
    char *all = read_fixture("reference/chat-templates.jsonl", &len);
    for (char *line = all, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        json_value *v;
        llmq_err err;
        ref_case c = {0};
        if (json_parse(line, (size_t)(next - line), &v, &err) < 0 || !read_case(v, &c)) {
            CHECK(0, "reference line %zu reads", n + 1);
            break;
        }
        chat_template *t = reference_template(c.name);
        chat_prompt p;
        if (t && chat_render(t, c.messages, c.n, &c.vars, &p, &err) == 0) {
            fn(&c, &p, ctx);
            chat_prompt_free(&p);
        } else if (t) {
            CHECK(0, "%s / %s renders (%s)", c.name, c.conversation, err.msg);
        }
        chat_template_free(t);
        free(c.messages);
        json_free(v);
        n++;
    }
    free(all);
    return n;
}

static void check_identical(const ref_case *c, const chat_prompt *p, void *ctx)
{
    size_t *same = ctx;
    bool ok = p->len == c->want_len && memcmp(p->text, c->want, p->len) == 0;
    size_t joined = 0;
    for (size_t i = 0; i < p->n_segments; i++)
        joined += p->segments[i].len;
    *same += ok;
    CHECK(ok && joined == p->len, "%s / %s: byte-identical to transformers (%zu bytes)", c->name,
          c->conversation, c->want_len);
}

static void test_reference_renders(void)
{
    size_t same = 0, n = each_case(check_identical, &same);
    printf("# byte-identical: %zu/%zu\n", same, n);
    CHECK(n == 56 && same == 56, "all 56 reference conversations render byte-identical (%zu/%zu)",
          same, n);
}

/* template-like-text: the markers written inside the message are content;
 * only the template's own markers are template text. */
static void check_injection(const ref_case *c, const chat_prompt *p, void *ctx)
{
    static const char *const markers[] = {"<|im_start|>", "<|im_end|>", "[INST]",
                                          "[/INST]",      "<|eot_id|>", "</s>"};
    char content[8192], tmpl[8192];
    (void)ctx;
    if (strcmp(c->conversation, "template-like-text") != 0)
        return;
    split_segments(p, content, tmpl, sizeof content);
    bool ok = strstr(content, c->messages[c->n - 1].content) != NULL;
    for (size_t k = 0; k < sizeof markers / sizeof markers[0]; k++) {
        size_t in_message = count_of(c->messages[c->n - 1].content, markers[k]);
        ok &= count_of(content, markers[k]) == in_message;
        ok &= count_of(tmpl, markers[k]) == count_of(p->text, markers[k]) - in_message;
    }
    CHECK(ok, "%s: special-token look-alikes in the message are content, the template's are not",
          c->name);
}

/* newlines-spaces: a trimmed or stripped message is still content, whole. */
static void check_trimmed(const ref_case *c, const chat_prompt *p, void *ctx)
{
    (void)ctx;
    if (strcmp(c->conversation, "newlines-spaces") != 0 || strcmp(c->name, "Llama-2-7b-chat") == 0)
        return;
    const char *want = strncmp(c->name, "Meta-Llama-3", 12) == 0 ||
                               strncmp(c->name, "Llama-3.1", 9) == 0
                           ? "line one\nline two\n\n  indented line"
                           : "   line one\nline two\n\n  indented line   \n";
    bool found = false;
    for (size_t i = 0; i < p->n_segments; i++)
        found |= p->segments[i].from_content && p->segments[i].len == strlen(want) &&
                 memcmp(p->segments[i].text, want, p->segments[i].len) == 0;
    CHECK(found, "%s: the user message (%s) is one content segment", c->name,
          want[0] == ' ' ? "as given" : "trimmed");
}

static void test_reference_segments(void)
{
    each_case(check_injection, NULL);
    each_case(check_trimmed, NULL);
}

/* ---- built-in templates ---- */

static void test_builtins(void)
{
    static const struct {
        const char *name, *file;
    } copies[] = {{"llama2", "Llama-2-7b-chat"},
                  {"llama3", "Meta-Llama-3-8B-Instruct"},
                  {"llama3.1", "Llama-3.1-8B-Instruct"},
                  {"mistral-v0.3", "Mistral-7B-Instruct-v0.3"},
                  {"phi3", "Phi-3-mini-4k-instruct"},
                  {"qwen2.5", "Qwen2.5-7B-Instruct"},
                  {"qwen3", "Qwen3"}};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        char rel[256];
        size_t len, blen;
        const char *text;
        snprintf(rel, sizeof rel, "reference/chat-templates/%s.jinja", copies[i].file);
        char *ref = read_fixture(rel, &len);
        CHECK(ref && chat_builtin(copies[i].name, &text, &blen) == 0 && blen == len &&
                  memcmp(text, ref, len) == 0,
              "built-in %s is %s.jinja byte for byte", copies[i].name, copies[i].file);
        free(ref);
    }
    const char *text;
    size_t len;
    CHECK(chat_builtin("nosuch", &text, &len) < 0, "an unknown built-in name is not found");

    /* chatml: the classic template, rendered by jinja2 */
    chat_template *t = NULL;
    llmq_err err;
    chat_message m[] = {{"system", 6, "Be brief.", 9}, {"user", 4, "Hi", 2}};
    chat_vars vars = {true, NULL, NULL, 0};
    chat_prompt p = {0};
    int rc = chat_template_open(&t, "chatml", NULL, &err);
    if (rc == 0)
        rc = chat_render(t, m, 2, &vars, &p, &err);
    CHECK(rc == 0 && strcmp(p.text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                    "Hi<|im_end|>\n<|im_start|>assistant\n") == 0,
          "chatml renders as jinja2 does (%s)", rc ? err.msg : p.text);
    chat_prompt_free(&p);
    chat_template_free(t);
}

/* ---- Jinja semantics, against jinja2 ---- */

/* Produced by jinja2 3.1.6 with transformers' environment
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * tojson = json.dumps(ensure_ascii=False), strftime_now at 1722000000 UTC). */
static const char k_vars[] = "{\"messages\": [{\"role\": \"system\", \"content\": \"  Sys  \"}"
                             ", {\"role\": \"user\", \"content\": \"Hi <|im_start|> there\"}, "
                             "{\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\"
                             "n\\nans\"}], \"add_generation_prompt\": true, \"bos_token\": \"<"
                             "s>\", \"eos_token\": \"</s>\", \"tools\": null, \"documents\": n"
                             "ull, \"n\": 3, \"f\": 2.5, \"d\": {\"b\": 1, \"a\": [1, 2]}, \"l"
                             "\": [3, 1, 2], \"s\": \"Hello World\", \"e\": \"\", \"u\": \" x\343"
                             "\200\200 \", \"z\": null}";

static const struct {
    const char *tmpl, *want;
} k_semantics[] = {
    {"{{ n + 1 }}|{{ n - 5 }}|{{ n * 2.5 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{"
     "{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7.5 % 2"
     " }}",
     "4|-2|7.5|3.5|3|-4|2|1024|0.5|1.5"},
    {"{{ 1e16 }}|{{ 1.5e-5 }}|{{ 0.1 + 0.2 }}|{{ 100.0 }}|{{ 1/3 }}|{{"
     " 123456789.125 }}|{{ -0.0 }}|{{ 1e22 }}|{{ 12345678901234567.0 }"
     "}",
     "1e+16|1.5e-05|0.30000000000000004|100.0|0.3333333333333333|12345"
     "6789.125|-0.0|1e+22|1.2345678901234568e+16"},
    {"{{ true }}|{{ none }}|{{ [1, 'a', none, true, 1.5] }}|{{ {'a': 1"
     ", 'b': [2]} }}|{{ (1,) }}|{{ (1, 2) }}|{{ \"it's\" }}|{{ [\"it's"
     "\", 'q\"x'] }}",
     "True|None|[1, 'a', None, True, 1.5]|{'a': 1, 'b': [2]}|(1,)|(1, "
     "2)|it's|[\"it's\", 'q\"x']"},
    {"{{ s.upper() }}|{{ s.lower() }}|{{ s|upper }}|{{ 'hello wORLD-fo"
     "o(bar' | title }}|{{ \"they're bill's\" .title() }}|{{ 'hELLO' |"
     " capitalize }}",
     "HELLO WORLD|hello world|HELLO WORLD|Hello World-Foo(Bar|They'Re "
     "Bill'S|Hello"},
    {"{{ u | trim }}|{{ u.strip() }}|[{{ u.lstrip() }}]|[{{ u.rstrip()"
     " }}]|{{ 'xxhixx'.strip('x') }}|{{ '--a--'|trim('-') }}",
     "x|x|[x\343\200\200 ]|[ x]|hi|a"},
    {"{{ s.split() }}|{{ s.split('o') }}|{{ '  a  b c '.split(None, 1)"
     " }}|{{ 'a,b,,c'.split(',', 2) }}|{{ ''.split() }}|{{ ''.split(',"
     "') }}",
     "['Hello', 'World']|['Hell', ' W', 'rld']|['a', 'b c ']|['a', 'b'"
     ", ',c']|[]|['']"},
    {"{{ s.replace('o', '0') }}|{{ s.replace('o', '0', 1) }}|{{ 'ab'.r"
     "eplace('', '-') }}|{{ s | replace('World', 'There') }}",
     "Hell0 W0rld|Hell0 World|-a-b-|Hello There"},
    {"{{ s.startswith('Hell') }}|{{ s.endswith(('x', 'ld')) }}|{{ s.fi"
     "nd('W') }}|{{ s.find('z') }}|{{ '-'.join(['a','b']) }}",
     "True|True|6|-1|a-b"},
    {"{{ l | length }}|{{ s | length }}|{{ d | length }}|{{ undefined_"
     "x | length }}|{{ l | first }}|{{ l | last }}|{{ s|first }}|{{ l "
     "| join(', ') }}|{{ l|reverse|list }}|{{ s|reverse }}",
     "3|11|2|0|3|2|H|3, 1, 2|[2, 1, 3]|dlroW olleH"},
    {"{{ l[0] }}|{{ l[-1] }}|{{ l[1:] }}|{{ l[::-1] }}|{{ l[5] }}|{{ s"
     "[0] }}|{{ s[-3:] }}|{{ s[::2] }}|{{ s[1:8:3] }}|{{ l[:-1] }}|{{ "
     "l[-100:100] }}",
     "3|2|[1, 2]|[2, 1, 3]||H|rld|HloWrd|eoo|[3, 1]|[3, 1, 2]"},
    {"{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revin"
     "dex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ "
     "loop.length }}/{{ x }};{% endfor %}",
     "1/0/3/2/True/False/3/3;2/1/2/1/False/False/3/1;3/2/1/0/False/Tru"
     "e/3/2;"},
    {"{% for x in l if x > 1 %}{{ loop.index }}:{{ x }} {% else %}none"
     "{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}",
     "1:3 2:2 |empty"},
    {"{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x "
     "== 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "3"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k"
     " in d %}{{ k }}{% endfor %}|{% for c in 'abc' %}{{ c }}.{% endfo"
     "r %}",
     "b=1;a=[1, 2];|ba|a.b.c."},
    {"{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endf"
     "or %}|{{ x }}",
     "423|1"},
    {"{% set ns = namespace(total=0, found=false) %}{% for i in l %}{%"
     " set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}|{{ ns."
     "found }}",
     "6|False"},
    {"{% if n > 2 %}big{% elif n > 1 %}mid{% else %}small{% endif %}|{"
     "{ 'yes' if n else 'no' }}|{{ 'y' if z }}|{{ z or 'dflt' }}|{{ n "
     "and 'ok' }}",
     "big|yes||dflt|ok"},
    {"{{ z is none }}|{{ n is number }}|{{ n is integer }}|{{ f is flo"
     "at }}|{{ s is string }}|{{ d is mapping }}|{{ l is iterable }}|{"
     "{ undefined_y is defined }}|{{ n is odd }}|{{ n is even }}|{{ 6 "
     "is divisibleby 3 }}|{{ n is not none }}",
     "True|True|True|True|True|True|True|False|True|False|True|True"},
    {"{{ x_undefined }}|{{ x_undefined is defined }}|{{ not x_undefine"
     "d }}|{{ x_undefined | default('dd') }}|{{ e | default('empty', t"
     "rue) }}|{{ x_undefined ~ 'a' }}",
     "|False|True|dd|empty|a"},
    {"{{ messages | tojson }}", "[{\"role\": \"system\", \"content\": \"  Sys  \"}, {\"role\": \""
                                "user\", \"content\": \"Hi <|im_start|> there\"}, {\"role\": \"as"
                                "sistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nans\"}]"},
    {"{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ \""
     "\303\251\\n\\\"\" | tojson }}|{{ \"\303\251\" | tojson(ensure_as"
     "cii=true) }}|{{ [1.5, none, true] | tojson }}|{{ {} | tojson(ind"
     "ent=4) }}",
     "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ]\n}|{\"a\": [1, 2]"
     ", \"b\": 1}|\"\303\251\\n\\\"\"|\"\\u00e9\"|[1.5, null, true]|{}"},
    {"{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ [1] "
     "+ [2] }}|{{ 'a' + 'b' }}",
     "a1NoneTrue|ababab|[1, 1, 1]|[1, 2]|ab"},
    {"{{ 1 < 2 < 3 }}|{{ 3 > 2 > 5 }}|{{ 'a' in 'cat' }}|{{ 2 in l }}|"
     "{{ 'a' in d }}|{{ 'q' not in s }}|{{ [1,2] == [1,2] }}|{{ (1,2) "
     "== [1,2] }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' < 'b' }}",
     "True|False|True|True|True|True|True|False|True|True|True"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | map(attrib"
     "ute='content') | join('|') }}|{{ messages | rejectattr('role', '"
     "eq', 'user') | list | length }}|{{ messages|map(attribute='role'"
     ")|list }}",
     "Hi <|im_start|> there|2|['system', 'user', 'assistant']"},
    {"{{ [1, 0, 2, none] | select | list }}|{{ l | reject('odd') | lis"
     "t }}|{{ l | select('gt', 1) | list }}|{{ ['a','B'] | map('upper'"
     ") | list }}",
     "[1, 2]|[2]|[3, 2]|['A', 'B']"},
    {"{{ strftime_now('%Y-%m-%d %H:%M:%S %b %d') }}|{{ strftime_now(\""
     "%d %B %Y\") }}",
     "2024-07-26 13:20:00 Jul 26|26 July 2024"},
    {"{{ range(5) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0"
     ", -2) | list }}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}",
     "[0, 1, 2, 3, 4]|[1, 4, 7]|[5, 3, 1]|{'a': 1, 'b': 'x'}|1"},
    {"{{ '3' | int + 1 }}|{{ '2.5' | float }}|{{ 'x' | int }}|{{ 3.9 |"
     " int }}|{{ -3 | abs }}|{{ 5 | string ~ 'a' }}|{{ d | items | lis"
     "t }}",
     "4|2.5|0|3|3|5a|[('b', 1), ('a', [1, 2])]"},
    {"  {% if true %}\n  x\n  {% endif %}\ny   {%- if true -%}   z   {"
     "%- endif %}",
     "  x\nyz"},
    {"{% if true %}    a\n{% endif %}\n    {# comment #}\n  b {# c #} "
     " c\n{%+ if true %}kept{% endif %}\n{% if true +%}\nnl kept\n{%- "
     "endif %}",
     "    a\n  b   c\nkept\nnl kept"},
    {"{{- \"a\" -}}\n   {{ \"b\" }}   \n {%- for i in l -%}\n   {{ i }"
     "}\n {%- endfor %}\nend",
     "ab312end"},
    {"{% set a, b = [1, 2] %}{{ a }}{{ b }}|{% set t = (1, 2) %}{{ t }"
     "}|{% set x %}inner {{ n }}{% endset %}[{{ x }}]",
     "12|(1, 2)|[inner 3]"},
    {"{{ d.a }}|{{ d['a'] }}|{{ d.get('b') }}|{{ d.get('q', 'def') }}|"
     "{{ d.keys() | list }}|{{ d.values() | list }}|{{ messages[0].con"
     "tent }}|{{ messages[1]['role'] }}",
     "[1, 2]|[1, 2]|1|def|['b', 'a']|[1, [1, 2]]|  Sys  |user"},
    {"{{ none.x }}|{{ n.x }}|{{ l.x }}|{{ s.nope }}", "|||"},
    {"{% for m in messages %}{% if loop.previtem is defined %}{{ loop."
     "previtem.role }}>{% endif %}{{ m.role }}{% if loop.nextitem is d"
     "efined %}<{{ loop.nextitem.role }}{% endif %};{% endfor %}",
     "system<user;system>user<assistant;user>assistant;"},
    {"{% for m in messages %}{{ loop.cycle('odd', 'even') }}{% endfor "
     "%}",
     "oddevenodd"},
    {"{{ \"a\\tb\\\\n\\x41\\u00e9\\101\" }}|{{ 'single' \"double\" }}|"
     "{{ 'it\\'s' }}",
     "a\tb\\nA\303\251A|singledouble|it's"},
    {"{{ 1_000 + 0.5e1 }}|{{ 1_0.0_1 }}", "1005.0|10.01"},
    {"{{ messages[0]['content'] | trim | length }}|{{ messages | lengt"
     "h - 1 }}|{{ -n | abs }}|{{ not n is none }}",
     "3|2|3|True"},
    {"{% for m in messages[::-1] %}{{ m.role }}{% endfor %}|{% for m i"
     "n messages[1:] %}{{ loop.index0 }}{{ m.role }}{% endfor %}",
     "assistantusersystem|0user1assistant"},
    {"{%- set content = messages[2].content %}{{ content.split('</thin"
     "k>')[-1].lstrip('\\n') }}|{{ content.split('</think>')[0].rstrip"
     "('\\n').split('<think>')[-1].lstrip('\\n') }}",
     "ans|r"},
    {"{{ ''.join(['a', 'b']) }}|{{ ['x', 1] | join('-') }}|{{ messages"
     " | join(attribute='role') }}",
     "ab|x-1|systemuserassistant"},
    {"{{ s is lower }}|{{ 'abc' is lower }}|{{ 'ABC' is upper }}|{{ '1"
     "23' is lower }}\n",
     "False|True|True|False"},
    {"{{ s.title() }}|{{ '\307\206a' | upper }}|{{ '\307\205x' | lower"
     " }}",
     "Hello World|\307\204A|\307\206x"},
    {"{{ s[3] }}{{ s[-1] }}{{ s[100] }}|{{ s[2:5] }}|{{ s[5:2] }}|{{ s"
     "[-3:] }}|{{ u[1:3] }}|{{ u[-2] }}|{{ '\303\251\342\202\254\360\237"
     "\230\200x'[1:3] }}|{{ '\303\251\342\202\254\360\237\230\200x'[-2"
     "] }}|{{ '\303\251\342\202\254\360\237\230\200x'[::-2] }}",
     "ld|llo||rld|x\343\200\200|\343\200\200|\342\202\254\360\237\230\200"
     "|\360\237\230\200|x\342\202\254"},
    {"{{ messages[1].content[0:2] }}{{ messages[1]['content'][-5:] }}|"
     "{{ messages[1].content[3] }}",
     "Hithere|<"},
    {"{% for a in range(3) %}{% for b in range(2) %}{{ loop.index }}{{"
     " a }}{% endfor %}{{ loop.index }};{% endfor %}",
     "10201;11212;12223;"},
    {"{% set ns = namespace(x=[]) %}{% for m in messages %}{% set ns.x"
     " = ns.x + [m.role] %}{% endfor %}{{ ns.x }}",
     "['system', 'user', 'assistant']"},
    {"{{ messages[0] }}", "{'role': 'system', 'content': '  Sys  '}"},
    {"{{ {'a': none, 'b': [1, {'c': 'd'}], 1: 2} }}|{{ {'a': 1}.items("
     ") | list }}",
     "{'a': None, 'b': [1, {'c': 'd'}], 1: 2}|[('a', 1)]"},
    {"{{ \"x\" if none }}|{{ none if 1 }}|{{ (1 if 0) is defined }}", "|None|False"},
    {"{% for x in [1,2,3] if x != 2 %}{{ loop.index }}/{{ loop.length "
     "}}/{{ loop.last }} {% endfor %}",
     "1/2/False 2/2/True "},
    {"{{ \"%\" }}|{{ '{{' }}|{{ '}}' }}|{{ {'k': '}}'} }}", "%|{{|}}|{'k': '}}'}"},
    {"{%- for m in messages -%}\n  {{ m.role }}\n{%- endfor -%}", "systemuserassistant"},
    {"{% if true %}\n  yes\n{% else %}\n  no\n{% endif %}\ntail", "  yes\ntail"},
    {"  {%- set x = 1 %}\n  {{ x }}\n  {#- comment -#}\n  {{ x + 1 }}", "  12"},
    {"a{#\nmulti\nline #}b{# x -#}   c", "abc"},
    {"{{ 3 // 0.5 }}|{{ -3 % 5 }}|{{ 3 % -5 }}|{{ -3.5 % 2 }}|{{ 2 ** "
     "0.5 }}|{{ 10 / 4 * 2 }}|{{ 1 + 2 * 3 ** 2 }}|{{ (1 + 2) * 3 }}|{"
     "{ -2 ** 2 }}",
     "6.0|2|-2|0.5|1.4142135623730951|5.0|19|9|4"},
    {"{{ 'abc' ~ 1.0 ~ [1] }}|{{ 1 ~ 2 }}|{{ true ~ none }}", "abc1.0[1]|12|TrueNone"},
    {"{{ l | join }}|{{ d | join(',') }}|{{ 'abc' | join('-') }}|{{ l "
     "| first }}{{ d | first }}|{{ [] | first }}|{{ '' | last }}",
     "312|b,a|a-b-c|3b||"},
    {"{{ messages | selectattr('role', 'in', ['user', 'system']) | map"
     "(attribute='content') | map('trim') | join('/') }}",
     "Sys/Hi <|im_start|> there"},
    {"{{ 1 in [1, 2] and 'x' not in 'abc' or false }}|{{ not 1 == 2 }}"
     "|{{ not (1 == 2) }}|{{ 1 is not string }}",
     "True|True|True|True"},
    {"{% set x = {'a': 1} %}{{ x.a }}{% set y = [1, 2, 3][1:] %}{{ y }"
     "}",
     "1[2, 3]"},
    {"{{ 0.1 * 3 }}|{{ 1e-7 }}|{{ 123e300 * 10 }}|{{ 1.0e15 }}|{{ 1.5e"
     "16 }}|{{ 2.5 | int }}|{{ '0x1A' | int(base=16) }}|{{ ' 42 ' | in"
     "t }}\n",
     "0.30000000000000004|1e-07|1.2300000000000001e+303|10000000000000"
     "00.0|1.5e+16|2|26|42"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% end"
     "macro %}{{ greet('a') }}|{{ greet('b', '?') }}|{{ greet(punct='."
     "', name='c') }}|{{ greet() }}|",
     "Hi a!|Hi b?|Hi c.|Hi !|"},
    {"{% macro render(m) -%}\n<{{ m.role }}>{{ m.content | trim }}\n{%"
     "- endmacro %}\n{% for m in messages %}{{ render(m) }}{% endfor %"
     "}",
     "<system>Sys<user>Hi <|im_start|> there<assistant><think>\nr\n</t"
     "hink>\n\nans"},
    {"{% set x = 'top' %}{% macro f() %}{{ x }}{% endmacro %}{{ f() }}"
     "{% set x = 'later' %}{{ f() }}",
     "toplater"},
    {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n -"
     " 1) }}{% endif %}{% endmacro %}{{ fact(4) }}",
     "4*3*2*1"},
    {"{% macro t(a, b=a ~ '2') %}{{ a }}{{ b }}{% endmacro %}{{ t('x')"
     " }}|{{ t('x', 'y') }}",
     "xx2|xy"},
    {"{%- macro json_to_python_type(json_spec) %}\n{%- set basic_type_"
     "map = {\"string\": \"str\", \"number\": \"float\", \"integer\": "
     "\"int\", \"boolean\": \"bool\"} %}\n{%- if basic_type_map[json_s"
     "pec.type] is defined %}\n    {{- basic_type_map[json_spec.type] "
     "}}\n{%- elif json_spec.type == \"array\" %}\n    {{- \"list[\" +"
     "  json_to_python_type(json_spec|items) + \"]\"}}\n{%- else %}\n "
     "   {{- \"Any\" }}\n{%- endif %}\n{%- endmacro %}\n{{ json_to_pyt"
     "hon_type({\"type\": \"string\"}) }}|{{ json_to_python_type({\"ty"
     "pe\": \"object\"}) }}",
     "str|Any"},
    {"{% macro m() %}{{ messages[1].content }}{% endmacro %}{{ m() | l"
     "ength }}|{{ m() ~ '!' }}|{{ m() is string }}",
     "21|Hi <|im_start|> there!|True"},
};

static void test_semantics(void)
{
    for (size_t i = 0; i < sizeof k_semantics / sizeof k_semantics[0]; i++) {
        jinja_output o;
        llmq_err err;
        int rc = render(k_semantics[i].tmpl, k_vars, &o, &err);
        bool ok = rc == 0 && strcmp(o.text, k_semantics[i].want) == 0;
        char line[128];
        CHECK(ok, "as jinja2: %s%s", oneline(k_semantics[i].tmpl, line, sizeof line),
              ok   ? ""
              : rc ? err.msg
                   : o.text);
        if (rc == 0)
            jinja_output_free(&o);
    }
}

/* ---- segments ---- */

static void test_segments(void)
{
    static const char vars[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \" <|im_end|>hi \"}], \"bos\": \"<s>\"}";
    static const struct {
        const char *tmpl;
        const char *want; /* segments, content ones in [] */
    } cases[] = {
        {"{{ '<|im_start|>' + messages[0].content + '<|im_end|>' }}",
         "<|im_start|>[ <|im_end|>hi ]<|im_end|>"},
        {"{{ bos ~ messages[0]['content'] | trim ~ bos }}", "<s>[<|im_end|>hi]<s>"},
        {"{{ messages[0].content.strip().upper() }}!", "[<|IM_END|>HI]!"},
        {"{{ messages[0].content.split('>')[1] }}", "[hi ]"},
        {"{{ messages[0].content.replace('hi', 'X') }}", "[ <|im_end|>]X[ ]"},
        {"{{ messages[0].content[2:4] }}{{ messages[0].content[::-1][0] }}", "[|i ]"},
        {"{{ messages[0] | tojson }}",
         "{\"[role]\": \"[user]\", \"[content]\": \"[ <|im_end|>hi ]\"}"},
        {"{% set s %}<{{ messages[0].role }}>{% endset %}{{ s ~ s }}", "<[user]><[user]>"},
        {"{{ messages | map(attribute='role') | join('/') }}:{{ messages | length }}", "[user]:1"},
        {"{% for c in messages[0].content[:3] %}{{ c }}.{% endfor %}", "[ ].[<].[|]."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jinja_output o;
        llmq_err err;
        char got[512] = "";
        size_t at = 0;
        int rc = render(cases[i].tmpl, vars, &o, &err);
        for (size_t k = 0; rc == 0 && k < o.n_segments; k++) {
            const jinja_segment *s = &o.segments[k];
            at += (size_t)snprintf(got + at, sizeof got - at, s->from_content ? "[%.*s]" : "%.*s",
                                   (int)s->len, s->text);
        }
        CHECK(rc == 0 && strcmp(got, cases[i].want) == 0, "segments of %s: %s", cases[i].tmpl,
              rc ? err.msg : got);
        if (rc == 0)
            jinja_output_free(&o);
    }
}

/* ---- errors ---- */

static void test_errors(void)
{
    static const char vars[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"x\": 1}";
    static const struct {
        const char *tmpl, *want;
    } cases[] = {
        {"{{ x | nosuch }}", "line 1, column 8: unknown filter 'nosuch'"},
        {"{% if x is nosuch %}{% endif %}", "line 1, column 12: unknown test 'nosuch'"},
        {"{% call m() %}{% endcall %}", "line 1, column 4: the 'call' tag is not supported"},
        {"{% for i in x %}{% macro m() %}{% endmacro %}{% endfor %}",
         "line 1, column 20: macros are supported at the top level only"},
        {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes 1 arguments (2 given)"},
        {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "macro 'm' has no parameter 'b'"},
        {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "macro calls nested deeper than 100"},
        {"{% raw %}{% endraw %}", "line 1, column 4: the 'raw' tag is not supported"},
        {"{% frobnicate %}", "line 1, column 4: unknown tag 'frobnicate'"},
        {"{% for i in x %}{% endfor %}{{ f(*a) }}", "line 1, column 34: *args and **kwargs"},
        {"{{ x[1, 2] }}", "line 1, column 7: subscripts with commas are not supported"},
        {"{{ '%s' % x }}", "line 1, column 9: string formatting with % is not supported"},
        {"a\n  {{ x", "line 2, column 3: '{{' is never closed"},
        {"a\n{% if x", "line 2, column 1: '{%' is never closed"},
        {"{# note", "line 1, column 1: '{#' is never closed"},
        {"{{ 'abc }}", "line 1, column 4: unterminated string"},
        {"x\n{% if x %}a", "line 2, column 4: this block is never closed (no 'endif')"},
        {"{% for i in x %}a", "line 1, column 4: this block is never closed (no 'endfor')"},
        {"{% for i in x %}{% if 1 %}{% endfor %}", "line 1, column 30: unexpected 'endfor'"},
        {"{% endif %}", "line 1, column 4: unexpected 'endif'"},
        {"{% break %}", "line 1, column 4: 'break' outside a for loop"},
        {"{{ 1 + }}", "line 1, column 8: unexpected end of print statement"},
        {"{{ x }} {{ @ }}", "line 1, column 12: unexpected character '@'"},
        {"\xff", "line 1, column 1: template is not valid UTF-8"},
        {"{{ 99999999999999999999 }}", "line 1, column 4: integer literal does not fit"},
        {"{{ raise_exception('Roles must alternate') }}",
         "line 1, column 4: raise_exception: Roles must alternate"},
        {"{{ 1 + 'a' }}", "line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'"},
        {"{{ y.z }}", "line 1, column 5: 'y' is undefined"},
        {"{{ messages[0].content.nosuch() }}", "'str object' has no attribute 'nosuch'"},
        {"{{ x / 0 }}", "float division by zero"},
        {"{{ 9223372036854775807 + x }}", "integer overflow"},
        {"{% for i in x %}{% endfor %}", "line 1, column 4: 'int' object is not iterable"},
        {"{{ y | tojson }}", "tojson: Object of type Undefined is not JSON serializable"},
        {"{% set x.a = 1 %}", "cannot assign attribute on a int ('x' is not a namespace)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jinja_output o;
        llmq_err err = {0};
        int rc = render(cases[i].tmpl, vars, &o, &err);
        char line[128];
        CHECK(rc < 0 && strstr(err.msg, cases[i].want), "refused: %s -> %s",
              oneline(cases[i].tmpl, line, sizeof line), rc ? err.msg : "rendered");
        if (rc == 0)
            jinja_output_free(&o);
    }

    /* a real template's own refusal, through chat_render */
    chat_template *t = NULL;
    llmq_err err = {0};
    chat_message m[] = {{"user", 4, "a", 1}, {"user", 4, "b", 1}};
    chat_vars vars2 = {true, "<s>", "</s>", 0};
    chat_prompt p;
    int rc = chat_template_open(&t, "mistral-v0.3", NULL, &err);
    if (rc == 0)
        rc = chat_render(t, m, 2, &vars2, &p, &err);
    CHECK(rc < 0 && strstr(err.msg, "chat template mistral-v0.3: line 11, column 13: "
                                    "raise_exception: After the optional system message, "
                                    "conversation roles must alternate"),
          "mistral-v0.3 refuses two user turns in a row, with its message (%s)", err.msg);
    chat_message bad = {"user", 4, "\xc3(", 2};
    rc = rc < 0 && t ? chat_render(t, &bad, 1, &vars2, &p, &err) : 0;
    CHECK(rc < 0 && strstr(err.msg, "messages[0].content: invalid UTF-8 at byte 0"),
          "a message that is not UTF-8 is refused, named (%s)", err.msg);
    chat_template_free(t);
}

/* ---- bounded work ---- */

static void expect_refused(const char *what, const char *tmpl, jinja_limits limits,
                           const char *want)
{
    jinja_output o;
    llmq_err err = {0};
    int rc = render_with(tmpl, "{}", limits, &o, &err);
    CHECK(rc < 0 && strstr(err.msg, want), "%s is refused (%s)", what, rc ? err.msg : "ran");
    if (rc == 0)
        jinja_output_free(&o);
}

static void test_bounds(void)
{
    const jinja_limits dflt = JINJA_DEFAULT_LIMITS;
    /* 1000^3 iterations of 64 bytes: 64 GB if it ran */
    expect_refused("a for nest writing gigabytes",
                   "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
                   "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                   "{% endfor %}{% endfor %}{% endfor %}",
                   dflt, "text longer than the output limit of 16777216 bytes");
    expect_refused("a for nest writing nothing for 10^10 iterations",
                   "{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}"
                   "{% endfor %}",
                   dflt, "the render takes more than 10000000 steps");
    expect_refused("a string doubled 64 times",
                   "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                   "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                   dflt, "the render needs more than 256 MiB of memory");
    expect_refused("a huge repetition", "{{ 'ab' * 1000000000000 }}", dflt, "output limit");
    expect_refused("a huge range", "{{ range(1000000000000) | length }}", dflt,
                   "range() of 1000000000000 items passes the step limit");
    expect_refused("a list nested 1000 deep",
                   "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                   "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
                   dflt, "values nested deeper than 128");
    jinja_limits small = {1000, 1u << 20, 100000};
    expect_refused("output past a small limit", "{% for i in range(200) %}0123456789{% endfor %}",
                   (jinja_limits){1000, 64u << 20, 100000}, "output limit of 1000 bytes");
    expect_refused("memory past a small limit",
                   "{% for i in range(100) %}{% set x = [i] * 10000 %}{% endfor %}", small,
                   "needs more than 1 MiB of memory");

    /* nesting is bounded while parsing, before anything runs */
    char deep[20000];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 5000; i++)
        deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 5000; i++)
        deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_refused("5000 nested parentheses", deep, dflt, "nesting deeper than 100");
    n = 0;
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "{%% if 1 %%}");
    expect_refused("1000 nested ifs", deep, dflt, "nesting deeper than 100");
    /* chains are as deep as they are long */
    static const char *const links[] = {" + 1", " | trim", ".a", " or x"};
    for (size_t k = 0; k < sizeof links / sizeof links[0]; k++) {
        n = (size_t)snprintf(deep, sizeof deep, "{{ 1");
        for (int i = 0; i < 1000; i++)
            n += (size_t)snprintf(deep + n, sizeof deep - n, "%s", links[k]);
        snprintf(deep + n, sizeof deep - n, " }}");
        char what[64];
        snprintf(what, sizeof what, "a chain of 1000 '%s'", links[k] + 1);
        expect_refused(what, deep, dflt, "nesting deeper than 100");
    }
}

/* ---- choosing the template ---- */

static void test_open(void)
{
    chat_template *t = NULL;
    llmq_err err = {0};
    char path[1024], dir[512];
    const char *tmpdir = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/llmq-test-chat-XXXXXX", tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp %s", dir);
        return;
    }

    gguf_file *f = NULL;
    check_data_path(path, sizeof path, "models/stories260K.gguf");
    int rc = gguf_open(&f, path, &err) < 0 ? -2 : chat_template_open(&t, NULL, f, &err);
    CHECK(rc == -1 && strstr(err.msg, "has no tokenizer.chat_template: pass --chat-template") &&
              strstr(err.msg, "chatml, llama2"),
          "a model without a template is refused, naming the key and the way out (%s)", err.msg);
    gguf_close(f);

    /* a model that carries one: its template is the default */
    static const char tmpl[] = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    snprintf(path, sizeof path, "%s/with-template.gguf", dir);
    gw_writer *w = NULL;
    rc = gw_new(&w, path, &err);
    if (rc == 0)
        rc = gw_kv_str(w, CHAT_TEMPLATE_KEY, tmpl, sizeof tmpl - 1, &err);
    if (rc == 0)
        rc = gw_begin(w, &err);
    if (rc == 0)
        rc = gw_commit(w, &err);
    gw_free(w);
    chat_message m = {"user", 4, "hi", 2};
    chat_vars vars = {false, NULL, NULL, 0};
    chat_prompt p = {0};
    f = NULL;
    if (rc == 0)
        rc = gguf_open(&f, path, &err);
    if (rc == 0)
        rc = chat_template_open(&t, NULL, f, &err);
    if (rc == 0)
        rc = chat_render(t, &m, 1, &vars, &p, &err);
    CHECK(rc == 0 && strcmp(p.text, "<user>hi") == 0 &&
              strcmp(chat_template_name(t), CHAT_TEMPLATE_KEY) == 0,
          "the model's tokenizer.chat_template is the default (%s)", rc ? err.msg : p.text);
    chat_prompt_free(&p);
    chat_template_free(t);

    /* --chat-template NAME overrides it; FILE reads a file */
    rc = chat_template_open(&t, "qwen2.5", f, &err);
    CHECK(rc == 0 && strcmp(chat_template_name(t), "qwen2.5") == 0,
          "--chat-template qwen2.5 is the built-in copy");
    chat_template_free(t);
    snprintf(path, sizeof path, "%s/mine.jinja", dir);
    FILE *out = fopen(path, "w");
    fputs("[{{ messages[0].content }}]\n", out);
    fclose(out);
    rc = chat_template_open(&t, path, f, &err);
    if (rc == 0)
        rc = chat_render(t, &m, 1, &vars, &p, &err);
    CHECK(rc == 0 && strcmp(p.text, "[hi]") == 0,
          "--chat-template FILE reads the file (its final newline dropped, as jinja2 does)");
    chat_prompt_free(&p);
    chat_template_free(t);
    unlink(path);

    rc = chat_template_open(&t, "nosuch", f, &err);
    CHECK(rc < 0 && strstr(err.msg, "--chat-template nosuch: not a built-in name (chatml"),
          "an unknown name that is no file is refused, listing the names (%s)", err.msg);
    out = fopen(path, "w");
    fputs("ok\n{% include 'x' %}", out);
    fclose(out);
    rc = chat_template_open(&t, path, f, &err);
    CHECK(rc < 0 && strstr(err.msg, "mine.jinja: line 2, column 4: the 'include' tag is not"),
          "a file outside the subset is refused, with the file and the place (%s)", err.msg);
    unlink(path);
    snprintf(path, sizeof path, "%s/with-template.gguf", dir);
    unlink(path);
    rmdir(dir);
    gguf_close(f);

    /* strftime_now reads the caller's clock */
    chat_vars at = {false, NULL, NULL, 1722000000};
    rc = chat_template_parse(&t, "date", "{{ strftime_now('%d %b %Y') }}", 30, &err);
    if (rc == 0)
        rc = chat_render(t, &m, 1, &at, &p, &err);
    CHECK(rc == 0 && strcmp(p.text, "26 Jul 2024") == 0, "strftime_now formats the given clock");
    chat_prompt_free(&p);
    chat_template_free(t);
}

/* ---- rendered prompts tokenized with the family's vocabulary ---- */

typedef struct family_vocab {
    const char *prefix; /* of the reference's template_name */
    const char *rel;    /* its vocabulary under tests/data */
    gguf_file *f;
    tok_vocab *v;
} family_vocab;

static family_vocab k_vocabs[] = {
    {"Meta-Llama-3", "vocab/ggml-vocab-llama-bpe.gguf", NULL, NULL},
    {"Llama-3.1", "vocab/ggml-vocab-llama-bpe.gguf", NULL, NULL},
    {"Qwen", "vocab/ggml-vocab-qwen2.gguf", NULL, NULL},
    {"Phi-3", "vocab/ggml-vocab-phi-3.gguf", NULL, NULL},
    {"Llama-2", "vocab/ggml-vocab-llama-spm.gguf", NULL, NULL},
    {"Mistral", "vocab/ggml-vocab-llama-spm.gguf", NULL, NULL},
};
#define N_VOCABS (sizeof k_vocabs / sizeof k_vocabs[0])

static bool open_vocab(family_vocab *fv)
{
    char path[1024];
    llmq_err err = {0};
    check_data_path(path, sizeof path, fv->rel);
    if (gguf_open(&fv->f, path, &err) < 0 || tok_load(&fv->v, fv->f, &err) < 0) {
        CHECK(0, "%s loads (%s)", fv->rel, err.msg);
        return false;
    }
    return true;
}

static size_t controls_in(const tok_vocab *v, const int32_t *ids, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += tok_is_control(v, ids[i]);
    return k;
}

/* The control tokens of text[0..len) with special parsing; -1 on error. */
static long controls_of_text(const tok_vocab *v, const char *text, size_t len, int32_t **ids,
                             size_t *n)
{
    llmq_err err = {0};
    if (tok_encode(v, text, len, false, true, ids, n, &err) < 0)
        return -1;
    return (long)controls_in(v, *ids, *n);
}

/* The control tokens the template's own segments hold. */
static long template_controls(const tok_vocab *v, const chat_prompt *p)
{
    long k = 0;
    for (size_t i = 0; i < p->n_segments && k >= 0; i++) {
        int32_t *ids = NULL;
        size_t n;
        if (!p->segments[i].from_content) {
            long c = controls_of_text(v, p->segments[i].text, p->segments[i].len, &ids, &n);
            k = c < 0 ? -1 : k + c;
        }
        free(ids);
    }
    return k;
}

/* Every control token of the prompt's ids comes from template text; the
 * look-alikes of template-like-text would have been control tokens in the
 * unsegmented text; any other conversation gives the whole text's ids. */
static void check_tokenized(const ref_case *c, const chat_prompt *p, void *ctx)
{
    size_t *checked = ctx;
    const family_vocab *fv = NULL;
    for (size_t i = 0; i < N_VOCABS && !fv; i++)
        if (strncmp(c->name, k_vocabs[i].prefix, strlen(k_vocabs[i].prefix)) == 0)
            fv = &k_vocabs[i];
    if (!fv || !fv->v)
        return;
    int32_t *ids = NULL, *whole = NULL;
    size_t n = 0, n_whole = 0;
    llmq_err err = {0};
    if (chat_tokenize(p, fv->v, &ids, &n, &err) < 0) {
        CHECK(0, "%s / %s tokenizes (%s)", c->name, c->conversation, err.msg);
        return;
    }
    long from_template = template_controls(fv->v, p);
    long unsegmented = controls_of_text(fv->v, p->text, p->len, &whole, &n_whole);
    bool ok = from_template >= 0 && (long)controls_in(fv->v, ids, n) == from_template;
    if (strcmp(c->conversation, "template-like-text") == 0) {
        CHECK(ok && unsegmented > from_template,
              "%s / template-like-text with %s: %ld control tokens, all the template's (the"
              " unsegmented text has %ld)",
              c->name, fv->rel, from_template, unsegmented);
    } else {
        ok = ok && n == n_whole && memcmp(ids, whole, n * sizeof *ids) == 0;
        *checked += ok;
        if (!ok)
            CHECK(0, "%s / %s with %s: the ids of the whole text", c->name, c->conversation,
                  fv->rel);
    }
    free(ids);
    free(whole);
}

/* A model's own template rendered for a job (chat_render_for): the
 * vocabulary's BOS once, where the template writes it, and the prompt
 * ending where the assistant's turn begins. */
static void check_model_template(const char *rel, int32_t bos, const char *ends_with)
{
    family_vocab fv = {"", rel, NULL, NULL};
    chat_template *t = NULL;
    chat_prompt p = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    llmq_err err = {0};
    chat_message m[2] = {{"system", 6, "Be brief.", 9}, {"user", 4, "Hi!", 3}};
    int rc = open_vocab(&fv) ? chat_template_open(&t, NULL, fv.f, &err) : -2;
    if (rc == 0)
        rc = chat_render_for(t, fv.v, m, 2, &p, &err);
    if (rc == 0)
        rc = chat_tokenize(&p, fv.v, &ids, &n, &err);
    size_t tail = strlen(ends_with);
    bool ends = rc == 0 && p.len >= tail && memcmp(p.text + p.len - tail, ends_with, tail) == 0;
    size_t n_bos = 0;
    for (size_t i = 0; i < n; i++)
        n_bos += ids[i] == bos;
    CHECK(ends && (bos == TOK_NONE ? n_bos == 0 : n_bos == 1 && ids[0] == bos),
          "%s: its own template, rendered for a job: %s, ends with the assistant's header (%s)",
          rel, bos == TOK_NONE ? "no BOS" : "one BOS, first", rc ? err.msg : "ok");
    free(ids);
    chat_prompt_free(&p);
    chat_template_free(t);
    tok_free(fv.v);
    gguf_close(fv.f);
}

static void test_tokenize(void)
{
    for (size_t i = 0; i < N_VOCABS; i++)
        open_vocab(&k_vocabs[i]);
    size_t checked = 0;
    each_case(check_tokenized, &checked);
    CHECK(checked == 49, "the 49 other reference renders tokenize as their whole text (%zu)",
          checked);
    for (size_t i = 0; i < N_VOCABS; i++) {
        tok_free(k_vocabs[i].v);
        gguf_close(k_vocabs[i].f);
    }
    check_model_template("vocab/ggml-vocab-llama-bpe.gguf", 128000,
                         "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_model_template("vocab/ggml-vocab-qwen2.gguf", TOK_NONE, "<|im_start|>assistant\n");
}

int main(void)
{
    test_reference_renders();
    test_reference_segments();
    test_builtins();
    test_semantics();
    test_segments();
    test_errors();
    test_bounds();
    test_open();
    test_tokenize();
    return check_done();
}
