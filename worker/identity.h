/* identity: who a worker says it is in its hello.
 *
 * The worker id must be unique among the broker's connected workers: by
 * default HOST:gpuN for a GPU worker (one process per GPU) and HOST:cpu-PID
 * for a CPU worker (several may share a host).  The model is named by its
 * file name without ".gguf" unless a name is given, and fingerprinted by
 * model_hash = "fnv1a64:" + the FNV-1a 64-bit hash (hex) of the file's
 * GGUF header (every metadata key and value, every tensor's name, type,
 * shape and offset) followed by the file size as 8 little-endian bytes:
 * cheap at start-up even for large files, and different for any two
 * files that differ in architecture, quantization, tokenizer or name.
 * Every string is wire-clean (worker/text.h) and within WIRE_MAX_NAME_BYTES.
 *
 * The identity owns its strings; the hello it fills points into them. */
#ifndef LLMQ_WORKER_IDENTITY_H
#define LLMQ_WORKER_IDENTITY_H

#include <stdint.h>

#include "common/err.h"
#include "proto/wire.h"
#include "model/gguf.h"

typedef struct identity {
    char *worker, *host, *model, *model_hash;
    char *gpu_name, *gpu_uuid; /* NULL: CPU, or not known */
    int32_t gpu_index;         /* -1: CPU */
} identity;

typedef struct identity_opts {
    const char *worker;     /* --id, or NULL for the default */
    const char *model_name; /* --model-name, or NULL for the file's stem */
    int32_t gpu_index;      /* -1: CPU */
    const char *gpu_name, *gpu_uuid; /* NULL: not known */
} identity_opts;

int identity_make(identity *id, const identity_opts *o, const gguf_file *f, llmq_err *err);
void identity_free(identity *id);

/* Fills the identity fields of a hello (worker, host, pid, gpu_index,
 * gpu_name, gpu_uuid, model, model_hash); the caller sets engine, slots and n_ctx. */
void identity_hello(const identity *id, wire_hello *h);

#endif
