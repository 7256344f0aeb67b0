/* curve: ZeroMQ CURVE keys as llmq keeps them, shared by the broker, the
 * worker, the client library and llmq-keygen.
 *
 * A key file holds one Z85 key (40 characters) and may end with a newline;
 * llmq-keygen writes NAME.public and NAME.secret (mode 0600).  Only the
 * secret key is ever needed besides the peer's public one: the public half
 * is derived from it (zmq_curve_public), so the two can never disagree.
 *
 * The broker is the CURVE server on both its sockets; workers and clients
 * are CURVE clients that must know the broker's public key in advance. */
#ifndef LLMQ_PROTO_CURVE_H
#define LLMQ_PROTO_CURVE_H

#include <stdbool.h>

#include "common/err.h"

#define CURVE_Z85_LEN 40 /* characters of a Z85 key */

typedef struct curve_keys {
    char server_public[CURVE_Z85_LEN + 1]; /* the broker's (clients only) */
    char public_key[CURVE_Z85_LEN + 1];    /* ours, derived from secret_key */
    char secret_key[CURVE_Z85_LEN + 1];
} curve_keys;

/* True when this libzmq was built with CURVE (libsodium). */
bool curve_available(void);

/* Checks that text is one Z85 key of 32 bytes; its binary form in raw
 * (may be NULL).  `what` names it in the error. */
int curve_check(const char *text, unsigned char raw[32], const char *what,
                llmq_err *err);

/* Reads the one key in path into out (CURVE_Z85_LEN + 1 bytes). */
int curve_read_key(const char *path, char *out, llmq_err *err);

/* Reads the secret key in path and derives its public half into k. */
int curve_load_secret(curve_keys *k, const char *path, llmq_err *err);

/* A client's keys: the broker's public key and our secret one, from files.
 * Refused, naming the file: an llmq-keygen .secret file as the broker's
 * key, a .public one as ours, our own public key as the broker's. */
int curve_load_client(curve_keys *k, const char *broker_key_path,
                      const char *secret_path, llmq_err *err);

/* Makes sock a CURVE server with k's keys (before bind). */
int curve_serve(void *sock, const curve_keys *k, llmq_err *err);
/* Makes sock a CURVE client of k->server_public (before connect). */
int curve_connect_as(void *sock, const curve_keys *k, llmq_err *err);

#endif
