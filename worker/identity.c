#include "worker/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/text.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* The header is read afresh (not through the mapping) so that the hash is
 * exactly that of the bytes on disk before the data section. */
static int header_hash(const gguf_file *f, uint64_t *out, llmq_err *err)
{
    const char *path = gguf_path(f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llmq_errf(err, "%s: %s", path, strerror(errno));
    uint64_t h = FNV_OFFSET, left = gguf_data_offset(f), at = 0;
    unsigned char buf[1 << 16];
    while (left > 0) {
        ssize_t got = pread(fd, buf, left < sizeof buf ? (size_t)left : sizeof buf, (off_t)at);
        if (got <= 0) {
            close(fd);
            return llmq_errf(err, "%s: reading the header at offset %" PRIu64 ": %s", path, at,
                             got < 0 ? strerror(errno) : "end of file");
        }
        h = fnv1a(h, buf, (size_t)got);
        at += (uint64_t)got;
        left -= (uint64_t)got;
    }
    close(fd);
    unsigned char size[8];
    for (int i = 0; i < 8; i++)
        size[i] = (unsigned char)(gguf_file_size(f) >> (8 * i));
    *out = fnv1a(h, size, sizeof size);
    return 0;
}

/* The file name without its directory and a ".gguf" ending. */
static char *stem(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
        n -= 5;
    return text_clean(base, n, WIRE_MAX_NAME_BYTES);
}

static char *clean(const char *s)
{
    return text_clean(s, strlen(s), WIRE_MAX_NAME_BYTES);
}

static char *default_worker(const char *host, int32_t gpu_index)
{
    char name[WIRE_MAX_NAME_BYTES + 64];
    if (gpu_index >= 0)
        snprintf(name, sizeof name, "%s:gpu%d", host, gpu_index);
    else
        snprintf(name, sizeof name, "%s:cpu-%ld", host, (long)getpid());
    return clean(name);
}

int identity_make(identity *id, const identity_opts *o, const gguf_file *f, llmq_err *err)
{
    memset(id, 0, sizeof *id);
    char host[WIRE_MAX_NAME_BYTES + 1] = "localhost";
    if (gethostname(host, sizeof host) != 0 || !host[0])
        strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    uint64_t h;
    if (header_hash(f, &h, err) != 0)
        return -1;
    char hash[32];
    snprintf(hash, sizeof hash, "fnv1a64:%016" PRIx64, h);
    id->host = clean(host);
    id->model = o->model_name ? clean(o->model_name) : stem(gguf_path(f));
    id->model_hash = clean(hash);
    id->worker = !id->host ? NULL
                 : o->worker ? clean(o->worker)
                             : default_worker(id->host, o->gpu_index);
    id->gpu_index = o->gpu_index;
    id->gpu_name = o->gpu_name ? clean(o->gpu_name) : NULL;
    id->gpu_uuid = o->gpu_uuid ? clean(o->gpu_uuid) : NULL;
    if (!id->host || !id->model || !id->model_hash || !id->worker ||
        (o->gpu_name && !id->gpu_name) || (o->gpu_uuid && !id->gpu_uuid)) {
        identity_free(id);
        return llmq_errf(err, "out of memory");
    }
    return 0;
}

void identity_free(identity *id)
{
    free(id->worker);
    free(id->host);
    free(id->model);
    free(id->model_hash);
    free(id->gpu_name);
    free(id->gpu_uuid);
    memset(id, 0, sizeof *id);
}

void identity_hello(const identity *id, wire_hello *h)
{
    h->worker = id->worker;
    h->host = id->host;
    h->pid = (uint32_t)getpid();
    h->gpu_index = id->gpu_index;
    h->gpu_name = id->gpu_name;
    h->gpu_uuid = id->gpu_uuid;
    h->model = id->model;
    h->model_hash = id->model_hash;
}
