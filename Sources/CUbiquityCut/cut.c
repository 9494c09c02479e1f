// The keyed chunker's cut decisions (see CUbiquityCut.h). AES-128 is used as a pseudorandom
// function of each window's 64-bit gear hash: with the processor's AES instructions on x86-64
// (eight windows enciphered side by side), else with the portable cipher below, which gives
// the same cut points byte for byte (tested against swift-crypto's AES).

#include "CUbiquityCut.h"
#include <string.h>

static const uint8_t sbox[256] = {
    0x63, 0x7c, 0x77, 0x7b, 0xf2, 0x6b, 0x6f, 0xc5, 0x30, 0x01, 0x67, 0x2b, 0xfe, 0xd7, 0xab, 0x76,
    0xca, 0x82, 0xc9, 0x7d, 0xfa, 0x59, 0x47, 0xf0, 0xad, 0xd4, 0xa2, 0xaf, 0x9c, 0xa4, 0x72, 0xc0,
    0xb7, 0xfd, 0x93, 0x26, 0x36, 0x3f, 0xf7, 0xcc, 0x34, 0xa5, 0xe5, 0xf1, 0x71, 0xd8, 0x31, 0x15,
    0x04, 0xc7, 0x23, 0xc3, 0x18, 0x96, 0x05, 0x9a, 0x07, 0x12, 0x80, 0xe2, 0xeb, 0x27, 0xb2, 0x75,
    0x09, 0x83, 0x2c, 0x1a, 0x1b, 0x6e, 0x5a, 0xa0, 0x52, 0x3b, 0xd6, 0xb3, 0x29, 0xe3, 0x2f, 0x84,
    0x53, 0xd1, 0x00, 0xed, 0x20, 0xfc, 0xb1, 0x5b, 0x6a, 0xcb, 0xbe, 0x39, 0x4a, 0x4c, 0x58, 0xcf,
    0xd0, 0xef, 0xaa, 0xfb, 0x43, 0x4d, 0x33, 0x85, 0x45, 0xf9, 0x02, 0x7f, 0x50, 0x3c, 0x9f, 0xa8,
    0x51, 0xa3, 0x40, 0x8f, 0x92, 0x9d, 0x38, 0xf5, 0xbc, 0xb6, 0xda, 0x21, 0x10, 0xff, 0xf3, 0xd2,
    0xcd, 0x0c, 0x13, 0xec, 0x5f, 0x97, 0x44, 0x17, 0xc4, 0xa7, 0x7e, 0x3d, 0x64, 0x5d, 0x19, 0x73,
    0x60, 0x81, 0x4f, 0xdc, 0x22, 0x2a, 0x90, 0x88, 0x46, 0xee, 0xb8, 0x14, 0xde, 0x5e, 0x0b, 0xdb,
    0xe0, 0x32, 0x3a, 0x0a, 0x49, 0x06, 0x24, 0x5c, 0xc2, 0xd3, 0xac, 0x62, 0x91, 0x95, 0xe4, 0x79,
    0xe7, 0xc8, 0x37, 0x6d, 0x8d, 0xd5, 0x4e, 0xa9, 0x6c, 0x56, 0xf4, 0xea, 0x65, 0x7a, 0xae, 0x08,
    0xba, 0x78, 0x25, 0x2e, 0x1c, 0xa6, 0xb4, 0xc6, 0xe8, 0xdd, 0x74, 0x1f, 0x4b, 0xbd, 0x8b, 0x8a,
    0x70, 0x3e, 0xb5, 0x66, 0x48, 0x03, 0xf6, 0x0e, 0x61, 0x35, 0x57, 0xb9, 0x86, 0xc1, 0x1d, 0x9e,
    0xe1, 0xf8, 0x98, 0x11, 0x69, 0xd9, 0x8e, 0x94, 0x9b, 0x1e, 0x87, 0xe9, 0xce, 0x55, 0x28, 0xdf,
    0x8c, 0xa1, 0x89, 0x0d, 0xbf, 0xe6, 0x42, 0x68, 0x41, 0x99, 0x2d, 0x0f, 0xb0, 0x54, 0xbb, 0x16,
};

void ubq_cut_expand_key(const uint8_t key[16], uint8_t round_keys[176]) {
    static const uint8_t rcon[10] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1b, 0x36};
    memcpy(round_keys, key, 16);
    for (int word = 4; word < 44; word++) {
        uint8_t t[4];
        memcpy(t, round_keys + 4 * (word - 1), 4);
        if (word % 4 == 0) {
            uint8_t first = t[0];
            t[0] = sbox[t[1]] ^ rcon[word / 4 - 1];
            t[1] = sbox[t[2]];
            t[2] = sbox[t[3]];
            t[3] = sbox[first];
        }
        for (int b = 0; b < 4; b++) round_keys[4 * word + b] = round_keys[4 * (word - 4) + b] ^ t[b];
    }
}

