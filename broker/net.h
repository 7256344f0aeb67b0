/* net: frames in and out of the broker's two ROUTER sockets.
 *
 * A message arrives as [routing id, envelope..., body] (docs/PROTOCOL.md §1):
 * net_recv splits it into a net_peer (the routing id and the envelope
 * frames, which every reply to that request repeats) and the body.  Under
 * CURVE the peer also carries the public key its connection was admitted
 * with: the ZAP handler (broker/zap.h) makes it the connection's User-Id,
 * which ZeroMQ attaches to every message, so no message can claim another
 * connection's key.
 *
 * Replies are not sent when produced: they go to a net_outbox, which the
 * broker flushes after the iteration's transaction committed, so nothing is
 * acknowledged (and no result pushed, no job handed out) before it is on
 * disk.  The outbox owns the encoded bodies and its copies of the peers. */
#ifndef LLMQ_BROKER_NET_H
#define LLMQ_BROKER_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <zmq.h>

#include "common/err.h"
#include "proto/curve.h"
#include "proto/wire.h"

#define NET_MAX_ENVELOPE 4     /* frames between routing id and body */
#define NET_MAX_FRAME_BYTES 255 /* of an envelope frame */

typedef struct net_peer {
    zmq_msg_t frames[1 + NET_MAX_ENVELOPE]; /* routing id, envelope */
    int n;
    char key[CURVE_Z85_LEN + 1]; /* Z85 public key; "" without CURVE */
} net_peer;

typedef enum net_status {
    NET_NONE,      /* nothing to read */
    NET_OK,        /* *from and *body hold a message */
    NET_MALFORMED, /* too many or too long envelope frames, or no body:
                      *from holds the routing id (an error can be sent) */
} net_status;

/* Reads one message without blocking.  On NET_OK the caller owns *from
 * (net_peer_close) and *body (zmq_msg_close); on NET_MALFORMED only *from.
 * -1 only for a socket error. */
int net_recv(void *sock, net_peer *from, zmq_msg_t *body, net_status *st,
             llmq_err *err);

void net_peer_close(net_peer *p);
/* dst becomes a copy of src (frames share their data, the key is copied). */
void net_peer_copy(net_peer *dst, const net_peer *src);
/* Same routing id: the same connection. */
bool net_peer_same(const net_peer *a, const net_peer *b);

typedef struct net_out {
    void *sock;
    net_peer to;
    zmq_msg_t body;
} net_out;

typedef struct net_outbox {
    net_out *v;
    size_t n, cap;
} net_outbox;

/* Encodes m for `to` on sock.  A message that does not encode (a reply over
 * a protocol limit) is replaced by an error reply saying why, so the peer
 * always hears back; -1 only when memory runs out. */
int net_send_later(net_outbox *ob, void *sock, const net_peer *to,
                   const wire_msg *m, llmq_err *err);

/* Called for each message a peer could not take: gone (EHOSTUNREACH) or not
 * reading (its queue at the high-water mark). */
typedef void (*net_undelivered_fn)(void *ctx, void *sock, const net_peer *to,
                                   int errnum);

/* Sends everything in order, then empties the outbox. */
void net_flush(net_outbox *ob, net_undelivered_fn fn, void *ctx);
/* Drops everything unsent. */
void net_outbox_clear(net_outbox *ob);
void net_outbox_free(net_outbox *ob);

#endif
