/* The JSON-schema compiler (engine/jsonschema.c), through the grammars it
 * builds: which byte strings each schema's grammar takes as complete
 * documents, which it refuses, and the message of every schema it refuses.
 *
 * Pins:
 *  - each supported keyword constrains as JSON Schema says (types and type
 *    lists, properties in order, required and optional members, enum and
 *    const filtered by type, anyOf, items, the four length bounds, $defs
 *    and $ref with recursion, json_object mode, the empty schema);
 *  - the generated form: whitespace only as one space after ':' and ',',
 *    bounded number digits, strings UTF-8 checked byte by byte, no
 *    surrogate escapes, control characters only escaped;
 *  - recursion is bounded by the grammar's stack (GRAMMAR_MAX_DEPTH);
 *  - unsupported keywords, bad values and grammars the matcher cannot run
 *    are refused with a message naming the keyword and its JSON pointer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/jsonschema.h"

enum { REFUSED, PREFIX, COMPLETE };

/* REFUSED, PREFIX (taken but not complete) or COMPLETE. */
static int match(const grammar *g, const char *s, size_t len)
{
    grammar_stack st;
    grammar_start(g, &st);
    if (!grammar_advance(g, &st, s, len))
        return REFUSED;
    return grammar_complete(g, &st) ? COMPLETE : PREFIX;
}

static grammar *compile(const char *schema)
{
    grammar *g;
    llmq_err err;
    if (jsonschema_compile(&g, schema, strlen(schema), &err) != 0) {
        printf("# %s: %s\n", schema, err.msg);
        return NULL;
    }
    return g;
}

typedef struct schema_case {
    const char *schema;
    const char *complete[8]; /* documents the grammar takes whole */
    const char *refused[8];  /* strings it refuses (or takes only as a prefix) */
} schema_case;

