/* text: strings the wire accepts.
 *
 * Wire strings are valid UTF-8 without NUL bytes (docs/PROTOCOL.md §2), but
 * what a worker sends is not always so: generated text is the model's bytes
 * (a token may end in the middle of a character, a byte token may be 0x00),
 * host and file names are whatever the system has.  A string the broker
 * cannot decode would be refused and, for a result, leave its job running
 * forever; so such text is repaired, not sent as is. */
#ifndef LLMQ_WORKER_TEXT_H
#define LLMQ_WORKER_TEXT_H

#include <stddef.h>

/* A malloc'd, NUL-terminated copy of s[0..n) in which every byte that is not
 * part of a valid UTF-8 sequence, and every NUL, is replaced by U+FFFD,
 * cut at a character boundary to at most max_bytes; NULL when memory runs
 * out. */
char *text_clean(const char *s, size_t n, size_t max_bytes);

#endif
