/* sampler: turns one row of logits into the next token of one sequence.
 *
 * Chain (llama.cpp's default order): repetition/presence/frequency penalties
 * over the last `repeat_last_n` tokens, top-k, top-p, min-p, temperature,
 * then a draw.  temperature <= 0 is greedy (argmax, ties to the lower id).
 *
 * Determinism: the draw for a sequence's step s uses a random number that is a
 * pure function of (seed, s) -- no state shared between sequences -- so the
 * same job yields the same tokens alone or in any batch, on any worker.
 *
 * Rules another implementation (the GPU sampler) must follow to agree:
 * truncation orders tokens by logit, ties to the lower id; top-p and min-p
 * see the penalized logits at temperature 1 (top-p after top-k renormalizes
 * over the top k); min-p keeps logit >= max + logf(min_p); the draw divides
 * the survivors' logits by the temperature, weighs them expf(x - max_x),
 * sums in double, and returns the first survivor *in id order* whose
 * cumulative weight exceeds sampler_uniform(seed, step) * total.
 *
 * The sampler owns scratch space sized for the vocabulary; one sampler serves
 * many sequences one after the other (not concurrently). */
#ifndef LLMQ_ENGINE_SAMPLER_H
#define LLMQ_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

typedef struct sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t repeat_last_n;   /* tokens looked back for penalties; 0: off, -1: whole history */
    uint64_t seed;
} sampler_params;

/* Defaults: greedy, no truncation, no penalties, repeat_last_n 64, seed 0. */
sampler_params sampler_default_params(void);

/* Checks ranges (temperature finite and >= 0, top_p in (0,1], min_p in [0,1],
 * repeat_penalty > 0, finite penalties, repeat_last_n >= -1); the error
 * (LLMQ_ERR_INVALID) names the field. */
int sampler_check_params(const sampler_params *p, llmq_err *err);

/* True when the token is always the lowest id of the row's maximum logit
 * (temperature <= 0 and no penalty active), which needs no logits on the
 * host: a backend's argmax gives it. */
bool sampler_is_greedy(const sampler_params *p);

typedef struct sampler sampler;

int sampler_create(sampler **out, int32_t n_vocab, llmq_err *err);
void sampler_free(sampler *s);

/* Sample the token for step `step` (0 for the first generated token) from
 * `logits` (n_vocab floats, modified in place by the penalties).  `history`
 * holds the sequence's tokens so far (prompt + generated), oldest first. */
int32_t sampler_sample(sampler *s, const sampler_params *p, float *logits, const int32_t *history,
                       int64_t n_history, uint64_t step);

/* How many of a row's best logits -- larger first, ties to the lower id,
 * before penalties -- sampler_sample_top needs to pick exactly the token
 * sampler_sample would pick from the whole row: top_k plus the penalty
 * window (a penalized token can leave the top k, letting the next ones
 * in).  0 when the row is needed whole: greedy (a backend's argmax serves
 * it), no top_k, a penalty that can raise a logit (repeat_penalty < 1,
 * negative presence or frequency penalty), or more than max_k. */
int32_t sampler_top_needed(const sampler_params *p, int64_t n_history, int32_t n_vocab,
                           int32_t max_k);

/* sampler_sample from the row's n best logits (ids and raw logits, in any
 * order, n >= sampler_top_needed, no NaN among the row's logits): penalties,
 * top-k, top-p, min-p, temperature and the draw as sampler_sample, so the
 * same token. */
int32_t sampler_sample_top(sampler *s, const sampler_params *p, const int32_t *ids,
                           const float *logits, int32_t n, const int32_t *history,
                           int64_t n_history, uint64_t step);

/* The penalty window of a row as (token, count) pairs into pairs[0..2n),
 * each distinct token of the last repeat_last_n tokens of history once, in
 * the order of its first appearance there, tokens outside the vocabulary
 * skipped: what a device needs to apply the penalties itself, with the
 * formula of llama.cpp's penalties sampler the sampler uses, for a token
 * seen c > 0 times (float arithmetic, in this order, no fused operations):
 *   l = l <= 0 ? l * repeat_penalty : l / repeat_penalty;
 *   l = l - ((float)c * frequency_penalty + presence_penalty);
 * Returns n (0 when the penalties are off), or -1 when more than cap
 * tokens are distinct (pairs then undefined). */
int32_t sampler_penalty_window(sampler *s, const sampler_params *p, const int32_t *history,
                               int64_t n_history, int32_t *pairs, int32_t cap);

/* The uniform draw in [0, 1) for (seed, step): exposed so tests and the GPU
 * sampler use the very same stream.  64-bit integer arithmetic only:
 *   mix(z) = splitmix64's finalizer (z ^= z>>30; z *= 0xbf58476d1ce4e5b9;
 *            z ^= z>>27; z *= 0x94d049bb133111eb; z ^= z>>31)
 *   z = mix(mix(seed) + 0x9e3779b97f4a7c15 * (step + 1))   (mod 2^64)
 *   u = (z >> 11) * 2^-53
 * i.e. the (step+1)-th output of splitmix64 seeded with mix(seed). */
double sampler_uniform(uint64_t seed, uint64_t step);

#endif
