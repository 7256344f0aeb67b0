/* cuda_internal: what the CUDA backend's .cu files share (CUDA C++, never
 * included from C).  cuda_backend.cu owns lifetime, memory, weights and the
 * ops table; each kernel family (elementwise.cu, mmv.cu, gemm.cu,
 * attention.cu, sampling.cu) exposes host launchers declared here, and
 * graphs.cu records and replays decode steps.
 *
 * Layouts on the device (the seam's be_* structs, defined here):
 * - Weights, row-major, n rows x k cols, each row a whole number of blocks:
 *   q4_K and q5_K stay in ggml's 144- and 176-byte blocks (16-byte aligned:
 *   a header of d, dmin, 12 scale bytes; q5_K's 32 bytes of fifth bits;
 *   then 128 bytes of nibbles).  q6_K and q8_0 are repacked at load into
 *   planes so every load is 16 bytes wide (see cuda_backend.cu: q6_repack):
 *   q6_K's 6-bit values as a q4_K-like plane of nibbles (ql4, 128 B/block)
 *   plus a plane of high bits (qh, 64 B/block), 16 int8 scales and one f16
 *   d per block; q8_0 as 32 B of quants per block plus one f16 d.  f16 and
 *   f32 rows are stored as they are; bf16 rows are widened to f32 at load.
 * - Activations (be_act): x is f32 rows x cols; the matmuls' copy
 *   (cuda_actq) is f16 rows in step order (numerics.cuh: act_step_pos),
 *   padded with zeros to a multiple of 64 columns, for mmv and the GEMM
 *   alike.
 * - KV cache: [layer][block * block_size + offset][kv_dim] values, f16 or
 *   (q8_0) int8, and for q8_0 a plane of f16 scales [layer][slot][kv_dim /
 *   32]: value e of a slot's row is q[e] * d[e / 32].
 *
 * Every op runs on the backend's one stream.  Launch errors and refused
 * shapes are kept as the backend's first error (naming the op) and
 * returned by the next sync or download. */
#ifndef LLMQ_KERNELS_CUDA_INTERNAL_H
#define LLMQ_KERNELS_CUDA_INTERNAL_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>
#include <utility>

/* The seam's headers are C11; their _Static_assert is C++'s static_assert. */
#define _Static_assert static_assert
extern "C" {
#include "config.h"
#include "kernels/backend.h"
}
#undef _Static_assert

/* The weight types the kernels are built for, in one place (bf16 is
 * widened to f32 at load and has none of its own).  Every launch site,
 * the GEMM's set-up and the load-time check go through the two walks
 * below, so a type added here gets kernels everywhere or fails to build. */
#define CUDA_WEIGHT_TYPES(X) \
    X(QUANT_Q4_K) X(QUANT_Q5_K) X(QUANT_Q6_K) X(QUANT_Q8_0) X(QUANT_F16) X(QUANT_F32)

/* Calls f(std::integral_constant<int, T>{}) for t and returns true, or
 * returns false for a type without kernels. */
template <typename F>
static bool with_weight_type(quant_type t, F f)
{
#define CUDA_WEIGHT_CASE(T) \
    case T: f(std::integral_constant<int, T>{}); return true;
    switch (t) {
        CUDA_WEIGHT_TYPES(CUDA_WEIGHT_CASE)
    default: return false;
    }
#undef CUDA_WEIGHT_CASE
}

/* Calls f(std::integral_constant<int, T>{}) for every type of the list. */
template <typename F>
static void for_each_weight_type(F f)
{
#define CUDA_WEIGHT_CALL(T) f(std::integral_constant<int, T>{});
    CUDA_WEIGHT_TYPES(CUDA_WEIGHT_CALL)
#undef CUDA_WEIGHT_CALL
}

/* Matmuls of at most this many activation rows may take mmv (the
 * tensor-core decode kernel, one m16 tile of rows), more rows the GEMM;
 * both compute the same bits (numerics.cuh), so the choice is one of speed
 * (docs/perf/05: at 32 and 64 rows the GEMM was the faster). */
#define MMV_MAX_ROWS 16
/* The GEMM's k tile: one 64-value quarter of a 256-value super-block. */
#define GEMM_BK 64
/* Matmuls of at least this many rows take the wgmma GEMM (gemm_sm90.cu)
 * where the build has it (sm_90a) and LLMQ_GEMM_SM90 is not 0, else gemm.cu's
 * mma.sync GEMM: a choice of speed only (numerics.cuh).  Every GEMM: at 64
 * rows wgmma took 0.63-0.75 of mma.sync's time on every 7B shape
 * (docs/perf/07, checkpoint 2), and below 64 both run the same 64-row
 * tiles as at 64. */