static const schema_case k_cases[] = {
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": "
     "\"string\"}}, \"required\": [\"a\", \"b\"], \"additionalProperties\": false}",
     {"{\"a\":1,\"b\":\"x\"}", "{\"a\": -12, \"b\": \"\"}", "{\"a\":0, \"b\":\"y\"}"},
     {"{\"b\":\"x\",\"a\":1}", "{\"a\":1}", "{\"a\":1,\"b\":\"x\",\"c\":2}",
      "{\"a\":01,\"b\":\"\"}", "{ \"a\":1,\"b\":\"\"}", "{\"a\" :1,\"b\":\"\"}",
      "{\"a\":1,\"b\":\"\"} ", "{\"a\":1,  \"b\":\"\"}"}},
    /* Optional members: any subset, in the schema's order, commas between. */
    {"{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"boolean\"}, \"y\": {\"type\": "
     "\"null\"}, \"z\": {\"type\": \"boolean\"}}, \"required\": [\"y\"]}",
     {"{\"y\":null}", "{\"x\":true,\"y\":null}", "{\"y\":null,\"z\":false}",
      "{\"x\":false, \"y\":null, \"z\":true}"},
     {"{}", "{\"x\":true}", "{\"y\":null,\"x\":true}", "{,\"y\":null}", "{\"y\":null,}",
      "{\"y\":null,\"y\":null}"}},
    {"{\"type\": \"object\", \"properties\": {\"p\": {\"type\": \"integer\"}, \"q\": {\"type\": "
     "\"integer\"}}}",
     {"{}", "{\"p\":1}", "{\"q\":2}", "{\"p\":1,\"q\":2}"},
     {"{\"q\":2,\"p\":1}", "{,}", "{\"p\":1,}"}},
    {"{\"type\": [\"string\", \"null\"]}", {"\"a\"", "null"}, {"1", "nul", "\"a"}},
    {"{\"enum\": [\"red\", 3, null, [1, \"x\"], {\"k\": false}]}",
     {"\"red\"", "3", "null", "[1,\"x\"]", "{\"k\":false}"},
     {"\"blue\"", "[1, \"x\"]", "4", "\"red"}},
    {"{\"type\": \"string\", \"enum\": [\"a\", 1, \"b\\\"c\"]}", {"\"a\"", "\"b\\\"c\""}, {"1"}},
    {"{\"type\": \"integer\", \"enum\": [1, 2.5, 3.0]}", {"1", "3"}, {"2.5"}},
    {"{\"const\": \"x\\ny\"}", {"\"x\\u000ay\""}, {"\"x\\ny\"", "\"xy\""}},
    {"{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"array\", \"items\": {\"type\": "
     "\"boolean\"}}]}",
     {"7", "[]", "[true]", "[true, false,true]"},
     {"[1]", "[true,]", "[,true]", "true"}},
    {"{\"type\": \"array\", \"items\": {\"enum\": [\"a\"]}, \"minItems\": 1, \"maxItems\": 2}",
     {"[\"a\"]", "[\"a\",\"a\"]"},
     {"[]", "[\"a\",\"a\",\"a\"]"}},
    {"{\"type\": \"array\", \"minItems\": 2}", {"[1,{\"a\":[]}]", "[null,\"x\",3]"}, {"[1]", "[]"}},
    {"{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
     /* Characters as JSON Schema counts them: a code point or an escape. */
     {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xe2\x82\xac\"", "\"\\n\\u00e9\"", "\"\xf0\x9f\x98\x80x\""},
     {"\"a\"", "\"abcd\"", "\"\xc3\xa9\""}},
    {"{\"type\": \"number\"}",
     {"0", "-0", "1.5", "-2.25e10", "3E-07", "1234567890123456", "1.1234567890123456", "1e+99"},
     {"01", ".5", "1.", "+1", "12345678901234567", "1.12345678901234567", "1e100", "1e"}},
    {"{\"type\": \"integer\"}", {"0", "-7", "42"}, {"1.0", "1e3", "-", "007"}},
    /* Strings: UTF-8 checked byte by byte, escapes, no raw control bytes. */
    {"{\"type\": \"string\"}",
     {"\"\"", "\"caf\xc3\xa9\"", "\"\xe2\x82\xac\"", "\"\xf4\x8f\xbf\xbf\"",
      "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\uFFFF\"", "\"\x7f\""},
     {"\"\xc0\x80\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xe0\x80\xaf\"", "\"\n\"",
      "\"\\ud800\"", "\"\\x\"", "\"\xff\""}},
    {"{\"type\": \"object\", \"additionalProperties\": false}", {"{}"}, {"{\"a\":1}"}},
    {"{\"type\": \"object\"}",
     {"{}", "{\"a\":1}", "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}"},
     {"[]", "{\"a\"}", "{\"a\":}", "1"}},
    {"{}", {"1", "\"s\"", "[]", "{\"x\":[true]}", "null"}, {"nul", "[1,]"}},
    {"true", {"false", "{}"}, {"tru"}},
    /* Recursion through $defs: a linked list of any length. */
    {"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": "
     "\"integer\"}, "
     "\"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}}, \"required\": "
     "[\"v\", \"next\"]}}, \"$ref\": \"#/$defs/node\"}",
     {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3,\"next\":null}}}"},
     {"{\"v\":1,\"next\":{\"v\":2}}", "{\"v\":1,\"next\":3}"}},
    {"{\"type\": \"object\", \"properties\": {\"kids\": {\"type\": \"array\", \"items\": "
     "{\"$ref\": "
     "\"#\"}}}, \"required\": [\"kids\"]}",
     {"{\"kids\":[]}", "{\"kids\":[{\"kids\":[]},{\"kids\":[{\"kids\":[]}]}]}"},
     {"{\"kids\":[{}]}"}},
    {"{\"definitions\": {\"a/b\": {\"const\": 1}}, \"$ref\": \"#/definitions/a~1b\"}",
     {"1"},
     {"2"}},
};

static void test_cases(void)
{
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++) {
        const schema_case *c = &k_cases[i];
        grammar *g = compile(c->schema);
        CHECK(g != NULL, "schema %zu compiles: %s", i, c->schema);
        if (!g)
            continue;
        for (int k = 0; k < 8 && c->complete[k]; k++)
            CHECK(match(g, c->complete[k], strlen(c->complete[k])) == COMPLETE,
                  "schema %zu takes %s", i, c->complete[k]);
        for (int k = 0; k < 8 && c->refused[k]; k++)
            CHECK(match(g, c->refused[k], strlen(c->refused[k])) != COMPLETE,
                  "schema %zu refuses %s", i, c->refused[k]);
        grammar_free(g);
    }
}

typedef struct refusal {
    const char *schema;
    const char *message;
} refusal;

