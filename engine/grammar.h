/* grammar: a context-free grammar over bytes, compiled into automata that
 * match a sequence's output one byte at a time.
 *
 * Building: a grammar_builder holds expressions -- byte sets, literals,
 * sequences, alternatives, repetitions -- and named rules whose bodies are
 * expressions that may call rules (themselves included).  grammar_compile
 * turns each rule into a DFA over bytes (Thompson's construction, then the
 * subset construction over byte classes: bytes no expression tells apart
 * share one column).  A call becomes a transition that pushes the callee's
 * start state, taken on the bytes the callee can begin with.  A grammar
 * without calls is thus one DFA; with calls it is a pushdown automaton whose
 * stack holds at most GRAMMAR_MAX_DEPTH frames (deeper nesting is refused
 * byte by byte, like any other byte the grammar does not allow; a document
 * nested that deep may thus be left with no way to finish, where every way
 * on goes through one more call).
 *
 * What the matcher needs, so that one state per frame is enough (no
 * backtracking, no sets of stacks): no rule matches the empty string; no
 * rule can begin with a call of itself (left recursion); where a call can
 * begin, no other alternative begins with the same byte.  grammar_compile
 * refuses grammars that break these, naming the rule.  A callee returns when
 * it is in an accepting state and cannot take the next byte itself (the
 * longest match): exact for JSON, where a value never continues with the
 * bytes that may follow it.  States from which no complete match can be
 * reached are pruned, so every byte accepted leaves a way to finish.
 *
 * Matching: a grammar_stack is the whole state of one sequence; copying it
 * is a snapshot.  grammar_step feeds one byte.  A compiled grammar is
 * immutable: share it between sequences and threads.
 *
 * Ownership: a builder's expressions are indices into the builder; a
 * failed allocation is remembered (the functions return GRAM_NONE from then
 * on) and reported by grammar_compile.  The compiled grammar does not refer
 * to the builder. */
#ifndef LLMQ_ENGINE_GRAMMAR_H
#define LLMQ_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Frames a stack holds at most: nesting depth of recursive rules. */
#define GRAMMAR_MAX_DEPTH 32
/* Compile-time bounds, so a hostile grammar fails fast instead of taking
 * the machine: automaton states in all, NFA states, and the subset
 * construction's work (NFA states visited). */
#define GRAMMAR_MAX_STATES 65536
#define GRAMMAR_MAX_NFA_STATES (1 << 20)
#define GRAMMAR_MAX_WORK 50000000L
/* Expressions nested at most this deep (the construction recurses). */
#define GRAMMAR_MAX_NESTING 2048

typedef struct grammar grammar;
typedef struct grammar_builder grammar_builder;

/* An expression of a builder; GRAM_NONE once an allocation has failed. */
typedef int32_t gram_expr;
#define GRAM_NONE (-1)

/* A set of bytes. */
typedef struct gram_bytes {
    uint64_t bits[4];
} gram_bytes;

void gram_bytes_add(gram_bytes *s, unsigned lo, unsigned hi); /* lo..hi inclusive */
bool gram_bytes_has(const gram_bytes *s, unsigned byte);

int grammar_builder_new(grammar_builder **out, llmq_err *err);
void grammar_builder_free(grammar_builder *b);

gram_expr gram_set(grammar_builder *b, const gram_bytes *s); /* one byte of s */
gram_expr gram_lit(grammar_builder *b, const char *s, size_t len);
gram_expr gram_seq(grammar_builder *b, const gram_expr *xs, int32_t n); /* n = 0: empty */
gram_expr gram_alt(grammar_builder *b, const gram_expr *xs, int32_t n); /* n = 0: nothing */
gram_expr gram_star(grammar_builder *b, gram_expr x);                   /* zero or more */
gram_expr gram_opt(grammar_builder *b, gram_expr x);
/* x at least min and at most max times (one node, however large max). */
gram_expr gram_repeat(grammar_builder *b, gram_expr x, int32_t min, int32_t max);
/* x (sep x)*: one or more x separated by sep, with one copy of each in the
 * automaton (written as a sequence, x would be built twice, and a list of
 * lists four times, ...). */
gram_expr gram_list(grammar_builder *b, gram_expr x, gram_expr sep);

#define GRAM_LIST_(...) ((const gram_expr[]){__VA_ARGS__})
#define GRAM_COUNT_(...) ((int32_t)(sizeof GRAM_LIST_(__VA_ARGS__) / sizeof(gram_expr)))
#define GRAM_SEQ(b, ...) gram_seq((b), GRAM_LIST_(__VA_ARGS__), GRAM_COUNT_(__VA_ARGS__))
#define GRAM_ALT(b, ...) gram_alt((b), GRAM_LIST_(__VA_ARGS__), GRAM_COUNT_(__VA_ARGS__))

/* Declares a rule (its name is copied, for error messages) and returns its
 * id, or -1 once an allocation has failed; gram_define gives its body. */
int32_t gram_rule(grammar_builder *b, const char *name);
void gram_define(grammar_builder *b, int32_t rule, gram_expr body);
gram_expr gram_call(grammar_builder *b, int32_t rule);

/* Compiles the rules reachable from root.  Fails (naming the rule) on a
 * rule declared but not defined, one that matches the empty string or
 * nothing at all, left recursion, a call that shares its first byte with
 * another alternative, or a grammar past the GRAMMAR_MAX_* bounds. */
int grammar_compile(grammar **out, const grammar_builder *b, int32_t root, llmq_err *err);
void grammar_free(grammar *g);

/* Automaton states and byte classes, for reports. */
int32_t grammar_n_states(const grammar *g);
int32_t grammar_n_classes(const grammar *g);

/* How many frames of a stack, counted from the top, a piece of n bytes can
 * read: n + 1 (the top may return without a byte; every frame under it
 * waits for a byte before it can return) when no call returns into an
 * accepting state, else the whole stack.  Token masks are keyed by them. */
int32_t grammar_reach(const grammar *g, size_t n);

typedef struct grammar_stack {
    int32_t depth;                     /* >= 1 */
    int32_t frames[GRAMMAR_MAX_DEPTH]; /* automaton states, bottom first */
} grammar_stack;

void grammar_start(const grammar *g, grammar_stack *st);

/* Feeds one byte: true and *st advanced if the grammar allows it here;
 * false (and *st unspecified: step a copy) if not. */
bool grammar_step(const grammar *g, grammar_stack *st, uint8_t byte);

/* Feeds n bytes; on false *st is left as it was. */
bool grammar_advance(const grammar *g, grammar_stack *st, const char *bytes, size_t n);

/* Whether the bytes so far are a whole match (every frame accepting). */
bool grammar_complete(const grammar *g, const grammar_stack *st);

#endif
