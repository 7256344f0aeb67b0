/* err: errors are values.
 *
 * A function that can fail returns 0 on success and -1 on failure, after
 * writing into the caller's llmq_err a message that says what went wrong and
 * where (file, offset, key, tensor, job id, field).  Callers add context by
 * prefixing: llmq_err_prefix(err, "loading %s", path).  No global state. */
#ifndef LLMQ_COMMON_ERR_H
#define LLMQ_COMMON_ERR_H

#include <stddef.h>

#define LLMQ_ERR_MAX 512

typedef struct llmq_err {
    char msg[LLMQ_ERR_MAX];
} llmq_err;

/* Writes the message (printf format) and returns -1.  err may be NULL. */
int llmq_errf(llmq_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "context: " to the current message and returns -1. */
int llmq_err_prefix(llmq_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
