/* tokenmask: which tokens of a vocabulary a grammar (engine/grammar.h)
 * allows next, computed once per automaton state and cached.
 *
 * A token stands for the bytes tok_piece gives, the bytes the engine's text
 * gets: SentencePiece's U+2581 as a space, <0xNN> tokens as their byte,
 * byte-level BPE's characters as the bytes they encode.  A token is allowed
 * when the grammar accepts all of its bytes from the state.  Tokens with no
 * bytes (control tokens) are never allowed; end-of-generation tokens are
 * allowed exactly when the document is complete (grammar_complete).
 *
 * tokenmask_vocab: every token's piece in a byte trie laid out in preorder
 * (each node knows where its subtree ends), built once per vocabulary.  A
 * mask is one walk of the trie from the state, stepping the automaton one
 * byte per node and skipping the subtree of every byte it refuses: tokens
 * that share a prefix share its steps, and a refused prefix costs one step
 * for all the tokens behind it.
 *
 * tokenmask_cache: the masks of one grammar over one vocabulary, computed
 * on first need and keyed by what a token can see of the state: the stack's
 * depth and the frames at its top that a token's bytes can reach
 * (grammar_reach of the longest piece) -- for a grammar without calls, just
 * the DFA state.  At most TOKENMASK_CACHE_MAX masks are kept; past that the
 * cache starts over.  A cache is not thread-safe (one engine, one thread);
 * the grammar and the vocab are borrowed and must outlive it.
 *
 * The engine applies a mask on the host (tokenmask_apply) to a row whose
 * logits come back, or hands it to a backend that samples on the device
 * (tokenmask_allowed_bits, backend_ops.sample), so that a constrained row
 * stays on the GPU. */
#ifndef LLMQ_ENGINE_TOKENMASK_H
#define LLMQ_ENGINE_TOKENMASK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/grammar.h"
#include "model/tokenizer.h"

#define TOKENMASK_CACHE_MAX 4096

typedef struct tokenmask_vocab tokenmask_vocab;

/* Borrows v, which must outlive the trie. */
int tokenmask_vocab_new(tokenmask_vocab **out, const tok_vocab *v, llmq_err *err);
void tokenmask_vocab_free(tokenmask_vocab *tv);

typedef struct tokenmask_cache tokenmask_cache;

int tokenmask_cache_new(tokenmask_cache **out, const grammar *g, const tokenmask_vocab *tv,
                        llmq_err *err);
void tokenmask_cache_free(tokenmask_cache *c);

/* One state's mask: bit t of bits (64 tokens per word) is set when token t
 * may come next; end-of-generation tokens are not in it (see
 * tokenmask_apply).  n_allowed counts the set bits. */
typedef struct tokenmask {
    const uint64_t *bits;
    int32_t n_allowed;
} tokenmask;

/* The mask of st, computed if no state with the same key has been seen.
 * Valid until the next tokenmask_get on c.  Fails only on memory
 * exhaustion. */
int tokenmask_get(tokenmask_cache *c, const grammar_stack *st, tokenmask *out, llmq_err *err);

/* Sets the logits of the tokens m does not allow to -inf; those of the
 * end-of-generation tokens too unless st is complete. */
void tokenmask_apply(const tokenmask_cache *c, const tokenmask *m, const grammar_stack *st,
                     float *logits);

/* The tokens that may come next as bits, 64 tokens per word, ceil(n_vocab
 * / 64) words into out: m's, and the end-of-generation tokens when st is
 * complete -- exactly the tokens tokenmask_apply leaves alone. */
void tokenmask_allowed_bits(const tokenmask_cache *c, const tokenmask *m, const grammar_stack *st,
                            uint64_t *out);

/* Whether token may come next: its bit in m, or for an end-of-generation
 * token, whether st is complete. */
bool tokenmask_allows(const tokenmask_cache *c, const tokenmask *m, const grammar_stack *st,
                      int32_t token);

/* Advances st by token's bytes; false (st unchanged) if the grammar does
 * not take them, or the token is out of range or has no bytes.  An
 * end-of-generation token leaves st as it is: true when it is complete. */
bool tokenmask_accept(const tokenmask_cache *c, grammar_stack *st, int32_t token);

/* Masks computed and lookups answered from the cache so far (benchmarks). */
typedef struct tokenmask_stats {
    uint64_t computed;
    uint64_t hits;
    uint64_t trie_steps; /* automaton steps of the trie walks */
} tokenmask_stats;

tokenmask_stats tokenmask_get_stats(const tokenmask_cache *c);

/* Nodes of the trie (benchmarks). */
int32_t tokenmask_vocab_nodes(const tokenmask_vocab *tv);

#endif
