/* test-json: the strict JSON reader accepts RFC 8259 exactly (escapes,
 * surrogate pairs, exact integers), refuses what is not JSON with line:column,
 * reads every reference JSONL line, json_write_string output parses back
 * to the same bytes, json_buf_string writes that same text in memory, and
 * json_buf_value writes a parsed tree back as compact JSON that parses to
 * the same values. */
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "tests/unit/check.h"

static json_value *parse(const char *text, llmq_err *err)
{
    json_value *v = NULL;
    if (json_parse(text, strlen(text), &v, err) < 0)
        return NULL;
    return v;
}

static void check_refused(const char *text, const char *where, const char *what)
{
    llmq_err err = {0};
    json_value *v = parse(text, &err);
    CHECK(!v && strstr(err.msg, where) != NULL, "refused: %s (%s) -> \"%s\"", what, where,
          err.msg);
    json_free(v);
}

static void test_values(void)
{
    llmq_err err;
    json_value *v = parse(" {\"a\": [1, -2.5e1, true, false, null, \"x\"], \"b\": {}} \n", &err);
    CHECK(v && v->type == JSON_OBJECT && v->obj.n == 2, "an object with an array and an object");
    const json_value *a = json_get(v, "a");
    CHECK(a && a->type == JSON_ARRAY && a->arr.n == 6 && a->arr.items[0].num.is_int &&
              a->arr.items[0].num.i == 1 && a->arr.items[1].num.d == -25.0 &&
              a->arr.items[2].boolean && !a->arr.items[3].boolean &&
              a->arr.items[4].type == JSON_NULL && strcmp(a->arr.items[5].str.s, "x") == 0,
          "array elements keep their types and values in order");
    CHECK(json_get(v, "b")->type == JSON_OBJECT && !json_get(v, "c") && !json_get(a, "a"),
          "json_get finds members, NULL for absent keys and non-objects");
    json_free(v);

    v = parse("[9007199254740993, -9223372036854775808, 1e2, 1.5, 0, -0, 18446744073709551616]",
              &err);
    const json_value *n = v ? v->arr.items : NULL;
    CHECK(n && n[0].num.is_int && n[0].num.i == 9007199254740993LL,
          "2^53+1 is exact as an int64 (a double would round it)");
    CHECK(n && n[1].num.is_int && n[1].num.i == INT64_MIN, "INT64_MIN is exact");
    CHECK(n && n[2].num.is_int && n[2].num.i == 100 && !n[3].num.is_int && n[4].num.is_int &&
              n[5].num.is_int && n[5].num.i == 0,
          "1e2 is integral, 1.5 is not, 0 and -0 are");
    CHECK(n && !n[6].num.is_int && n[6].num.d == 18446744073709551616.0,
          "2^64 is a double, not an int64");
    json_free(v);

    v = parse("\"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t \\u00e9\\u20AC \\ud83d\\ude00 \\u0000!\"", &err);
    static const char want[] = "q\"b\\s/\b\f\n\r\t \xc3\xa9\xe2\x82\xac \xf0\x9f\x98\x80 \0!";
    CHECK(v && v->str.len == sizeof want - 1 && memcmp(v->str.s, want, sizeof want - 1) == 0,
          "all escapes decode; a surrogate pair becomes one 4-byte UTF-8 sequence; \\u0000 "
          "is kept (len counts it)");
    json_free(v);
    v = parse("\"caf\xc3\xa9 \xe4\xb8\xad\"", &err);
    CHECK(v && strcmp(v->str.s, "caf\xc3\xa9 \xe4\xb8\xad") == 0, "raw UTF-8 passes through");
    json_free(v);
}

