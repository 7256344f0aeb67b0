/* gguf_writer: writes a GGUF v3 file whose tensor data is streamed in later.
 *
 * Use: gw_new, then metadata (gw_kv_*, kept in the order added) and tensor
 * infos (gw_add_tensor: offsets are assigned at once, each aligned to 32
 * bytes), then gw_begin writes the header to PATH.tmp and sizes the file.
 * Tensor bytes go in with gw_write at any position, from any number of
 * threads at once (positioned writes on one descriptor, no shared cursor), so
 * memory never holds more than the caller's buffers.  gw_commit renames
 * PATH.tmp to PATH; gw_free without a commit removes PATH.tmp, so a failed
 * run never leaves a partial file under either name.
 *
 * Ownership: the writer copies every key, value and name it is given. */
#ifndef LLMQ_MODEL_GGUF_WRITER_H
#define LLMQ_MODEL_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/quant.h"
#include "model/gguf.h"

typedef struct gw_writer gw_writer;

/* A writer for the file at path (written as path.tmp until gw_commit). */
int gw_new(gw_writer **out, const char *path, llmq_err *err);

/* Removes path.tmp unless gw_commit succeeded.  NULL is fine. */
void gw_free(gw_writer *w);

/* ---- metadata (before gw_begin; a key may be added once) ---- */
int gw_kv_str(gw_writer *w, const char *key, const char *s, uint64_t len, llmq_err *err);
int gw_kv_u32(gw_writer *w, const char *key, uint32_t v, llmq_err *err);
int gw_kv_f32(gw_writer *w, const char *key, float v, llmq_err *err);
/* Any non-string, non-array scalar, given as its little-endian bytes. */
int gw_kv_scalar(gw_writer *w, const char *key, gguf_vtype t, const void *le, llmq_err *err);
/* An array of n numeric or bool elements, packed little-endian. */
int gw_kv_array(gw_writer *w, const char *key, gguf_vtype elem, const void *le, uint64_t n,
                llmq_err *err);
int gw_kv_str_array(gw_writer *w, const char *key, const gguf_str *items, uint64_t n,
                    llmq_err *err);
/* Key-value i of f, with its type (string, scalar or array of either). */
int gw_kv_copy(gw_writer *w, const gguf_file *f, uint64_t i, llmq_err *err);

/* ---- tensors (before gw_begin) ---- */
/* Adds a tensor of n_dims (1..4) dims ne[] (ne[0] = row length) and a
 * supported type; *index receives its number for gw_write. */
int gw_add_tensor(gw_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                  quant_type type, uint64_t *index, llmq_err *err);
/* Sum of all tensors' data bytes (without alignment padding). */
uint64_t gw_data_bytes(const gw_writer *w);
/* The size the file will have. */
uint64_t gw_file_bytes(const gw_writer *w);

/* ---- output ---- */
/* Creates path.tmp, writes the header and sizes the file (padding reads as zeros). */
int gw_begin(gw_writer *w, llmq_err *err);
/* Writes len bytes at byte offset off of tensor index.  Thread-safe. */
int gw_write(const gw_writer *w, uint64_t index, uint64_t off, const void *buf, size_t len,
             llmq_err *err);
/* Closes path.tmp and renames it to path. */
int gw_commit(gw_writer *w, llmq_err *err);

#endif
