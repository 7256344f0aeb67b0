/* test-quant: pins the tensor types of kernels/quant against the format
 * definitions (ggml-common.h block layouts, ggml-quants.c formulas).
 *
 * Blocks are written byte by byte from the layout; the expected floats are
 * recomputed here per weight index from the format description (which byte,
 * which nibble, which bit, which scale), not by walking the blocks the way the
 * dequantizer does, and compared exactly.  Real data: the Q8_0 TinyStories
 * file must be what ggml's reference quantizer makes of the F16 file. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "tests/unit/check.h"
#include "model/gguf.h"

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Bit-exact float equality (distinguishes -0 from 0). */
static bool same(float a, float b)
{
    return bits_of(a) == bits_of(b);
}

/* Deterministic filler for block bytes. */
static uint32_t next_rand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void fill(void *p, size_t n, uint32_t *s)
{
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)p)[i] = (uint8_t)next_rand(s);
}

/* ---- type table ---- */

static void test_types(void)
{
    static const struct { quant_type t; const char *name; size_t elems, bytes; bool ok; } want[] = {
        {QUANT_F32, "f32", 1, 4, true},        {QUANT_F16, "f16", 1, 2, true},
        {QUANT_Q4_0, "q4_0", 32, 18, false},   {QUANT_Q4_1, "q4_1", 32, 20, false},
        {QUANT_Q5_0, "q5_0", 32, 22, false},   {QUANT_Q5_1, "q5_1", 32, 24, false},
        {QUANT_Q8_0, "q8_0", 32, 34, true},    {QUANT_Q8_1, "q8_1", 32, 36, false},
        {QUANT_Q2_K, "q2_K", 256, 84, false},  {QUANT_Q3_K, "q3_K", 256, 110, false},
        {QUANT_Q4_K, "q4_K", 256, 144, true},  {QUANT_Q5_K, "q5_K", 256, 176, true},
        {QUANT_Q6_K, "q6_K", 256, 210, true},  {QUANT_Q8_K, "q8_K", 256, 292, false},
        {QUANT_BF16, "bf16", 1, 2, true},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *n = quant_type_name(want[i].t);
        if (!n || strcmp(n, want[i].name) || quant_type_supported(want[i].t) != want[i].ok ||
            quant_block_elems(want[i].t) != want[i].elems ||
            quant_block_bytes(want[i].t) != want[i].bytes) {
            printf("# type %d: got %s\n", (int)want[i].t, n ? n : "(null)");
            bad++;
        }
    }
    CHECK(bad == 0, "every ggml id of the enum has ggml's name, block size and support flag");
    int supported = 0;
    for (int t = 0; t < QUANT_TYPE_LIMIT; t++)
        supported += quant_type_supported((quant_type)t);
    CHECK(supported == 7, "exactly 7 types are supported (got %d)", supported);
    CHECK(quant_type_name((quant_type)4) == NULL && quant_type_name((quant_type)63) == NULL &&
              quant_type_name((quant_type)1000) == NULL,
          "retired and out-of-range ids have no name");
    CHECK(!strcmp(quant_type_name((quant_type)23), "iq4_xs"), "i-quants are named for errors");

    llmq_err err = {0};
    uint64_t b = 0;
    CHECK(quant_row_bytes(QUANT_Q4_0, 4096, &b, &err) == -1 &&
              !strcmp(err.msg, "tensor type q4_0 is not supported (supported: f32, f16, bf16, "
                               "q8_0, q4_K, q5_K, q6_K)"),
          "an unsupported type is named in the error: %s", err.msg);
    CHECK(quant_row_bytes((quant_type)5, 4096, &b, &err) == -1 && strstr(err.msg, "5"),
          "an unknown id is refused with its number: %s", err.msg);
    CHECK(quant_row_bytes(QUANT_Q4_K, 4000, &b, &err) == -1 && strstr(err.msg, "q4_K") &&
              strstr(err.msg, "4000"),
          "a row that is not whole blocks is refused: %s", err.msg);
    CHECK(quant_row_bytes(QUANT_Q8_0, UINT64_MAX - 31, &b, &err) == -1,
          "a row size overflowing 64 bits is refused: %s", err.msg);
    uint64_t r1 = 0, r2 = 0, r3 = 0, r4 = 0, r5 = 0, r6 = 0, r7 = 0;
    CHECK(!quant_row_bytes(QUANT_F32, 4096, &r1, &err) && r1 == 16384 &&
              !quant_row_bytes(QUANT_F16, 4096, &r2, &err) && r2 == 8192 &&
              !quant_row_bytes(QUANT_BF16, 4096, &r3, &err) && r3 == 8192 &&
              !quant_row_bytes(QUANT_Q8_0, 4096, &r4, &err) && r4 == 128 * 34 &&
              !quant_row_bytes(QUANT_Q4_K, 4096, &r5, &err) && r5 == 16 * 144 &&
              !quant_row_bytes(QUANT_Q5_K, 4096, &r6, &err) && r6 == 16 * 176 &&
              !quant_row_bytes(QUANT_Q6_K, 4096, &r7, &err) && r7 == 16 * 210,
          "row bytes of a 4096 row: f32 16384, f16/bf16 8192, q8_0 4352, q4_K 2304, q5_K 2816, "
          "q6_K 3360");
}

