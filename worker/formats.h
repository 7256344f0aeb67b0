/* formats: the grammars of a worker's structured-output jobs.
 *
 * A job may ask for its output to follow a JSON schema (job_params's
 * json_schema) or to be any JSON object (json_object).  The worker compiles
 * that into a grammar (engine/jsonschema.h) and hands it to the engine as
 * the request's constraint.  The engine caches token masks per grammar
 * object and shares them between the live sequences of one grammar, so jobs
 * that ask for the same schema (the same text) must get the same object:
 * this table compiles each distinct schema once and counts the jobs that
 * hold it.  A grammar no job holds is kept (up to FORMATS_IDLE_MAX of them,
 * the least recently used going first), since the next job of a batch
 * usually asks for the same schema again.
 *
 * Ownership: the table owns the grammars; a grammar handed out stays valid
 * until it is released as often as it was acquired (the engine borrows it
 * until the job's finishing event) or the table is freed.  One thread. */
#ifndef LLMQ_WORKER_FORMATS_H
#define LLMQ_WORKER_FORMATS_H

#include <stdint.h>

#include "common/err.h"
#include "engine/grammar.h"
#include "proto/job_params.h"

#define FORMATS_IDLE_MAX 32

typedef struct formats formats;

int formats_new(formats **out, llmq_err *err);
void formats_free(formats *f);

/* The grammar of p's output format, held once more; *g is NULL (and nothing
 * is held) for free text.  Fails, naming the field, with LLMQ_ERR_INVALID
 * when the schema is one llmq cannot honour (the keyword and its JSON
 * pointer) and LLMQ_ERR_NO_ROOM when memory runs out. */
int formats_acquire(formats *f, const job_params *p, const grammar **g, llmq_err *err);

/* Lets go of one hold of g; NULL is fine. */
void formats_release(formats *f, const grammar *g);

/* Grammars in the table and compilations so far (tests). */
typedef struct formats_stats {
    int32_t grammars;
    uint64_t compiled;
} formats_stats;

formats_stats formats_get_stats(const formats *f);

#endif
