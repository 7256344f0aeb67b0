#include "proto/curve.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

bool curve_available(void)
{
    return zmq_has("curve") != 0;
}

int curve_check(const char *text, unsigned char raw[32], const char *what,
                llmq_err *err)
{
    unsigned char tmp[32];
    if (strlen(text) != CURVE_Z85_LEN || !zmq_z85_decode(raw ? raw : tmp, text))
        return llmq_errf(err, "%s: not a Z85 CURVE key (%d characters of the Z85"
                              " alphabet)", what, CURVE_Z85_LEN);
    return 0;
}

int curve_read_key(const char *path, char *out, llmq_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return llmq_errf(err, "%s: %s", path, strerror(errno));
    char buf[CURVE_Z85_LEN + 8];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    if (curve_check(buf, NULL, path, err))
        return -1;
    memcpy(out, buf, CURVE_Z85_LEN + 1);
    return 0;
}

int curve_load_secret(curve_keys *k, const char *path, llmq_err *err)
{
    if (!curve_available())
        return llmq_errf(err, "%s: this libzmq has no CURVE support (built"
                              " without libsodium)", path);
    if (curve_read_key(path, k->secret_key, err))
        return -1;
    if (zmq_curve_public(k->public_key, k->secret_key) != 0)
        return llmq_errf(err, "%s: cannot derive the public key: %s", path,
                         zmq_strerror(errno));
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The slips a client's two key files allow, refused by name where the
 * handshake would only time out: both are bare Z85 and look alike, so a
 * file llmq-keygen named NAME.secret given as the broker's key (or a
 * .public one as this client's secret), or this client's own public key
 * given as the broker's, is said so. */
static int check_client_keys(const curve_keys *k, const char *broker_key_path,
                             const char *secret_path, llmq_err *err)
{
    if (ends_with(broker_key_path, ".secret"))
        return llmq_errf(err,
                         "%s: a secret key file given as the broker's public key"
                         " (--broker-key takes the broker's NAME.public from llmq-keygen)",
                         broker_key_path);
    if (ends_with(secret_path, ".public"))
        return llmq_errf(err,
                         "%s: a public key file given as this client's secret key"
                         " (--curve-secret takes its own NAME.secret from llmq-keygen)",
                         secret_path);
    if (strcmp(k->server_public, k->public_key) == 0)
        return llmq_errf(err,
                         "%s: this is the public key of %s, this client's own: --broker-key"
                         " takes the broker's",
                         broker_key_path, secret_path);
    return 0;
}

int curve_load_client(curve_keys *k, const char *broker_key_path,
                      const char *secret_path, llmq_err *err)
{
    return curve_load_secret(k, secret_path, err) ||
                   curve_read_key(broker_key_path, k->server_public, err) ||
                   check_client_keys(k, broker_key_path, secret_path, err)
               ? -1
               : 0;
}

static int set_str(void *sock, int opt, const char *v, llmq_err *err)
{
    if (zmq_setsockopt(sock, opt, v, strlen(v)) != 0)
        return llmq_errf(err, "zmq_setsockopt(CURVE %d): %s", opt,
                         zmq_strerror(errno));
    return 0;
}

int curve_serve(void *sock, const curve_keys *k, llmq_err *err)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0)
        return llmq_errf(err, "zmq_setsockopt(CURVE_SERVER): %s",
                         zmq_strerror(errno));
    return set_str(sock, ZMQ_CURVE_SECRETKEY, k->secret_key, err);
}

int curve_connect_as(void *sock, const curve_keys *k, llmq_err *err)
{
    return set_str(sock, ZMQ_CURVE_SERVERKEY, k->server_public, err) ||
                   set_str(sock, ZMQ_CURVE_PUBLICKEY, k->public_key, err) ||
                   set_str(sock, ZMQ_CURVE_SECRETKEY, k->secret_key, err)
               ? -1
               : 0;
}