/* ---- fp16 / bf16 ---- */

static void test_f16_decode(void)
{
    static const struct { uint16_t h; uint32_t f; } cases[] = {
        {0x0000, 0x00000000}, /* +0 */
        {0x8000, 0x80000000}, /* -0 */
        {0x0001, 0x33800000}, /* smallest subnormal 2^-24 */
        {0x03ff, 0x387fc000}, /* largest subnormal 1023 * 2^-24 */
        {0x8200, 0xb8000000}, /* -2^-15, a subnormal */
        {0x0400, 0x38800000}, /* smallest normal 2^-14 */
        {0x3c00, 0x3f800000}, /* 1 */
        {0xc000, 0xc0000000}, /* -2 */
        {0x3555, 0x3eaaa000}, /* 0.333251953125 */
        {0x7bff, 0x477fe000}, /* max 65504 */
        {0x7c00, 0x7f800000}, /* inf */
        {0xfc00, 0xff800000}, /* -inf */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (bits_of(quant_f16_to_f32(cases[i].h)) != cases[i].f) {
            printf("# f16 %04x -> %08x, want %08x\n", cases[i].h,
                   bits_of(quant_f16_to_f32(cases[i].h)), cases[i].f);
            bad++;
        }
    CHECK(bad == 0, "f16 -> f32: zeros, subnormals, normals, max, infinities");
    float qn = quant_f16_to_f32(0x7e00), sn = quant_f16_to_f32(0xfd01);
    CHECK(isnan(qn) && isnan(sn) && signbit(sn) && !signbit(qn), "f16 NaNs decode to NaN, sign kept");
}

static void test_f16_encode(void)
{
    static const struct { float f; uint16_t h; } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {1.0f + 0x1p-11f, 0x3c00},          /* tie, 1.0 is even */
        {1.0f + 3 * 0x1p-11f, 0x3c02},      /* tie, rounds up to even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie */
        {65504.0f, 0x7bff},
        {65519.996f, 0x7bff},               /* just below the overflow tie */
        {65520.0f, 0x7c00},                 /* tie above max: rounds to inf */
        {1e10f, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},                 /* tie between 0 and 2^-24: 0 is even */
        {0x1p-25f + 0x1p-40f, 0x0001},
        {3 * 0x1p-25f, 0x0002},             /* tie between 1 and 2 ulps */
        {5 * 0x1p-25f, 0x0002},             /* tie between 2 and 3 ulps */
        {0x1p-14f - 0x1p-25f, 0x0400},      /* tie between largest subnormal and 2^-14 */
        {-1e-10f, 0x8000},
        {0.1f, 0x2e66},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (quant_f32_to_f16(cases[i].f) != cases[i].h) {
            printf("# f32 %a -> %04x, want %04x\n", cases[i].f, quant_f32_to_f16(cases[i].f),
                   cases[i].h);
            bad++;
        }
    CHECK(bad == 0, "f32 -> f16: zeros, ties to even (normal, subnormal, overflow), inf");
    uint16_t n1 = quant_f32_to_f16(NAN), n2 = quant_f32_to_f16(-from_bits(0x7f800001));
    CHECK((n1 & 0x7c00) == 0x7c00 && (n1 & 0x03ff) && (n2 & 0x8000) && (n2 & 0x03ff),
          "f32 NaN -> f16 NaN (%04x, %04x), sign kept", n1, n2);

    /* Every half round-trips, and the midpoint to the next half (exact in
     * f32) rounds to the even one of the two, one f32 ulp off it to the
     * nearer one: all binades, subnormals and the overflow edge. */
    int trip = 0, mid = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        trip += quant_f32_to_f16(f) != h || quant_f32_to_f16(-f) != (h | 0x8000);
        float next = h == 0x7bff ? 65536.0f : quant_f16_to_f32((uint16_t)(h + 1));
        float m = (float)(((double)f + next) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        mid += quant_f32_to_f16(m) != even ||
               quant_f32_to_f16(from_bits(bits_of(m) - 1)) != h ||
               quant_f32_to_f16(from_bits(bits_of(m) + 1)) != h + 1;
    }
    CHECK(trip == 0, "all 63488 finite halves round-trip through f32, both signs (%d bad)", trip);
    CHECK(mid == 0, "every halfway point rounds to even, its neighbours to nearest (%d bad)", mid);
}

static void test_bf16(void)
{
    CHECK(same(quant_bf16_to_f32(0x3f80), 1.0f) && same(quant_bf16_to_f32(0xc040), -3.0f) &&
              same(quant_bf16_to_f32(0x8000), -0.0f) &&
              bits_of(quant_bf16_to_f32(0x0001)) == 0x00010000 &&
              isinf(quant_bf16_to_f32(0x7f80)) && isnan(quant_bf16_to_f32(0x7fc0)),
          "bf16 -> f32 is the top half of the f32 bits (1, -3, -0, subnormal, inf, NaN)");
    quant_bf16 row[37];
    quant_f16 hrow[37];
    float y[37], z[37];
    int bad = 0;
    for (int i = 0; i < 37; i++) {
        row[i] = (quant_bf16)(0x3f00 + 7 * i);
        hrow[i] = (quant_f16)(0x0100 + 977 * i); /* subnormals to large normals */
    }
    quant_dequantize_row(QUANT_BF16, row, y, 37);
    quant_dequantize_row(QUANT_F16, hrow, z, 37);
    for (int i = 0; i < 37; i++)
        bad += !same(y[i], quant_bf16_to_f32(row[i])) || !same(z[i], quant_f16_to_f32(hrow[i]));
    CHECK(bad == 0, "bf16 and f16 rows of 37 (past the 32-wide chunks) decode element-wise");
    float f[5] = {1.5f, -0.0f, 3e-38f, INFINITY, -7.25f}, g[5];
    quant_dequantize_row(QUANT_F32, f, g, 5);
    CHECK(!memcmp(f, g, sizeof f), "an f32 row is copied bit for bit");
}

/* ---- q8_0 ---- */

static void test_q8_0(void)
{
    block_q8_0 b[2];
    b[0].d = 0x3800; /* 0.5 */
    for (int j = 0; j < 32; j++)
        b[0].qs[j] = (int8_t)(j * 8 - 128); /* -128, -120, ..., 120 */
    b[1].d = 0x2e66; /* 0.0999755859375 */
    uint32_t s = 11;
    fill(b[1].qs, sizeof b[1].qs, &s);
    b[1].qs[0] = 127;
    float y[64];
    quant_dequantize_row(QUANT_Q8_0, b, y, 64);
    CHECK(same(y[0], -64.0f) && same(y[31], 60.0f) && same(y[16], 0.0f),
          "q8_0 block d=0.5: -128 -> -64, 120 -> 60, 0 -> 0");
    int bad = 0;
    for (int j = 0; j < 32; j++)
        bad += !same(y[32 + j], (float)b[1].qs[j] * 0.0999755859375f);
    CHECK(bad == 0 && same(y[32], 12.696899414062500f), "q8_0 second block is qs * d (d = 0x2e66)");

    float x[64];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16) * 0.1f + 0.05f; /* amax 1.6 -> d = 1.6/127 */
    for (int i = 32; i < 64; i++)
        x[i] = 0.0f;
    x[40] = -2.54f; /* amax 2.54 at a negative value */
    block_q8_0 q[2];
    quant_quantize_row_q8_0(x, q, 64);
    float amax = 0; /* about 1.55, at both ends */
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    float d0 = amax / 127;
    int qbad = 0;
    for (int i = 0; i < 32; i++)
        qbad += q[0].qs[i] != (int8_t)roundf(x[i] * (1.0f / d0));
    CHECK(q[0].d == quant_f32_to_f16(d0) && qbad == 0, "q8_0 quantizer: d = amax/127 in f16, "
          "q = roundf(x / d)");
    CHECK(q[1].qs[8] == -127 && q[1].qs[0] == 0 && q[1].d == quant_f32_to_f16(2.54f / 127),
          "q8_0 quantizer: the absmax element maps to -127, zeros to 0");
    float zero[32] = {0};
    block_q8_0 zq;
    quant_quantize_row_q8_0(zero, &zq, 32);
    int zbad = zq.d != 0;
    for (int i = 0; i < 32; i++)
        zbad += zq.qs[i] != 0;
    CHECK(zbad == 0, "q8_0 quantizer: an all-zero block has d = 0 and q = 0");
}

