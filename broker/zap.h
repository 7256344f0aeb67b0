/* zap: who may talk to the broker, when it runs with CURVE.
 *
 * ZeroMQ asks a ZAP handler (RFC 27, at inproc://zeromq.zap.01 in the
 * broker's context) about every CURVE handshake; the socket's ZAP domain
 * says which side it came in on ("workers" or "clients").  A side with an
 * allow-list admits only the public keys on it; a side without one admits
 * any key (the traffic is still encrypted: the broker runs so only when told
 * to, broker.h).  An admitted connection's User-Id is its public key in Z85,
 * which the broker reads off every message (net.h) to know who sent it.
 * Every refusal is logged with
 * the peer's address and key.  Handshakes that fail before ZAP is asked (a
 * peer with the wrong broker key, or without CURVE) are logged from the
 * sockets' monitor events.  A refused peer costs one handshake: nothing of
 * it reaches the broker's loop.
 *
 * The handler is one thread that owns its sockets; the lists are read-only
 * once it runs.  It stops when the context shuts down (zmq_ctx_shutdown),
 * after which zap_stop joins it. */
#ifndef LLMQ_BROKER_ZAP_H
#define LLMQ_BROKER_ZAP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

#define ZAP_DOMAIN_WORKERS "workers"
#define ZAP_DOMAIN_CLIENTS "clients"

typedef struct zap_list {
    unsigned char (*keys)[32];
    size_t n, cap;
    bool set; /* false: no list, any key is admitted */
} zap_list;

/* Reads one Z85 public key per line; blank lines and comments (from a '#'
 * that starts a line or follows a blank: '#' is also a Z85 digit) are
 * ignored.  An empty list admits nobody.  Errors name the file and line. */
int zap_list_load(zap_list *l, const char *path, llmq_err *err);
void zap_list_free(zap_list *l);
/* Adds src's keys to dst (a set list stays set; an unset one admits any key
 * and stays so). */
int zap_list_merge(zap_list *dst, const zap_list *src, llmq_err *err);
/* Whether l admits the key in Z85 (an unset list admits any valid key). */
bool zap_list_admits(const zap_list *l, const char *z85_key);

typedef struct zap zap;

/* Binds the handler in zctx and starts its thread; monitors the two
 * routers (which must not be bound yet, so no handshake is missed).
 * The lists must outlive the handler. */
int zap_start(zap **out, void *zctx, void *workers, void *clients,
              const zap_list *allow_workers, const zap_list *allow_clients,
              llmq_err *err);
/* Joins the thread (after zmq_ctx_shutdown of its context).  NULL is fine. */
void zap_stop(zap *z);

/* True for endpoints only this host can reach: ipc://, inproc://, and tcp://
 * on 127.0.0.0/8, ::1 or localhost. */
bool zap_endpoint_local(const char *endpoint);

#endif
