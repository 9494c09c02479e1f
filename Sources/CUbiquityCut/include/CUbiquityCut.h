#ifndef C_UBIQUITY_CUT_H
#define C_UBIQUITY_CUT_H

#include <stdint.h>

/// The keyed chunker's inner loop (UbiquityKeys' `KeyedChunker`): whether a chunk ends after a
/// byte is decided by a pseudorandom function of the 64 bytes that end there, so the cut points
/// of known bytes cannot be worked out, nor the key from cut points seen.
///
/// At each byte `i` a rolling gear hash over bytes `i-63 … i` is taken with a secret table
/// (`g = (g << 1) + table[byte]`, which forgets a byte after 64 steps), and `g` (little-endian,
/// then eight zero bytes) is enciphered with AES-128 under a secret key; the chunk ends after
/// byte `i` when the first eight bytes of the result, little-endian, are below `threshold`.

/// Expands a 16-byte AES-128 key into its 11 round keys (176 bytes), as FIPS 197 does.
void ubq_cut_expand_key(const uint8_t key[16], uint8_t round_keys[176]);

/// Enciphers one 16-byte block with AES-128 under expanded `round_keys`, in portable C (for
/// checking, and for processors without AES instructions).
void ubq_cut_encipher_block(const uint8_t round_keys[176], const uint8_t input[16], uint8_t output[16]);

/// The first cut in `[from, to)` of `bytes`: the smallest `i` there whose decision is a cut,
/// returned as `i + 1`; -1 when there is none. The window needs the 63 bytes before `from`:
/// `from` must be at least 63. `mode` 0 uses the processor's AES instructions where there are
/// any (its 512-bit ones, sixteen windows at a time, where there are those); 1 the portable
/// cipher (tests); 2 no cipher at all — the gear hash itself below the threshold, the
/// unprotected decision of keyed gear chunkers, which tests attack; 3 the 128-bit AES
/// instructions even where there are 512-bit ones (tests: every way must cut alike).
long ubq_cut_scan(const uint8_t *bytes, long from, long to, const uint64_t table[256],
                  const uint8_t round_keys[176], uint64_t threshold, int mode);

/// Whether `ubq_cut_scan` uses the processor's AES instructions here.
int ubq_cut_has_aes_instructions(void);

/// Whether `ubq_cut_scan` uses the processor's 512-bit AES instructions (VAES with AVX-512) here.
int ubq_cut_has_wide_aes_instructions(void);

/// Each of `count` blocks of `length` bytes (a multiple of 16) printed: AES-128 CBC-MAC under
/// expanded `round_keys` (a zero first state; a pseudorandom function on messages of one
/// fixed length), its first eight bytes little-endian, into `out`. Eight blocks side by side
/// on the processor's AES instructions where there are any (sixteen blocks at a time on its 512-bit
/// ones, eight on the others); the portable cipher elsewhere, or
/// when `portable` is nonzero (tests: both print alike).
void ubq_block_macs(const uint8_t *const *blocks, long count, long length, const uint8_t round_keys[176],
                    uint64_t *out, int portable);

#endif
