/* jsonschema: JSON schemas in OpenAI's strict structured-outputs subset,
 * and json_object mode (any JSON object), compiled into a grammar
 * (engine/grammar.h) that matches the JSON texts the schema accepts, in the
 * form described below.
 *
 * Keywords: "type" (object, array, string, number, integer, boolean, null,
 * or a list of them), "properties", "required" (the properties it does not
 * name are optional), "additionalProperties" (false, or true, which
 * generates the same: only the listed properties, which any value of it
 * allows), "items", "minItems" and "maxItems", "minLength" and "maxLength"
 * (characters, as JSON Schema counts them: a code point or an escape; the
 * four bounds are at most JSONSCHEMA_MAX_BOUND), "enum", "const" (values of
 * any type), "anyOf",
 * "$defs" (or "definitions") at the root with "$ref" to "#" or
 * "#/$defs/NAME", and the annotations "title", "description", "$comment",
 * "examples", "default" and "$schema", which constrain nothing.  A reference
 * is inlined, unless it is reached again while being inlined: then it
 * becomes a call of a rule (the pushdown automaton; recursion is bounded by
 * the grammar's stack).  Anything else is refused, naming the keyword and
 * where it is as a JSON pointer:
 *     schema/properties/age: 'minimum' is not supported
 * "$ref" and "anyOf" stand alone (no other constraint beside them); "enum"
 * and "const" only with "type", whose types they are filtered by.
 *
 * The form generated -- a subset of each schema's JSON texts, the same for
 * every schema:
 *  - whitespace: none, except one optional space after ':' and after ','.
 *    Compact JSON (OpenAI's, json.dumps(separators=(',', ':'))) and
 *    json.dumps' default form both match.  Whitespace is bounded because a
 *    model may otherwise emit spaces forever; newlines and indentation would
 *    only cost tokens.
 *  - properties in the schema's order, each at most once.
 *  - numbers: at most JSONSCHEMA_DIGITS digits before and after the point
 *    and a 2-digit exponent (room for every double; a bound for the same
 *    reason as whitespace's); integers without fraction or exponent.
 *  - strings: UTF-8 checked byte by byte (no overlong forms, surrogates or
 *    code points past U+10FFFF), control characters only escaped, \u
 *    escapes of any code point but a surrogate.
 *  - enum and const values written compactly, object members in the
 *    order the schema gives.
 *  - the empty schema, an array without "items" and an object without
 *    "properties" (unless additionalProperties is false: then only {})
 *    take any JSON value there: an object rule and an array rule that call
 *    each other, so nesting is bounded by GRAMMAR_MAX_DEPTH.
 *
 * Bounds: schemas nested at most JSONSCHEMA_MAX_NESTING levels (through
 * references too); the automaton bounds of grammar_compile. */
#ifndef LLMQ_ENGINE_JSONSCHEMA_H
#define LLMQ_ENGINE_JSONSCHEMA_H

#include <stddef.h>

#include "common/err.h"
#include "common/json.h"
#include "engine/grammar.h"

#define JSONSCHEMA_DIGITS 16
#define JSONSCHEMA_MAX_NESTING 64
#define JSONSCHEMA_MAX_BOUND 1024 /* largest minLength, maxLength, minItems, maxItems */

/* Compiles the schema in text[0..len) (JSON) into *out, which the caller
 * frees with grammar_free. */
int jsonschema_compile(grammar **out, const char *text, size_t len, llmq_err *err);

/* The same from a parsed schema. */
int jsonschema_compile_value(grammar **out, const json_value *schema, llmq_err *err);

/* json_object mode: any JSON object. */
int jsonschema_any_object(grammar **out, llmq_err *err);

#endif
