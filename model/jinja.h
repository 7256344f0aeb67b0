/* jinja: the subset of Jinja2 that chat templates are written in, rendered
 * byte for byte as Hugging Face transformers renders them.
 *
 * The environment is transformers' (_compile_jinja_template): trim_blocks
 * and lstrip_blocks on, the loopcontrols extension ({% break %}, {% continue
 * %}), keep_trailing_newline off (one newline at the very end of a template
 * is dropped; \r\n and \r read as \n), Undefined as jinja2's default (prints
 * as "", is false, iterates as empty; arithmetic, attributes and calls on it
 * are errors), immutable values (lists and dicts have no mutating methods;
 * only namespace() attributes can be set), tojson without HTML escaping,
 * and the globals raise_exception(msg) and strftime_now(fmt).
 *
 * The subset: text, {{ }}, {# #}, {% if/elif/else %}, {% for %} (tuple
 * targets, an `if` filter, `else`, the loop object), {% set %} (names,
 * tuples, namespace attributes, {% set x %}...{% endset %}), {% macro %} at
 * the top level (parameters with defaults; no caller, varargs or kwargs),
 * break/continue, whitespace control (-, +), literals, arithmetic,
 * comparisons, and/or/not, in, is-tests, ~, ternaries, subscripts and
 * slices, attributes, the filters and string/dict methods listed in
 * jinja.c's tables.  Everything else (call blocks, blocks, includes,
 * unknown filters or tests, *args) is refused when parsed, with an error
 * naming the construct and "line L, column C" (1-based, columns in bytes).
 * Python semantics are followed where templates can see them: str() and
 * repr() of values, shortest float repr, len() in code points, Unicode
 * whitespace for strip()/trim/split(), floor division and modulo signs.
 * Deliberate differences: integers are 64-bit (overflow is an error),
 * upper/lower use simple one-to-one case mapping (Python maps "ß" to "SS"),
 * a dict's items()/keys()/values() are lists (they print as lists, not as
 * dict_items(...)), strftime_now formats the caller's clock in UTC.
 *
 * Content tracking: a string from a variable marked from_content (message
 * text) stays marked through concatenation, slicing, strip, split, replace,
 * case changes, tojson and joins; concatenation keeps the parts apart (a
 * string is a rope of pieces).  The output is a list of segments, so that a
 * caller can parse special tokens only in text the template wrote.
 *
 * Bounded work: a render stops with an error when its output, its memory or
 * its step count (expressions evaluated, statements run, loop iterations)
 * passes jinja_limits; parsing bounds nesting depth and template size, so no
 * template, however hostile, crashes, loops forever or exhausts memory.
 *
 * Ownership: a jinja_template owns its parse (one arena) and is immutable
 * after jinja_parse: one template may be rendered by several threads.  Each
 * render has its own arena, freed before jinja_render returns; its output
 * is malloc'd and owned by the caller (jinja_output_free).  Variables are
 * read during the call only. */
#ifndef LLMQ_MODEL_JINJA_H
#define LLMQ_MODEL_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/json.h"

/* Templates larger than this are refused (real ones are under 20 KB). */
#define JINJA_MAX_SOURCE (1u << 20)
/* Nesting of blocks and expressions (each link of a chain such as a + b + c
 * counts), checked while parsing: it bounds the recursion of a render. */
#define JINJA_MAX_DEPTH 100

typedef struct jinja_limits {
    size_t max_output;  /* bytes rendered */
    size_t max_memory;  /* bytes of the render's arena */
    uint64_t max_steps; /* expressions, statements and loop iterations */
} jinja_limits;

/* 16 MiB of output (16 prompts of the wire's largest), 256 MiB of memory,
 * 10 million steps (well under a second; a real chat takes thousands). */
#define JINJA_DEFAULT_LIMITS ((jinja_limits){16u << 20, 256u << 20, 10000000u})

/* A variable the template sees: a JSON value (objects become dicts, arrays
 * lists, integral numbers ints).  from_content marks every string in it. */
typedef struct jinja_var {
    const char *name;
    const json_value *value;
    bool from_content;
} jinja_var;

typedef struct jinja_env {
    const jinja_var *vars;
    size_t n_vars;
    int64_t now; /* seconds since the epoch, for strftime_now */
    jinja_limits limits;
} jinja_env;

/* A run of output bytes, all from template text or all from content. */
typedef struct jinja_segment {
    const char *text; /* inside jinja_output.text */
    size_t len;
    bool from_content;
} jinja_segment;

/* text[0..len) (NUL after it) is the concatenation of the segments, in
 * order; adjacent segments differ in from_content.  Empty output: no segment. */
typedef struct jinja_output {
    char *text;
    size_t len;
    jinja_segment *segments;
    size_t n_segments;
} jinja_output;

typedef struct jinja_template jinja_template;

/* Parses src[0..len) (UTF-8).  On failure *out is NULL and err says what
 * and where ("line L, column C: ..."). */
int jinja_parse(jinja_template **out, const char *src, size_t len, llmq_err *err);
void jinja_free(jinja_template *t);

/* Renders t with env's variables into *out.  Errors (raise_exception's
 * message, a type error, a limit) say where in the template they arose. */
int jinja_render(const jinja_template *t, const jinja_env *env, jinja_output *out, llmq_err *err);
void jinja_output_free(jinja_output *out);

#endif
