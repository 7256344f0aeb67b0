#include "common/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

/* The least room each read is offered: few calls for big files. */
#define READ_CHUNK 65536

int file_read_all(const char *path, char **buf, size_t *len, llmq_err *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return llmq_errf(err, "%s: %s", path, strerror(errno));
    char *data = NULL;
    size_t cap = 0, n = 0, got;
    do {
        /* Room to read a chunk and, after the last, to add the NUL. */
        if (grow_reserve(&data, &cap, n + READ_CHUNK, 1) < 0) {
            free(data);
            if (f != stdin)
                fclose(f);
            return llmq_errf(err, "%s: out of memory after %zu bytes", path, n);
        }
        got = fread(data + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    int failed = ferror(f);
    if (f != stdin)
        fclose(f);
    if (failed) {
        free(data);
        return llmq_errf(err, "%s: read error", path);
    }
    data[n] = '\0';
    *buf = data;
    *len = n;
    return 0;
}
