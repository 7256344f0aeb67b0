/* gguf: parse and validate a whole GGUF header before exposing any of it.
 *
 * Layout (little-endian; v2 and v3 are read identically: v3 only allowed
 * big-endian files, which we refuse; v1 had 32-bit counts and is refused):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x (string key, u32 type, value),
 *   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset),
 *   padding to general.alignment, then the data section.
 * A string is u64 length + bytes; an array is u32 element type + u64 count +
 * elements.  Tensor offsets are relative to the data section.
 *
 * Memory is bounded by the bytes actually parsed, never by a count read from
 * the file: entry tables grow as entries are read, and a string array's table
 * is allocated only after all its strings were found in the file. */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/grow.h"

/* Smallest encodings of a key-value and a tensor info, to refuse counts that
 * cannot fit in the bytes left before reading any entry. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)             /* key length, key, type, u8 */
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8) /* name, n_dims, one dim, type, offset */
#define NAME_SHOWN 64 /* bytes of a key or tensor name quoted in messages */
#define QUOTE_CAP (NAME_SHOWN * 4 + 4)

struct gguf_kv {
    gguf_str key;
    uint64_t off;     /* file offset of the entry */
    uint64_t val_off; /* file offset of the value */
    gguf_vtype type;
    const uint8_t *val;   /* scalar value, or first array element */
    gguf_str str;         /* GGUF_STRING */
    gguf_vtype elem_type; /* GGUF_ARRAY */
    uint64_t n;           /* GGUF_ARRAY */
    gguf_str *strs;       /* GGUF_ARRAY of GGUF_STRING, owned */
};

struct tensor_rec {
    gguf_tensor t;
    gguf_str raw_name;   /* in the mapping */
    uint64_t off;        /* file offset of the tensor info */
    uint64_t offset_off; /* file offset of its data offset field */
};

/* Open addressing over entry indices (slot = index + 1, 0 = empty). */
typedef struct name_index {
    uint64_t *slots;
    uint64_t mask;
} name_index;

struct gguf_file {
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when we mmap'd base */
    char *path;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    struct gguf_kv *kv;
    uint64_t n_kv;
    size_t cap_kv;
    struct tensor_rec *tensors;
    uint64_t n_tensors;
    size_t cap_tensors;
    char *names; /* NUL-terminated tensor names, one block */
    name_index kv_index, tensor_index;
};

typedef struct parser {
    gguf_file *f;
    uint64_t pos;
    char ctx[QUOTE_CAP + 32]; /* "key 'x': " or "tensor 'y': " or "" */
    llmq_err *err;
} parser;

/* ---- small helpers ---- */

