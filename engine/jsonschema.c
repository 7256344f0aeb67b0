#include "engine/jsonschema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Schemas visited in all (inlined references count each time), so that
 * references that fan out cannot build an expression without bound. */
#define MAX_VISITS 100000

/* JSON types as bits; "integer" is a separate bit that "number" covers. */
enum {
    T_OBJECT = 1,
    T_ARRAY = 2,
    T_STRING = 4,
    T_INTEGER = 8,
    T_NUMBER = 16,
    T_BOOLEAN = 32,
    T_NULL = 64,
    T_ALL = 127,
};

static const struct {
    const char *name;
    unsigned bit;
} k_types[] = {
    {"object", T_OBJECT}, {"array", T_ARRAY},     {"string", T_STRING}, {"integer", T_INTEGER},
    {"number", T_NUMBER}, {"boolean", T_BOOLEAN}, {"null", T_NULL},
};

static const char *const k_annotations[] = {
    "title", "description", "$comment", "examples", "default", "$schema",
};

/* The keywords that constrain, in the order messages name them. */
static const char *const k_constraints[] = {
    "type",      "properties", "required", "additionalProperties",
    "items",     "minItems",   "maxItems", "minLength",
    "maxLength", "enum",       "const",    "anyOf",
    "$ref",
};

/* The root and each of its $defs: what a reference can name. */
typedef struct def_entry {
    const json_value *schema;
    char *path;    /* "schema" or "schema/$defs/NAME" */
    int32_t rule;  /* -1 until a recursive reference needs it */
    bool defined;  /* the rule has its body */
    bool inlining; /* being compiled now (on the expansion stack) */
} def_entry;

typedef struct compiler {
    grammar_builder *b;
    llmq_err *err;
    bool failed;
    char path[256]; /* JSON pointer of the schema being compiled */
    size_t path_len;
    def_entry *defs; /* [0] is the root */
    size_t n_defs;
    const char *defs_key; /* "$defs" or "definitions" */
    int32_t nesting, visits;
    gram_expr string_char, string, number, integer, colon, comma;
    /* Any JSON value, and the bodies of the rules for any object and any
     * array that it calls: GRAM_NONE until first needed. */
    gram_expr any_value, any_object, any_array;
    int32_t object_rule;
} compiler;

/* ---- errors and the pointer --------------------------------------------- */