/* ---- k-quant scales ---- */

/* 8 scales and mins, the top bits set in the upper four so that the split
 * storage is exercised. */
static const uint8_t SC[8] = {1, 2, 62, 63, 33, 17, 48, 63};
static const uint8_t MN[8] = {3, 0, 63, 5, 47, 60, 16, 1};
/* Packed by hand from the layout: bytes 0-3 = sc[0..3] | (sc[4..7] >> 4) << 6,
 * bytes 4-7 = m[0..3] | (m[4..7] >> 4) << 6,
 * bytes 8-11 = (sc[4..7] & 15) | (m[4..7] & 15) << 4. */
static const uint8_t SCALES[12] = {0x81, 0x42, 0xfe, 0xff, 0x83, 0xc0, 0x7f, 0x05,
                                   0xf1, 0xc1, 0x00, 0x1f};

static void test_scale_min(void)
{
    int bad = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc = 0, m = 0;
        quant_get_scale_min_k4(j, SCALES, &sc, &m);
        if (sc != SC[j] || m != MN[j]) {
            printf("# j=%d: sc %u m %u, want %u %u\n", j, sc, m, SC[j], MN[j]);
            bad++;
        }
    }
    CHECK(bad == 0, "get_scale_min_k4 unpacks all 8 (scale, min) pairs of hand-packed bytes");
    uint8_t packed[12];
    quant_pack_scale_min_k4(SC, MN, packed);
    CHECK(!memcmp(packed, SCALES, 12), "pack_scale_min_k4 produces the same 12 bytes");
    uint32_t s = 5;
    int trip = 0;
    for (int it = 0; it < 1000; it++) {
        uint8_t sc[8], m[8], p[12];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)(next_rand(&s) & 63);
            m[j] = (uint8_t)(next_rand(&s) & 63);
        }
        quant_pack_scale_min_k4(sc, m, p);
        for (int j = 0; j < 8; j++) {
            uint8_t a, b;
            quant_get_scale_min_k4(j, p, &a, &b);
            trip += a != sc[j] || b != m[j];
        }
    }
    CHECK(trip == 0, "pack then unpack returns 1000 random scale sets");
}

