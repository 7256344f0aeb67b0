/* broker_priv: what broker.c, on_client.c and on_worker.c share.
 *
 * The broker is one module split by concern: the loop, timers and dispatch
 * (broker.c), client requests (on_client.c) and worker messages
 * (on_worker.c).  Handlers return -1 only for fatal errors (the store
 * failed, memory ran out); a bad request is answered with a typed error and
 * returns 0. */
#ifndef LLMQ_BROKER_BROKER_PRIV_H
#define LLMQ_BROKER_BROKER_PRIV_H

#include "broker/broker.h"
#include "broker/net.h"
#include "broker/pool.h"
#include "broker/store.h"
#include "broker/waiters.h"
#include "broker/zap.h"
#include "proto/curve.h"
#include "proto/wire.h"

struct broker {
    broker_config cfg;
    void *zctx, *clients, *workers;
    bool curve;
    curve_keys keys;
    zap_list allow_workers, allow_clients, admin_clients;
    zap *zap;
    store *st;
    pool pool;
    waiters waiters;
    net_outbox out;
    int64_t now;  /* monotonic ms, fixed for one iteration */
    int64_t wall; /* ms since the epoch, fixed for one iteration */
    int stops;    /* stop requests seen */
    bool draining;
    int64_t drain_deadline;
    bool done;
    uint64_t undelivered; /* replies dropped since last logged */
    int64_t room_at;      /* monotonic ms of the last look at the space left */
    char no_room[200]; /* why there is no room for new jobs; "" when there is */
    bool reserve_lost; /* the WAL reserve could not be held (said once) */
};

/* ---- replies (broker.c) ---- */
int broker_reply(broker *b, void *sock, const net_peer *to, const wire_msg *m,
                 llmq_err *err);
/* A typed error to `to`, echoing req. */
int broker_refuse(broker *b, void *sock, const net_peer *to, uint64_t req,
                  wire_code code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Decodes a body that came on sock (clients or workers): true when it
 * decoded, else *we says why and what it had read. */
bool broker_decode(const broker *b, void *sock, const void *body, size_t len,
                   wire_msg *m, wire_error *we);
/* Answers a body that did not decode with its typed error. */
int broker_undecoded(broker *b, void *sock, const net_peer *to,
                     const wire_error *we, llmq_err *err);
/* A job became final: push it to the clients waiting for it. */
int broker_job_final(broker *b, int64_t job_id, llmq_err *err);
wire_state broker_wire_state(store_state s);

/* ---- client requests (on_client.c) ---- */
int on_client(broker *b, const net_peer *from, const void *body, size_t len,
              llmq_err *err);
/* The waiters' callback: pushes a result or ends a wait. */
int on_client_waiter(void *ctx, const waiter *w, waiter_event ev,
                     int64_t job_id, bool timed_out, llmq_err *err);

/* ---- worker messages (on_worker.c) ---- */
int on_worker(broker *b, const net_peer *from, const void *body, size_t len,
              llmq_err *err);
typedef enum session_end {
    SESSION_LOST, /* presumed dead or replaced: its jobs fault */
    SESSION_GONE, /* left or broker stopping: its jobs go back untouched */
} session_end;
int on_worker_end(broker *b, pool_worker *w, session_end how,
                  const char *reason, llmq_err *err);
/* Sends the job to w (a store_claim callback; ctx is a dispatch_ctx). */
typedef struct dispatch_ctx {
    broker *b;
    pool_worker *w;
} dispatch_ctx;
int on_worker_send_job(void *ctx, const store_job *job, llmq_err *err);

#endif