static gram_expr refuse(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static gram_expr refuse(compiler *c, const char *fmt, ...)
{
    if (!c->failed) {
        char msg[LLMQ_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        llmq_errf(c->err, "%s: %s", c->path, msg);
    }
    c->failed = true;
    return GRAM_NONE;
}

/* Appends "/" and key (escaped as RFC 6901 says) to the pointer; returns
 * the length to restore.  A pointer too long for the buffer ends in "...". */
static size_t push_path(compiler *c, const char *key, size_t len)
{
    const size_t saved = c->path_len, room = sizeof c->path - 4;
    size_t at = c->path_len;
    if (at < room)
        c->path[at++] = '/';
    for (size_t i = 0; i < len && at < room; i++) {
        if (key[i] == '~' || key[i] == '/') {
            c->path[at++] = '~';
            c->path[at++] = key[i] == '~' ? '0' : '1';
        } else {
            c->path[at++] = key[i] ? key[i] : '?';
        }
    }
    if (at >= room) {
        memcpy(c->path + room, "...", 3);
        at = room + 3;
    }
    c->path[at] = '\0';
    c->path_len = at;
    return saved;
}

static size_t push_index(compiler *c, size_t i)
{
    char s[24];
    int n = snprintf(s, sizeof s, "%zu", i);
    return push_path(c, s, (size_t)n);
}

static void pop_path(compiler *c, size_t saved)
{
    c->path_len = saved;
    c->path[saved] = '\0';
}

/* ---- shared expressions -------------------------------------------------- */

static gram_expr byte_range(grammar_builder *b, unsigned lo, unsigned hi)
{
    gram_bytes s = {0};
    gram_bytes_add(&s, lo, hi);
    return gram_set(b, &s);
}

static gram_expr byte_chars(grammar_builder *b, const char *chars)
{
    gram_bytes s = {0};
    for (const char *p = chars; *p; p++)
        gram_bytes_add(&s, (unsigned char)*p, (unsigned char)*p);
    return gram_set(b, &s);
}

static gram_expr text(grammar_builder *b, const char *s)
{
    return gram_lit(b, s, strlen(s));
}

/* A UTF-8 character of two to four bytes, as RFC 3629's table has them. */
static gram_expr utf8_multibyte(grammar_builder *b)
{
    const gram_expr cont = byte_range(b, 0x80, 0xBF);
    return GRAM_ALT(b, GRAM_SEQ(b, byte_range(b, 0xC2, 0xDF), cont),
                    GRAM_SEQ(b, byte_range(b, 0xE0, 0xE0), byte_range(b, 0xA0, 0xBF), cont),
                    GRAM_SEQ(b, byte_range(b, 0xE1, 0xEC), cont, cont),
                    GRAM_SEQ(b, byte_range(b, 0xED, 0xED), byte_range(b, 0x80, 0x9F), cont),
                    GRAM_SEQ(b, byte_range(b, 0xEE, 0xEF), cont, cont),
                    GRAM_SEQ(b, byte_range(b, 0xF0, 0xF0), byte_range(b, 0x90, 0xBF), cont, cont),
                    GRAM_SEQ(b, byte_range(b, 0xF1, 0xF3), cont, cont, cont),
                    GRAM_SEQ(b, byte_range(b, 0xF4, 0xF4), byte_range(b, 0x80, 0x8F), cont, cont));
}

/* \uXXXX of any code point but a surrogate (D800-DFFF): a lone one is not
 * a character, and pairs are left to raw UTF-8. */
static gram_expr unicode_escape(grammar_builder *b)
{
    const gram_expr hex = byte_chars(b, "0123456789abcdefABCDEF");
    return GRAM_SEQ(
        b, text(b, "u"),
        GRAM_ALT(b, GRAM_SEQ(b, byte_chars(b, "0123456789abcABCefEF"), hex, hex, hex),
                 GRAM_SEQ(b, byte_chars(b, "dD"), byte_chars(b, "01234567"), hex, hex)));
}

/* One character of a string's contents: what JSON Schema's lengths count. */
static gram_expr json_string_char(grammar_builder *b)
{
    gram_bytes plain = {0};
    gram_bytes_add(&plain, 0x20, 0x7F);
    plain.bits['"' >> 6] &= ~(UINT64_C(1) << ('"' & 63));
    plain.bits['\\' >> 6] &= ~(UINT64_C(1) << ('\\' & 63));
    const gram_expr escape = GRAM_SEQ(b, text(b, "\\"),
                                      GRAM_ALT(b, byte_chars(b, "\"\\/bfnrt"), unicode_escape(b)));
    return GRAM_ALT(b, gram_set(b, &plain), utf8_multibyte(b), escape);
}

/* x at least min times and at most max times (max < 0: no bound). */
static gram_expr bounded(grammar_builder *b, gram_expr x, int32_t min, int32_t max)
{
    return max < 0 ? GRAM_SEQ(b, gram_repeat(b, x, min, min), gram_star(b, x))
                   : gram_repeat(b, x, min, max);
}

static gram_expr json_string(grammar_builder *b, gram_expr ch, int32_t min, int32_t max)
{
    return GRAM_SEQ(b, text(b, "\""), bounded(b, ch, min, max), text(b, "\""));
}

static gram_expr digits(grammar_builder *b, int32_t min, int32_t max)
{
    return gram_repeat(b, byte_range(b, '0', '9'), min, max);
}

/* -?(0|[1-9][0-9]{0,15}) */
static gram_expr json_integer(grammar_builder *b)
{
    const gram_expr whole = GRAM_ALT(
        b, text(b, "0"), GRAM_SEQ(b, byte_range(b, '1', '9'), digits(b, 0, JSONSCHEMA_DIGITS - 1)));
    return GRAM_SEQ(b, gram_opt(b, text(b, "-")), whole);
}

static gram_expr json_number(grammar_builder *b, gram_expr integer)
{
    const gram_expr fraction = GRAM_SEQ(b, text(b, "."), digits(b, 1, JSONSCHEMA_DIGITS));
    const gram_expr exponent = GRAM_SEQ(b, byte_chars(b, "eE"), gram_opt(b, byte_chars(b, "+-")),
                                        digits(b, 1, 2));
    return GRAM_SEQ(b, integer, gram_opt(b, fraction), gram_opt(b, exponent));
}

/* A separator and the one space it may be followed by. */
static gram_expr separator(grammar_builder *b, const char *sep)
{
    return GRAM_SEQ(b, text(b, sep), gram_opt(b, text(b, " ")));
}

/* "[" item ("," item)* "]" with min to max items (max < 0: no bound).
 * Without bounds the items are a gram_list (one copy of the item); bounds
 * are counted by copies, min-1 of them and max-min more. */
static gram_expr array_of(compiler *c, gram_expr item, int32_t min, int32_t max)
{
    grammar_builder *b = c->b;
    if (max == 0)
        return text(b, "[]");
    const gram_expr next = GRAM_SEQ(b, c->comma, item);
    const gram_expr items = min <= 1 && max < 0 ? gram_list(b, item, c->comma)
                                                : GRAM_SEQ(b, item,
                                                           bounded(b, next, min > 0 ? min - 1 : 0,
                                                                   max < 0 ? -1 : max - 1));
    return GRAM_SEQ(b, text(b, "["), min > 0 ? items : gram_opt(b, items), text(b, "]"));
}

/* Any JSON value: scalars inline, objects and arrays through two rules that
 * call each other (built once, on first use).  Where a schema asks for any
 * object or any array, the rule's body is used inline: only what is nested
 * in it goes through calls. */
static void build_any(compiler *c)
{
    if (c->any_value != GRAM_NONE)
        return;
    grammar_builder *b = c->b;
    const int32_t object = gram_rule(b, "any JSON object"), array = gram_rule(b, "any JSON array");
    const gram_expr value = GRAM_ALT(b, c->string, c->number, text(b, "true"), text(b, "false"),
                                     text(b, "null"), gram_call(b, object), gram_call(b, array));
    const gram_expr member = GRAM_SEQ(b, c->string, c->colon, value);
    const gram_expr members = gram_list(b, member, c->comma);
    c->any_object = GRAM_SEQ(b, text(b, "{"), gram_opt(b, members), text(b, "}"));
    c->any_array = array_of(c, value, 0, -1);
    gram_define(b, object, c->any_object);
    gram_define(b, array, c->any_array);
    c->any_value = value;
    c->object_rule = object;
}

static gram_expr any_value(compiler *c)
{
    build_any(c);
    return c->any_value;
}

static gram_expr any_object(compiler *c)
{
    build_any(c);
    return c->any_object;
}

static gram_expr any_array(compiler *c)
{
    build_any(c);
    return c->any_array;
}

static int compiler_init(compiler *c, llmq_err *err)
{
    *c = (compiler){.err = err,
                    .any_value = GRAM_NONE,
                    .any_object = GRAM_NONE,
                    .any_array = GRAM_NONE,
                    .object_rule = -1};
    memcpy(c->path, "schema", 7);
    c->path_len = 6;
    if (grammar_builder_new(&c->b, err) != 0)
        return -1;
    grammar_builder *b = c->b;
    c->string_char = json_string_char(b);
    c->string = json_string(b, c->string_char, 0, -1);
    c->integer = json_integer(b);
    c->number = json_number(b, c->integer);
    c->colon = separator(b, ":");
    c->comma = separator(b, ",");
    return 0;
}

static void compiler_free(compiler *c)
{
    for (size_t i = 0; i < c->n_defs; i++)
        free(c->defs[i].path);
    free(c->defs);
    grammar_builder_free(c->b);
}

/* ---- literals: enum and const -------------------------------------------- */

typedef struct textbuf {
    char *p;
    size_t n, cap;
    bool failed;
} textbuf;

static void put(textbuf *t, const char *s, size_t n)
{
    if (t->failed || n == 0)
        return;
    if (t->n + n > t->cap) {
        size_t cap = (t->n + n) * 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->failed = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
}

static void put_string(textbuf *t, const char *s, size_t len)
{
    put(t, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        const unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            put(t, esc, 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            put(t, esc, 6);
        } else {
            put(t, s + i, 1);
        }
    }
    put(t, "\"", 1);
}

/* The shortest %g that reads back as d. */
static void put_number(textbuf *t, const json_value *v)
{
    char s[40];
    if (v->num.is_int) {
        snprintf(s, sizeof s, "%lld", (long long)v->num.i);
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(s, sizeof s, "%.*g", prec, v->num.d);
            if (strtod(s, NULL) == v->num.d)
                break;
        }
    }
    put(t, s, strlen(s));
}

/* v written as compact JSON (object members in their order). */
static void put_json(textbuf *t, const json_value *v)
{
    switch (v->type) {
    case JSON_NULL: put(t, "null", 4); return;
    case JSON_BOOL: v->boolean ? put(t, "true", 4) : put(t, "false", 5); return;
    case JSON_NUMBER: put_number(t, v); return;
    case JSON_STRING: put_string(t, v->str.s, v->str.len); return;
    case JSON_ARRAY:
        put(t, "[", 1);
        for (size_t i = 0; i < v->arr.n; i++) {
            if (i)
                put(t, ",", 1);
            put_json(t, &v->arr.items[i]);
        }
        put(t, "]", 1);
        return;
    case JSON_OBJECT:
        put(t, "{", 1);
        for (size_t i = 0; i < v->obj.n; i++) {
            if (i)
                put(t, ",", 1);
            put_string(t, v->obj.members[i].key, v->obj.members[i].key_len);
            put(t, ":", 1);
            put_json(t, &v->obj.members[i].value);
        }
        put(t, "}", 1);
        return;
    }
}

static unsigned type_of(const json_value *v)
{
    switch (v->type) {
    case JSON_NULL: return T_NULL;
    case JSON_BOOL: return T_BOOLEAN;
    case JSON_STRING: return T_STRING;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_OBJECT: return T_OBJECT;
    case JSON_NUMBER: break;
    }
    /* JSON Schema's integer is any number without a fractional part. */
    return v->num.is_int || (isfinite(v->num.d) && v->num.d == floor(v->num.d))
               ? T_INTEGER | T_NUMBER
               : T_NUMBER;
}

static gram_expr literal(compiler *c, const json_value *v)
{
    textbuf t = {0};
    put_json(&t, v);
    gram_expr x = t.failed ? refuse(c, "out of memory") : gram_lit(c->b, t.p, t.n);
    free(t.p);
    return x;
}

/* ---- the schema ---------------------------------------------------------- */

static gram_expr compile(compiler *c, const json_value *s);

/* Whether the JSON string s[0..len) is str (which has no NUL). */
static bool is_text(const char *s, size_t len, const char *str)
{
    return strlen(str) == len && memcmp(s, str, len) == 0;
}

static bool is_one_of(const json_member *m, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (is_text(m->key, m->key_len, list[i]))
            return true;
    return false;
}

#define COUNT(a) (sizeof(a) / sizeof *(a))

static int check_keywords(compiler *c, const json_value *s)
{
    for (size_t i = 0; i < s->obj.n; i++) {
        const json_member *m = &s->obj.members[i];
        const char *key = m->key;
        if (is_one_of(m, k_annotations, COUNT(k_annotations)) ||
            is_one_of(m, k_constraints, COUNT(k_constraints)))
            continue;
        if (is_text(key, m->key_len, "$defs") || is_text(key, m->key_len, "definitions")) {
            if (s == c->defs[0].schema)
                continue;
            refuse(c, "'%s' is only supported at the root", key);
            return -1;
        }
        refuse(c, "'%s' is not supported", key);
        return -1;
    }
    return 0;
}

/* Refuses s if it has a constraint keyword beside `keyword` other than
 * `allowed` (NULL: none). */
static int stands_alone(compiler *c, const json_value *s, const char *keyword, const char *allowed)
{
    for (size_t i = 0; i < COUNT(k_constraints); i++)
        if (strcmp(k_constraints[i], keyword) != 0 &&
            !(allowed && strcmp(k_constraints[i], allowed) == 0) && json_get(s, k_constraints[i])) {
            refuse(c, "'%s' beside '%s' is not supported", k_constraints[i], keyword);
            return -1;
        }
    return 0;
}

static int parse_types(compiler *c, const json_value *s, unsigned *types)
{
    const json_value *t = json_get(s, "type");
    *types = T_ALL;
    if (!t)
        return 0;
    const size_t saved = push_path(c, "type", 4);
    const json_value *list = t->type == JSON_ARRAY ? t->arr.items : t;
    const size_t n = t->type == JSON_ARRAY ? t->arr.n : 1;
    *types = 0;
    for (size_t i = 0; i < n && !c->failed; i++) {
        size_t k = 0;
        if (list[i].type != JSON_STRING) {
            refuse(c, "a type is a string, not %s", json_type_name(list[i].type));
            break;
        }
        while (k < COUNT(k_types) && !is_text(list[i].str.s, list[i].str.len, k_types[k].name))
            k++;
        if (k == COUNT(k_types))
            refuse(c, "'%s' is not a type", list[i].str.s);
        else
            *types |= k_types[k].bit;
    }
    if (!c->failed && *types == 0)
        refuse(c, "the list names no type");
    pop_path(c, saved);
    return c->failed ? -1 : 0;
}

static gram_expr compile_literals(compiler *c, const json_value *s)
{
    const json_value *en = json_get(s, "enum"), *cst = json_get(s, "const");
    unsigned types;
    if (stands_alone(c, s, en ? "enum" : "const", "type") != 0)
        return GRAM_NONE;
    if (parse_types(c, s, &types) != 0)
        return GRAM_NONE;
    if (en && (en->type != JSON_ARRAY || en->arr.n == 0))
        return refuse(c, "'enum' must be an array of at least one value");
    const json_value *values = en ? en->arr.items : cst;
    const size_t n = en ? en->arr.n : 1;
    gram_expr *alts = malloc(n * sizeof *alts);
    if (!alts)
        return refuse(c, "out of memory");
    int32_t k = 0;
    for (size_t i = 0; i < n && !c->failed; i++)
        if (type_of(&values[i]) & types)
            alts[k++] = literal(c, &values[i]);
    gram_expr x = c->failed ? GRAM_NONE
                  : k == 0  ? refuse(c, "no value of '%s' has a type 'type' allows",
                                    en ? "enum" : "const")
                            : gram_alt(c->b, alts, k);
    free(alts);
    return x;
}

static gram_expr compile_any_of(compiler *c, const json_value *s)
{
    if (stands_alone(c, s, "anyOf", NULL) != 0)
        return GRAM_NONE;
    const json_value *list = json_get(s, "anyOf");
    if (list->type != JSON_ARRAY || list->arr.n == 0)
        return refuse(c, "'anyOf' must be an array of at least one schema");
    gram_expr *alts = malloc(list->arr.n * sizeof *alts);
    if (!alts)
        return refuse(c, "out of memory");
    const size_t saved = push_path(c, "anyOf", 5);
    for (size_t i = 0; i < list->arr.n && !c->failed; i++) {
        const size_t at = push_index(c, i);
        alts[i] = compile(c, &list->arr.items[i]);
        pop_path(c, at);
    }
    pop_path(c, saved);
    gram_expr x = c->failed ? GRAM_NONE : gram_alt(c->b, alts, (int32_t)list->arr.n);
    free(alts);
    return x;
}

/* Whether the JSON pointer segment seg[0..n) (~1 for '/', ~0 for '~')
 * names key[0..len). */
static bool segment_names(const char *seg, size_t n, const char *key, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++, k++) {
        char ch = seg[i];
        if (ch == '/' || (ch == '~' && (i + 1 == n || (seg[i + 1] != '0' && seg[i + 1] != '1'))))
            return false;
        if (ch == '~')
            ch = seg[++i] == '0' ? '~' : '/';
        if (k >= len || key[k] != ch)
            return false;
    }
    return k == len;
}

/* The def a reference names: "#" or "#/$defs/NAME"; NULL if none. */
static def_entry *resolve(compiler *c, const json_value *ref)
{
    const char *r = ref->str.s;
    if (is_text(r, ref->str.len, "#"))
        return &c->defs[0];
    const size_t k = c->defs_key ? strlen(c->defs_key) : 0;
    if (!c->defs_key || ref->str.len < k + 3 || memcmp(r, "#/", 2) != 0 ||
        memcmp(r + 2, c->defs_key, k) != 0 || r[2 + k] != '/')
        return NULL;
    const char *name = r + 3 + k;
    const size_t n = ref->str.len - 3 - k;
    for (size_t i = 1; i < c->n_defs; i++) {
        const json_member *m = &json_get(c->defs[0].schema, c->defs_key)->obj.members[i - 1];
        if (segment_names(name, n, m->key, m->key_len))
            return &c->defs[i];
    }
    return NULL;
}

/* A def compiled where it is named; one that is being compiled already is
 * reached through recursion, and called as a rule instead. */
static gram_expr compile_def(compiler *c, def_entry *d)
{
    if (d->inlining) {
        if (d->rule < 0)
            d->rule = gram_rule(c->b, d->path);
        return gram_call(c->b, d->rule);
    }
    char saved[sizeof c->path];
    const size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    c->path_len = strlen(d->path);
    memcpy(c->path, d->path, c->path_len + 1);
    d->inlining = true;
    const gram_expr x = compile(c, d->schema);
    d->inlining = false;
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    return x;
}

static gram_expr compile_ref(compiler *c, const json_value *s)
{
    if (stands_alone(c, s, "$ref", NULL) != 0)
        return GRAM_NONE;
    const json_value *ref = json_get(s, "$ref");
    const size_t saved = push_path(c, "$ref", 4);
    def_entry *d = ref->type == JSON_STRING ? resolve(c, ref) : NULL;
    if (!d)
        refuse(c,
               ref->type == JSON_STRING ? "'%s' is not supported (only '#' and '#/%s/NAME' "
                                          "of this schema)"
                                        : "%s: a reference is a string (like '#/%s/NAME')",
               ref->type == JSON_STRING ? ref->str.s : json_type_name(ref->type),
               c->defs_key ? c->defs_key : "$defs");
    pop_path(c, saved);
    return d ? compile_def(c, d) : GRAM_NONE;
}

/* One member: "key", the separator, the value. */
static gram_expr member(compiler *c, const json_member *m)
{
    textbuf t = {0};
    put_string(&t, m->key, m->key_len);
    const gram_expr key = t.failed ? refuse(c, "out of memory") : gram_lit(c->b, t.p, t.n);
    free(t.p);
    const size_t saved = push_path(c, m->key, m->key_len);
    const gram_expr value = compile(c, &m->value);
    pop_path(c, saved);
    return GRAM_SEQ(c->b, key, c->colon, value);
}

/* Which properties "required" names; refuses names that are not properties. */
static int required_set(compiler *c, const json_value *s, const json_value *props, bool *req)
{
    const json_value *r = json_get(s, "required");
    if (!r)
        return 0;
    const size_t saved = push_path(c, "required", 8);
    if (r->type != JSON_ARRAY)
        refuse(c, "must be an array of property names");
    for (size_t i = 0; !c->failed && i < r->arr.n; i++) {
        const json_value *name = &r->arr.items[i];
        const size_t at = push_index(c, i);
        size_t k = 0;
        while (props && name->type == JSON_STRING && k < props->obj.n &&
               !(props->obj.members[k].key_len == name->str.len &&
                 memcmp(props->obj.members[k].key, name->str.s, name->str.len) == 0))
            k++;
        if (name->type != JSON_STRING)
            refuse(c, "a property name is a string, not %s", json_type_name(name->type));
        else if (!props || k == props->obj.n)
            refuse(c, "'%s' is not among the properties", name->str.s);
        else
            req[k] = true;
        pop_path(c, at);
    }
    pop_path(c, saved);
    return c->failed ? -1 : 0;
}

/* The members in the schema's order, the optional ones possibly left out,
 * commas only between the members present.  after[i]: the members from i
 * on once one has been written (each behind a comma); first[i]: from i on
 * when none has been written yet.  An optional member before the first
 * required one thus appears once per possible first member: the
 * automaton grows with their square, not with 2^n. */
static gram_expr members(compiler *c, const json_value *props, const bool *req)
{
    grammar_builder *b = c->b;
    const size_t n = props->obj.n;
    gram_expr *m = malloc((n + 1) * sizeof *m);
    if (!m)
        return refuse(c, "out of memory");
    for (size_t i = 0; i < n && !c->failed; i++)
        m[i] = member(c, &props->obj.members[i]);
    gram_expr after = gram_seq(b, NULL, 0), first = after;
    for (size_t i = n; i-- > 0 && !c->failed;) {
        const gram_expr next = GRAM_SEQ(b, c->comma, m[i]);
        first = req[i] ? GRAM_SEQ(b, m[i], after) : GRAM_ALT(b, GRAM_SEQ(b, m[i], after), first);
        after = GRAM_SEQ(b, req[i] ? next : gram_opt(b, next), after);
    }
    free(m);
    return c->failed ? GRAM_NONE : first;
}

static gram_expr compile_object(compiler *c, const json_value *s)
{
    const json_value *props = json_get(s, "properties"),
                     *extra = json_get(s, "additionalProperties");
    if (extra && extra->type != JSON_BOOL) {
        const size_t saved = push_path(c, "additionalProperties", 20);
        refuse(c, "only true or false is supported, not %s", json_type_name(extra->type));
        pop_path(c, saved);
        return GRAM_NONE;
    }
    if (props && props->type != JSON_OBJECT) {
        const size_t saved = push_path(c, "properties", 10);
        refuse(c, "must be an object of schemas, not %s", json_type_name(props->type));
        pop_path(c, saved);
        return GRAM_NONE;
    }
    bool *req = calloc(props ? props->obj.n + 1 : 1, sizeof *req);
    if (!req)
        return refuse(c, "out of memory");
    gram_expr x = GRAM_NONE;
    if (required_set(c, s, props, req) == 0) {
        if (props) {
            const size_t saved = push_path(c, "properties", 10);
            x = GRAM_SEQ(c->b, text(c->b, "{"), members(c, props, req), text(c->b, "}"));
            pop_path(c, saved);
        } else {
            x = extra && !extra->boolean ? text(c->b, "{}") : any_object(c);
        }
    }
    free(req);
    return c->failed ? GRAM_NONE : x;
}

/* A bound keyword: absent (*out = fallback) or an integer in
 * [0, JSONSCHEMA_MAX_BOUND]. */
static int bound(compiler *c, const json_value *s, const char *key, int32_t fallback, int32_t *out)
{
    const json_value *v = json_get(s, key);
    *out = fallback;
    if (!v)
        return 0;
    if (v->type != JSON_NUMBER || type_of(v) != (T_INTEGER | T_NUMBER) || v->num.d < 0) {
        refuse(c, "'%s' must be an integer >= 0", key);
        return -1;
    }
    if (v->num.d > JSONSCHEMA_MAX_BOUND) {
        refuse(c, "'%s' above %d is not supported", key, JSONSCHEMA_MAX_BOUND);
        return -1;
    }
    *out = (int32_t)v->num.d;
    return 0;
}

/* min and max from the keywords named (max -1: none); refuses max < min. */
static int bounds(compiler *c, const json_value *s, const char *min_key, const char *max_key,
                  int32_t *min, int32_t *max)
{
    if (bound(c, s, min_key, 0, min) != 0 || bound(c, s, max_key, -1, max) != 0)
        return -1;
    if (*max >= 0 && *max < *min) {
        refuse(c, "'%s' %d is below '%s' %d: no value fits", max_key, *max, min_key, *min);
        return -1;
    }
    return 0;
}

static gram_expr compile_string(compiler *c, const json_value *s)
{
    int32_t min, max;
    if (bounds(c, s, "minLength", "maxLength", &min, &max) != 0)
        return GRAM_NONE;
    return min == 0 && max < 0 ? c->string : json_string(c->b, c->string_char, min, max);
}

static gram_expr compile_array(compiler *c, const json_value *s)
{
    const json_value *items = json_get(s, "items");
    int32_t min, max;
    if (bounds(c, s, "minItems", "maxItems", &min, &max) != 0)
        return GRAM_NONE;
    if (!items && min == 0 && max < 0)
        return any_array(c);
    const size_t saved = push_path(c, "items", 5);
    const gram_expr item = !items ? any_value(c)
                           : items->type == JSON_ARRAY
                               ? refuse(c, "only one schema for every item is supported (not a "
                                           "list of schemas)")
                               : compile(c, items);
    pop_path(c, saved);
    return item == GRAM_NONE ? GRAM_NONE : array_of(c, item, min, max);
}

/* Keywords of types a schema does not allow are ignored, as JSON Schema
 * says ("properties" constrain objects only). */
static gram_expr compile_types(compiler *c, const json_value *s)
{
    unsigned types;
    if (parse_types(c, s, &types) != 0)
        return GRAM_NONE;
    if (types & T_NUMBER)
        types &= ~(unsigned)T_INTEGER;
    grammar_builder *b = c->b;
    gram_expr alts[COUNT(k_types)];
    int32_t n = 0;
    if (types & T_OBJECT)
        alts[n++] = compile_object(c, s);
    if (types & T_ARRAY)
        alts[n++] = compile_array(c, s);
    if (types & T_STRING)
        alts[n++] = compile_string(c, s);
    if (types & T_INTEGER)
        alts[n++] = c->integer;
    if (types & T_NUMBER)
        alts[n++] = c->number;
    if (types & T_BOOLEAN)
        alts[n++] = GRAM_ALT(b, text(b, "true"), text(b, "false"));
    if (types & T_NULL)
        alts[n++] = text(b, "null");
    return c->failed ? GRAM_NONE : gram_alt(b, alts, n);
}

static gram_expr compile_schema(compiler *c, const json_value *s)
{
    if (s->type == JSON_BOOL)
        return s->boolean ? any_value(c) : refuse(c, "'false' admits no value");
    if (s->type != JSON_OBJECT)
        return refuse(c, "a schema is an object or a boolean, not %s", json_type_name(s->type));
    if (check_keywords(c, s) != 0)
        return GRAM_NONE;
    if (json_get(s, "$ref"))
        return compile_ref(c, s);
    if (json_get(s, "anyOf"))
        return compile_any_of(c, s);
    if (json_get(s, "enum") && json_get(s, "const"))
        return refuse(c, "'enum' beside 'const' is not supported");
    if (json_get(s, "enum") || json_get(s, "const"))
        return compile_literals(c, s);
    return compile_types(c, s);
}

static gram_expr compile(compiler *c, const json_value *s)
{
    if (c->failed)
        return GRAM_NONE;
    if (c->nesting >= JSONSCHEMA_MAX_NESTING)
        return refuse(c, "nested deeper than %d levels", JSONSCHEMA_MAX_NESTING);
    if (++c->visits > MAX_VISITS)
        return refuse(c, "too large (more than %d schemas to compile, references inlined)",
                      MAX_VISITS);
    c->nesting++;
    const gram_expr x = compile_schema(c, s);
    c->nesting--;
    return x;
}

/* ---- the root ------------------------------------------------------------ */

/* The root and its $defs, which references may name. */
static int collect_defs(compiler *c, const json_value *root)
{
    const json_value *defs = NULL;
    if (root->type == JSON_OBJECT) {
        c->defs_key = json_get(root, "$defs")         ? "$defs"
                      : json_get(root, "definitions") ? "definitions"
                                                      : NULL;
        defs = c->defs_key ? json_get(root, c->defs_key) : NULL;
    }
    if (defs && defs->type != JSON_OBJECT) {
        refuse(c, "'%s' must be an object of schemas, not %s", c->defs_key,
               json_type_name(defs->type));
        return -1;
    }
    const size_t n = defs ? defs->obj.n : 0;
    if (!(c->defs = calloc(n + 1, sizeof *c->defs))) {
        refuse(c, "out of memory");
        return -1;
    }
    c->defs[0] = (def_entry){.schema = root, .path = strdup("schema"), .rule = -1};
    c->n_defs = 1;
    for (size_t i = 0; i < n; i++, c->n_defs++) {
        const size_t saved = push_path(c, c->defs_key, strlen(c->defs_key));
        push_path(c, defs->obj.members[i].key, defs->obj.members[i].key_len);
        c->defs[i + 1] = (def_entry){
            .schema = &defs->obj.members[i].value, .path = strdup(c->path), .rule = -1};
        pop_path(c, saved);
    }
    for (size_t i = 0; i < c->n_defs; i++)
        if (!c->defs[i].path) {
            refuse(c, "out of memory");
            return -1;
        }
    return 0;
}

/* The rules recursive references asked for, each compiled with its own def
 * on the expansion stack (they may ask for more). */
static void define_rules(compiler *c)
{
    for (bool more = true; more && !c->failed;) {
        more = false;
        for (size_t i = 0; i < c->n_defs && !c->failed; i++) {
            def_entry *d = &c->defs[i];
            if (d->rule < 0 || d->defined)
                continue;
            d->defined = more = true;
            d->inlining = true;
            strcpy(c->path, d->path);
            c->path_len = strlen(d->path);
            gram_define(c->b, d->rule, compile(c, d->schema));
            d->inlining = false;
        }
    }
}

static int compile_root(compiler *c, const json_value *schema, grammar **out)
{
    if (collect_defs(c, schema) != 0)
        return -1;
    /* The root is a rule from the start: a reference to "#" calls it. */
    def_entry *d = &c->defs[0];
    const int32_t root = d->rule = gram_rule(c->b, "schema");
    d->defined = d->inlining = true;
    gram_define(c->b, root, compile(c, schema));
    d->inlining = false;
    define_rules(c);
    if (c->failed)
        return -1;
    return grammar_compile(out, c->b, root, c->err) != 0 ? llmq_err_prefix(c->err, "schema") : 0;
}

int jsonschema_compile_value(grammar **out, const json_value *schema, llmq_err *err)
{
    *out = NULL;
    compiler c;
    int rc = compiler_init(&c, err) != 0 ? -1 : compile_root(&c, schema, out);
    compiler_free(&c);
    return rc;
}

int jsonschema_compile(grammar **out, const char *text, size_t len, llmq_err *err)
{
    *out = NULL;
    json_value *schema;
    if (json_parse(text, len, &schema, err) != 0)
        return llmq_err_prefix(err, "schema");
    int rc = jsonschema_compile_value(out, schema, err);
    json_free(schema);
    return rc;
}

int jsonschema_any_object(grammar **out, llmq_err *err)
{
    *out = NULL;
    compiler c;
    int rc = compiler_init(&c, err);
    if (rc == 0) {
        build_any(&c);
        rc = grammar_compile(out, c.b, c.object_rule, err);
    }
    compiler_free(&c);
    return rc;
}
