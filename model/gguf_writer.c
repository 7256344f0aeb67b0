/* gguf_writer: the header is built in memory (metadata is small: a 32000-token
 * vocabulary is under 1 MB), tensor data never is.  Layout as in gguf.c:
 *   "GGUF" u32 3, u64 n_tensors, u64 n_kv, key-values, tensor infos,
 *   zero padding to 32, data section (each tensor at a 32-aligned offset and
 *   padded to 32, as ggml's own writer does). */
#include "model/gguf_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"

#define GW_ALIGN 32
#define GW_VERSION 3
#define GW_MAX_NAME 63 /* ggml's GGML_MAX_NAME (64) includes the NUL */

typedef struct gw_buf {
    uint8_t *p;
    size_t len, cap;
} gw_buf;

typedef struct gw_tensor {
    char *name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    quant_type type;
    uint64_t offset; /* in the data section */
    uint64_t nbytes;
} gw_tensor;

struct gw_writer {
    char *path, *tmp;
    int fd;
    bool committed;
    gw_buf kv; /* serialized key-values */
    char **keys;
    uint64_t n_kv;
    size_t cap_keys;
    gw_tensor *tensors;
    uint64_t n_tensors;
    size_t cap_tensors;
    uint64_t data_end;    /* aligned end of the data section */
    uint64_t data_offset; /* file offset of the data section, once known */
};

static uint64_t align_up(uint64_t x)
{
    return (x + GW_ALIGN - 1) / GW_ALIGN * GW_ALIGN;
}

/* ---- byte buffer ---- */

static int buf_put(gw_buf *b, const void *src, size_t n, llmq_err *err)
{
    if (n > SIZE_MAX / 2 - b->len)
        return llmq_errf(err, "GGUF header too large");
    if (grow_reserve(&b->p, &b->cap, b->len + n, 1))
        return llmq_errf(err, "out of memory for a GGUF header of %zu bytes", b->len + n);
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int put_u32(gw_buf *b, uint32_t v, llmq_err *err)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return buf_put(b, le, sizeof le, err);
}

static int put_u64(gw_buf *b, uint64_t v, llmq_err *err)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    return buf_put(b, le, sizeof le, err);
}

static int put_str(gw_buf *b, const char *s, uint64_t len, llmq_err *err)
{
    return put_u64(b, len, err) || buf_put(b, s, len, err) ? -1 : 0;
}

/* ---- writer ---- */

int gw_new(gw_writer **out, const char *path, llmq_err *err)
{
    *out = NULL;
    gw_writer *w = calloc(1, sizeof *w);
    size_t n = strlen(path);
    char *p = strdup(path), *tmp = malloc(n + 5);
    if (!w || !p || !tmp) {
        free(w);
        free(p);
        free(tmp);
        return llmq_errf(err, "out of memory");
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    w->path = p;
    w->tmp = tmp;
    w->fd = -1;
    *out = w;
    return 0;
}

void gw_free(gw_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0) { /* begun, not committed */
        close(w->fd);
        unlink(w->tmp);
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w->path);
    free(w->tmp);
    free(w);
}

static int check_open(const gw_writer *w, const char *what, const char *name, llmq_err *err)
{
    if (w->fd >= 0 || w->committed)
        return llmq_errf(err, "%s: cannot add %s '%s' after the header was written", w->path, what,
                         name);
    return 0;
}

/* Starts a key-value: checks the key and writes it and the value type. */
static int kv_begin(gw_writer *w, const char *key, gguf_vtype t, llmq_err *err)
{
    if (check_open(w, "key", key, err))
        return -1;
    if (!key[0])
        return llmq_errf(err, "%s: empty metadata key", w->path);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key))
            return llmq_errf(err, "%s: metadata key '%s' added twice", w->path, key);
    if (grow_reserve(&w->keys, &w->cap_keys, w->n_kv + 1, sizeof *w->keys) ||
        !(w->keys[w->n_kv] = strdup(key)))
        return llmq_errf(err, "out of memory");
    w->n_kv++;
    return put_str(&w->kv, key, strlen(key), err) || put_u32(&w->kv, (uint32_t)t, err) ? -1 : 0;
}

int gw_kv_str(gw_writer *w, const char *key, const char *s, uint64_t len, llmq_err *err)
{
    return kv_begin(w, key, GGUF_STRING, err) || put_str(&w->kv, s, len, err) ? -1 : 0;
}

int gw_kv_u32(gw_writer *w, const char *key, uint32_t v, llmq_err *err)
{
    return kv_begin(w, key, GGUF_UINT32, err) || put_u32(&w->kv, v, err) ? -1 : 0;
}

int gw_kv_f32(gw_writer *w, const char *key, float v, llmq_err *err)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return kv_begin(w, key, GGUF_FLOAT32, err) || put_u32(&w->kv, bits, err) ? -1 : 0;
}

int gw_kv_scalar(gw_writer *w, const char *key, gguf_vtype t, const void *le, llmq_err *err)
{
    size_t n = gguf_vtype_size(t);
    if (!n)
        return llmq_errf(err, "%s: key '%s': %s is not a scalar type", w->path, key,
                         gguf_vtype_name(t));
    return kv_begin(w, key, t, err) || buf_put(&w->kv, le, n, err) ? -1 : 0;
}

