/* job_params: a job's parameters, defined once.
 *
 * JOB_PARAMS is the one list of the scalar parameters a client sets per job
 * (besides its prompt, key, priority, model and stop strings).  Every layer
 * that carries them is generated from it or checked against it:
 *   - the wire's field table, with ranges and defaults (proto/wire.c),
 *   - the store's job columns, binds and reads (broker/store.c; a column the
 *     schema lacks fails store_open, and test-store checks each one's type),
 *   - the client library's llmq_job (proto/client.c copies it field by field
 *     and checks each field's C type: a field llmq.h lacks fails the build),
 *   - llmq-submit's job lines (tools/jobfile.c),
 *   - the worker's engine request (worker/jobconv.c: likewise checked by the
 *     compiler).
 * docs/ARCHITECTURE.md, "Adding a job parameter", lists the steps.
 *
 * X(name, kind, lo, hi, lo_open, dflt, engine)
 *   name     the wire key, the jobs column and the C field in every layer
 *   kind     U32 I32 U64 F32 BOOL: the C type (JOB_PARAM_TYPE_kind), the
 *            wire's number type, the column's storage (INTEGER or REAL)
 *   lo, hi   the accepted range, inclusive (bools: 0, 0); the wire's limits
 *            are named (WIRE_MAX_...): expand the table where proto/wire.h
 *            is included
 *   lo_open  1: lo itself is refused
 *   dflt     the value of a job that does not say
 *   engine   where the worker puts it: SAMPLER (engine_request.sampling,
 *            an engine/sampler.h sampler_params field) or REQUEST (an
 *            engine/engine.h engine_request field), under the same name;
 *            CONSTRAINT: the worker compiles it, with json_schema, into
 *            the request's grammar (engine_request.constraint)
 *
 * Two parameters are not in the table, and each layer writes them out:
 * `stop`, the one list-valued parameter (a str array on the wire, a JSON
 * array in the store, copies in the engine), and `json_schema`, the one
 * text (a str on the wire, a TEXT column, a grammar in the engine). */
#ifndef LLMQ_PROTO_JOB_PARAMS_H
#define LLMQ_PROTO_JOB_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

/* clang-format off */
#define JOB_PARAMS(X)                                             \
    X(max_tokens, U32, 1, WIRE_MAX_GEN_TOKENS, 0, 256, REQUEST)   \
    X(temperature, F32, 0, 100, 0, 0.0f, SAMPLER)                 \
    X(top_k, I32, 0, 1048576, 0, 0, SAMPLER)                      \
    X(top_p, F32, 0, 1, 1, 1.0f, SAMPLER)                         \
    X(min_p, F32, 0, 1, 0, 0.0f, SAMPLER)                         \
    X(repeat_penalty, F32, 0, 100, 1, 1.0f, SAMPLER)              \
    X(repeat_last_n, I32, -1, 1048576, 0, 64, SAMPLER)            \
    X(presence_penalty, F32, -2, 2, 0, 0.0f, SAMPLER)             \
    X(frequency_penalty, F32, -2, 2, 0, 0.0f, SAMPLER)            \
    X(seed, U64, 0, WIRE_NO_MAX, 0, 0, SAMPLER)                   \
    X(ignore_eos, BOOL, 0, 0, 0, false, REQUEST)                  \
    X(logprobs, BOOL, 0, 0, 0, false, REQUEST)                    \
    X(top_logprobs, I32, 0, WIRE_MAX_TOP_LOGPROBS, 0, 0, REQUEST) \
    X(json_object, BOOL, 0, 0, 0, false, CONSTRAINT)
/* clang-format on */

#define JOB_PARAM_TYPE_U32 uint32_t
#define JOB_PARAM_TYPE_I32 int32_t
#define JOB_PARAM_TYPE_U64 uint64_t
#define JOB_PARAM_TYPE_F32 float
#define JOB_PARAM_TYPE_BOOL bool

#define JOB_PARAM_FIELD(name, kind, lo, hi, lo_open, dflt, engine) JOB_PARAM_TYPE_##kind name;

/* A job's parameters as every layer holds them.  Strings and arrays are
 * borrowed: the struct owns nothing. */
typedef struct job_params {
    JOB_PARAMS(JOB_PARAM_FIELD)
    const char *const *stop; /* 0..WIRE_MAX_STOP strings of 1..WIRE_MAX_STOP_BYTES */
    uint32_t n_stop;
    /* A JSON schema (OpenAI's strict subset, engine/jsonschema.h) the output
     * must follow, as JSON text of 1..WIRE_MAX_SCHEMA_BYTES; NULL: none. */
    const char *json_schema;
} job_params;

/* Every parameter at its default, no stop strings, no schema. */
job_params job_params_default(void);

#endif
