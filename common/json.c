#include "common/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/utf8.h"

typedef struct parser {
    const char *s;
    size_t len;
    size_t pos;
    llmq_err *err;
} parser;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports the position of p->pos as line:column. */
static int fail(parser *p, const char *fmt, ...)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char text[LLMQ_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return llmq_errf(p->err, "line %zu, column %zu: %s", line, col, text);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int peek(const parser *p)
{
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int parse_value(parser *p, json_value *v, int depth);

static int expect_word(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "invalid literal (expected \"%s\")", word);
    p->pos += n;
    return 0;
}

static size_t digits(parser *p)
{
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos - start;
}

static int parse_number(parser *p, json_value *v)
{
    size_t start = p->pos;
    bool integral_syntax = true;
    if (peek(p) == '-')
        p->pos++;
    if (peek(p) == '0') {
        p->pos++;
        if (peek(p) >= '0' && peek(p) <= '9')
            return fail(p, "leading zeros are not allowed");
    } else if (digits(p) == 0) {
        return fail(p, "expected a digit");
    }
    if (peek(p) == '.') {
        p->pos++;
        integral_syntax = false;
        if (digits(p) == 0)
            return fail(p, "expected a digit after '.'");
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->pos++;
        integral_syntax = false;
        if (peek(p) == '+' || peek(p) == '-')
            p->pos++;
        if (digits(p) == 0)
            return fail(p, "expected a digit in the exponent");
    }
    /* strtod/strtoll need a terminated copy: the input need not be. */
    char buf[64];
    size_t n = p->pos - start;
    char *heap = n >= sizeof buf ? malloc(n + 1) : NULL;
    char *t = heap ? heap : buf;
    if (n >= sizeof buf && !heap)
        return fail(p, "out of memory");
    memcpy(t, p->s + start, n);
    t[n] = '\0';
    v->type = JSON_NUMBER;
    v->num.d = strtod(t, NULL);
    errno = 0;
    long long ll = integral_syntax ? strtoll(t, NULL, 10) : 0;
    free(heap);
    if (isinf(v->num.d)) {
        p->pos = start;
        return fail(p, "number out of range");
    }
    if (integral_syntax && errno == 0) {
        v->num.i = ll;
        v->num.is_int = true;
    } else if (v->num.d == floor(v->num.d) && fabs(v->num.d) < 9223372036854775808.0) {
        v->num.i = (int64_t)v->num.d;
        v->num.is_int = true;
    }
    return 0;
}

static int hex4(parser *p, uint32_t *out)
{
    if (p->len - p->pos < 4)
        return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return fail(p, "invalid hex digit in \\u escape");
        v = v << 4 | (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

/* After the 'u' of "\u": one code point, joining a surrogate pair. */
static int unicode_escape(parser *p, uint32_t *cp)
{
    size_t at = p->pos - 2;
    uint32_t hi = 0;
    if (hex4(p, &hi) < 0)
        return -1;
    if (hi >= 0xDC00 && hi <= 0xDFFF) {
        p->pos = at;
        return fail(p, "lone low surrogate \\u%04X", (unsigned)hi);
    }
    if (hi < 0xD800 || hi > 0xDBFF) {
        *cp = hi;
        return 0;
    }
    uint32_t lo = 0;
    if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
        p->pos = at;
        return fail(p, "high surrogate \\u%04X not followed by a low surrogate", (unsigned)hi);
    }
    p->pos += 2;
    if (hex4(p, &lo) < 0)
        return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) {
        p->pos = at;
        return fail(p, "high surrogate \\u%04X followed by \\u%04X", (unsigned)hi, (unsigned)lo);
    }
    *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    return 0;
}

static int escape(parser *p, json_buf *b)
{
    static const char FROM[] = "\"\\/bfnrt", TO[] = "\"\\/\b\f\n\r\t";
    char c = p->pos < p->len ? p->s[p->pos] : '\0';
    p->pos++;
    const char *hit = c ? strchr(FROM, c) : NULL;
    if (hit)
        return json_buf_put(b, &TO[hit - FROM], 1) < 0 ? fail(p, "out of memory") : 0;
    if (c != 'u') {
        p->pos--;
        return fail(p, "invalid escape");
    }
    uint32_t cp = 0;
    char u[4];
    if (unicode_escape(p, &cp) < 0)
        return -1;
    return json_buf_put(b, u, utf8_encode(cp, u)) < 0 ? fail(p, "out of memory") : 0;
}

/* The run of plain bytes up to the next '"', '\\' or control character,
 * checked as UTF-8. */
static int plain_run(parser *p, json_buf *b)
{
    size_t start = p->pos;
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"' || c == '\\' || c < 0x20)
            break;
        p->pos++;
    }
    size_t ok = utf8_valid_prefix(p->s + start, p->pos - start);
    if (ok != p->pos - start) {
        p->pos = start + ok;
        return fail(p, "invalid UTF-8 in string");
    }
    return json_buf_put(b, p->s + start, p->pos - start) < 0 ? fail(p, "out of memory") : 0;
}

