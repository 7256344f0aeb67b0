/* utf8: strict UTF-8 checking and encoding (RFC 3629).
 *
 * Valid means: no overlong forms, no surrogates (U+D800..U+DFFF), nothing
 * above U+10FFFF, no truncated sequences.  Used wherever text from outside
 * (msgpack strings, JSON input) must be clean before it is stored or echoed. */
#ifndef LLMQ_COMMON_UTF8_H
#define LLMQ_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the longest valid UTF-8 prefix of s[0..n): n when all of it is valid. */
size_t utf8_valid_prefix(const char *s, size_t n);

/* Length in bytes (1..4) of the sequence starting at s[0..n), or 0 when the
 * bytes there are not one valid sequence; *cp receives the code point. */
size_t utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Writes the UTF-8 form of code point cp (<= U+10FFFF, not a surrogate) to
 * out and returns its length (1..4); 0 for a value that is not a scalar. */
size_t utf8_encode(uint32_t cp, char out[4]);

#endif