static uint16_t le16(const uint8_t *b)
{
    return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t le64(const uint8_t *b)
{
    return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

/* A name as printable ASCII, cut at NAME_SHOWN bytes: names come from the file. */
static void quote(char buf[QUOTE_CAP], gguf_str s)
{
    size_t o = 0;
    for (uint64_t i = 0; i < s.len && i < NAME_SHOWN; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, QUOTE_CAP - o, "\\x%02x", c);
    }
    if (s.len > NAME_SHOWN)
        o += (size_t)snprintf(buf + o, QUOTE_CAP - o, "...");
    buf[o] = '\0';
}

static int fail(const parser *p, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(const parser *p, uint64_t off, const char *fmt, ...)
{
    char detail[LLMQ_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return llmq_errf(p->err, "%s: offset %" PRIu64 ": %s%s", p->f->path, off, p->ctx, detail);
}

static void set_ctx(parser *p, const char *what, gguf_str name)
{
    char q[QUOTE_CAP];
    quote(q, name);
    snprintf(p->ctx, sizeof p->ctx, "%s '%s': ", what, q);
}

static uint64_t left(const parser *p)
{
    return p->f->size - p->pos;
}

static int take(parser *p, uint64_t n, const char *what, const uint8_t **out)
{
    if (n > left(p))
        return fail(p, p->pos,
                    "%s needs %" PRIu64 " bytes, only %" PRIu64 " left (truncated file?)", what, n,
                    left(p));
    *out = p->f->base + p->pos;
    p->pos += n;
    return 0;
}

static int read_u32(parser *p, const char *what, uint32_t *v)
{
    const uint8_t *b = NULL;
    if (take(p, 4, what, &b))
        return -1;
    *v = le32(b);
    return 0;
}

static int read_u64(parser *p, const char *what, uint64_t *v)
{
    const uint8_t *b = NULL;
    if (take(p, 8, what, &b))
        return -1;
    *v = le64(b);
    return 0;
}

static int read_str(parser *p, const char *what, gguf_str *s)
{
    uint64_t off = p->pos, len;
    if (read_u64(p, what, &len))
        return -1;
    if (len > left(p))
        return fail(p, off,
                    "%s length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes left)",
                    what, len, left(p));
    s->ptr = (const char *)p->f->base + p->pos;
    s->len = len;
    p->pos += len;
    return 0;
}

/* Keys and tensor names are looked up by C string, so they must be one. */
static int check_name(parser *p, uint64_t off, const char *what, gguf_str s)
{
    if (s.len == 0)
        return fail(p, off, "empty %s", what);
    if (memchr(s.ptr, '\0', s.len))
        return fail(p, off, "%s contains a NUL byte", what);
    return 0;
}

/* Room for one more entry; tables grow with what was parsed, not with counts. */
static int reserve(parser *p, void *array, size_t *cap, uint64_t n, size_t elem)
{
    return grow_reserve(array, cap, (size_t)n + 1, elem) ? fail(p, p->pos, "out of memory") : 0;
}

/* ---- name index ---- */

/* An indexed entry: its name and where it starts in the file (for messages). */
typedef struct entry_ref {
    gguf_str name;
    uint64_t off;
} entry_ref;

typedef entry_ref (*entry_fn)(const gguf_file *f, uint64_t i);

static entry_ref kv_entry(const gguf_file *f, uint64_t i)
{
    return (entry_ref){f->kv[i].key, f->kv[i].off};
}

static entry_ref tensor_entry(const gguf_file *f, uint64_t i)
{
    return (entry_ref){f->tensors[i].raw_name, f->tensors[i].off};
}

static uint64_t hash_str(gguf_str s)
{
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (uint64_t i = 0; i < s.len; i++)
        h = (h ^ (unsigned char)s.ptr[i]) * 0x100000001b3u;
    return h;
}

static bool str_same(gguf_str a, gguf_str b)
{
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static int64_t index_find(const name_index *ix, const gguf_file *f, entry_fn entry, gguf_str s)
{
    if (!ix->slots)
        return -1;
    for (uint64_t h = hash_str(s) & ix->mask; ix->slots[h]; h = (h + 1) & ix->mask)
        if (str_same(entry(f, ix->slots[h] - 1).name, s))
            return (int64_t)(ix->slots[h] - 1);
    return -1;
}

/* Index entries 0..n-1, refusing a name seen twice ("duplicate <noun>"). */
static int index_build(parser *p, name_index *ix, uint64_t n, entry_fn entry, const char *what,
                       const char *noun)
{
    if (n == 0)
        return 0;
    uint64_t size = 8;
    while (size < 2 * n)
        size *= 2;
    ix->slots = calloc(size, sizeof *ix->slots);
    if (!ix->slots)
        return fail(p, p->pos, "out of memory");
    ix->mask = size - 1;
    for (uint64_t i = 0; i < n; i++) {
        entry_ref e = entry(p->f, i);
        int64_t j = index_find(ix, p->f, entry, e.name);
        if (j >= 0) {
            set_ctx(p, what, e.name);
            return fail(p, e.off, "duplicate %s (first at offset %" PRIu64 ")", noun,
                        entry(p->f, (uint64_t)j).off);
        }
        uint64_t h = hash_str(e.name) & ix->mask;
        while (ix->slots[h])
            h = (h + 1) & ix->mask;
        ix->slots[h] = i + 1;
    }
    return 0;
}

/* ---- header ---- */

static int parse_header(parser *p, uint64_t *n_tensors, uint64_t *n_kv)
{
    const uint8_t *m = NULL;
    if (take(p, 4, "magic", &m))
        return -1;
    if (memcmp(m, "GGUF", 4) != 0)
        return fail(p, 0, "bad magic %02x %02x %02x %02x (not a GGUF file)", m[0], m[1], m[2],
                    m[3]);
    uint32_t v;
    if (read_u32(p, "version", &v))
        return -1;
    if (v == 1)
        return fail(p, 4, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (v == 0x02000000 || v == 0x03000000)
        return fail(p, 4, "big-endian GGUF files are not supported");
    if (v != 2 && v != 3)
        return fail(p, 4, "unsupported GGUF version %" PRIu32 " (only versions 2 and 3)", v);
    p->f->version = v;
    if (read_u64(p, "tensor count", n_tensors) || read_u64(p, "key-value count", n_kv))
        return -1;
    if (*n_tensors > left(p) / MIN_TENSOR_BYTES)
        return fail(p, 8, "tensor count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                    *n_tensors, left(p));
    if (*n_kv > left(p) / MIN_KV_BYTES)
        return fail(p, 16, "key-value count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                    *n_kv, left(p));
    if (*n_tensors * MIN_TENSOR_BYTES + *n_kv * MIN_KV_BYTES > left(p))
        return fail(p, 8,
                    "%" PRIu64 " tensors and %" PRIu64 " key-values cannot fit in the %" PRIu64
                    " bytes left",
                    *n_tensors, *n_kv, left(p));
    return 0;
}

/* ---- key-values ---- */

static int parse_scalars(parser *p, gguf_vtype t, uint64_t n, const uint8_t **out)
{
    uint64_t off = p->pos, sz = gguf_vtype_size(t);
    if (n > left(p) / sz)
        return fail(p, off,
                    "%" PRIu64 " values of type %s run past the end of the file (%" PRIu64
                    " bytes left)",
                    n, gguf_vtype_name(t), left(p));
    *out = p->f->base + off;
    if (t == GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if ((*out)[i] > 1)
                return fail(p, off + i, "bool value %u is neither 0 nor 1", (*out)[i]);
    p->pos += n * sz;
    return 0;
}

static int parse_str_array(parser *p, struct gguf_kv *kv)
{
    uint64_t start = p->pos;
    kv->val = p->f->base + start;
    gguf_str s;
    /* Find every string first, so the table is only as large as what is there. */
    for (uint64_t i = 0; i < kv->n; i++)
        if (read_str(p, "array string", &s))
            return -1;
    if (kv->n == 0)
        return 0;
    kv->strs = malloc(kv->n * sizeof *kv->strs); /* n <= bytes parsed / 8 */
    if (!kv->strs)
        return fail(p, start, "out of memory for %" PRIu64 " strings", kv->n);
    p->pos = start;
    for (uint64_t i = 0; i < kv->n; i++)
        read_str(p, "array string", &kv->strs[i]);
    return 0;
}

static int parse_array(parser *p, struct gguf_kv *kv)
{
    uint64_t off = p->pos;
    uint32_t et;
    if (read_u32(p, "array element type", &et))
        return -1;
    if (et > GGUF_FLOAT64)
        return fail(p, off, "unknown array element type %" PRIu32, et);
    if (et == GGUF_ARRAY) /* llama.cpp files never nest arrays */
        return fail(p, off, "arrays of arrays are not supported");
    kv->elem_type = (gguf_vtype)et;
    if (read_u64(p, "array length", &kv->n))
        return -1;
    if (et == GGUF_STRING)
        return parse_str_array(p, kv);
    return parse_scalars(p, kv->elem_type, kv->n, &kv->val);
}

static int parse_value(parser *p, struct gguf_kv *kv)
{
    kv->val_off = p->pos;
    if (kv->type == GGUF_STRING)
        return read_str(p, "string value", &kv->str);
    if (kv->type == GGUF_ARRAY)
        return parse_array(p, kv);
    return parse_scalars(p, kv->type, 1, &kv->val);
}

static int parse_kv(parser *p, uint64_t i)
{
    gguf_file *f = p->f;
    if (reserve(p, &f->kv, &f->cap_kv, f->n_kv, sizeof *f->kv))
        return -1;
    struct gguf_kv *kv = &f->kv[f->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->off = p->pos;
    snprintf(p->ctx, sizeof p->ctx, "key-value #%" PRIu64 ": ", i);
    if (read_str(p, "key", &kv->key) || check_name(p, kv->off, "key", kv->key))
        return -1;
    set_ctx(p, "key", kv->key);
    uint64_t toff = p->pos;
    uint32_t t;
    if (read_u32(p, "value type", &t))
        return -1;
    if (t > GGUF_FLOAT64)
        return fail(p, toff, "unknown value type %" PRIu32, t);
    kv->type = (gguf_vtype)t;
    f->n_kv++; /* counted now so that gguf_close frees a partial string table */
    return parse_value(p, kv);
}

static int parse_kvs(parser *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (parse_kv(p, i))
            return -1;
    p->ctx[0] = '\0';
    return index_build(p, &p->f->kv_index, p->f->n_kv, kv_entry, "key", "key");
}

static int read_alignment(parser *p)
{
    gguf_file *f = p->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(f, "general.alignment");
    if (i < 0)
        return 0;
    const struct gguf_kv *kv = &f->kv[i];
    set_ctx(p, "key", kv->key);
    if (kv->type != GGUF_UINT32)
        return fail(p, kv->off, "type is %s, expected uint32", gguf_vtype_name(kv->type));
    uint32_t a = le32(kv->val);
    if (a == 0 || (a & (a - 1)) != 0)
        return fail(p, kv->val_off, "alignment %" PRIu32 " is not a power of two", a);
    f->alignment = a;
    p->ctx[0] = '\0';
    return 0;
}

/* ---- tensor infos ---- */

static int parse_dims(parser *p, gguf_tensor *t)
{
    uint64_t off = p->pos;
    if (read_u32(p, "n_dims", &t->n_dims))
        return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(p, off, "n_dims is %" PRIu32 ", expected 1 to %d", t->n_dims, GGUF_MAX_DIMS);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t doff = p->pos;
        if (read_u64(p, "dim", &t->ne[d]))
            return -1;
        if (t->ne[d] == 0)
            return fail(p, doff, "dim %" PRIu32 " is 0", d);
        if (t->ne[d] > (uint64_t)INT64_MAX / elems)
            return fail(p, doff, "dim %" PRIu32 " (%" PRIu64 ") makes the element count overflow",
                        d, t->ne[d]);
        elems *= t->ne[d];
    }
    return 0;
}

static int parse_type(parser *p, gguf_tensor *t, uint64_t dims_off)
{
    uint64_t off = p->pos;
    uint32_t id;
    if (read_u32(p, "type", &id))
        return -1;
    const char *name = id < QUANT_TYPE_LIMIT ? quant_type_name((quant_type)id) : NULL;
    if (!name)
        return fail(p, off, "unknown type id %" PRIu32, id);
    t->type = (quant_type)id;
    if (!quant_type_supported(t->type))
        return fail(p, off, "type %s is not supported", name);
    size_t block = quant_block_elems(t->type);
    if (t->ne[0] % block != 0)
        return fail(p, dims_off, "dim 0 (%" PRIu64 ") is not a multiple of the %s block size %zu",
                    t->ne[0], name, block);
    uint64_t row;
    llmq_err qerr;
    if (quant_row_bytes(t->type, t->ne[0], &row, &qerr))
        return fail(p, off, "%s", qerr.msg);
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3]; /* fits: parse_dims bounded the product */
    if (rows > UINT64_MAX / row)
        return fail(p, off, "size of %" PRIu64 " rows of %" PRIu64 " bytes overflows", rows, row);
    t->nbytes = rows * row;
    return 0;
}

static int parse_tensor(parser *p, uint64_t i)
{
    gguf_file *f = p->f;
    if (reserve(p, &f->tensors, &f->cap_tensors, f->n_tensors, sizeof *f->tensors))
        return -1;
    struct tensor_rec *r = &f->tensors[f->n_tensors];
    memset(r, 0, sizeof *r);
    r->off = p->pos;
    snprintf(p->ctx, sizeof p->ctx, "tensor #%" PRIu64 ": ", i);
    if (read_str(p, "tensor name", &r->raw_name) ||
        check_name(p, r->off, "tensor name", r->raw_name))
        return -1;
    set_ctx(p, "tensor", r->raw_name);
    uint64_t dims_off = p->pos + 4;
    if (parse_dims(p, &r->t) || parse_type(p, &r->t, dims_off))
        return -1;
    r->offset_off = p->pos;
    if (read_u64(p, "data offset", &r->t.offset))
        return -1;
    if (r->t.offset % f->alignment != 0)
        return fail(p, r->offset_off,
                    "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                    r->t.offset, f->alignment);
    f->n_tensors++;
    return 0;
}

/* Once the data section's start is known: every tensor's bytes inside the file. */
static int place_tensors(parser *p)
{
    gguf_file *f = p->f;
    uint64_t pad = (f->alignment - p->pos % f->alignment) % f->alignment;
    f->data_offset = p->pos + pad;
    p->ctx[0] = '\0';
    if (f->n_tensors > 0 && f->data_offset > f->size)
        return fail(p, p->pos,
                    "data section (at offset %" PRIu64 ") starts past the end of the file"
                    " (%" PRIu64 " bytes)",
                    f->data_offset, f->size);
    uint64_t avail = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct tensor_rec *r = &f->tensors[i];
        if (r->t.offset > avail || r->t.nbytes > avail - r->t.offset) {
            set_ctx(p, "tensor", r->raw_name);
            return fail(p, r->offset_off,
                        "data at offset %" PRIu64 " (%" PRIu64 " bytes) runs past "
                        "the end of the file (the data section has %" PRIu64 " bytes)",
                        r->t.offset, r->t.nbytes, avail);
        }
        r->t.data = f->base + f->data_offset + r->t.offset;
    }
    return 0;
}

static int copy_names(parser *p)
{
    gguf_file *f = p->f;
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        total += f->tensors[i].raw_name.len + 1; /* bounded by the file size */
    if (total == 0)
        return 0;
    f->names = malloc(total);
    if (!f->names)
        return fail(p, p->pos, "out of memory for tensor names");
    char *o = f->names;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct tensor_rec *r = &f->tensors[i];
        memcpy(o, r->raw_name.ptr, r->raw_name.len);
        o[r->raw_name.len] = '\0';
        r->t.name = o;
        o += r->raw_name.len + 1;
    }
    return 0;
}

static int parse_tensors(parser *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (parse_tensor(p, i))
            return -1;
    p->ctx[0] = '\0';
    if (index_build(p, &p->f->tensor_index, p->f->n_tensors, tensor_entry, "tensor", "tensor name"))
        return -1;
    return place_tensors(p) || copy_names(p) ? -1 : 0;
}

/* ---- open / close ---- */

/* Takes ownership of map (may be NULL) and unmaps it on failure. */
static int open_common(gguf_file **out, const void *data, size_t size, void *map, const char *name,
                       llmq_err *err)
{
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    char *path = strdup(name ? name : "<buffer>");
    if (!f || !path) {
        free(f);
        free(path);
        if (map)
            munmap(map, size);
        return llmq_errf(err, "%s: out of memory", name ? name : "<buffer>");
    }
    f->base = data;
    f->size = size;
    f->map = map;
    f->path = path;
    parser p = {.f = f, .err = err};
    uint64_t n_tensors, n_kv;
    if (parse_header(&p, &n_tensors, &n_kv) || parse_kvs(&p, n_kv) || read_alignment(&p) ||
        parse_tensors(&p, n_tensors)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_open_buffer(gguf_file **out, const void *data, size_t size, const char *name,
                     llmq_err *err)
{
    return open_common(out, data, size, NULL, name, err);
}

int gguf_open(gguf_file **out, const char *path, llmq_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llmq_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return llmq_errf(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return llmq_errf(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        /* The file must not shrink while mapped (that would SIGBUS); model files are immutable. */
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return llmq_errf(err, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
        }
    }
    close(fd);
    return open_common(out, map, size, map, path, err);
}

void gguf_close(gguf_file *f)
{
    if (!f)
        return;
    for (uint64_t i = 0; i < f->n_kv; i++)
        free(f->kv[i].strs);
    free(f->kv);
    free(f->tensors);
    free(f->names);
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    if (f->map)
        munmap(f->map, f->size);
    free(f->path);
    free(f);
}

uint32_t gguf_version(const gguf_file *f)
{
    return f->version;
}

uint64_t gguf_alignment(const gguf_file *f)
{
    return f->alignment;
}

uint64_t gguf_data_offset(const gguf_file *f)
{
    return f->data_offset;
}

uint64_t gguf_file_size(const gguf_file *f)
{
    return f->size;
}

const char *gguf_path(const gguf_file *f)
{
    return f->path;
}

/* ---- metadata ---- */

uint64_t gguf_kv_count(const gguf_file *f)
{
    return f->n_kv;
}

gguf_str gguf_kv_key(const gguf_file *f, uint64_t i)
{
    return i < f->n_kv ? f->kv[i].key : (gguf_str){"", 0};
}

gguf_vtype gguf_kv_type(const gguf_file *f, uint64_t i)
{
    return i < f->n_kv ? f->kv[i].type : GGUF_UINT8;
}

int64_t gguf_find_key(const gguf_file *f, const char *key)
{
    return index_find(&f->kv_index, f, kv_entry, (gguf_str){key, strlen(key)});
}

static const struct gguf_kv *lookup(const gguf_file *f, const char *key)
{
    int64_t i = gguf_find_key(f, key);
    return i < 0 ? NULL : &f->kv[i];
}

static void describe(char *buf, size_t cap, gguf_vtype t, gguf_vtype elem)
{
    if (t == GGUF_ARRAY)
        snprintf(buf, cap, "array of %s", gguf_vtype_name(elem));
    else
        snprintf(buf, cap, "%s", gguf_vtype_name(t));
}

static int type_error(const gguf_file *f, const struct gguf_kv *kv, const char *want, llmq_err *err)
{
    char have[32], q[QUOTE_CAP];
    describe(have, sizeof have, kv->type, kv->elem_type);
    quote(q, kv->key);
    return llmq_errf(err, "%s: key '%s' has type %s, expected %s", f->path, q, have, want);
}

/* An integer value as sign and magnitude, so that every range check is exact. */
typedef struct int_val {
    bool neg;
    uint64_t mag;
} int_val;

static int_val from_signed(int64_t s)
{
    return (int_val){s < 0, s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s};
}

static bool kv_int(const struct gguf_kv *kv, int_val *v)
{
    const uint8_t *b = kv->val;
    switch (kv->type) {
    case GGUF_UINT8: *v = (int_val){false, b[0]}; return true;
    case GGUF_INT8: *v = from_signed((int8_t)b[0]); return true;
    case GGUF_UINT16: *v = (int_val){false, le16(b)}; return true;
    case GGUF_INT16: *v = from_signed((int16_t)le16(b)); return true;
    case GGUF_UINT32: *v = (int_val){false, le32(b)}; return true;
    case GGUF_INT32: *v = from_signed((int32_t)le32(b)); return true;
    case GGUF_UINT64: *v = (int_val){false, le64(b)}; return true;
    case GGUF_INT64: *v = from_signed((int64_t)le64(b)); return true;
    default: return false;
    }
}

/* The integer under key if it lies in [-neg_max, pos_max]: 0, absent 1, else -1. */
static int get_int(const gguf_file *f, const char *key, const char *want, uint64_t neg_max,
                   uint64_t pos_max, int_val *v, llmq_err *err)
{
    const struct gguf_kv *kv = lookup(f, key);
    if (!kv)
        return 1;
    if (!kv_int(kv, v))
        return type_error(f, kv, want, err);
    if (v->neg ? v->mag > neg_max : v->mag > pos_max) {
        char q[QUOTE_CAP];
        quote(q, kv->key);
        return llmq_errf(err, "%s: key '%s': %s value %s%" PRIu64 " does not fit in %s", f->path, q,
                         gguf_vtype_name(kv->type), v->neg ? "-" : "", v->mag, want);
    }
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, llmq_err *err)
{
    int_val v;
    int rc = get_int(f, key, "uint32", 0, UINT32_MAX, &v, err);
    if (rc == 0)
        *out = (uint32_t)v.mag;
    return rc;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, llmq_err *err)
{
    int_val v;
    int rc = get_int(f, key, "uint64", 0, UINT64_MAX, &v, err);
    if (rc == 0)
        *out = v.mag;
    return rc;
}

int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, llmq_err *err)
{
    int_val v;
    int rc = get_int(f, key, "int32", (uint64_t)INT32_MAX + 1, INT32_MAX, &v, err);
    if (rc == 0)
        *out = v.neg ? (int32_t) - (int64_t)v.mag : (int32_t)v.mag;
    return rc;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, llmq_err *err)
{
    const struct gguf_kv *kv = lookup(f, key);
    if (!kv)
        return 1;
    if (kv->type == GGUF_FLOAT32) {
        uint32_t bits = le32(kv->val);
        memcpy(out, &bits, sizeof *out);
        return 0;
    }
    if (kv->type != GGUF_FLOAT64)
        return type_error(f, kv, "float32", err);
    uint64_t bits = le64(kv->val);
    double d;
    memcpy(&d, &bits, sizeof d);
    if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX)) {
        char q[QUOTE_CAP];
        quote(q, kv->key);
        return llmq_errf(err, "%s: key '%s': float64 value %g does not fit in float32", f->path, q,
                         d);
    }
    *out = (float)d;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, llmq_err *err)
{
    const struct gguf_kv *kv = lookup(f, key);
    if (!kv)
        return 1;
    if (kv->type != GGUF_BOOL)
        return type_error(f, kv, "bool", err);
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, llmq_err *err)
{
    const struct gguf_kv *kv = lookup(f, key);
    if (!kv)
        return 1;
    if (kv->type != GGUF_STRING)
        return type_error(f, kv, "string", err);
    *out = kv->str;
    return 0;
}

int gguf_get_array(const gguf_file *f, const char *key, gguf_vtype *elem_type, const void **data,
                   uint64_t *n, llmq_err *err)
{
    const struct gguf_kv *kv = lookup(f, key);
    if (!kv)
        return 1;
    if (kv->type != GGUF_ARRAY)
        return type_error(f, kv, "array", err);
    *elem_type = kv->elem_type;
    *data = kv->val;
    *n = kv->n;
    return 0;
}

int gguf_get_str_array(const gguf_file *f, const char *key, const gguf_str **items, uint64_t *n,
                       llmq_err *err)
{
    const struct gguf_kv *kv = lookup(f, key);
    if (!kv)
        return 1;
    if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
        return type_error(f, kv, "array of string", err);
    *items = kv->strs;
    *n = kv->n;
    return 0;
}

/* ---- tensors ---- */

uint64_t gguf_tensor_count(const gguf_file *f)
{
    return f->n_tensors;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i)
{
    return i < f->n_tensors ? &f->tensors[i].t : NULL;
}

int64_t gguf_find_tensor_index(const gguf_file *f, const char *name)
{
    return index_find(&f->tensor_index, f, tensor_entry, (gguf_str){name, strlen(name)});
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    int64_t i = gguf_find_tensor_index(f, name);
    return i < 0 ? NULL : &f->tensors[i].t;
}

const char *gguf_vtype_name(gguf_vtype t)
{
    static const char *const names[] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

size_t gguf_vtype_size(gguf_vtype t)
{
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64: return 8;
    case GGUF_STRING:
    case GGUF_ARRAY: break;
    }
    return 0;
}

bool gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}