static inline uint8_t times_two(uint8_t x) { return (uint8_t)((x << 1) ^ ((x >> 7) * 0x1b)); }

void ubq_cut_encipher_block(const uint8_t round_keys[176], const uint8_t input[16], uint8_t output[16]) {
    uint8_t s[16];
    for (int i = 0; i < 16; i++) s[i] = input[i] ^ round_keys[i];
    for (int round = 1; round <= 10; round++) {
        uint8_t t[16];
        // SubBytes and ShiftRows together: byte (row r, column c) comes from column c + r.
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 4; r++) t[4 * c + r] = sbox[s[4 * ((c + r) % 4) + r]];
        if (round < 10) {
            for (int c = 0; c < 4; c++) {
                uint8_t *col = t + 4 * c;
                uint8_t a0 = col[0], a1 = col[1], a2 = col[2], a3 = col[3], all = a0 ^ a1 ^ a2 ^ a3;
                col[0] = a0 ^ all ^ times_two(a0 ^ a1);
                col[1] = a1 ^ all ^ times_two(a1 ^ a2);
                col[2] = a2 ^ all ^ times_two(a2 ^ a3);
                col[3] = a3 ^ all ^ times_two(a3 ^ a0);
            }
        }
        for (int i = 0; i < 16; i++) s[i] = t[i] ^ round_keys[16 * round + i];
    }
    memcpy(output, s, 16);
}

/// The decision value of one window's gear hash.
static inline uint64_t portable_value(const uint8_t round_keys[176], uint64_t g) {
    uint8_t block[16] = {0}, out[16];
    for (int b = 0; b < 8; b++) block[b] = (uint8_t)(g >> (8 * b));
    ubq_cut_encipher_block(round_keys, block, out);
    uint64_t value = 0;
    for (int b = 7; b >= 0; b--) value = (value << 8) | out[b];
    return value;
}

static void macs_portable(const uint8_t *const *blocks, long count, long length, const uint8_t round_keys[176], uint64_t *out) {
    for (long b = 0; b < count; b++) {
        uint8_t state[16] = {0};
        for (long off = 0; off < length; off += 16) {
            for (int i = 0; i < 16; i++) state[i] ^= blocks[b][off + i];
            ubq_cut_encipher_block(round_keys, state, state);
        }
        uint64_t value = 0;
        for (int i = 7; i >= 0; i--) value = (value << 8) | state[i];
        out[b] = value;
    }
}

/// The gear hash of the 63 bytes before `from` (the window's start for byte `from`).
static inline uint64_t warm_up(const uint8_t *bytes, long from, const uint64_t table[256]) {
    uint64_t g = 0;
    for (long i = from - 63; i < from; i++) g = (g << 1) + table[bytes[i]];
    return g;
}

static long scan_portable(const uint8_t *bytes, long from, long to, const uint64_t table[256],
                          const uint8_t round_keys[176], uint64_t threshold, int cipher) {
    uint64_t g = warm_up(bytes, from, table);
    for (long i = from; i < to; i++) {
        g = (g << 1) + table[bytes[i]];
        if ((cipher ? portable_value(round_keys, g) : g) < threshold) return i + 1;
    }
    return -1;
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <immintrin.h>
#include <cpuid.h>

int ubq_cut_has_aes_instructions(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_AES) && (c & bit_SSE4_1);
}

int ubq_cut_has_wide_aes_instructions(void) {
    unsigned a, b, c, d;
    if (!ubq_cut_has_aes_instructions() || !__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
    // The system must save the 512-bit registers (XCR0: SSE, AVX, opmask, both halves of ZMM).
    unsigned low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    if ((low & 0xe6) != 0xe6) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b & bit_AVX512F) && (c & bit_VAES);
}

// Asked once (the processor's answer does not change; in a virtual machine each question is a
// trip to the host); threads that race to ask first all store the same answer.
static int asked_once(int *answer, int (*ask)(void)) {
    int known = __atomic_load_n(answer, __ATOMIC_RELAXED);
    if (known < 0) {
        known = ask();
        __atomic_store_n(answer, known, __ATOMIC_RELAXED);
    }
    return known;
}

static int has_aes_answer = -1, has_wide_aes_answer = -1;
static int cached_has_aes(void) { return asked_once(&has_aes_answer, ubq_cut_has_aes_instructions); }
static int cached_has_wide_aes(void) { return asked_once(&has_wide_aes_answer, ubq_cut_has_wide_aes_instructions); }

