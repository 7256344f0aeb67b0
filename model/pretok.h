/* pretok: the pre-tokenizers of byte-level BPE vocabularies, as data.
 *
 * A byte-level BPE vocabulary (tokenizer.ggml.model = gpt2) first cuts text
 * into words with a regex named by tokenizer.ggml.pre, then merges inside each
 * word.  The regexes are implemented by hand, as llama.cpp does for speed, so
 * each pre-tokenizer is a chain of split functions: every function cuts each
 * piece left by the previous one.  A table maps `pre` names to chains, so a
 * new pre-tokenizer is one row plus, at most, one split function.
 *
 * Text is handled as Unicode code points decoded the way llama.cpp decodes
 * (pretok_decode): a byte that does not start a well-formed sequence becomes
 * U+FFFD.  Character classes (\p{L}, \p{N}, \p{P}) come from utf8proc,
 * whitespace (\s) is the Unicode White_Space property.
 *
 * Ownership: pretok_find returns a pointer to a constant table entry; the
 * arrays the other functions return are malloc'd and owned by the caller. */
#ifndef LLMQ_MODEL_PRETOK_H
#define LLMQ_MODEL_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct pretok pretok;

/* The pre-tokenizer named `name` (len bytes), or NULL when unknown.  A NULL
 * name (key absent) selects "default", as llama.cpp does. */
const pretok *pretok_find(const char *name, size_t len);

/* Comma-separated names of every known pre-tokenizer (for error messages). */
const char *pretok_known_names(void);

/* A word that is itself a token is emitted whole, without merging (llama3). */
bool pretok_ignore_merges(const pretok *p);
/* The vocabulary adds BOS unless tokenizer.ggml.add_bos_token says otherwise. */
bool pretok_default_add_bos(const pretok *p);

/* Decodes len bytes into *cpts (*n code points), llama.cpp-style: truncated
 * or stray bytes become U+FFFD one byte at a time; no overlong/surrogate check. */
int pretok_decode(const char *text, size_t len, uint32_t **cpts, size_t *n, llmq_err *err);

/* Splits n code points into words: *lens gets the length of each word in
 * code points (*n_words of them, summing to n). */
int pretok_split(const pretok *p, const uint32_t *cpts, size_t n, size_t **lens, size_t *n_words,
                 llmq_err *err);

/* Appends the UTF-8 encoding of cpt (U+FFFD for values past U+10FFFF) to out,
 * which has room for 4 bytes; returns the number of bytes written. */
size_t pretok_encode_cpt(uint32_t cpt, char *out);

#endif