static const refusal k_refusals[] = {
    {"{\"type\": \"string\", \"minimum\": 0}", "schema: 'minimum' is not supported"},
    {"{\"type\": \"object\", \"properties\": {\"age\": {\"type\": \"integer\", \"minimum\": 0}}}",
     "schema/properties/age: 'minimum' is not supported"},
    {"{\"properties\": {\"a/b\": {\"items\": {\"pattern\": \"x\"}}}}",
     "schema/properties/a~1b/items: 'pattern' is not supported"},
    {"{\"anyOf\": [{\"type\": \"null\"}, {\"format\": \"date\"}]}",
     "schema/anyOf/1: 'format' is not supported"},
    {"{\"type\": \"strin\"}", "schema/type: 'strin' is not a type"},
    {"{\"type\": []}", "schema/type: the list names no type"},
    {"{\"type\": 3}", "schema/type: a type is a string, not number"},
    {"{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}",
     "schema/required/0: 'b' is not among the properties"},
    {"{\"required\": [\"a\"]}", "schema/required/0: 'a' is not among the properties"},
    {"{\"additionalProperties\": {\"type\": \"string\"}}",
     "schema/additionalProperties: only true or false is supported, not object"},
    {"{\"items\": [{\"type\": \"string\"}]}",
     "schema/items: only one schema for every item is supported (not a list of schemas)"},
    {"{\"enum\": []}", "schema: 'enum' must be an array of at least one value"},
    {"{\"type\": \"string\", \"enum\": [1, 2]}",
     "schema: no value of 'enum' has a type 'type' allows"},
    {"{\"enum\": [1], \"const\": 1}", "schema: 'enum' beside 'const' is not supported"},
    {"{\"enum\": [1], \"items\": {}}", "schema: 'items' beside 'enum' is not supported"},
    {"{\"anyOf\": [{\"type\": \"string\"}], \"type\": \"string\"}",
     "schema: 'type' beside 'anyOf' is not supported"},
    {"{\"anyOf\": []}", "schema: 'anyOf' must be an array of at least one schema"},
    {"{\"$ref\": \"#/$defs/x\"}",
     "schema/$ref: '#/$defs/x' is not supported (only '#' and '#/$defs/NAME' of this schema)"},
    {"{\"$defs\": {\"x\": {}}, \"$ref\": \"#/$defs/x/properties\"}",
     "schema/$ref: '#/$defs/x/properties' is not supported (only '#' and '#/$defs/NAME' of this "
     "schema)"},
    {"{\"$defs\": {\"x\": {}}, \"$ref\": \"#/$defs/x\", \"type\": \"object\"}",
     "schema: 'type' beside '$ref' is not supported"},
    {"{\"properties\": {\"x\": {\"$defs\": {}}}}",
     "schema/properties/x: '$defs' is only supported at the root"},
    {"{\"$defs\": [], \"type\": \"null\"}",
     "schema: '$defs' must be an object of schemas, not array"},
    {"false", "schema: 'false' admits no value"},
    {"\"x\"", "schema: a schema is an object or a boolean, not string"},
    {"{\"type\": \"string\", \"maxLength\": 2, \"minLength\": 3}",
     "schema: 'maxLength' 2 is below 'minLength' 3: no value fits"},
    {"{\"type\": \"string\", \"maxLength\": 5000}",
     "schema: 'maxLength' above 1024 is not supported"},
    {"{\"type\": \"array\", \"maxItems\": -1}", "schema: 'maxItems' must be an integer >= 0"},
    {"{\"type\": \"array\", \"minItems\": 1.5}", "schema: 'minItems' must be an integer >= 0"},
    /* Grammars the matcher cannot run, found by grammar_compile. */
    {"{\"$defs\": {\"a\": {\"anyOf\": [{\"$ref\": \"#/$defs/a\"}, {\"type\": \"null\"}]}}, "
     "\"$ref\": \"#/$defs/a\"}",
     "schema: grammar: rule 'schema/$defs/a' is left-recursive (it can begin with a call of "
     "itself)"},
    {"{\"$defs\": {\"a\": {\"type\": \"object\", \"properties\": {\"x\": {\"$ref\": "
     "\"#/$defs/a\"}}, "
     "\"required\": [\"x\"]}}, \"$ref\": \"#/$defs/a\"}",
     "schema: grammar: rule 'schema' matches nothing (no complete match can be reached)"},
    {"{\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"object\", \"properties\": {\"a\": "
     "{\"type\": \"object\"}}}]}",
     "schema: grammar: rule 'schema' is ambiguous: '{' can begin a call of 'any JSON object' and "
     "another alternative"},
};

