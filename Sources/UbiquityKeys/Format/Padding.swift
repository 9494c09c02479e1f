/// Padmé padding (Nikitin et al., "Reducing Metadata Leakage from Encrypted Files and
/// Communication with PURBs", PETS 2019): a length is rounded up so that only O(log log L) bits
/// of it remain, at most about 12% more for small objects and under 1.6% from 128 KiB up.
/// The plaintext is followed by 0x80 and zeros (ISO/IEC 7816-4), so its length comes back.
enum Padme {
    /// The padded length of `length` bytes.
    static func paddedLength(_ length: Int) -> Int {
        guard length > 1 else { return max(length, 1) }
        let exponent = Int.bitWidth - 1 - length.leadingZeroBitCount // floor(log2 L)
        let bitsOfExponent = Int.bitWidth - exponent.leadingZeroBitCount // floor(log2 E) + 1
        let lowBits = exponent - bitsOfExponent
        let mask = (1 << lowBits) - 1
        return (length + mask) & ~mask
    }

    /// `plaintext` ‖ 0x80 ‖ zeros, to its Padmé length and at least `minimum` bytes (small
    /// objects — names, records, values — all look alike below it).
    static func pad(_ plaintext: [UInt8], minimum: Int = 0) -> [UInt8] {
        let length = max(minimum, paddedLength(plaintext.count + 1))
        var padded = plaintext
        padded.reserveCapacity(length)
        padded.append(0x80)
        padded.append(contentsOf: repeatElement(0, count: length - padded.count))
        return padded
    }

    /// The plaintext of a padded buffer; nil if its padding is not 0x80 and zeros.
    static func unpad(_ padded: [UInt8]) -> [UInt8]? {
        guard let marker = padded.lastIndex(where: { $0 != 0 }), padded[marker] == 0x80 else { return nil }
        return Array(padded[..<marker])
    }
}
