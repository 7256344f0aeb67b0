#include "common/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (n + 1 >= cap) {
            cap = cap ? cap * 2 : 65536;
            char *grown = realloc(data, cap);
            if (!grown) {
                free(data);
                if (f != stdin)
                    fclose(f);
                return llmq_errf(err, "%s: out of memory after %zu bytes", path, n);
            }
            data = grown;
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