static int parse_string_raw(parser *p, char **out, size_t *out_len)
{
    json_buf b = {0};
    p->pos++;   /* opening quote */
    for (;;) {
        if (plain_run(p, &b) < 0)
            goto fail;
        int c = peek(p);
        if (c == '"')
            break;
        if (c < 0) {
            fail(p, "unterminated string");
            goto fail;
        }
        if (c != '\\') {
            fail(p, "raw control character 0x%02X in string", (unsigned)c);
            goto fail;
        }
        p->pos++;
        if (escape(p, &b) < 0)
            goto fail;
    }
    p->pos++;
    if (!b.p && json_buf_put(&b, "", 0) < 0) {
        fail(p, "out of memory");
        goto fail;
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
fail:
    free(b.p);
    return -1;
}

static int parse_array(parser *p, json_value *v, int depth)
{
    size_t cap = 0;
    v->type = JSON_ARRAY;
    v->arr.items = NULL;
    v->arr.n = 0;
    p->pos++;
    skip_ws(p);
    if (peek(p) == ']') {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (grow_reserve(&v->arr.items, &cap, v->arr.n + 1, sizeof *v->arr.items) < 0)
            return fail(p, "out of memory");
        json_value *item = &v->arr.items[v->arr.n++];   /* owned by v, also on error */
        item->type = JSON_NULL;
        if (parse_value(p, item, depth + 1) < 0)
            return -1;
        skip_ws(p);
        int c = peek(p);
        p->pos++;
        if (c == ']')
            return 0;
        if (c != ',') {
            p->pos--;
            return fail(p, "expected ',' or ']' in array");
        }
        skip_ws(p);
    }
}

static bool has_key(const json_value *obj, const char *key, size_t len)
{
    for (size_t i = 0; i < obj->obj.n; i++)
        if (obj->obj.members[i].key_len == len && memcmp(obj->obj.members[i].key, key, len) == 0)
            return true;
    return false;
}

static int parse_member(parser *p, json_value *v, int depth)
{
    if (peek(p) != '"')
        return fail(p, "expected a string key");
    size_t at = p->pos;
    char *key;
    size_t klen;
    if (parse_string_raw(p, &key, &klen) < 0)
        return -1;
    if (has_key(v, key, klen)) {
        free(key);
        p->pos = at;
        return fail(p, "duplicate key");
    }
    json_member *m = &v->obj.members[v->obj.n];
    m->key = key;
    m->key_len = klen;
    m->value.type = JSON_NULL;
    v->obj.n++;   /* owned by v from here, also on the error paths below */
    skip_ws(p);
    if (peek(p) != ':')
        return fail(p, "expected ':' after key");
    p->pos++;
    skip_ws(p);
    return parse_value(p, &m->value, depth + 1);
}

static int parse_object(parser *p, json_value *v, int depth)
{
    size_t cap = 0;
    v->type = JSON_OBJECT;
    v->obj.members = NULL;
    v->obj.n = 0;
    p->pos++;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (grow_reserve(&v->obj.members, &cap, v->obj.n + 1, sizeof *v->obj.members) < 0)
            return fail(p, "out of memory");
        if (parse_member(p, v, depth) < 0)
            return -1;
        skip_ws(p);
        int c = peek(p);
        p->pos++;
        if (c == '}')
            return 0;
        if (c != ',') {
            p->pos--;
            return fail(p, "expected ',' or '}' in object");
        }
        skip_ws(p);
    }
}

