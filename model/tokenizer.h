/* tokenizer: text <-> token ids, driven by a GGUF file's tokenizer.ggml.*
 * metadata and giving exactly the ids llama.cpp gives.
 *
 * Two vocabulary kinds (tokenizer.ggml.model):
 *   "llama"  SentencePiece: spaces escaped as U+2581, a space prefixed to each
 *            text run (add_space_prefix), highest-score bigram merges, bytes
 *            of unknown characters as <0xNN> tokens (else the unknown token).
 *   "gpt2"   byte-level BPE: bytes mapped to printable code points, text cut
 *            into words by the pre-tokenizer named by tokenizer.ggml.pre
 *            (model/pretok.h), lowest-rank merges of .merges.
 * Special tokens (control, user-defined, unknown) written in the text are
 * recognised before either algorithm runs: user-defined ones always, control
 * and unknown ones when parse_special is set (llama.cpp's rules).
 *
 * A tok_vocab copies what it needs from the gguf_file, which may be closed
 * after tok_load.  It is immutable after loading: one vocab may be shared by
 * threads.  Token ids are int32_t; TOK_NONE (-1) means "no such token".
 * Malformed metadata (missing or mistyped arrays, lengths that disagree,
 * merges that are not "left right", special ids past the vocabulary) is
 * refused at load with an error naming the key and index. */
#ifndef LLMQ_MODEL_TOKENIZER_H
#define LLMQ_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "model/gguf.h"

#define TOK_NONE (-1)

typedef struct tok_vocab tok_vocab;

int tok_load(tok_vocab **out, const gguf_file *f, llmq_err *err);
void tok_free(tok_vocab *v);

uint32_t tok_n_vocab(const tok_vocab *v);
/* "llama" or "gpt2". */
const char *tok_model(const tok_vocab *v);

/* Special ids, or TOK_NONE. */
int32_t tok_bos(const tok_vocab *v);
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v);
int32_t tok_unk(const tok_vocab *v);
int32_t tok_pad(const tok_vocab *v);

/* End of generation, llama.cpp's set (c2b1518): eos, eot, eom, the tokens it
 * recognises by their text (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>,
 * <|endoftext|>, <|end_of_text|>, </s>, ...; each is made a control token
 * too) and the first FIM pad, repo and file-separator tokens.  The engine
 * stops a sequence at any of them unless asked not to. */
bool tok_is_eog(const tok_vocab *v, int32_t id);
/* The whole set, ascending: *ids points into the vocab; returns its size. */
size_t tok_eog(const tok_vocab *v, const int32_t **ids);
/* Control or unknown: not rendered as text unless asked for. */
bool tok_is_control(const tok_vocab *v, int32_t id);

/* What the model asks for (tokenizer.ggml.add_bos_token / add_eos_token,
 * defaulting as llama.cpp does: BOS for "llama" and Llama-3 BPE). */
bool tok_add_bos(const tok_vocab *v);
bool tok_add_eos(const tok_vocab *v);

/* Tokenizes len bytes of text (any bytes; NULs included) into a malloc'd
 * array *ids of *n ids, which the caller frees (NULL when *n is 0).  Bytes
 * that are not UTF-8 become U+FFFD for byte-level BPE, as in llama.cpp;
 * SentencePiece passes them through byte tokens.  add_bos prepends BOS (an
 * error if the vocabulary has none); pass tok_add_bos(v) for the model's
 * wish.  parse_special: control tokens written in the text (e.g. "<s>") are
 * taken as those tokens.  Fails only on memory exhaustion or a character no
 * token can represent (no byte token and no unknown token). */
int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
               int32_t **ids, size_t *n, llmq_err *err);

/* A run of the text tok_encode_segments tokenizes: its length, and whether
 * control tokens written in it are taken as those tokens. */
typedef struct tok_segment {
    size_t len;
    bool parse_special;
} tok_segment;

/* tok_encode of text[0..len), cut into segments whose lengths add up to len
 * (else LLMQ_ERR_INVALID): a control or unknown token written in the text is
 * taken as that token only where it lies wholly inside a run of
 * parse_special segments, and is text anywhere else, as with parse_special
 * false (user-defined tokens are found everywhere, as always).  The text
 * between the tokens found is tokenized as one run whatever segments it
 * spans, so its merges are those of the whole string: the ids are
 * tok_encode's with parse_special true when no control token's text lies
 * outside those segments.  This is how a chat prompt is tokenized, control
 * tokens coming only from its template's text (model/chat.h). */
int tok_encode_segments(const tok_vocab *v, const char *text, size_t len, const tok_segment *segs,
                        size_t n_segs, bool add_bos, int32_t **ids, size_t *n, llmq_err *err);

/* The bytes id stands for (llama_token_to_piece): U+2581 -> space, <0xNN> ->
 * that byte, byte-level BPE characters -> their bytes; control and unknown
 * tokens are empty unless `special`.  Points into the vocab (not
 * NUL-terminated); NULL when id is out of range. */
/* The vocabulary's own string for id (U+2581 and byte-level characters
 * included), not NUL-terminated; NULL when id is out of range. */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len);
const char *tok_piece(const tok_vocab *v, int32_t id, bool special, size_t *len);
/* The longest piece of any token, in bytes. */
size_t tok_max_piece(const tok_vocab *v);

/* Flags of tok_detokenize and tok_stream. */
enum {
    TOK_SPECIAL = 1,     /* render control and unknown tokens as their text */
    TOK_STRIP_SPACE = 2, /* drop one leading space of the first token's piece
                            when the vocabulary prefixes spaces (SentencePiece),
                            so detokenize(tokenize(s)) == s without BOS */
};

/* The concatenated pieces of n ids, as a malloc'd NUL-terminated string
 * (*len bytes before the NUL).  Bytes are returned as they are, valid UTF-8
 * or not.  Fails on an id out of range or memory exhaustion. */
int tok_detokenize(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char **text,
                   size_t *len, llmq_err *err);

/* Streaming detokenization for output produced one token at a time: text
 * comes out as soon as it is complete UTF-8, and a multi-byte character split
 * across tokens is held back until its last byte arrives.  Bytes that can
 * never complete a character (stray continuation bytes, invalid leads) are
 * passed through at once.  The stream borrows the vocab, which must outlive it. */
typedef struct tok_stream tok_stream;

int tok_stream_new(tok_stream **out, const tok_vocab *v, unsigned flags, llmq_err *err);
void tok_stream_free(tok_stream *s);
/* Feeds one token; *text and *len receive the bytes now ready (possibly none),
 * valid until the next call on s.  Fails only on an id out of range. */
int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len, llmq_err *err);
/* Ends the stream: the bytes still held back (an incomplete character), as
 * they are.  The stream may then be reused as if new. */
void tok_stream_flush(tok_stream *s, const char **text, size_t *len);

#endif
