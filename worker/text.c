#include "worker/text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* The next piece of output at s[0..n): the valid character there, or U+FFFD
 * for one bad byte; *used receives the input bytes it stands for. */
static const char *next_piece(const char *s, size_t n, size_t *len, size_t *used)
{
    uint32_t cp;
    size_t k = utf8_decode(s, n, &cp);
    if (k == 0 || cp == 0) {
        *used = 1;
        *len = sizeof REPLACEMENT - 1;
        return REPLACEMENT;
    }
    *used = *len = k;
    return s;
}

/* Two passes, so a large clean text costs one copy of its own size. */
char *text_clean(const char *s, size_t n, size_t max_bytes)
{
    size_t out_len = 0, len, used;
    for (size_t i = 0; i < n; i += used) {
        next_piece(s + i, n - i, &len, &used);
        if (out_len + len > max_bytes)
            break;
        out_len += len;
    }
    char *out = malloc(out_len + 1);
    if (!out)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; at < out_len; i += used) {
        const char *piece = next_piece(s + i, n - i, &len, &used);
        memcpy(out + at, piece, len);
        at += len;
    }
    out[out_len] = '\0';
    return out;
}