int gw_kv_array(gw_writer *w, const char *key, gguf_vtype elem, const void *le, uint64_t n,
                llmq_err *err)
{
    size_t sz = gguf_vtype_size(elem);
    if (!sz)
        return llmq_errf(err, "%s: key '%s': arrays of %s need gw_kv_str_array", w->path, key,
                         gguf_vtype_name(elem));
    if (n > SIZE_MAX / sz)
        return llmq_errf(err, "%s: key '%s': array of %" PRIu64 " elements is too large", w->path,
                         key, n);
    return kv_begin(w, key, GGUF_ARRAY, err) || put_u32(&w->kv, (uint32_t)elem, err) ||
                   put_u64(&w->kv, n, err) || buf_put(&w->kv, le, (size_t)n * sz, err)
               ? -1
               : 0;
}

int gw_kv_str_array(gw_writer *w, const char *key, const gguf_str *items, uint64_t n, llmq_err *err)
{
    if (kv_begin(w, key, GGUF_ARRAY, err) || put_u32(&w->kv, GGUF_STRING, err) ||
        put_u64(&w->kv, n, err))
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (put_str(&w->kv, items[i].ptr, items[i].len, err))
            return -1;
    return 0;
}

/* ---- copies ---- */

static void put_le(uint8_t *b, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static int copy_value(gw_writer *w, const gguf_file *f, const char *key, gguf_vtype t,
                      llmq_err *err)
{
    uint8_t le[8];
    switch (t) {
    case GGUF_STRING: {
        gguf_str s;
        return gguf_get_str(f, key, &s, err) ? -1 : gw_kv_str(w, key, s.ptr, s.len, err);
    }
    case GGUF_ARRAY: {
        gguf_vtype et;
        const void *data;
        uint64_t n;
        if (gguf_get_array(f, key, &et, &data, &n, err))
            return -1;
        if (et != GGUF_STRING)
            return gw_kv_array(w, key, et, data, n, err);
        const gguf_str *items;
        return gguf_get_str_array(f, key, &items, &n, err) ? -1
                                                           : gw_kv_str_array(w, key, items, n, err);
    }
    case GGUF_BOOL: {
        bool b;
        if (gguf_get_bool(f, key, &b, err))
            return -1;
        le[0] = b;
        return gw_kv_scalar(w, key, t, le, err);
    }
    case GGUF_FLOAT32: {
        float v;
        return gguf_get_f32(f, key, &v, err) ? -1 : gw_kv_f32(w, key, v, err);
    }
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64: {
        uint64_t v;
        if (gguf_get_u64(f, key, &v, err))
            return -1;
        put_le(le, v, gguf_vtype_size(t));
        return gw_kv_scalar(w, key, t, le, err);
    }
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32: {
        int32_t v;
        if (gguf_get_i32(f, key, &v, err))
            return -1;
        put_le(le, (uint64_t)(int64_t)v, gguf_vtype_size(t));
        return gw_kv_scalar(w, key, t, le, err);
    }
    default:
        return llmq_errf(err, "%s: key '%s' has type %s, which the writer does not copy",
                         gguf_path(f), key, gguf_vtype_name(t));
    }
}

int gw_kv_copy(gw_writer *w, const gguf_file *f, uint64_t i, llmq_err *err)
{
    gguf_str k = gguf_kv_key(f, i);
    char *key = strndup(k.ptr, k.len); /* keys hold no NUL (the reader checks) */
    if (!key)
        return llmq_errf(err, "out of memory");
    int rc = copy_value(w, f, key, gguf_kv_type(f, i), err);
    free(key);
    return rc;
}

/* ---- tensors ---- */

static int tensor_size(const gw_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                       quant_type type, uint64_t *nbytes, llmq_err *err)
{
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return llmq_errf(err, "%s: tensor '%s': %u dims (expected 1 to %d)", w->path, name,
                         (unsigned)n_dims, GGUF_MAX_DIMS);
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] == 0 || rows > UINT64_MAX / ne[d])
            return llmq_errf(err, "%s: tensor '%s': dim %u (%" PRIu64 ") is 0 or overflows",
                             w->path, name, (unsigned)d, ne[d]);
        rows *= ne[d];
    }
    uint64_t row = 0;
    if (ne[0] == 0)
        return llmq_errf(err, "%s: tensor '%s': dim 0 is 0", w->path, name);
    if (quant_row_bytes(type, ne[0], &row, err))
        return llmq_err_prefix(err, "%s: tensor '%s'", w->path, name);
    if (rows > (UINT64_MAX / 2) / row)
        return llmq_errf(err, "%s: tensor '%s' is too large", w->path, name);
    *nbytes = rows * row;
    return 0;
}

