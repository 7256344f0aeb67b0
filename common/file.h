/* file: whole-file reads for small inputs (prompts, texts, key files). */
#ifndef LLMQ_COMMON_FILE_H
#define LLMQ_COMMON_FILE_H

#include <stddef.h>

#include "common/err.h"

/* Reads all of path ("-" is standard input) into a malloc'd buffer with a
 * NUL after the last byte (*len excludes it).  The error names the file. */
int file_read_all(const char *path, char **buf, size_t *len, llmq_err *err);

#endif
