/* link: the worker's connection to the broker (docs/PROTOCOL.md §7).
 *
 * The broker knows a worker by its connection (the DEALER's routing
 * identity), so heartbeats must travel on the same socket as everything
 * else; and they must keep going while the main thread is inside a long
 * engine_step.  Hence one I/O thread owns the DEALER: it forwards messages
 * between the broker and an inproc PAIR pipe that the main thread reads
 * and writes, and sends a heartbeat whenever nothing went to the broker for
 * a heartbeat period.  Any message from the broker counts as a sign of life
 * (link_silent_ms).  The main thread never touches the DEALER.
 *
 * ZeroMQ reconnects by itself when the broker goes away and comes back;
 * messages sent meanwhile wait in the DEALER's queue (a full queue drops
 * them: they would be stale for a new broker anyway).  Heartbeats start with
 * the first message sent (the hello), so a worker never heartbeats a broker
 * it has not introduced itself to.
 *
 * Ownership: the link owns its ZeroMQ context, both sockets and the thread;
 * link_close stops the thread and gives queued messages (results, bye) up
 * to LINK_LINGER_MS to leave.  Decoded messages are the caller's
 * (wire_msg_free). */
#ifndef LLMQ_WORKER_LINK_H
#define LLMQ_WORKER_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/curve.h"
#include "proto/wire.h"

/* How long link_close waits for queued messages to reach the broker. */
#define LINK_LINGER_MS 2000

typedef struct link_conn link_conn;

/* Connects to the broker's worker endpoint and starts the I/O thread;
 * with keys (NULL: none) over CURVE, as keys->public_key, to a broker whose
 * public key is keys->server_public.  A broker that refuses the keys is
 * never reached: the link stays silent, as for an absent broker. */
int link_open(link_conn **out, const char *endpoint, uint32_t heartbeat_ms,
              const curve_keys *keys, llmq_err *err);
void link_close(link_conn *l);

/* The main thread's end of the pipe, for zmq_poll (ZMQ_POLLIN: a message
 * from the broker is waiting). */
void *link_socket(link_conn *l);

/* Encodes m and queues it for the broker. */
int link_send(link_conn *l, const wire_msg *m, llmq_err *err);

/* Takes the next message from the broker without waiting.  1: *m holds
 * it; 0: none waiting; -1: the pipe failed (err).  A body that does not
 * decode is reported as 1 with m->type WIRE_T_NONE and the reason in err,
 * so the caller can log it and go on. */
int link_recv(link_conn *l, wire_msg *m, llmq_err *err);

/* The broker's heartbeat period (from welcome). */
void link_set_heartbeat(link_conn *l, uint32_t heartbeat_ms);

/* Milliseconds since the broker was last heard from (since link_open when
 * it never was). */
int64_t link_silent_ms(const link_conn *l);

#endif