static void test_refusals(void)
{
    for (size_t i = 0; i < sizeof k_refusals / sizeof *k_refusals; i++) {
        const refusal *r = &k_refusals[i];
        grammar *g = NULL;
        llmq_err err = {0};
        const int rc = jsonschema_compile(&g, r->schema, strlen(r->schema), &err);
        CHECK(rc == -1 && g == NULL && strcmp(err.msg, r->message) == 0,
              "%s is refused: \"%s\" (got \"%s\")", r->schema, r->message, err.msg);
    }
    grammar *g = NULL;
    llmq_err err = {0};
    CHECK(jsonschema_compile(&g, "{\"type\":", 8, &err) == -1 &&
              strncmp(err.msg, "schema: line 1, column 9", 24) == 0,
          "a schema that is not JSON is refused with where it breaks (%s)", err.msg);
}

/* Defs d0 .. d(n-1), each an array of the next (the last of integers),
 * and a root that refers to d0: inlined, 2n schema levels deep. */
static char *chained_defs(int n)
{
    char *s = malloc((size_t)n * 80 + 64);
    size_t at = (size_t)sprintf(s, "{\"$ref\": \"#/$defs/d0\", \"$defs\": {");
    for (int i = 0; i < n; i++) {
        if (i + 1 < n)
            at += (size_t)sprintf(s + at,
                                  "%s\"d%d\": {\"type\": \"array\", \"items\": "
                                  "{\"$ref\": \"#/$defs/d%d\"}}",
                                  i ? ", " : "", i, i + 1);
        else
            at += (size_t)sprintf(s + at, "%s\"d%d\": {\"type\": \"integer\"}", i ? ", " : "", i);
    }
    sprintf(s + at, "}}");
    return s;
}

static void test_bounds(void)
{
    char *ok = chained_defs(JSONSCHEMA_MAX_NESTING / 2);
    char *deep = chained_defs(JSONSCHEMA_MAX_NESTING / 2 + 1);
    grammar *g = compile(ok);
    char arrays_doc[JSONSCHEMA_MAX_NESTING + 2];
    const int arrays = JSONSCHEMA_MAX_NESTING / 2 - 1;
    memset(arrays_doc, '[', arrays);
    arrays_doc[arrays] = '1';
    memset(arrays_doc + arrays + 1, ']', arrays);
    CHECK(g != NULL && match(g, arrays_doc, 2 * arrays + 1) == COMPLETE &&
              match(g, arrays_doc + 1, 2 * arrays - 1) == REFUSED,
          "references inlined %d levels deep compile: %d arrays nested (of arrays: the automaton "
          "grows linearly)",
          JSONSCHEMA_MAX_NESTING, arrays);
    grammar_free(g);
    llmq_err err = {0};
    g = NULL;
    CHECK(jsonschema_compile(&g, deep, strlen(deep), &err) == -1 &&
              strcmp(err.msg, "schema/$defs/d31/items: nested deeper than 64 levels") == 0,
          "past %d levels they are refused where it happens (%s)", JSONSCHEMA_MAX_NESTING, err.msg);
    free(ok);
    free(deep);

    /* json_object: nesting goes as deep as the grammar's stack. */
    CHECK(jsonschema_any_object(&g, &err) == 0, "json_object mode compiles");
    char doc[6 * (GRAMMAR_MAX_DEPTH + 2)];
    size_t n = 0;
    for (int i = 0; i < GRAMMAR_MAX_DEPTH; i++)
        n += (size_t)sprintf(doc + n, "{\"a\":");
    doc[n++] = '1';
    for (int i = 0; i < GRAMMAR_MAX_DEPTH; i++)
        doc[n++] = '}';
    CHECK(match(g, doc, n) == COMPLETE, "json_object takes objects nested %d deep",
          GRAMMAR_MAX_DEPTH);
    memmove(doc + 5, doc, n);
    memcpy(doc, "{\"a\":", 5);
    CHECK(match(g, doc, 5 * (GRAMMAR_MAX_DEPTH + 1)) == REFUSED,
          "and refuses the byte that would nest one deeper");
    CHECK(match(g, "[1]", 3) == REFUSED && match(g, "1", 1) == REFUSED &&
              match(g, "{\"a\":[[{}]]}", 12) == COMPLETE,
          "json_object takes objects only, with any values in them");
    grammar_free(g);
}

int main(void)
{
    test_cases();
    test_refusals();
    test_bounds();
    return check_done();
}