static void test_refusals(void)
{
    check_refused("", "line 1, column 1", "empty input");
    check_refused("[1,]", "column 4", "a trailing comma");
    check_refused("{\"a\":1,}", "column 8", "a trailing comma in an object");
    check_refused("[01]", "column 3", "a leading zero");
    check_refused("[+1]", "column 2", "a leading plus");
    check_refused("[.5]", "column 2", "a bare fraction");
    check_refused("[1.]", "column 4", "a dot without digits");
    check_refused("[1e]", "column 4", "an exponent without digits");
    check_refused("[1e400]", "out of range", "a number beyond double range");
    check_refused("[NaN]", "column 2", "NaN");
    check_refused("{\"a\":1,\n \"a\":2}", "line 2, column 2", "a duplicate key");
    check_refused("{a:1}", "column 2", "an unquoted key");
    check_refused("[1] 2", "column 5", "data after the value");
    check_refused("// c\n1", "column 1", "a comment");
    check_refused("\"a\tb\"", "column 3", "a raw tab in a string");
    check_refused("\"abc", "unterminated", "an unterminated string");
    check_refused("\"\\x\"", "invalid escape", "an unknown escape");
    check_refused("\"\\u12G4\"", "hex digit", "a bad \\u escape");
    check_refused("\"\\ude00\"", "lone low surrogate", "a lone low surrogate");
    check_refused("\"\\ud83d\"", "not followed", "a lone high surrogate");
    check_refused("\"\\ud83d\\u0041\"", "followed by", "a high surrogate with a non-surrogate");
    check_refused("\"a\xff\"", "column 3", "an invalid UTF-8 byte");
    check_refused("\"\xc0\xaf\"", "invalid UTF-8", "an overlong UTF-8 form");
    check_refused("tru", "true", "a truncated literal");
    check_refused("{\"a\" 1}", "':'", "a missing colon");

    char deep[2 * JSON_MAX_DEPTH + 3];
    for (int i = 0; i <= JSON_MAX_DEPTH; i++) {
        deep[i] = '[';
        deep[2 * JSON_MAX_DEPTH + 1 - i] = ']';
    }
    deep[2 * JSON_MAX_DEPTH + 2] = '\0';
    check_refused(deep, "nesting", "arrays nested one deeper than JSON_MAX_DEPTH");
    llmq_err err;
    deep[2 * JSON_MAX_DEPTH + 1] = '\0';
    json_value *v = parse(deep + 1, &err);
    CHECK(v != NULL, "arrays nested exactly JSON_MAX_DEPTH deep are accepted");
    json_free(v);
}

/* The input may be a slice of a larger buffer: nothing past len is read. */
static void test_unterminated_input(void)
{
    char buf[] = "[12]xyz";
    json_value *v = NULL;
    llmq_err err;
    int rc = json_parse(buf, 4, &v, &err);
    CHECK(rc == 0 && v->arr.items[0].num.i == 12, "parses a slice of a buffer");
    json_free(v);
    char num[] = "123456";
    rc = json_parse(num, 3, &v, &err);
    CHECK(rc == 0 && v->num.i == 123, "a number ends where the slice ends");
    json_free(v);
}

static const char RAW[] = "say \"hi\"\\ \n\t\x01\x1f caf\xc3\xa9 \xf0\x9f\x98\x80 bad:\xff\xc3";

static void test_writer(void)
{
    const char *raw = RAW;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    json_write_string(f, raw, sizeof RAW - 1);
    fclose(f);
    CHECK(strcmp(out, "\"say \\\"hi\\\"\\\\ \\n\\t\\u0001\\u001f caf\xc3\xa9 \xf0\x9f\x98\x80 "
                      "bad:\\ufffd\\ufffd\"") == 0,
          "escapes quotes, backslashes, controls; keeps UTF-8; invalid bytes become U+FFFD: %s",
          out);
    llmq_err err;
    json_value *v = parse(out, &err);
    CHECK(v && v->type == JSON_STRING && memcmp(v->str.s, raw, 24) == 0,
          "the written string parses back to the original bytes (up to the invalid ones)");
    json_free(v);
    free(out);
}

/* The buffer writer is the same writer: a JSON array built in memory, as
 * the store builds its TEXT columns, holds the file writer's string. */
