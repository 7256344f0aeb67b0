/* test-backend: what the backend seam says about the machine and its
 * memory (kernels/select.h, backend_ops.kv_block_bytes), in either build.
 *
 * Pins: a build says whether it has a GPU backend, and one without sees no
 * GPU; an index past the visible GPUs is refused, naming it; every visible
 * GPU has a name and a UUID as nvidia-smi prints it; cpu_only opens the
 * CPU, and the default opens GPU 0 when there is one, else the CPU with the
 * reason when a GPU backend was built; a KV block of the CPU backend is the
 * keys and values of its tokens in every layer, 2 bytes a value in f16 and
 * 4 in f32. */
#include "config.h"

#include <string.h>

#include "kernels/select.h"
#include "tests/unit/check.h"

#ifdef LLMQ_HAVE_CUDA
#define CUDA_BUILT true
#else
#define CUDA_BUILT false
#endif

static void check_gpus(int n)
{
    CHECK(backend_gpus_built() == CUDA_BUILT, "the build says whether it has a GPU backend (%d)",
          (int)backend_gpus_built());
    CHECK(n >= 0 && (CUDA_BUILT || n == 0), "%d GPUs visible", n);
    char name[256], uuid[64];
    llmq_err err = {0};
    char want[32];
    snprintf(want, sizeof want, "GPU %d", n);
    CHECK(backend_gpu_info(n, name, sizeof name, uuid, sizeof uuid, &err) == -1 &&
              strstr(err.msg, want) != NULL,
          "GPU %d, past the visible ones, is refused by name: %s", n, err.msg);
    for (int i = 0; i < n; i++) {
        int rc = backend_gpu_info(i, name, sizeof name, uuid, sizeof uuid, &err);
        CHECK(rc == 0 && name[0] && strncmp(uuid, "GPU-", 4) == 0 && strlen(uuid) == 40,
              "GPU %d: '%s', %s", i, rc == 0 ? name : err.msg, rc == 0 ? uuid : "");
    }
}

static void check_select(int n_gpus)
{
    backend *be = NULL;
    int gpu = 7;
    char fallback[LLMQ_ERR_MAX];
    llmq_err err = {0};
    const backend_request cpu = {.cpu_only = true, .gpu = -1, .threads = 1};
    CHECK(backend_select(&be, &cpu, &gpu, fallback, sizeof fallback, &err) == 0 && be &&
              strcmp(be->name, "cpu") == 0 && gpu == -1 && fallback[0] == '\0',
          "cpu_only opens the CPU and gives no reason");
    backend_destroy(be);
    be = NULL;
    const backend_request any = {.cpu_only = false, .gpu = -1, .threads = 1};
    int rc = backend_select(&be, &any, &gpu, fallback, sizeof fallback, &err);
    if (n_gpus > 0)
        CHECK(rc == 0 && strcmp(be->name, "cuda") == 0 && gpu == 0, "by default, GPU 0 of %d (%s)",
              n_gpus, rc == 0 ? be->name : err.msg);
    else
        CHECK(rc == 0 && strcmp(be->name, "cpu") == 0 && gpu == -1 &&
                  (fallback[0] != '\0') == CUDA_BUILT,
              "by default without a GPU, the CPU, saying why when CUDA was built: '%s'", fallback);
    backend_destroy(be);
}

static void check_kv_block_bytes(void)
{
    backend *be = NULL;
    llmq_err err = {0};
    if (backend_cpu_create(&be, 1, &err) != 0) {
        CHECK(0, "cpu backend: %s", err.msg);
        return;
    }
    size_t f16 = 0, f32 = 0;
    const int rc = be->ops->kv_block_bytes(be, 32, 16, 1024, BE_KV_F16, &f16, &err) |
                   be->ops->kv_block_bytes(be, 32, 16, 1024, BE_KV_F32, &f32, &err);
    CHECK(rc == 0 && f16 == (size_t)2 * 32 * 16 * 1024 * 2 && f32 == 2 * f16,
          "a CPU block of 16 tokens, 32 layers, 1024 values a row: %zu bytes f16, %zu f32", f16,
          f32);
    backend_destroy(be);
}

int main(void)
{
    llmq_err err = {0};
    const int n = backend_gpu_count(&err);
    if (n < 0)
        printf("# counting GPUs: %s\n", err.msg);
    check_gpus(n);
    check_select(n);
    check_kv_block_bytes();
    return check_done();
}
