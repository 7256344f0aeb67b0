#include "broker/lpblob.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_HEAD 10 /* u32 token, f32 logprob, u16 n_bytes */

static size_t record_size(const wire_logprob *lp)
{
    return RECORD_HEAD + lp->n_bytes;
}

size_t lpblob_size(const wire_token_logprobs *v, uint32_t n)
{
    size_t size = 0;
    for (uint32_t i = 0; i < n; i++) {
        size += record_size(&v[i].chosen) + 1;
        for (uint32_t k = 0; k < v[i].n_top; k++)
            size += record_size(&v[i].top[k]);
    }
    return size;
}

static uint8_t *put_le(uint8_t *p, uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_record(uint8_t *p, const wire_logprob *lp)
{
    uint32_t bits;
    memcpy(&bits, &lp->logprob, sizeof bits);
    p = put_le(p, lp->token, 4);
    p = put_le(p, bits, 4);
    p = put_le(p, lp->n_bytes, 2);
    if (lp->n_bytes)
        memcpy(p, lp->bytes, lp->n_bytes);
    return p + lp->n_bytes;
}

void lpblob_pack(const wire_token_logprobs *v, uint32_t n, uint8_t *out)
{
    for (uint32_t i = 0; i < n; i++) {
        out = put_record(out, &v[i].chosen);
        *out++ = (uint8_t)v[i].n_top;
        for (uint32_t k = 0; k < v[i].n_top; k++)
            out = put_record(out, &v[i].top[k]);
    }
}

/* ---- reading ---- */

typedef struct reader {
    const uint8_t *p;
    size_t left;
} reader;

static uint32_t get_le(const uint8_t *p, int bytes)
{
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* One record, its bytes pointing into the blob; false when it is cut or out
 * of the wire's limits (those are what clients are promised). */
static bool get_record(reader *r, wire_logprob *lp)
{
    if (r->left < RECORD_HEAD)
        return false;
    const uint32_t bits = get_le(r->p + 4, 4);
    lp->token = get_le(r->p, 4);
    memcpy(&lp->logprob, &bits, sizeof bits);
    lp->n_bytes = get_le(r->p + 8, 2);
    lp->bytes = r->p + RECORD_HEAD;
    if (r->left - RECORD_HEAD < lp->n_bytes ||
        lp->n_bytes > WIRE_MAX_TOKEN_BYTES || lp->token > WIRE_MAX_TOKEN_ID ||
        !(lp->logprob >= WIRE_LOGPROB_FLOOR && lp->logprob <= 0.0f))
        return false;
    r->p += RECORD_HEAD + lp->n_bytes;
    r->left -= RECORD_HEAD + lp->n_bytes;
    return true;
}

/* Walks the blob: counts entries, alternatives and bytes, or fails. */
static bool measure(reader r, uint32_t *n, size_t *n_top, size_t *n_bytes)
{
    *n = 0;
    *n_top = *n_bytes = 0;
    while (r.left > 0) {
        wire_logprob lp;
        if (!get_record(&r, &lp) || r.left < 1 ||
            r.p[0] > WIRE_MAX_TOP_LOGPROBS)
            return false;
        *n_bytes += lp.n_bytes;
        const uint32_t k = *r.p++;
        r.left--;
        for (uint32_t j = 0; j < k; j++) {
            if (!get_record(&r, &lp))
                return false;
            *n_bytes += lp.n_bytes;
        }
        *n_top += k;
        (*n)++;
    }
    return true;
}

/* Copies a record's bytes into the block's byte area. */
static void keep_bytes(wire_logprob *lp, uint8_t **area)
{
    if (lp->n_bytes)
        memcpy(*area, lp->bytes, lp->n_bytes);
    lp->bytes = *area;
    *area += lp->n_bytes;
}

int lpblob_unpack(const uint8_t *p, size_t len, wire_token_logprobs **out,
                  uint32_t *n, llmq_err *err)
{
    *out = NULL;
    size_t n_top, n_bytes;
    reader r = {p, len};
    if (!measure(r, n, &n_top, &n_bytes))
        return llmq_errc(err, LLMQ_ERR_INTERNAL,
                         "logprobs: %zu bytes that are not whole records", len);
    const size_t entries = (size_t)*n * sizeof **out,
                 tops = n_top * sizeof(wire_logprob);
    uint8_t *block = malloc(entries + tops + n_bytes + 1);
    if (!block)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM,
                         "logprobs: out of memory for %u entries", *n);
    wire_token_logprobs *v = (wire_token_logprobs *)(void *)block;
    wire_logprob *top = (wire_logprob *)(void *)(block + entries);
    uint8_t *area = block + entries + tops;
    for (uint32_t i = 0; i < *n; i++) {
        get_record(&r, &v[i].chosen);
        keep_bytes(&v[i].chosen, &area);
        v[i].n_top = *r.p++;
        r.left--;
        v[i].top = top;
        for (uint32_t k = 0; k < v[i].n_top; k++, top++) {
            get_record(&r, top);
            keep_bytes(top, &area);
        }
    }
    *out = v;
    return 0;
}

int lpblob_dup(const wire_token_logprobs *v, uint32_t n,
               wire_token_logprobs **out, llmq_err *err)
{
    const size_t size = lpblob_size(v, n);
    uint8_t *packed = malloc(size ? size : 1);
    if (!packed)
        return llmq_errc(err, LLMQ_ERR_NO_ROOM,
                         "logprobs: out of memory for %zu bytes", size);
    lpblob_pack(v, n, packed);
    uint32_t back;
    int rc = lpblob_unpack(packed, size, out, &back, err);
    free(packed);
    return rc;
}
