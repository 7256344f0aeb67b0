/* gguf: a validating, read-only reader of GGUF v2/v3 files.
 *
 * The file is mmap'd once; gguf_open parses and checks every header field,
 * key, string, array length, tensor name, dim, type and data offset against
 * the file's size and alignment before anything is exposed, so every pointer
 * this module hands out is in bounds.  A malformed file gives an error naming
 * what is wrong and where (byte offset, key or tensor name).  Allocations are
 * bounded by the file size (counts are checked against the bytes left).
 *
 * Ownership: the gguf_file owns the mapping; every pointer returned (strings,
 * arrays, tensor data) lives until gguf_close.  Strings in GGUF are not
 * NUL-terminated: they come as gguf_str (pointer + length). */
#ifndef LLMQ_MODEL_GGUF_H
#define LLMQ_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/quant.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum gguf_vtype {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
} gguf_vtype;

typedef struct gguf_str {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    const char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row (contiguous) dimension; unused dims are 1 */
    quant_type type;
    uint64_t offset; /* relative to the start of the data section */
    uint64_t nbytes;
    const void *data; /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Open and validate a file.  On failure *out is NULL and err says why. */
int gguf_open(gguf_file **out, const char *path, llmq_err *err);

/* The same over a caller-owned buffer (which must outlive the gguf_file);
 * `name` is used in error messages.  Used by the fuzzer and tests. */
int gguf_open_buffer(gguf_file **out, const void *data, size_t size, const char *name,
                     llmq_err *err);

void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* file offset of the data section */
uint64_t gguf_file_size(const gguf_file *f);
const char *gguf_path(const gguf_file *f);

/* ---- metadata ---- */
uint64_t gguf_kv_count(const gguf_file *f);
gguf_str gguf_kv_key(const gguf_file *f, uint64_t i);
gguf_vtype gguf_kv_type(const gguf_file *f, uint64_t i);
/* Index of a key, or -1 when absent. */
int64_t gguf_find_key(const gguf_file *f, const char *key);

/* Typed getters.  Absent key: return 1 and leave *out untouched (so callers
 * can preset defaults).  Present with a type that does not convert exactly:
 * -1 with an error naming the key and both types.  Found: 0.
 * Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, llmq_err *err);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, llmq_err *err);
int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, llmq_err *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, llmq_err *err); /* f32, f64 */
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, llmq_err *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, llmq_err *err);

/* Arrays.  *elem_type is the element type; for numeric arrays *data points at
 * the n packed little-endian elements in the mapping (unaligned: read with
 * memcpy); for string arrays use gguf_get_str_array.  Absent: 1. */
int gguf_get_array(const gguf_file *f, const char *key, gguf_vtype *elem_type, const void **data,
                   uint64_t *n, llmq_err *err);
/* A string array as a table of gguf_str (owned by f). */
int gguf_get_str_array(const gguf_file *f, const char *key, const gguf_str **items, uint64_t *n,
                       llmq_err *err);

/* ---- tensors ---- */
uint64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
/* NULL when absent. */
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* Its index for gguf_tensor_at, or -1 when absent. */
int64_t gguf_find_tensor_index(const gguf_file *f, const char *name);

/* Name of a value type ("uint32", "string", ...). */
const char *gguf_vtype_name(gguf_vtype t);

/* Bytes of one value of a fixed-size type; 0 for string, array and unknown ids. */
size_t gguf_vtype_size(gguf_vtype t);

/* True when s equals the NUL-terminated c string. */
bool gguf_str_eq(gguf_str s, const char *c);

#endif
