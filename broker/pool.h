/* pool: the connected worker sessions, their credits, load and liveness.
 *
 * In memory only.  A session lives from a worker's hello to its bye, its
 * replacement by a new hello of the same process (on_worker.c), or its
 * presumed death; its durable trace is its row in the store's workers table
 * (same id).  The pool owns its sessions and their strings.
 *
 * Credits: a worker grants credits; every job sent uses one, so the broker
 * never sends more than asked.  A correct worker keeps credits + busy <=
 * slots; a grant beyond that is capped (pool_credit says by how much), so a
 * confused worker cannot be flooded.
 *
 * Dispatch picks, among sessions with credits that are not draining, not
 * distrusted (a result of theirs contradicted its job) and not skipped in
 * this round, the one with the most credits, then the one that
 * waited longest for a job: jobs spread over workers instead of filling the
 * first. */
#ifndef LLMQ_BROKER_POOL_H
#define LLMQ_BROKER_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/net.h"
#include "common/err.h"
#include "proto/wire.h"

typedef struct pool_worker {
    int64_t id; /* workers.id */
    net_peer peer;
    char *name, *host, *model, *gpu_name, *engine;
    char **aliases; /* other model names it answers to */
    uint32_t n_aliases;
    uint32_t pid;
    int32_t gpu_index;
    uint32_t slots;
    uint32_t n_ctx;    /* the context it announced, 0: unknown */
    int64_t since;     /* monotonic ms of its hello */
    uint32_t credits;  /* jobs asked for and not yet sent */
    uint32_t busy;     /* jobs running on it */
    uint64_t jobs_done, tokens_done;
    int64_t last_heard; /* monotonic ms of its last message */
    int64_t last_sent;  /* monotonic ms of our last message to it */
    bool draining;      /* sent shutdown: gets no more jobs */
    bool distrusted;    /* a result contradicted its job: gets no more jobs */
    uint64_t last_job;  /* dispatch sequence of its last job */
    uint64_t skip_round;
} pool_worker;

typedef struct pool {
    pool_worker **v;
    size_t n, cap;
    uint64_t round, seq;
} pool;

/* A new session for hello h from peer, with store id `id`. */
int pool_add(pool *p, const wire_hello *h, const net_peer *peer, int64_t id,
             int64_t now, pool_worker **out, llmq_err *err);
pool_worker *pool_by_peer(const pool *p, const net_peer *peer);
pool_worker *pool_by_name(const pool *p, const char *name);
pool_worker *pool_by_id(const pool *p, int64_t id);
/* True when a connected session serves model, or answers to it as an alias. */
bool pool_serves(const pool *p, const char *model);
/* Removes and frees w. */
void pool_remove(pool *p, pool_worker *w);
void pool_free(pool *p);

/* Adds n credits; returns how many were dropped by the slots cap. */
uint32_t pool_credit(pool_worker *w, uint32_t n);

/* Dispatch: pool_round starts a round, pool_pick gives the next worker to
 * send a job to (NULL: none), pool_sent records the job sent, pool_skip
 * leaves a worker out for the rest of the round (no job for its model). */
void pool_round(pool *p);
pool_worker *pool_pick(const pool *p);
void pool_sent(pool *p, pool_worker *w);
void pool_skip(const pool *p, pool_worker *w);

#endif