/* Weight w (0..255) of a q4_K/q5_K block: its sub-block is w / 32; sub-blocks
 * 2k and 2k+1 share qs[32k .. 32k+31], low then high nibble. */
static int k4_nibble(const uint8_t *qs, int w)
{
    int sub = w / 32, l = w % 32;
    uint8_t byte = qs[(sub / 2) * 32 + l];
    return sub % 2 ? byte >> 4 : byte & 15;
}

static float k4_expect(quant_f16 d16, quant_f16 dmin16, int w, int q)
{
    float d = quant_f16_to_f32(d16), dmin = quant_f16_to_f32(dmin16);
    int sub = w / 32;
    return d * SC[sub] * q - dmin * MN[sub];
}

static void test_q4_K(void)
{
    block_q4_K b[2];
    uint32_t s = 21;
    fill(b, sizeof b, &s);
    for (int i = 0; i < 2; i++)
        memcpy(b[i].scales, SCALES, 12);
    b[0].d = 0x3c00;    /* 1 */
    b[0].dmin = 0x3800; /* 0.5 */
    b[0].qs[104] = 0x5a; /* weights 200 (sub-block 6, low) and 232 (sub-block 7, high) */
    b[1].d = 0x2e66;
    b[1].dmin = 0x3555;
    float y[512];
    quant_dequantize_row(QUANT_Q4_K, b, y, 512);
    CHECK(same(y[200], 472.0f) && same(y[232], 314.5f),
          "q4_K by hand: w200 = 48*10 - 0.5*16 = 472, w232 = 63*5 - 0.5*1 = 314.5");
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int w = 0; w < 256; w++)
            bad += !same(y[256 * i + w], k4_expect(b[i].d, b[i].dmin, w, k4_nibble(b[i].qs, w)));
    CHECK(bad == 0, "q4_K: every weight of 2 blocks is d*sc*q - dmin*m of its nibble (%d bad)", bad);
}

