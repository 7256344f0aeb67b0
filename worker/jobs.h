/* jobs: the jobs a worker holds and the slots they use.
 *
 * A worker has `cap` slots.  A slot is used by a job it holds (from the
 * `job` message until its result or failure is sent) or promised to the
 * broker as an unused credit.  The invariant held + credits <= cap is what
 * lets the worker never be sent more than its engine can take: credits are
 * granted only out of jobs_grantable().  A slot whose job the engine
 * refused for lack of room is withheld (offered to nobody) until a job
 * leaves: granting it at once would only bring the job straight back.
 *
 * A job's id is the broker's job id and also its engine sequence id: the
 * broker never gives one session the same job twice at once, and a session
 * starts only once the jobs of the one before it have left the engine
 * (jobs_n_stale() == 0), so the ids cannot collide.
 *
 * The table owns its entries; pointers to entries are valid until the next
 * jobs_add or jobs_remove. */
#ifndef LLMQ_WORKER_JOBS_H
#define LLMQ_WORKER_JOBS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/grammar.h"

typedef struct jobs_entry {
    uint64_t id;      /* broker job id = engine sequence id */
    uint32_t attempt; /* echoed in the job's result or failure */
    bool cancelled;   /* the broker sent job_cancel: answer "cancelled" */
    bool stale;       /* its session ended (the broker requeued it): answer nothing */
    const grammar *format; /* the grammar its engine sequence follows (worker/formats.h), or NULL */
} jobs_entry;

typedef struct jobs {
    jobs_entry *v;
    uint32_t n;       /* jobs held */
    uint32_t cap;     /* slots */
    uint32_t credits; /* granted to the broker and not yet used by a job */
    uint32_t withheld; /* slots not granted until a job leaves (jobs_withhold) */
} jobs;

int jobs_init(jobs *t, uint32_t cap, llmq_err *err);
void jobs_free(jobs *t);

jobs_entry *jobs_find(jobs *t, uint64_t id);
/* Holds a new job; NULL when every slot is held (the caller refuses it). */
jobs_entry *jobs_add(jobs *t, uint64_t id, uint32_t attempt);
void jobs_remove(jobs *t, jobs_entry *e);

/* Credits: how many more may be granted now; record a grant (of at most
 * that many); a job arrived (it uses a credit); a new session (the
 * broker's count restarts at 0). */
uint32_t jobs_grantable(const jobs *t);
void jobs_granted(jobs *t, uint32_t n);
void jobs_arrived(jobs *t);
void jobs_new_session(jobs *t);
/* The engine refused a job for lack of room: one slot is not granted again
 * before a held job leaves (none when no job is held, as then nothing would
 * ever give it back). */
void jobs_withhold(jobs *t);

/* Marks every held job stale (its session is over); returns how many. */
uint32_t jobs_mark_stale(jobs *t);
uint32_t jobs_n_stale(const jobs *t);

#endif