static void test_buffer_writer(void)
{
    char *file_out = NULL;
    size_t file_len = 0;
    FILE *f = open_memstream(&file_out, &file_len);
    json_write_string(f, RAW, sizeof RAW - 1);
    fclose(f);
    json_buf b = {0};
    int rc = json_buf_put(&b, "[", 1) || json_buf_string(&b, RAW, sizeof RAW - 1) ||
             json_buf_put(&b, ",", 1) || json_buf_string(&b, "", 0) || json_buf_put(&b, "]", 1);
    CHECK(rc == 0 && b.len == file_len + 5 && memcmp(b.p + 1, file_out, file_len) == 0 &&
              strcmp(b.p + 1 + file_len, ",\"\"]") == 0,
          "json_buf_string writes what json_write_string writes: %s", b.p);
    llmq_err err;
    json_value *v = parse(b.p, &err);
    CHECK(v && v->type == JSON_ARRAY && v->arr.n == 2 && v->arr.items[1].str.len == 0,
          "the array built in memory parses back");
    json_free(v);
    b.len = 0;
    CHECK(json_buf_put(&b, "x", 1) == 0 && strcmp(b.p, "x") == 0,
          "a buffer is reused by setting its length to 0");
    free(b.p);
    free(file_out);
}

static void test_reference_files(void)
{
    static const char *const files[] = {
        "reference/stories260K.greedy.jsonl", "reference/TinyStories-656K.f16.greedy.jsonl",
        "reference/synth-q4km-gqa.greedy.jsonl", "reference/synth-q6k-mha.greedy.jsonl",
        "reference/tinystories-656k-q8_0.greedy.jsonl"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        FILE *f = fopen(check_data_path(path, sizeof path, files[i]), "r");
        CHECK(f != NULL, "opens %s", files[i]);
        if (!f)
            continue;
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        int lines = 0, good = 0;
        while ((n = getline(&line, &cap, f)) > 0) {
            lines++;
            json_value *v = NULL;
            llmq_err err;
            if (json_parse(line, (size_t)n, &v, &err) == 0) {
                const json_value *toks = json_get(v, "prompt_tokens");
                const json_value *steps = json_get(v, "steps");
                good += toks && toks->type == JSON_ARRAY && steps && steps->type == JSON_ARRAY &&
                        steps->arr.n > 0 && json_get(&steps->arr.items[0], "token")->num.is_int;
            } else {
                printf("  %s:%d: %s\n", files[i], lines, err.msg);
            }
            json_free(v);
        }
        free(line);
        fclose(f);
        CHECK(lines > 0 && good == lines, "%s: all %d lines parse with prompt_tokens and steps",
              files[i], lines);
    }
}

static void test_value_writer(void)
{
    static const char TEXT[] = "{ \"a\" : [1, -2.5, 1e300, true, false, null],\n"
                               "  \"b\\u00e9\" : {\"c\": \"x\\ny\"}, \"d\": {}, \"e\": []}";
    llmq_err err;
    json_value *v = parse(TEXT, &err), *back = NULL;
    json_buf b = {0};
    int rc = v ? json_buf_value(&b, v) : -1;
    CHECK(rc == 0 && strcmp(b.p, "{\"a\":[1,-2.5,1e+300,true,false,null],"
                                 "\"b\xc3\xa9\":{\"c\":\"x\\ny\"},\"d\":{},\"e\":[]}") == 0,
          "a tree is written back compact, members in document order: %s", b.p ? b.p : "");
    back = rc == 0 ? parse(b.p, &err) : NULL;
    const json_value *a = json_get(back, "a");
    CHECK(back && a && a->arr.items[2].num.d == 1e300 && a->arr.items[1].num.d == -2.5 &&
              strcmp(json_get(json_get(back, "b\xc3\xa9"), "c")->str.s, "x\ny") == 0,
          "and parses back to the same values");
    json_free(v);
    json_free(back);
    free(b.p);
}

int main(void)
{
    test_values();
    test_refusals();
    test_unterminated_input();
    test_writer();
    test_buffer_writer();
    test_value_writer();
    test_reference_files();
    return check_done();
}