#define GEMM_SM90_MIN_ROWS (MMV_MAX_ROWS + 1)

struct be_weight {
    quant_type type;
    int64_t rows, cols;
    int64_t nb;           /* blocks per row: of 256 (k-quants) or 32 (q8_0); 0 for floats */
    const uint8_t *q;     /* q4_K blocks; q6_K ql4 plane; q8_0 quants; f16/f32 values */
    const uint8_t *qh;    /* q6_K: high bits, 64 B per block */
    const int8_t *sc;     /* q6_K: 16 scales per block */
    const __half *d;      /* q6_K, q8_0: one scale per block */
    void *mem;            /* the one device allocation holding the planes */
};

struct be_kv {
    int32_t n_layers, n_blocks, block_size, kv_dim;
    be_kv_type type; /* BE_KV_F16 or BE_KV_Q8_0 */
    void *k, *v;     /* the values: __half or int8_t */
    __half *ks, *vs; /* q8_0: the scales; NULL for f16 */
};

/* be_act.q of this backend (host struct, device planes). */
struct cuda_actq {
    __half *h; /* rows x act_f16_stride(cols), step order; valid while be_act.q_valid */
};

/* One recorded decode step (graphs.cu). */
#define GRAPH_SLOTS 32
struct cuda_graph_slot {
    uint64_t owner;               /* the key: be_graph_key.owner, */
    int32_t rows, logits, splits; /* rows, logit rows, split-KV grid */
    int state;                    /* empty, seen once, recorded */
    cudaGraphExec_t exec;
    uint64_t last_use;
};

struct cuda_backend {
    backend base;
    int gpu;
    int n_sm;
    cudaStream_t stream;
    uint8_t *stage;       /* pinned ring for small uploads */
    size_t stage_size, stage_off;
    float *part;          /* scratch: split-k sums, split-KV partials (cuda_scratch) */
    size_t part_bytes;
    bool gemm_sm90; /* GEMMs of >= GEMM_SM90_MIN_ROWS rows take gemm_sm90.cu */
    bool failed;
    llmq_err first_err;
    /* graphs.cu */
    bool graphs_on;
    cuda_graph_slot graphs[GRAPH_SLOTS];
    cuda_graph_slot *recording; /* the slot the stream is recording, or NULL */
    bool record_broken;         /* an op could not be recorded: graph_end reruns the step */
    uint64_t graph_clock;
    bool pdl_on; /* launches may overlap their predecessor (cuda_launch) */
};

static inline int64_t act_f16_stride(int64_t cols)
{
    return (cols + GEMM_BK - 1) / GEMM_BK * GEMM_BK;
}

