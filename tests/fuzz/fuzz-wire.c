/* fuzz-wire: libFuzzer target for message decoding.
 *
 * Every input is decoded from an exact-size heap copy (so ASan sees any read
 * past the end) as a message of any direction.  When it is accepted, the
 * decoded message must encode, decode again and encode to the very same
 * bytes: what the decoder lets through is a message the encoder can write,
 * and nothing is lost or invented on the way (abort otherwise).  Every
 * string the message exposes is walked, so a dangling or unterminated one
 * is caught too.  A refusal must carry a code and a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t walk(const char *s)
{
    return s ? strlen(s) : 0;
}

/* Touches the strings of the messages with the most of them. */
static size_t walk_msg(const wire_msg *m)
{
    size_t n = 0;
    switch (m->type) {
    case WIRE_T_SUBMIT:
        n += walk(m->submit.batch) + walk(m->submit.meta);
        for (uint32_t i = 0; i < m->submit.n_jobs; i++) {
            const wire_job *j = &m->submit.jobs[i];
            n += walk(j->key) + walk(j->prompt) + walk(j->model);
            for (uint32_t k = 0; k < j->params.n_stop; k++)
                n += walk(j->params.stop[k]);
        }
        break;
    case WIRE_T_RESULT:
    case WIRE_T_JOB_RESULT:
        n += walk(m->result.text) + walk(m->result.error) + walk(m->result.worker);
        break;
    case WIRE_T_ERROR:
        n += walk(m->error.field) + walk(m->error.message);
        break;
    case WIRE_T_HELLO:
        n += walk(m->hello.worker) + walk(m->hello.host) + walk(m->hello.model);
        break;
    default:
        break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    wire_msg m;
    wire_error err;
    int rc = wire_decode(copy, size, WIRE_DIR_ANY, &m, &err);
    free(copy);
    if (rc < 0) {
        if (err.code == WIRE_OK || err.err.msg[0] == '\0' || m.arena != NULL)
            abort();
        return 0;
    }
    volatile size_t sink = walk_msg(&m);
    (void)sink;
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (wire_encode(&m, &a, &na, &err) < 0)
        abort();   /* accepted but not writable */
    wire_msg back;
    if (wire_decode(a, na, WIRE_DIR_ANY, &back, &err) < 0)
        abort();   /* written but not readable */
    if (wire_encode(&back, &b, &nb, &err) < 0 || na != nb || memcmp(a, b, na) != 0)
        abort();   /* something changed on the way */
    wire_msg_free(&back);
    wire_msg_free(&m);
    free(a);
    free(b);
    return 0;
}
