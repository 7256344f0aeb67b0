/* llmq-keygen: a CURVE key pair for a broker, a worker or a client.
 *
 * Writes NAME.public and NAME.secret (Z85, one line each).  The secret file
 * is created with mode 0600 and never overwritten: losing a key that is in
 * some allow-list by accident is worse than an error. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/cli.h"
#include "proto/curve.h"

static const char USAGE[] =
    "Usage: llmq-keygen NAME\n"
    "Make a CURVE key pair for llmq: NAME.public (give it to the peers) and\n"
    "NAME.secret (mode 0600, keep it on this host).  Existing files are not\n"
    "overwritten.\n";

static const char EPILOG[] =
    "The broker takes --curve-secret NAME.secret and lists the public keys it\n"
    "accepts in --allow-workers / --allow-clients files; workers and clients take\n"
    "--curve-secret NAME.secret and --broker-key BROKER.public.\n"
    "Exit status: 0 when both files were written, 1 on an error, 2 on bad usage.\n";

static int check_name(void *name, llmq_err *err)
{
    return **(const char **)name ? 0 : llmq_errf(err, "NAME is empty");
}

/* CLI_RUN with *name set, or the status to exit with at once. */
static int parse_args(int argc, char **argv, const char **name)
{
    const cli_spec spec = {.program = "llmq-keygen",
                           .usage = USAGE,
                           .epilog = EPILOG,
                           .operand = name,
                           .operand_name = "NAME",
                           .check = check_name,
                           .check_ctx = name};
    return cli_read(&spec, argc, argv);
}

static int write_key(const char *name, const char *ext, const char *key, mode_t mode)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s.%s", name, ext) >= (int)sizeof path) {
        fprintf(stderr, "llmq-keygen: %s: name too long\n", name);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) {
        fprintf(stderr, "llmq-keygen: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[CURVE_Z85_LEN + 2];
    int n = snprintf(line, sizeof line, "%s\n", key);
    int rc = write(fd, line, (size_t)n) == n && fchmod(fd, mode) == 0 ? 0 : -1;
    if (close(fd) != 0 || rc) {
        fprintf(stderr, "llmq-keygen: writing %s: %s\n", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *name;
    const int status = parse_args(argc, argv, &name);
    if (status != CLI_RUN)
        return status;
    if (!curve_available()) {
        fputs("llmq-keygen: this libzmq has no CURVE support (built without"
              " libsodium)\n", stderr);
        return 1;
    }
    char pub[CURVE_Z85_LEN + 1], sec[CURVE_Z85_LEN + 1];
    if (zmq_curve_keypair(pub, sec) != 0) {
        fprintf(stderr, "llmq-keygen: zmq_curve_keypair: %s\n", zmq_strerror(errno));
        return 1;
    }
    if (write_key(name, "secret", sec, 0600))
        return 1;
    if (write_key(name, "public", pub, 0644)) {
        char path[4096];
        snprintf(path, sizeof path, "%s.secret", name);
        unlink(path);
        return 1;
    }
    return 0;
}
