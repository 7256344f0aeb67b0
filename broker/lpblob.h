/* lpblob: a result's logprobs as the store keeps them, one BLOB of packed
 * little-endian records (docs/SCHEMA.md, results.logprobs): per generated
 * token, in order,
 *
 *   u32 token, f32 logprob, u16 n_bytes, n_bytes bytes   the token's own
 *   u8 n_top                                             alternatives that
 * follow n_top x (u32 token, f32 logprob, u16 n_bytes, bytes) most likely first
 *
 * f32 is IEEE-754 binary32.  At 20 alternatives a token costs about 300
 * bytes, some 40% of the same in msgpack maps, and any SQL client can read
 * it with a few lines (docs/SCHEMA.md shows Python's struct). */
#ifndef LLMQ_BROKER_LPBLOB_H
#define LLMQ_BROKER_LPBLOB_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/wire.h"

/* The bytes lpblob_pack writes for v[0..n). */
size_t lpblob_size(const wire_token_logprobs *v, uint32_t n);
void lpblob_pack(const wire_token_logprobs *v, uint32_t n, uint8_t *out);

/* The records of p[0..len) into one malloc'd block (*out, released with
 * free()) holding the entries, their alternatives and their bytes; *n
 * counts the entries.  A blob that is not whole records within the wire's
 * limits fails (LLMQ_ERR_INTERNAL: the store's own data is damaged). */
int lpblob_unpack(const uint8_t *p, size_t len, wire_token_logprobs **out,
                  uint32_t *n, llmq_err *err);

/* A copy of v[0..n) in one block, as lpblob_unpack gives. */
int lpblob_dup(const wire_token_logprobs *v, uint32_t n,
               wire_token_logprobs **out, llmq_err *err);

#endif