int gw_add_tensor(gw_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                  quant_type type, uint64_t *index, llmq_err *err)
{
    if (check_open(w, "tensor", name, err))
        return -1;
    size_t len = strlen(name);
    if (len == 0 || len > GW_MAX_NAME)
        return llmq_errf(err, "%s: tensor name '%s' must have 1 to %d bytes", w->path, name,
                         GW_MAX_NAME);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return llmq_errf(err, "%s: tensor '%s' added twice", w->path, name);
    uint64_t nbytes = 0;
    if (tensor_size(w, name, n_dims, ne, type, &nbytes, err))
        return -1;
    if (w->data_end > UINT64_MAX / 2 - nbytes)
        return llmq_errf(err, "%s: tensor data overflows 64-bit offsets", w->path);
    if (grow_reserve(&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof *w->tensors))
        return llmq_errf(err, "out of memory");
    gw_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return llmq_errf(err, "out of memory");
    t->n_dims = n_dims;
    memcpy(t->ne, ne, n_dims * sizeof *ne);
    t->type = type;
    t->offset = w->data_end;
    t->nbytes = nbytes;
    w->data_end = align_up(w->data_end + nbytes);
    *index = w->n_tensors++;
    return 0;
}

uint64_t gw_data_bytes(const gw_writer *w)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        sum += w->tensors[i].nbytes;
    return sum;
}

static uint64_t header_bytes(const gw_writer *w)
{
    uint64_t n = 4 + 4 + 8 + 8 + w->kv.len;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        n += 8 + strlen(w->tensors[i].name) + 4 + 8 * (uint64_t)w->tensors[i].n_dims + 4 + 8;
    return n;
}

uint64_t gw_file_bytes(const gw_writer *w)
{
    return align_up(header_bytes(w)) + w->data_end;
}

/* ---- output ---- */

static int write_all(const gw_writer *w, const void *buf, size_t len, uint64_t pos, llmq_err *err)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(w->fd, p, len, (off_t)pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return llmq_errf(err, "%s: write of %zu bytes at offset %" PRIu64 " failed: %s", w->tmp,
                             len, pos, n < 0 ? strerror(errno) : "no progress");
        p += n;
        len -= (size_t)n;
        pos += (uint64_t)n;
    }
    return 0;
}

static int serialize_header(const gw_writer *w, gw_buf *h, llmq_err *err)
{
    if (buf_put(h, "GGUF", 4, err) || put_u32(h, GW_VERSION, err) ||
        put_u64(h, w->n_tensors, err) || put_u64(h, w->n_kv, err) ||
        buf_put(h, w->kv.p, w->kv.len, err))
        return -1;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const gw_tensor *t = &w->tensors[i];
        if (put_str(h, t->name, strlen(t->name), err) || put_u32(h, t->n_dims, err))
            return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (put_u64(h, t->ne[d], err))
                return -1;
        if (put_u32(h, (uint32_t)t->type, err) || put_u64(h, t->offset, err))
            return -1;
    }
    static const uint8_t zeros[GW_ALIGN];
    return buf_put(h, zeros, align_up(h->len) - h->len, err);
}

int gw_begin(gw_writer *w, llmq_err *err)
{
    if (w->fd >= 0 || w->committed)
        return llmq_errf(err, "%s: header already written", w->path);
    gw_buf h = {0};
    if (serialize_header(w, &h, err)) {
        free(h.p);
        return -1;
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        free(h.p);
        return llmq_errf(err, "cannot create %s: %s", w->tmp, strerror(errno));
    }
    w->data_offset = h.len;
    int rc = write_all(w, h.p, h.len, 0, err);
    free(h.p);
    if (rc)
        return -1;
    if (ftruncate(w->fd, (off_t)(w->data_offset + w->data_end)))
        return llmq_errf(err, "%s: cannot size the file to %" PRIu64 " bytes: %s", w->tmp,
                         w->data_offset + w->data_end, strerror(errno));
    return 0;
}

int gw_write(const gw_writer *w, uint64_t index, uint64_t off, const void *buf, size_t len,
             llmq_err *err)
{
    if (w->fd < 0)
        return llmq_errf(err, "%s: tensor data written before the header", w->path);
    if (index >= w->n_tensors)
        return llmq_errf(err, "%s: no tensor #%" PRIu64, w->path, index);
    const gw_tensor *t = &w->tensors[index];
    if (off > t->nbytes || len > t->nbytes - off)
        return llmq_errf(err,
                         "%s: tensor '%s': %zu bytes at %" PRIu64 " run past its %" PRIu64 " bytes",
                         w->path, t->name, len, off, t->nbytes);
    return write_all(w, buf, len, w->data_offset + t->offset + off, err);
}

int gw_commit(gw_writer *w, llmq_err *err)
{
    if (w->fd < 0)
        return llmq_errf(err, "%s: nothing to commit (header not written)", w->path);
    int rc = close(w->fd);
    w->fd = -1;
    if (rc) {
        unlink(w->tmp);
        return llmq_errf(err, "%s: close failed: %s", w->tmp, strerror(errno));
    }
    if (rename(w->tmp, w->path)) {
        int e = errno;
        unlink(w->tmp);
        return llmq_errf(err, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(e));
    }
    w->committed = true;
    return 0;
}
