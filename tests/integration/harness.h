/* harness: a real llmq-broker process and raw protocol peers for tests.
 *
 * Each harness has its own temp directory holding the database, the
 * broker's log and ipc:// endpoints, so tests running in parallel never
 * share a port or a file.  Peers are plain ZeroMQ DEALER sockets that speak
 * the wire protocol through proto/wire (or send raw bytes, for bad-input
 * tests): they exercise the broker exactly as any client or worker would.
 *
 * Every wait is bounded; h_init arms an alarm so that a hung broker fails
 * the test instead of hanging the suite. */
#ifndef LLMQ_TESTS_HARNESS_H
#define LLMQ_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <msgpack.h>

#include "proto/wire.h"

typedef struct harness {
    char dir[200];
    char db[256], log[256];
    char clients[256], workers[256];
    char exe[512];
    pid_t broker;
    void *zctx;
} harness;

/* Makes the temp dir and endpoints; exits 77 (skip) outside `make check`. */
void h_init(harness *h, const char *name, unsigned alarm_s);
/* Starts llmq-broker on the harness's files with extra flags (NULL-ended). */
void h_start(harness *h, const char *const *extra);
/* SIGTERM, then waits up to wait_ms (then SIGKILL); the exit status as
 * given by waitpid, or -1 if it had to be killed. */
int h_stop(harness *h, int wait_ms);
void h_kill9(harness *h);
/* Removes the temp dir (unless the test failed: keep it to look at). */
void h_done(harness *h, bool keep);

/* A DEALER connected to endpoint. */
void *h_peer(harness *h, const char *endpoint);
void h_close(void *sock);

/* Sends m as one frame; 0 or -1. */
int h_send(void *sock, const wire_msg *m);
int h_send_raw(void *sock, const void *body, size_t len);
/* A body packed by hand, for the messages proto/wire will not encode (a
 * field of the wrong type, a value out of range): h_body_start, pack into
 * pk, h_body_send (which frees it). */
typedef struct h_body {
    msgpack_sbuffer buf;
    msgpack_packer pk;
} h_body;
msgpack_packer *h_body_start(h_body *b);
void h_pk_str(msgpack_packer *pk, const char *s);
int h_body_send(void *sock, h_body *b);
/* Receives and decodes one message within timeout_ms: 0, or -1 on timeout
 * or a body that does not decode (message in stderr). */
int h_recv(void *sock, int timeout_ms, wire_msg *m);
/* Receives until a message of type t arrives (others are dropped). */
int h_recv_type(void *sock, int timeout_ms, wire_type t, wire_msg *m);

/* A text job with default sampling; key may be NULL. */
void h_job(wire_job *j, const char *key, const char *prompt);

/* First column of the first row of sql on a read-only connection;
 * INT64_MIN when there is none. */
int64_t h_sql(const harness *h, const char *sql);

/* True when the file at path (the broker's log: h->log) holds text. */
bool h_file_has(const char *path, const char *text);

/* Waits up to wait_ms for child pid to exit (then kills it with SIGKILL);
 * its wait status, or -1 when it had to be killed. */
int h_reap(pid_t pid, int wait_ms);
void h_sleep_ms(int ms);

#endif
