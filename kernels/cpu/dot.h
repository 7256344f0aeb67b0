/* dot: the CPU's inner products between one weight row and one activation row.
 *
 * Quantized weights meet activations quantized to 8 bits exactly as
 * llama.cpp's CPU path does (q8_0 for q8_0 weights, q8_K for k-quants), so
 * the integer products vectorize and the sums are exact integers: the only
 * rounding is in the few float multiplies per block, and the engine's logits
 * track llama.cpp's to float rounding.
 * Float weights meet the f32 activations.  Each function reduces in one fixed
 * order, so the result for a (weight row, activation row) pair never depends
 * on the rest of the batch. */
#ifndef LLMQ_KERNELS_CPU_DOT_H
#define LLMQ_KERNELS_CPU_DOT_H

#include <stdint.h>

#include "kernels/quant.h"

/* How a weight type wants its activations. */
typedef enum dot_act {
    DOT_ACT_F32,  /* f32, f16, bf16 weights */
    DOT_ACT_Q8_0, /* q8_0 weights: llama.cpp's q8_0, a scale per 32 values */
    DOT_ACT_Q8_K, /* k-quants: llama.cpp's q8_K, a scale per 256 and sums per 16 */
} dot_act;

dot_act dot_act_for(quant_type t);

/* One quantized activation row: q holds cols values; d one scale per block
 * (32 for q8_0, 256 for q8_K); s (q8_K only) the sum of every 16 values. */
typedef struct dot_q8_row {
    const int8_t *q;
    const float *d;
    const int32_t *s;
} dot_q8_row;

/* llama.cpp's reference quantizers (n a multiple of 32, resp. 256). */
void dot_quantize_q8_0(const float *x, int64_t n, int8_t *q, float *d);
void dot_quantize_q8_K(const float *x, int64_t n, int8_t *q, float *d, int32_t *s);

/* Dot of weight row `w` (type t, n elements) with an activation row. */
float dot_row_f32(quant_type t, const void *w, const float *x, int64_t n);
float dot_row_q8(quant_type t, const void *w, const dot_q8_row *x, int64_t n);

#endif