#define UBQ_AES __attribute__((target("aes,sse4.1")))

/// Eight blocks through the ten rounds side by side: the processor works on several at once.
#define UBQ_ROUNDS(b)                                                                   \
    do {                                                                                \
        for (int k = 0; k < 8; k++) b[k] = _mm_xor_si128(b[k], rk[0]);                  \
        for (int r = 1; r < 10; r++)                                                    \
            for (int k = 0; k < 8; k++) b[k] = _mm_aesenc_si128(b[k], rk[r]);           \
        for (int k = 0; k < 8; k++) b[k] = _mm_aesenclast_si128(b[k], rk[10]);          \
    } while (0)

UBQ_AES static long scan_aes(const uint8_t *bytes, long from, long to, const uint64_t table[256],
                             const uint8_t round_keys[176], uint64_t threshold) {
    __m128i rk[11];
    for (int r = 0; r < 11; r++) rk[r] = _mm_loadu_si128((const __m128i *)(round_keys + 16 * r));
    uint64_t g = warm_up(bytes, from, table);
    long i = from;
    for (; i + 8 <= to; i += 8) {
        __m128i b[8];
        for (int k = 0; k < 8; k++) {
            g = (g << 1) + table[bytes[i + k]];
            b[k] = _mm_cvtsi64_si128((long long)g);
        }
        UBQ_ROUNDS(b);
        for (int k = 0; k < 8; k++)
            if ((uint64_t)_mm_cvtsi128_si64(b[k]) < threshold) return i + k + 1;
    }
    for (; i < to; i++) {
        g = (g << 1) + table[bytes[i]];
        __m128i block = _mm_xor_si128(_mm_cvtsi64_si128((long long)g), rk[0]);
        for (int r = 1; r < 10; r++) block = _mm_aesenc_si128(block, rk[r]);
        block = _mm_aesenclast_si128(block, rk[10]);
        if ((uint64_t)_mm_cvtsi128_si64(block) < threshold) return i + 1;
    }
    return -1;
}

/// `ubq_block_macs` on the AES instructions: eight blocks' chains side by side (each step of a
/// chain waits for the one before; eight keep the processor's AES unit busy).
UBQ_AES static void macs_aes(const uint8_t *const *blocks, long count, long length, const uint8_t round_keys[176], uint64_t *out) {
    __m128i rk[11];
    for (int r = 0; r < 11; r++) rk[r] = _mm_loadu_si128((const __m128i *)(round_keys + 16 * r));
    for (long first = 0; first < count; first += 8) {
        // The last group repeats its last block in the lanes it lacks (their prints unused).
        const uint8_t *lane[8];
        for (int k = 0; k < 8; k++) lane[k] = blocks[first + k < count ? first + k : count - 1];
        __m128i b[8];
        for (int k = 0; k < 8; k++) b[k] = _mm_setzero_si128();
        for (long off = 0; off < length; off += 16) {
            for (int k = 0; k < 8; k++) b[k] = _mm_xor_si128(b[k], _mm_loadu_si128((const __m128i *)(lane[k] + off)));
            UBQ_ROUNDS(b);
        }
        for (int k = 0; k < 8 && first + k < count; k++) out[first + k] = (uint64_t)_mm_cvtsi128_si64(b[k]);
    }
}

#define UBQ_VAES __attribute__((target("avx512f,vaes,aes,sse4.1")))

/// `ubq_block_macs` on the 512-bit AES instructions: sixteen chains side by side, four in each
/// register (one per 128-bit lane) — twice the blocks a round of `macs_aes` moves.
UBQ_VAES static void macs_vaes(const uint8_t *const *blocks, long count, long length, const uint8_t round_keys[176], uint64_t *out) {
    __m512i rk[11];
    for (int r = 0; r < 11; r++) rk[r] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(round_keys + 16 * r)));
    for (long first = 0; first < count; first += 16) {
        // The last group repeats its last block in the lanes it lacks (their prints unused).
        const uint8_t *lane[16];
        for (int k = 0; k < 16; k++) lane[k] = blocks[first + k < count ? first + k : count - 1];
        __m512i b[4];
        for (int q = 0; q < 4; q++) b[q] = _mm512_setzero_si512();
        for (long off = 0; off < length; off += 16) {
            for (int q = 0; q < 4; q++) {
                __m512i word = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(lane[4 * q] + off)));
                word = _mm512_inserti32x4(word, _mm_loadu_si128((const __m128i *)(lane[4 * q + 1] + off)), 1);
                word = _mm512_inserti32x4(word, _mm_loadu_si128((const __m128i *)(lane[4 * q + 2] + off)), 2);
                word = _mm512_inserti32x4(word, _mm_loadu_si128((const __m128i *)(lane[4 * q + 3] + off)), 3);
                b[q] = _mm512_xor_si512(_mm512_xor_si512(b[q], word), rk[0]);
            }
            for (int r = 1; r < 10; r++)
                for (int q = 0; q < 4; q++) b[q] = _mm512_aesenc_epi128(b[q], rk[r]);
            for (int q = 0; q < 4; q++) b[q] = _mm512_aesenclast_epi128(b[q], rk[10]);
        }
        uint64_t words[32];
        for (int q = 0; q < 4; q++) _mm512_storeu_si512((void *)(words + 8 * q), b[q]);
        // Each lane's first eight bytes: the low 64 bits of its 128 (words 0, 2, 4, … of a register).
        for (int k = 0; k < 16 && first + k < count; k++) out[first + k] = words[2 * k];
    }
}

