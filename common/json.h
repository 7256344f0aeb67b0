/* json: a strict, small JSON (RFC 8259) reader, and the writer of strings.
 *
 * json_parse builds a tree from one JSON text: objects, arrays, strings (all
 * escapes, surrogate pairs joined and stored as UTF-8), numbers (a double,
 * plus the exact int64 when the number is integral and fits), true, false,
 * null.  Strict means: no comments, no trailing commas, no leading zeros or
 * '+' or bare '.', no raw control characters or invalid UTF-8 in strings, no
 * lone surrogates, no duplicate object keys, nothing after the value but
 * whitespace, nesting at most JSON_MAX_DEPTH.  Errors say "line L, column C:"
 * (both 1-based, columns in bytes) and what was expected.
 *
 * Ownership: the tree returned by json_parse is one allocation tree owned by
 * the caller and released with json_free; strings are NUL-terminated copies
 * (they may contain NUL from \u0000: use len).
 *
 * Writing: every JSON string llmq writes, to a file or into a json_buf, is
 * escaped by one function: '"', '\\' and control characters escaped, valid
 * UTF-8 passed through, each invalid byte replaced by U+FFFD, so that the
 * output is always valid JSON.  Numbers, punctuation and structure are the
 * caller's (json_buf_put), as they are with a file. */
#ifndef LLMQ_COMMON_JSON_H
#define LLMQ_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

#define JSON_MAX_DEPTH 64

typedef enum json_type {
    JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT
} json_type;

typedef struct json_value json_value;
typedef struct json_member json_member;

struct json_value {
    json_type type;
    union {
        bool boolean;
        struct {
            double d;
            int64_t i;       /* valid when is_int */
            bool is_int;     /* integral and within int64 */
        } num;
        struct {
            char *s;
            size_t len;
        } str;
        struct {
            json_value *items;
            size_t n;
        } arr;
        struct {
            json_member *members;   /* in document order */
            size_t n;
        } obj;
    };
};

struct json_member {
    char *key;
    size_t key_len;
    json_value value;
};

/* Parses text[0..len) into a new tree (*out); 0 on success, -1 with err. */
int json_parse(const char *text, size_t len, json_value **out, llmq_err *err);

void json_free(json_value *v);

/* The member named key of an object, or NULL (also when v is not an object). */
const json_value *json_get(const json_value *v, const char *key);

/* A JSON type's name: "null", "boolean", "number", "string", "array", "object". */
const char *json_type_name(json_type t);

/* Writes s[0..len) to f as a JSON string literal (quotes included). */
void json_write_string(FILE *f, const char *s, size_t len);

/* JSON text built in memory (e.g. for a TEXT column): p is NUL-terminated
 * after every successful append; the caller owns p (free it) and may reuse
 * the buffer by setting len to 0. */
typedef struct json_buf {
    char *p;
    size_t len, cap;
} json_buf;

/* Appends s[0..n) as it is, or as a JSON string literal.  0, or -1 when
 * memory is short; after a failure the text may end in part of what was
 * appended, and is still the caller's to free. */
int json_buf_put(json_buf *b, const char *s, size_t n);
int json_buf_string(json_buf *b, const char *s, size_t len);
/* Appends a parsed tree as compact JSON text (no whitespace, members in
 * document order; a number as its integer, or in the fewest digits that
 * read back as the same double). */
int json_buf_value(json_buf *b, const json_value *v);

#endif