static void test_q5_K(void)
{
    block_q5_K b[2];
    uint32_t s = 33;
    fill(b, sizeof b, &s);
    for (int i = 0; i < 2; i++)
        memcpy(b[i].scales, SCALES, 12);
    b[0].d = 0x3c00;
    b[0].dmin = 0x3800;
    b[0].qs[104] = 0x5a;
    b[0].qh[8] = 0x40;  /* bit 6 = sub-block 6: weight 200 gets +16; weight 232 (bit 7) not */
    b[1].d = 0x1c00;    /* 2^-8 */
    b[1].dmin = 0x8abc; /* negative, subnormal-free small value */
    float y[512];
    quant_dequantize_row(QUANT_Q5_K, b, y, 512);
    CHECK(same(y[200], 1240.0f) && same(y[232], 314.5f),
          "q5_K by hand: w200 = 48*(10+16) - 8 = 1240, w232 without its high bit = 314.5");
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int w = 0; w < 256; w++) {
            /* The fifth bit of weight w is bit (w / 32) of qh[w % 32]. */
            int q = k4_nibble(b[i].qs, w) + 16 * ((b[i].qh[w % 32] >> (w / 32)) & 1);
            bad += !same(y[256 * i + w], k4_expect(b[i].d, b[i].dmin, w, q));
        }
    CHECK(bad == 0, "q5_K: every weight of 2 blocks takes its high bit from qh (%d bad)", bad);
}

/* Weight w of a q6_K block: half h = w / 128 uses ql[64h..], qh[32h..] and
 * scales[8h..]; within the half, quarter k = (w % 128) / 32 and l = w % 32:
 * low 4 bits from ql[l] (k = 0, 2) or ql[l + 32] (k = 1, 3), low nibble for
 * k < 2, high for k >= 2; high 2 bits are bits 2k..2k+1 of qh[l]; the scale
 * is scales[2k + l / 16]. */
static float q6_expect(const block_q6_K *b, int w)
{
    int h = w / 128, k = (w % 128) / 32, l = w % 32;
    uint8_t lo = b->ql[64 * h + l + (k % 2) * 32];
    int low = k < 2 ? lo & 15 : lo >> 4;
    int high = (b->qh[32 * h + l] >> (2 * k)) & 3;
    int q = (low | high << 4) - 32;
    return quant_f16_to_f32(b->d) * b->scales[8 * h + 2 * k + l / 16] * q;
}

static void test_q6_K(void)
{
    block_q6_K b[2];
    uint32_t s = 47;
    fill(b, sizeof b, &s);
    b[0].d = 0x3c00;
    b[0].ql[6] = 0xa0;   /* weight 70 = quarter 2, l 6: high nibble 10 */
    b[0].qh[6] = 0x20;   /* bits 4-5 = 2 */
    b[0].scales[4] = -3; /* scale 2*2 + 6/16 */
    b[0].ql[127] = 0xf0; /* weight 255 (high nibble) and weight 191 (low nibble 0) */
    b[0].qh[63] = 0xc0;  /* weight 255 high bits 3, weight 191 high bits 0 */
    b[0].scales[15] = 127;
    b[0].scales[11] = 2;
    b[1].d = 0x0123; /* a subnormal d */
    float y[512];
    quant_dequantize_row(QUANT_Q6_K, b, y, 512);
    CHECK(same(y[70], -30.0f), "q6_K by hand: w70 = -3 * ((10 | 2<<4) - 32) = -30");
    CHECK(same(y[255], 3937.0f) && same(y[191], -64.0f),
          "q6_K by hand: w255 = 127 * (63 - 32), w191 = 2 * (0 - 32): ql/qh shared across quarters");
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int w = 0; w < 256; w++)
            bad += !same(y[256 * i + w], q6_expect(&b[i], w));
    CHECK(bad == 0, "q6_K: every weight of 2 blocks follows the interleaved ql/qh layout (%d bad)",
          bad);
}

