/* model_fixture: stories260K (real weights) on a 2-thread CPU backend, and
 * its vocabulary -- the model of the tests that run the engine.  Header
 * only, as check.h: each test is its own program. */
#ifndef LLMQ_TESTS_MODEL_FIXTURE_H
#define LLMQ_TESTS_MODEL_FIXTURE_H

#include <stdio.h>

#include "check.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/tokenizer.h"

typedef struct model_fixture {
    backend *be;
    model *m;
    tok_vocab *vocab;
} model_fixture;

static inline void model_fixture_free(model_fixture *fx)
{
    tok_free(fx->vocab);
    model_free(fx->m);
    if (fx->be)
        backend_destroy(fx->be);
    *fx = (model_fixture){0};
}

/* Loads it; on failure prints why and returns -1. */
static inline int model_fixture_load(model_fixture *fx)
{
    char path[512];
    llmq_err err;
    *fx = (model_fixture){0};
    if (backend_cpu_create(&fx->be, 2, &err) != 0 ||
        model_load(&fx->m, check_data_path(path, sizeof path, "models/stories260K.gguf"), fx->be,
                   &err) != 0 ||
        tok_load(&fx->vocab, model_gguf(fx->m), &err) != 0) {
        printf("setup: %s\n", err.msg);
        model_fixture_free(fx);
        return -1;
    }
    return 0;
}

#endif
