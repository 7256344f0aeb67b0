/* waiters: clients waiting for jobs to become final (the "wait" request).
 *
 * In memory only: a wait lives until every job it selected is final, its
 * deadline passes, its client proves gone, or the broker stops; the client
 * then gets its wait_end.  A wait that asked for heartbeats gets a
 * wait_alive every beat_ms while it lives: its client's proof that the wait
 * is still here (a broker restarted since has no such wait, and says
 * nothing about it).  A waiter keeps the sorted distinct ids it
 * selected with a final flag each; the registry owns waiters, their ids and
 * their copies of the clients' envelopes.
 *
 * The broker calls waiters_final for each job that became final; the
 * registry calls back for every waiter that selected it (the broker pushes
 * the result there) and, for those with nothing left pending, once more to
 * end them (the broker sends wait_end), then frees them. */
#ifndef LLMQ_BROKER_WAITERS_H
#define LLMQ_BROKER_WAITERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/net.h"
#include "common/err.h"

typedef struct waiter {
    net_peer peer;
    uint64_t req;
    bool stream;
    int64_t deadline;  /* monotonic ms */
    uint32_t beat_ms;  /* 0: no heartbeats */
    int64_t next_beat; /* monotonic ms */
    int64_t *ids;      /* sorted, distinct */
    bool *final;
    size_t n, pending;
} waiter;

typedef struct waiters {
    waiter **v;
    size_t n, cap;
    size_t total_ids; /* over all waiters: bounded by the caller */
} waiters;

/* What a wait is, besides its jobs. */
typedef struct waiter_spec {
    const net_peer *peer;
    uint64_t req;
    bool stream;
    int64_t now;      /* monotonic ms */
    int64_t deadline; /* monotonic ms */
    uint32_t beat_ms; /* a wait_alive every beat_ms from now; 0: none */
} waiter_spec;

/* Takes ownership of ids/final (n entries, malloc'd). */
int waiters_add(waiters *ws, const waiter_spec *spec, int64_t *ids, bool *final,
                size_t n, size_t pending, llmq_err *err);

typedef enum waiter_event {
    WAITER_RESULT, /* job_id became final for this waiter */
    WAITER_END,    /* the wait is over (timed_out says why) */
    WAITER_ALIVE,  /* a heartbeat is due */
} waiter_event;

typedef int (*waiter_fn)(void *ctx, const waiter *w, waiter_event ev,
                         int64_t job_id, bool timed_out, llmq_err *err);

/* job_id is final: WAITER_RESULT for each waiter that selected it and, where
 * that was the last pending job, WAITER_END; ended waiters are freed. */
int waiters_final(waiters *ws, int64_t job_id, waiter_fn fn, void *ctx,
                  llmq_err *err);
/* Ends (timed_out) every waiter whose deadline is <= now. */
int waiters_expire(waiters *ws, int64_t now, waiter_fn fn, void *ctx,
                   llmq_err *err);
/* WAITER_ALIVE for every waiter whose heartbeat is due at now. */
int waiters_beat(waiters *ws, int64_t now, waiter_fn fn, void *ctx,
                 llmq_err *err);
/* Ends every waiter (broker stopping). */
int waiters_end_all(waiters *ws, waiter_fn fn, void *ctx, llmq_err *err);
/* Forgets, without a callback, the waits of a client that proved gone. */
void waiters_drop_peer(waiters *ws, const net_peer *peer);
/* Earliest deadline or heartbeat due, or INT64_MAX. */
int64_t waiters_next_due(const waiters *ws);
void waiters_free(waiters *ws);

#endif