/* ---- real files ---- */

/* The Q8_0 TinyStories file was made from the same weights as the F16 one
 * (bit-exact), so its blocks must be what ggml's reference quantizer makes of
 * the F16 rows, and its dequantized weights within half a step of them. */
static void test_tinystories(void)
{
    char p1[512], p2[512];
    llmq_err err = {0};
    gguf_file *q8 = NULL, *f16 = NULL;
    if (gguf_open(&q8, check_data_path(p1, sizeof p1, "models/tinystories-656k-q8_0.gguf"), &err) ||
        gguf_open(&f16, check_data_path(p2, sizeof p2, "models/TinyStories-656K.f16.gguf"), &err)) {
        CHECK(0, "open the TinyStories files: %s", err.msg);
        gguf_close(q8);
        return;
    }
    int tensors = 0, block_diff = 0, over = 0;
    double worst = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(q8); i++) {
        const gguf_tensor *t = gguf_tensor_at(q8, i);
        const gguf_tensor *u = gguf_find_tensor(f16, t->name);
        if (t->type != QUANT_Q8_0 || !u || u->type != QUANT_F16 || u->ne[0] != t->ne[0] ||
            u->ne[1] != t->ne[1])
            continue;
        tensors++;
        int64_t n = (int64_t)t->ne[0], nb = n / 32;
        float *ref = malloc((size_t)n * sizeof *ref), *deq = malloc((size_t)n * sizeof *deq);
        block_q8_0 *mine = malloc((size_t)nb * sizeof *mine);
        for (uint64_t r = 0; ref && deq && mine && r < t->ne[1]; r++) {
            const block_q8_0 *file = (const block_q8_0 *)t->data + r * (uint64_t)nb;
            quant_dequantize_row(QUANT_F16, (const quant_f16 *)u->data + r * (uint64_t)n, ref, n);
            quant_dequantize_row(QUANT_Q8_0, file, deq, n);
            quant_quantize_row_q8_0(ref, mine, n);
            block_diff += memcmp(mine, file, (size_t)nb * sizeof *mine) != 0;
            for (int64_t b = 0; b < nb; b++) {
                float amax = 0;
                for (int j = 0; j < 32; j++)
                    amax = fmaxf(amax, fabsf(ref[32 * b + j]));
                double d = amax / 127.0, ds = quant_f16_to_f32(file[b].d);
                double bound = d / 2 + 127 * fabs(ds - d) + 1e-9;
                for (int j = 0; j < 32; j++) {
                    double e = fabs((double)deq[32 * b + j] - ref[32 * b + j]);
                    over += e > bound;
                    if (amax > 0 && e / amax > worst)
                        worst = e / amax;
                }
            }
        }
        free(ref);
        free(deq);
        free(mine);
    }
    CHECK(tensors == 15, "all 15 Q8_0 tensors have an F16 twin (%d)", tensors);
    CHECK(block_diff == 0, "quantize_row_q8_0 of the F16 rows reproduces the Q8_0 file byte for "
          "byte (%d rows differ)", block_diff);
    /* Relative to absmax: half a step is 1/254, a scale off by at most 2^-11
     * relative moves q = 127 by 127 * d * 2^-11 = absmax * 2^-11. */
    CHECK(over == 0 && worst <= 0.5 / 127 + 0x1p-11, "dequantized Q8_0 is within half a step of "
          "F16 plus the fp16 scale rounding (%d over; worst error/absmax %.5f)", over, worst);
    gguf_close(q8);
    gguf_close(f16);
}

int main(void)
{
    test_types();
    test_f16_decode();
    test_f16_encode();
    test_bf16();
    test_q8_0();
    test_scale_min();
    test_q4_K();
    test_q5_K();
    test_q6_K();
    test_tinystories();
    return check_done();
}
