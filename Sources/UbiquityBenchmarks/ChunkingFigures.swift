import Crypto
import Foundation
import UbiquityTestSupport
import UbiquityFiles
#if canImport(Glibc)
import Glibc
#endif
import UbiquityKeys
import UbiquitySync

/// Cutting a large file into content-defined chunks (what a device does to every file it
/// sends, and again after every edit): the agent's chunker (the sizes for the file's size) on a `mib` MiB file, cache warm,
/// against GNU `sha256sum` reading and hashing the same file once — the least any scheme that
/// hashes every byte pays. Also its two parts alone, in memory: finding the cut points and
/// hashing the chunks — and, beside them, the encrypted format's: the keyed chunker's cut
/// points (a cipher decides each place), the chunks' keyed identifiers (HMAC-SHA256), and the
/// whole sealed path (cut, name, pad, seal) against the plaintext one (cut, SHA-256).
func chunkingFigures(in directory: URL, mib: Int, iterations: Int) throws -> [String: Any] {
    let file = directory.appendingPathComponent("chunking.bin")
    var generator = SystemRandomNumberGenerator()
    let bytes = Data((0..<(mib << 20) / 8).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } })
    try bytes.write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    let runs = max(3, min(iterations, 7))
    let clock = ContinuousClock()
    func best(_ body: () throws -> Void) rethrows -> Double {
        var times: [Double] = []
        for _ in 0..<runs {
            let start = clock.now
            try body()
            times.append((clock.now - start).inSeconds)
        }
        return times.min() ?? 0
    }
    var count = 0
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let cpuBefore = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    let cut = try best { count = try ContentChunker.chunks(ofFileAt: file).count }
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let cutCPU = (Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6 - cpuBefore) / Double(runs)
    let boundaries = best { _ = bytes.withUnsafeBytes { ContentChunker.forFile(ofSize: bytes.count).boundaries(of: $0) } }
    let hashing = best { _ = bytes.withUnsafeBytes { SHA256.hash(data: $0) } }
    let chunkKeys = AccountRootKey(epoch: 0).chunkKeys(container: "BENCH.chunking")
    let keyed = KeyedChunker(keys: chunkKeys, sizes: KeyedChunker.sizes(forFileOfSize: bytes.count))
    var keyedEnds: [Int] = []
    let keyedCut = best { keyedEnds = bytes.withUnsafeBytes { keyed.boundaries(of: $0) } }
    let keyedIdentifiers = best {
        var start = 0
        for end in keyedEnds { _ = chunkKeys.identifier(of: bytes[start..<end]); start = end }
    }
    // The whole sealed path in memory: keyed cut points, then each chunk named, padded and
    // sealed (what a device of an encrypted account does to a new file) — against today's cut
    // points and SHA-256 (the plaintext path); the bound is 1.2 times.
    var sealedBytes = 0
    let sealing = try best {
        var start = 0
        sealedBytes = 0
        for end in keyedEnds {
            sealedBytes += try chunkKeys.seal(bytes[start..<end]).body.count
            start = end
        }
    }
    // What the receiving device does to each: open it (AES-GCM) and check it against its keyed
    // name (HMAC-SHA256 of the plaintext) — against checking a plaintext chunk's SHA-256.
    let sealedChunks = try {
        var start = 0
        return try keyedEnds.map { end in
            defer { start = end }
            return try chunkKeys.seal(bytes[start..<end])
        }
    }()
    let opening = try best {
        for (id, body) in sealedChunks { _ = try chunkKeys.open(body, as: id) }
    }
    // The block prints a sealing device keeps of every chunk it sends or receives (sealed
    // patches: from the chunk's start and from its end).
    let printing = best {
        var start = 0
        bytes.withUnsafeBytes { raw in
            for end in keyedEnds { _ = BlockPrints(of: UnsafeRawBufferPointer(rebasing: raw[start..<end])); start = end }
        }
    }
    let peer = try best {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        process.arguments = [file.path]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
    }
    return [
        "mib": mib, "chunks": count, "runs": runs,
        "chunkFileSeconds": cut, "chunkFileCPUSecondsPerRun": cutCPU, "cutPointsInMemorySeconds": boundaries, "sha256InMemorySeconds": hashing,
        "peer": "GNU sha256sum of the same file", "peerSeconds": peer, "ratioToPeer": cut / peer,
        "chunkFileMiBPerSecond": Double(mib) / cut,
        "keyedChunks": keyedEnds.count, "keyedChunkerUsesAESInstructions": KeyedChunker.usesAESInstructions,
        "keyedCutPointsInMemorySeconds": keyedCut, "keyedCutPointsMBPerSecondPerCore": Double(bytes.count) / keyedCut / 1e6,
        "keyedCutPointsRatioToFastCDC": keyedCut / boundaries,
        "keyedIdentifiersInMemorySeconds": keyedIdentifiers, "keyedIdentifiersRatioToSHA256": keyedIdentifiers / hashing,
        "blockPrintsInMemorySeconds": printing, "blockPrintsUseWideAESInstructions": KeyedChunker.usesWideAESInstructions,
        "sealChunksInMemorySeconds": sealing, "sealedBytesRatioToPlaintext": Double(sealedBytes) / Double(bytes.count),
        "sealedPathInMemorySeconds": keyedCut + sealing, "plaintextPathInMemorySeconds": boundaries + hashing,
        "sealedPathRatioToPlaintextPath": (keyedCut + sealing) / (boundaries + hashing),
        "openChunksInMemorySeconds": opening,
        // Both devices' computing for a new file, sealed (the sender: keyed cut points, naming and
        // sealing, block prints; the receiver: opening and checking, block prints) and plaintext
        // (cut points and SHA-256; SHA-256 again to check): what sealing adds to a new file's CPU
        // at the least, whatever else the two paths share (reading, the network, the server).
        "bothDevicesSealedComputeSeconds": keyedCut + sealing + 2 * printing + opening,
        "bothDevicesPlaintextComputeSeconds": boundaries + 2 * hashing,
        "bothDevicesSealedExtraSeconds": keyedCut + sealing + 2 * printing + opening - (boundaries + 2 * hashing),
    ]
}