static int parse_value(parser *p, json_value *v, int depth)
{
    v->type = JSON_NULL;
    if (depth > JSON_MAX_DEPTH)
        return fail(p, "nesting deeper than %d", JSON_MAX_DEPTH);
    int c = peek(p);
    switch (c) {
    case '{': return parse_object(p, v, depth);
    case '[': return parse_array(p, v, depth);
    case '"':
        v->type = JSON_STRING;
        v->str.s = NULL;
        if (parse_string_raw(p, &v->str.s, &v->str.len) < 0) {
            v->type = JSON_NULL;
            return -1;
        }
        return 0;
    case 't': v->type = JSON_BOOL; v->boolean = true; return expect_word(p, "true");
    case 'f': v->type = JSON_BOOL; v->boolean = false; return expect_word(p, "false");
    case 'n': return expect_word(p, "null");
    case -1: return fail(p, "unexpected end of input");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            memset(&v->num, 0, sizeof v->num);
            return parse_number(p, v);
        }
        return fail(p, "unexpected character '%c'", c >= 0x20 && c < 0x7f ? c : '?');
    }
}

static void free_value(json_value *v)
{
    switch (v->type) {
    case JSON_STRING:
        free(v->str.s);
        break;
    case JSON_ARRAY:
        for (size_t i = 0; i < v->arr.n; i++)
            free_value(&v->arr.items[i]);
        free(v->arr.items);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->obj.n; i++) {
            free(v->obj.members[i].key);
            free_value(&v->obj.members[i].value);
        }
        free(v->obj.members);
        break;
    default:
        break;
    }
}

void json_free(json_value *v)
{
    if (!v)
        return;
    free_value(v);
    free(v);
}

int json_parse(const char *text, size_t len, json_value **out, llmq_err *err)
{
    *out = NULL;
    parser p = {.s = text, .len = len, .err = err};
    json_value *v = calloc(1, sizeof *v);
    if (!v)
        return llmq_errf(err, "out of memory");
    skip_ws(&p);
    if (parse_value(&p, v, 1) < 0) {
        json_free(v);
        return -1;
    }
    skip_ws(&p);
    if (p.pos != len) {
        json_free(v);
        return fail(&p, "unexpected data after the JSON value");
    }
    *out = v;
    return 0;
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    size_t len = strlen(key);
    for (size_t i = 0; i < v->obj.n; i++)
        if (v->obj.members[i].key_len == len && memcmp(v->obj.members[i].key, key, len) == 0)
            return &v->obj.members[i].value;
    return NULL;
}

const char *json_type_name(json_type t)
{
    static const char *const NAMES[] = {"null", "boolean", "number", "string", "array", "object"};
    return (unsigned)t < sizeof NAMES / sizeof NAMES[0] ? NAMES[t] : "?";
}

/* ---- writing ------------------------------------------------------------------ */

int json_buf_put(json_buf *b, const char *s, size_t n)
{
    if (grow_reserve(&b->p, &b->cap, b->len + n + 1, 1) < 0)
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* Where an escaped string goes (a file, a buffer); 0, or -1 on failure. */
typedef int (*json_sink)(void *to, const char *s, size_t n);

/* The length of the prefix of s[0..n) that is written as it is: printable
 * ASCII but '"' and '\\', and whole valid UTF-8 sequences. */
static size_t verbatim_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t k; /* bytes that pass: 0 stops the run */
        if (c < 0x80)
            k = c >= 0x20 && c != '"' && c != '\\';
        else
            k = utf8_decode(s + i, n - i, &cp);
        if (k == 0)
            break;
        i += k;
    }
    return i;
}

