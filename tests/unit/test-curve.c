/* test-curve: a client's CURVE key files (proto/curve.c).
 *
 * Pins: a broker's NAME.public and a client's NAME.secret, as llmq-keygen
 * writes them (one Z85 line each), load; the slips that would otherwise
 * only time out at the handshake are refused, naming the file: the
 * broker's .secret given as its public key, the client's .public given as
 * its secret, and the client's own public key given as the broker's;
 * a file that is not a key is refused as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "proto/curve.h"
#include "tests/unit/check.h"

/* NAME.public and NAME.secret in dir, as llmq-keygen writes them. */
static void keygen(const char *dir, const char *name)
{
    char pub[41], sec[41], path[256];
    CHECK(zmq_curve_keypair(pub, sec) == 0, "a key pair for %s", name);
    const char *const kinds[2] = {"public", "secret"};
    const char *const keys[2] = {pub, sec};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.%s", dir, name, kinds[i]);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%s\n", keys[i]);
            fclose(f);
        }
    }
}

/* curve_load_client on dir/BROKER and dir/SECRET: 0, or -1 with err. */
static int load(const char *dir, const char *broker, const char *secret, llmq_err *err)
{
    char b[256], s[256];
    snprintf(b, sizeof b, "%s/%s", dir, broker);
    snprintf(s, sizeof s, "%s/%s", dir, secret);
    curve_keys k;
    err->msg[0] = '\0';
    return curve_load_client(&k, b, s, err);
}

int main(void)
{
    if (!curve_available()) {
        printf("# this libzmq has no CURVE: skipped\n");
        return 77;
    }
    char dir[] = "/tmp/llmq-test-curve.XXXXXX";
    if (!mkdtemp(dir))
        return 99;
    keygen(dir, "broker");
    keygen(dir, "alice");
    llmq_err err;
    CHECK(load(dir, "broker.public", "alice.secret", &err) == 0, "the right files load (%s)",
          err.msg);
    CHECK(load(dir, "broker.secret", "alice.secret", &err) == -1 &&
              strstr(err.msg, "broker.secret: a secret key file given as the broker's public key"),
          "the broker's secret as its public key is refused by name: %s", err.msg);
    CHECK(load(dir, "broker.public", "alice.public", &err) == -1 &&
              strstr(err.msg, "alice.public: a public key file given as this client's secret"),
          "the client's public file as its secret is refused by name: %s", err.msg);
    CHECK(load(dir, "alice.public", "alice.secret", &err) == -1 &&
              strstr(err.msg, "alice.public: this is the public key of") &&
              strstr(err.msg, "this client's own"),
          "the client's own public key as the broker's is refused: %s", err.msg);
    char bad[256];
    snprintf(bad, sizeof bad, "%s/notakey", dir);
    FILE *f = fopen(bad, "w");
    if (f) {
        fputs("hello\n", f);
        fclose(f);
    }
    CHECK(load(dir, "notakey", "alice.secret", &err) == -1 &&
              strstr(err.msg, "not a Z85 CURVE key"),
          "a file that is not a key is refused as before: %s", err.msg);
    const char *const names[] = {"broker.public", "broker.secret", "alice.public", "alice.secret",
                                 "notakey"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return check_done();
}
