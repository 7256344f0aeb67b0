/* test-cpu-kernels: the CPU backend's forward pass gives bit-identical
 * logits with every kernel set this CPU runs (LLMQ_CPU_KERNELS = generic,
 * avx2, avx512), on a model of each weight type the kernels cover (f32,
 * f16, q8_0, q4_K/q6_K), with the f16 and the q8_0 KV cache: a prompt
 * prefilled in one batch, every row's logits, then two decode steps.  test-dot pins each kernel;
 * this pins that the backend wires them so that nothing else differs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/check.h"
#include "model/model.h"

#define PROMPT 37
#define STEPS 2
#define BLOCK 16
#define BLOCKS 4

/* Logits of PROMPT prefill rows then STEPS decode rows (caller frees), or
 * NULL with a message when this CPU does not run the set. */
static float *run(const char *path, const char *set, be_kv_type kv_type, int32_t *n_vocab)
{
    setenv("LLMQ_CPU_KERNELS", set, 1);
    llmq_err err;
    backend *be = NULL;
    model *m = NULL;
    model_state *st = NULL;
    be_kv *kv = NULL;
    float *logits = NULL;
    if (backend_cpu_create(&be, 2, &err) != 0) {
        printf("# %s: %s\n", set, err.msg);
        return NULL;
    }
    if (model_load(&m, path, be, &err) != 0) {
        printf("# %s: %s\n", path, err.msg);
        goto done;
    }
    const model_config *c = model_get_config(m);
    *n_vocab = c->n_vocab;
    if (model_state_create(&st, m, PROMPT, 1, BLOCKS, PROMPT, &err) != 0 ||
        be->ops->kv_create(be, c->n_layers, BLOCKS, BLOCK, c->n_head_kv * c->head_dim, kv_type, &kv,
                           &err) != 0) {
        printf("# %s: %s\n", path, err.msg);
        goto done;
    }
    logits = malloc((size_t)(PROMPT + STEPS) * c->n_vocab * sizeof *logits);
    int32_t tokens[PROMPT + STEPS], pos[PROMPT + STEPS], rows[PROMPT], zero[PROMPT] = {0};
    const int32_t table[BLOCKS] = {2, 0, 3, 1}; /* blocks out of order, as the pool hands them */
    int32_t slot[PROMPT + STEPS];
    for (int32_t i = 0; i < PROMPT + STEPS; i++) {
        tokens[i] = (int32_t)((i * 7919u + 13u) % (uint32_t)c->n_vocab);
        pos[i] = i;
        slot[i] = table[i / BLOCK] * BLOCK + i % BLOCK;
        if (i < PROMPT)
            rows[i] = i;
    }
    for (int32_t step = 0; step <= STEPS; step++) {
        const int32_t first = step == 0 ? 0 : PROMPT + step - 1;
        const int32_t n = step == 0 ? PROMPT : 1;
        const int32_t len = first + n;
        const model_batch b = {.n_rows = n, .tokens = tokens + first, .pos = pos + first,
                               .slot = slot + first, .row_seq = zero, .n_seqs = 1,
                               .block_table = table, .seq_len = &len, .max_blocks = BLOCKS,
                               .n_logits = n, .logit_rows = rows};
        if (model_forward(m, st, kv, &b, logits + (size_t)(step == 0 ? 0 : first) * c->n_vocab,
                          &err) != 0) {
            printf("# %s: %s\n", path, err.msg);
            free(logits);
            logits = NULL;
            break;
        }
    }
done:
    if (kv)
        be->ops->kv_destroy(be, kv);
    model_state_free(st);
    model_free(m);
    backend_destroy(be);
    return logits;
}

int main(void)
{
    static const char *const models[] = {"stories260K.gguf", "TinyStories-656K.f16.gguf",
                                         "tinystories-656k-q8_0.gguf", "synth-q4km-gqa.gguf"};
    static const char *const sets[] = {"avx2", "avx512"};
    static const be_kv_type kv_types[] = {BE_KV_F16, BE_KV_Q8_0};
    int compared = 0;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        for (size_t t = 0; t < sizeof kv_types / sizeof *kv_types; t++) {
            const char *kv = be_kv_type_name(kv_types[t]);
            char path[4096], rel[256];
            snprintf(rel, sizeof rel, "models/%s", models[i]);
            check_data_path(path, sizeof path, rel);
            int32_t n_vocab = 0;
            float *ref = run(path, "generic", kv_types[t], &n_vocab);
            CHECK(ref != NULL, "%s, %s KV: runs on the generic kernels", models[i], kv);
            for (size_t s = 0; ref && s < sizeof sets / sizeof *sets; s++) {
                int32_t nv = 0;
                float *got = run(path, sets[s], kv_types[t], &nv);
                if (!got)
                    continue;
                compared++;
                CHECK(nv == n_vocab &&
                          memcmp(ref, got, (size_t)(PROMPT + STEPS) * n_vocab * sizeof *ref) == 0,
                      "%s, %s KV: %s gives the generic kernels' logits bit for bit (%d prefill "
                      "rows, %d decode steps)",
                      models[i], kv, sets[s], PROMPT, STEPS);
                free(got);
            }
            free(ref);
        }
    unsetenv("LLMQ_CPU_KERNELS");
    llmq_err err;
    backend *be;
    setenv("LLMQ_CPU_KERNELS", "sse9", 1);
    CHECK(backend_cpu_create(&be, 1, &err) != 0 && strstr(err.msg, "sse9"),
          "an unknown LLMQ_CPU_KERNELS is refused, naming it");
    if (compared == 0)
        printf("# no SIMD kernel set runs here: only the generic one was exercised\n");
    return check_done();
}