/* The escape of a byte verbatim_prefix stopped at, into esc; its length.  A
 * byte that starts no valid UTF-8 sequence becomes U+FFFD. */
static size_t escape_byte(unsigned char c, char esc[8])
{
    static const char SHORT[] = "btn\0fr"; /* \b \t \n (\v) \f \r */
    if (c == '"' || c == '\\')
        return (size_t)snprintf(esc, 8, "\\%c", c);
    if (c >= 8 && c <= 13 && SHORT[c - 8])
        return (size_t)snprintf(esc, 8, "\\%c", SHORT[c - 8]);
    if (c < 0x20)
        return (size_t)snprintf(esc, 8, "\\u%04x", c);
    return (size_t)snprintf(esc, 8, "\\ufffd");
}

static int write_escaped(json_sink put, void *to, const char *s, size_t len)
{
    if (put(to, "\"", 1) < 0)
        return -1;
    for (size_t i = 0; i < len;) {
        const size_t run = verbatim_prefix(s + i, len - i);
        if (run > 0 && put(to, s + i, run) < 0)
            return -1;
        i += run;
        if (i == len)
            break;
        char esc[8];
        if (put(to, esc, escape_byte((unsigned char)s[i++], esc)) < 0)
            return -1;
    }
    return put(to, "\"", 1);
}

static int put_file(void *to, const char *s, size_t n)
{
    return fwrite(s, 1, n, to) == n ? 0 : -1;
}

static int put_buf(void *to, const char *s, size_t n)
{
    return json_buf_put(to, s, n);
}

void json_write_string(FILE *f, const char *s, size_t len)
{
    write_escaped(put_file, f, s, len);
}

int json_buf_string(json_buf *b, const char *s, size_t len)
{
    return write_escaped(put_buf, b, s, len);
}

/* An integer as itself; a double in the fewest digits (15 to 17) that read
 * back as the same double. */
static int put_number(json_buf *b, const json_value *v)
{
    char num[32];
    int n = 0;
    if (v->num.is_int)
        n = snprintf(num, sizeof num, "%lld", (long long)v->num.i);
    for (int digits = 15; !v->num.is_int && digits <= 17; digits++) {
        n = snprintf(num, sizeof num, "%.*g", digits, v->num.d);
        if (strtod(num, NULL) == v->num.d)
            break;
    }
    return json_buf_put(b, num, (size_t)n);
}

int json_buf_value(json_buf *b, const json_value *v)
{
    switch (v->type) {
    case JSON_NULL: return json_buf_put(b, "null", 4);
    case JSON_BOOL: return v->boolean ? json_buf_put(b, "true", 4) : json_buf_put(b, "false", 5);
    case JSON_NUMBER: return put_number(b, v);
    case JSON_STRING: return json_buf_string(b, v->str.s, v->str.len);
    case JSON_ARRAY:
        if (json_buf_put(b, "[", 1) < 0)
            return -1;
        for (size_t i = 0; i < v->arr.n; i++)
            if ((i && json_buf_put(b, ",", 1) < 0) || json_buf_value(b, &v->arr.items[i]) < 0)
                return -1;
        return json_buf_put(b, "]", 1);
    case JSON_OBJECT:
        if (json_buf_put(b, "{", 1) < 0)
            return -1;
        for (size_t i = 0; i < v->obj.n; i++) {
            const json_member *m = &v->obj.members[i];
            if ((i && json_buf_put(b, ",", 1) < 0) || json_buf_string(b, m->key, m->key_len) < 0 ||
                json_buf_put(b, ":", 1) < 0 || json_buf_value(b, &m->value) < 0)
                return -1;
        }
        return json_buf_put(b, "}", 1);
    }
    return -1;
}