void ubq_block_macs(const uint8_t *const *blocks, long count, long length, const uint8_t round_keys[176],
                    uint64_t *out, int portable) {
    if (count <= 0) return;
    if (!portable && count > 8 && cached_has_wide_aes()) macs_vaes(blocks, count, length, round_keys, out);
    else if (!portable && cached_has_aes()) macs_aes(blocks, count, length, round_keys, out);
    else macs_portable(blocks, count, length, round_keys, out);
}

/// Sixteen windows at a time, four in each 512-bit register (one block per 128-bit lane, the
/// gear hash in its low half as for one block): the same decisions as `scan_aes`, about twice
/// as fast where the processor has 512-bit AES instructions.
UBQ_VAES static long scan_vaes(const uint8_t *bytes, long from, long to, const uint64_t table[256],
                              const uint8_t round_keys[176], uint64_t threshold) {
    __m512i rk[11];
    for (int r = 0; r < 11; r++) rk[r] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(round_keys + 16 * r)));
    const __m512i limit = _mm512_set1_epi64((long long)threshold);
    uint64_t g = warm_up(bytes, from, table);
    long i = from;
    for (; i + 16 <= to; i += 16) {
        uint64_t h[16];
        for (int k = 0; k < 16; k++) {
            g = (g << 1) + table[bytes[i + k]];
            h[k] = g;
        }
        __m512i b[4];
        for (int q = 0; q < 4; q++)
            b[q] = _mm512_xor_si512(_mm512_set_epi64(0, (long long)h[4 * q + 3], 0, (long long)h[4 * q + 2],
                                                     0, (long long)h[4 * q + 1], 0, (long long)h[4 * q]), rk[0]);
        for (int r = 1; r < 10; r++)
            for (int q = 0; q < 4; q++) b[q] = _mm512_aesenc_epi128(b[q], rk[r]);
        for (int q = 0; q < 4; q++) b[q] = _mm512_aesenclast_epi128(b[q], rk[10]);
        for (int q = 0; q < 4; q++) {
            // The low eight bytes of each lane against the threshold; the first lane that cuts.
            __mmask8 below = _mm512_mask_cmplt_epu64_mask(0x55, b[q], limit);
            if (below) return i + 4 * q + __builtin_ctz(below) / 2 + 1;
        }
    }
    // The last few windows: the hash needs only the 63 bytes before them, which are there.
    return i < to ? scan_aes(bytes, i, to, table, round_keys, threshold) : -1;
}

long ubq_cut_scan(const uint8_t *bytes, long from, long to, const uint64_t table[256],
                  const uint8_t round_keys[176], uint64_t threshold, int mode) {
    int known = cached_has_aes(), wide = cached_has_wide_aes();
    if (mode == 0 && wide) return scan_vaes(bytes, from, to, table, round_keys, threshold);
    if ((mode == 0 || mode == 3) && known) return scan_aes(bytes, from, to, table, round_keys, threshold);
    return scan_portable(bytes, from, to, table, round_keys, threshold, mode != 2);
}

#else

int ubq_cut_has_aes_instructions(void) { return 0; }

int ubq_cut_has_wide_aes_instructions(void) { return 0; }

void ubq_block_macs(const uint8_t *const *blocks, long count, long length, const uint8_t round_keys[176],
                    uint64_t *out, int portable) {
    (void)portable;
    if (count > 0) macs_portable(blocks, count, length, round_keys, out);
}

long ubq_cut_scan(const uint8_t *bytes, long from, long to, const uint64_t table[256],
                  const uint8_t round_keys[176], uint64_t threshold, int mode) {
    return scan_portable(bytes, from, to, table, round_keys, threshold, mode != 2);
}

#endif
