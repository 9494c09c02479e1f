import Foundation

/// A seeded random generator (SplitMix64): a run with a given seed replays exactly (the chunker's
/// test data, the sync simulation, the merge simulation).
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    /// The generator's state.
    public var state: UInt64

    /// A generator starting from `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `count` random bytes, made fast: the system's generator seeds a SplitMix64 that fills the
/// bytes eight at a time (a byte at a time from the system's generator is a system call each —
/// seconds of one of the two threads the tests' tasks share for a file of a few MiB).
public func randomBytes(_ count: Int) -> Data {
    var generator = SeededGenerator(seed: UInt64.random(in: 0...UInt64.max))
    var data = Data(count: count)
    data.withUnsafeMutableBytes { bytes in
        var offset = 0
        while offset < count {
            var word = generator.next()
            let take = min(8, count - offset)
            withUnsafeBytes(of: &word) { bytes.baseAddress!.advanced(by: offset).copyMemory(from: $0.baseAddress!, byteCount: take) }
            offset += take
        }
    }
    return data
}
