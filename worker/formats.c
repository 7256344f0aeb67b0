#include "worker/formats.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "engine/jsonschema.h"

typedef struct format {
    char *schema; /* the schema's text; NULL: json_object mode */
    grammar *g;
    uint32_t users;
    uint64_t used; /* tick of its last acquire: the idle one least recently used goes first */
} format;

struct formats {
    format *v;
    size_t n, cap;
    uint64_t tick;
    uint64_t compiled;
};

int formats_new(formats **out, llmq_err *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for the format table");
}

static void format_drop(format *e)
{
    grammar_free(e->g);
    free(e->schema);
}

void formats_free(formats *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        format_drop(&f->v[i]);
    free(f->v);
    free(f);
}

static format *find(formats *f, const char *schema)
{
    for (size_t i = 0; i < f->n; i++) {
        const char *s = f->v[i].schema;
        if (!s != !schema)
            continue;
        if (!s || strcmp(s, schema) == 0)
            return &f->v[i];
    }
    return NULL;
}

/* Drops the least recently used grammar no job holds while more than
 * FORMATS_IDLE_MAX are idle. */
static void trim(formats *f)
{
    for (;;) {
        size_t idle = 0, oldest = f->n;
        for (size_t i = 0; i < f->n; i++)
            if (f->v[i].users == 0) {
                idle++;
                if (oldest == f->n || f->v[i].used < f->v[oldest].used)
                    oldest = i;
            }
        if (idle <= FORMATS_IDLE_MAX)
            return;
        format_drop(&f->v[oldest]);
        f->v[oldest] = f->v[--f->n];
    }
}

/* A compile error is the schema's (bad input) unless memory ran out. */
static int compile(const char *schema, grammar **g, llmq_err *err)
{
    llmq_err why;
    int rc = schema ? jsonschema_compile(g, schema, strlen(schema), &why)
                    : jsonschema_any_object(g, &why);
    if (rc == 0)
        return 0;
    return llmq_errc(err, why.code == LLMQ_ERR_NO_ROOM ? LLMQ_ERR_NO_ROOM : LLMQ_ERR_INVALID,
                     "%s: %s", schema ? "json_schema" : "json_object", why.msg);
}

static format *add(formats *f, const char *schema, llmq_err *err)
{
    if (grow_reserve(&f->v, &f->cap, f->n + 1, sizeof *f->v) != 0) {
        llmq_errc(err, LLMQ_ERR_NO_ROOM, "out of memory for the format table");
        return NULL;
    }
    format e = {0};
    if (schema && !(e.schema = strdup(schema))) {
        llmq_errc(err, LLMQ_ERR_NO_ROOM, "json_schema: out of memory");
        return NULL;
    }
    if (compile(schema, &e.g, err) != 0) {
        free(e.schema);
        return NULL;
    }
    f->compiled++;
    f->v[f->n] = e;
    return &f->v[f->n++];
}

int formats_acquire(formats *f, const job_params *p, const grammar **g, llmq_err *err)
{
    *g = NULL;
    if (!p->json_schema && !p->json_object)
        return 0;
    format *e = find(f, p->json_schema);
    if (!e && !(e = add(f, p->json_schema, err)))
        return -1;
    e->users++;
    e->used = ++f->tick;
    *g = e->g;
    trim(f);
    return 0;
}

void formats_release(formats *f, const grammar *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].g == g && f->v[i].users > 0) {
            f->v[i].users--;
            break;
        }
    trim(f);
}

formats_stats formats_get_stats(const formats *f)
{
    return (formats_stats){.grammars = (int32_t)f->n, .compiled = f->compiled};
}