/* Records the first failure (printf format); later ones are dropped. */
void cuda_fail(cuda_backend *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Device scratch of at least `bytes` (cb->part), valid until the next call;
 * NULL after recording a failure that names op. */
float *cuda_scratch(cuda_backend *cb, const char *op, size_t bytes);
/* Whether a switch of the environment is on: unset or anything but "0"
 * (LLMQ_CUDA_GRAPHS, LLMQ_CUDA_PDL, LLMQ_GEMM_SM90: for A/B runs). */
bool cuda_env_allows(const char *name);
/* After a launch: a launch error becomes the backend's error, naming op. */
void cuda_check_launch(cuda_backend *cb, const char *op);

/* graphs.cu: decode steps as CUDA graphs (backend.h, graph_begin). */
void cuda_graphs_init(cuda_backend *cb);
void cuda_graphs_drop(cuda_backend *cb);
int cu_graph_begin(backend *be, const be_graph_key *key);
int cu_graph_end(backend *be);

/* ---- programmatic dependent launch (PDL) ----
 *
 * A decode step is ~350 dependent kernels of a few microseconds each; back
 * to back, each one's launch, ramp-up and the first round trip of its loads
 * to memory sit between its predecessor's last store and its own first
 * result.  Launched through cuda_launch, a kernel may start while its
 * predecessor still runs (the stream's programmatic serialization, kept
 * as programmatic edges when a graph records it): its CTAs become resident
 * as soon as every CTA of the predecessor has called pdl_launch_next, do
 * what needs nothing of earlier kernels (addresses; mmv's copies of its weights),
 * and stop in pdl_wait until the predecessor has completed with all its
 * memory visible.
 *
 * The rule every kernel launched by cuda_launch keeps: every CTA executes
 * pdl_wait before it reads or writes any memory that an earlier kernel
 * writes or reads (activations, the KV cache, scratch, outputs), and before
 * it exits.  The second part is what makes the wait transitive: a kernel
 * completes only after its own wait returned, so after its predecessor
 * completed, and so on back.  Constant inputs (weights, the step's
 * uploaded batch arrays, which the host writes before the step starts) may
 * be read before the wait.  The results are the same bits with or without
 * PDL (LLMQ_CUDA_PDL=0 turns it off for A/B runs); only when a kernel
 * starts changes. */
static __device__ __forceinline__ void pdl_launch_next(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* The start of a kernel with nothing to do before its inputs are ready. */
static __device__ __forceinline__ void pdl_begin(void)
{
    pdl_launch_next();
    pdl_wait();
}

/* Starts bringing the 16-byte units inside [p, p + n) into L2 and returns
 * (Hopper's bulk prefetch: no registers or shared memory held, nothing to
 * wait for); a hint, so the ragged ends are left out. */
static __device__ __forceinline__ void l2_prefetch(const void *p, uint64_t n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint64_t first = ((uint64_t)p + 15) & ~(uint64_t)15,
                   end = ((uint64_t)p + n) & ~(uint64_t)15;
    if (end > first)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(first),
                     "r"((uint32_t)(end - first))
                     : "memory");
#else
    (void)p;
    (void)n;
#endif
}

/* kernel<<<grid, block, smem, cb->stream>>>(args...), allowed to overlap
 * its predecessor when cb->pdl_on (the rule above); errors are left for
 * cuda_check_launch. */
template <typename... P, typename... A>
static void cuda_launch(cuda_backend *cb, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                        A &&...args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = cb->pdl_on ? 1 : 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

/* ---- launchers (each enqueues on cb->stream) ---- */

/* Raise the shared-memory limits of the kernels that need more than 48 KB
 * (once per backend, before the first launch). */
cudaError_t gemm_configure(void);
cudaError_t attention_configure(void);

/* elementwise.cu */
void launch_embed(cuda_backend *cb, const be_weight *w, const int32_t *ids, int32_t n, float *out);
void launch_gather_rows(cuda_backend *cb, const float *x, const int32_t *idx, int32_t n,
                        int32_t dim, float *out);
/* y = rmsnorm(x) * w into a->x, plus the matmuls' f16 copy. */
void launch_rmsnorm(cuda_backend *cb, const float *x, const float *w, float eps, int32_t rows,
                    int32_t dim, be_act *a);
void launch_swiglu(cuda_backend *cb, const float *g, const float *u, int32_t rows, int32_t n,
                   be_act *a);
/* The matmuls' f16 copy of a->x. */
void launch_act_quantize(cuda_backend *cb, be_act *a);
void launch_rope(cuda_backend *cb, float *q, float *k, const int32_t *pos, int32_t rows,
                 const be_attn_shape *sh, const be_rope *rope, float theta_scale);
void launch_kv_write(cuda_backend *cb, be_kv *kv, int32_t layer, const float *k, const float *v,
                     const int32_t *slot, int32_t rows);

/* mmv.cu, for rows <= MMV_MAX_ROWS of k-quant and q8_0 weights.  A group:
 * out[i] (rows x w[i]->rows) (+)= in . w[i]^T for i < n <= MMV_GROUP_MAX
 * weights of one type and width, in one launch. */
#define MMV_GROUP_MAX 3
struct mmv_group {
    be_weight w[MMV_GROUP_MAX];
    float *out[MMV_GROUP_MAX];
    const float *bias[MMV_GROUP_MAX];   /* added in the epilogue; NULL: none */
    unsigned first_tile[MMV_GROUP_MAX]; /* first tile (of mmv_layout rows) of each weight */
    int n;
};
cudaError_t mmv_configure(void);
/* Whether mmv takes weights like w for activations like in. */
bool mmv_takes(const be_weight *w, const be_act *in);
/* bias: NULL, or n entries (NULL where a weight has none), with accumulate
 * false: out = product + bias, one float add (backend.h, matmul_many). */
void launch_mmv_group(cuda_backend *cb, int n, const be_weight *const *w, const be_act *in,
                      float *const *out, const float *const *bias, bool accumulate);
/* gemm.cu: out (rows x w->rows) from the f16 copy of in; bias: NULL, or
 * w->rows floats added to the product (one float add, before accumulate's:
 * mmv's epilogue, backend.h matmul_many). */
void launch_gemm(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                 const float *bias, bool accumulate);
/* gemm.cu: out (rows x cols) (+)= the sum of `splits` partials of as many
 * floats (part + s * rows * cols), added in split order, + bias[col]. */
void launch_split_sum(cuda_backend *cb, const float *part, int splits, int64_t rows, int64_t cols,
                      const float *bias, float *out, bool accumulate);
/* The k loop of a GEMM of w by in: unsplit (one CTA runs every k tile) or
 * split (one CTA a chunk of MM_CHUNK, kt_per k tiles, partials in part,
 * scratch of splits x rows x w->rows floats, for launch_split_sum); false
 * after recording that the scratch could not be had. */
struct gemm_split {
    int64_t lda; /* the f16 activation copy's row stride */
    int splits, kt_per;
    float *part; /* NULL when splits is 1 */
};
bool gemm_split_plan(cuda_backend *cb, const be_weight *w, const be_act *in, bool split,
                     gemm_split *g);
/* gemm_sm90.cu: whether this build has the wgmma GEMM and the environment
 * (LLMQ_GEMM_SM90=0 turns it off) lets it run; its launcher, the same
 * contract as launch_gemm. */
cudaError_t gemm_sm90_configure(void);
bool gemm_sm90_enabled(void);
void launch_gemm_sm90(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                      const float *bias, bool accumulate);
/* sampling.cu: the first maximum of each row (backend.h, argmax). */
void launch_argmax(cuda_backend *cb, const float *x, int32_t rows, int32_t n, int32_t *out);
/* sampling.cu: each row's k best (backend.h, top_k). */
void launch_top_k(cuda_backend *cb, const float *x, int32_t rows, int32_t n, int32_t k,
                  int32_t *ids, float *vals);
/* sampling.cu: the chain of sampled rows without top-k (backend.h, sample). */
void launch_sample(cuda_backend *cb, float *x, int32_t n, const be_sample_row *rows, int32_t n_rows,
                   const int32_t *pen, float *save, const uint64_t *mask, be_sample_out *out);
/* sampling.cu: each row's log-softmax normalizer (backend.h, log_norm). */
void launch_log_norm(cuda_backend *cb, const float *x, int32_t rows, int32_t n, double *out);
/* attention.cu */
void launch_attention(cuda_backend *cb, const be_kv *kv, int32_t layer, const float *q,
                      const be_attn_batch *b, const be_attn_shape *sh, float *out);

/* ---- device helpers shared by the kernel families ---- */

/* What a GEMM epilogue stores for product y: y plus the column's bias b
 * (when has_bias; one float add, as mmv's epilogue), then added to the
 * value o it replaces when accumulating (the residual add). */
static __device__ __forceinline__ float gemm_final_of(float y, bool has_bias, float b, float o,
                                                      bool accumulate)
{
    if (has_bias)
        y = __fadd_rn(y, b);
    return accumulate ? o + y : y;
}

/* gemm_final_of for column col of *o (bias NULL: none). */
static __device__ __forceinline__ float gemm_final(float y, const float *bias, int64_t col,
                                                   const float *o, bool accumulate)
{
    return gemm_final_of(y, bias != NULL, bias ? bias[col] : 0.0f, accumulate ? *o : 0.0f,
                         accumulate);
}

/* Scale and min (6 bits each) of sub-block j (0..7) of a q4_K block whose
 * 12 scale bytes are the words s0, s1, s2 (ggml's get_scale_min_k4). */
static __device__ __forceinline__ void k4_scale_min(int j, uint32_t s0, uint32_t s1, uint32_t s2,
                                                    int *sc, int *m)
{
    if (j < 4) {
        *sc = (int)((s0 >> (8 * j)) & 63);
        *m = (int)((s1 >> (8 * j)) & 63);
    } else {
        const int s = 8 * (j - 4);
        *sc = (int)(((s2 >> s) & 0x0f) | (((s0 >> s) >> 6 & 3) << 4));
        *m = (int)(((s2 >> s) >> 4 & 0x0f) | (((s1 >> s) >> 6 & 3) << 4));
    }
}

/* q6_K value i (0..255) of block b as 0..63 from the repacked planes. */
static __device__ __forceinline__ int q6_value(const uint8_t *ql4, const uint8_t *qh, int64_t b,
                                               int i)
{
    const int c = i / 64, l = i % 32, hi = (i % 64) / 32; /* quarter, lane, nibble */
    const uint8_t lo = ql4[b * 128 + 32 * c + l];
    const int k = l % 16, chunk = 2 * c + l / 16;
    const uint8_t hb = qh[b * 64 + 8 * chunk + 4 * hi + (k % 4)];
    return (int)((hi ? lo >> 4 : lo & 15) | (((hb >> (2 * (k / 4))) & 3) << 4));
}

/* ---- tensor-core and async-copy primitives (gemm.cu, attention.cu) ---- */

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* d (16x8 f32) += a (16x16 f16, row) . b (16x8 f16, col). */
static __device__ __forceinline__ void mma_f16(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_half2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&h;
}

#endif
