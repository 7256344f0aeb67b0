/* err: errors are values.
 *
 * A function that can fail returns 0 on success and -1 on failure, after
 * writing into the caller's llmq_err a message that says what went wrong and
 * where (file, offset, key, tensor, job id, field), and a code that says what
 * kind of failure it is.  Callers add context by prefixing:
 * llmq_err_prefix(err, "loading %s", path), which keeps the code, so that a
 * caller far from where the error was made can decide on the kind without
 * reading the text (retry elsewhere or fail for good; which error type a
 * reply carries: proto/wire.h maps the codes, in one place).  No global
 * state. */
#ifndef LLMQ_COMMON_ERR_H
#define LLMQ_COMMON_ERR_H

#include <stddef.h>

#define LLMQ_ERR_MAX 512

/* Kinds of failure, as SQLite's result codes are: few, and each one
 * calling for a different reaction. */
typedef enum llmq_err_code {
    LLMQ_ERR_GENERIC = 0, /* not classified where it was made (llmq_errf) */
    LLMQ_ERR_INVALID,     /* bad input (a request field, a file's content, a token id):
                             the same input fails again, anywhere */
    LLMQ_ERR_NO_ROOM,     /* a resource ran out (memory, sequence slots, KV blocks, queue
                             space): the same input may succeed later or elsewhere */
    LLMQ_ERR_UNAVAILABLE, /* this process cannot serve it now (it is stopping, serves
                             another model, its engine failed): another one may */
    LLMQ_ERR_IO,          /* a read, write or socket operation failed */
    LLMQ_ERR_INTERNAL,    /* a broken invariant, or a library we call failed */
    LLMQ_ERR_CODE_COUNT
} llmq_err_code;

typedef struct llmq_err {
    char msg[LLMQ_ERR_MAX];
    llmq_err_code code;
} llmq_err;

/* Writes the message (printf format) with code LLMQ_ERR_GENERIC and
 * returns -1.  err may be NULL. */
int llmq_errf(llmq_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* llmq_errf with a code. */
int llmq_errc(llmq_err *err, llmq_err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "context: " to the current message, keeping its code, and
 * returns -1.  A chain that outgrows LLMQ_ERR_MAX loses its middle (marked
 * "..."): its start, the outermost context, and its end, the cause, stay;
 * cuts fall between UTF-8 characters. */
int llmq_err_prefix(llmq_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "generic", "invalid", "no_room", "unavailable", "io", "internal";
 * "?" out of range. */
const char *llmq_err_code_name(llmq_err_code code);

#endif
