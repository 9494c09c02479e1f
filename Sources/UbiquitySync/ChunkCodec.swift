import Foundation
import UbiquityKeys

/// How one container's chunks are cut, named and carried on this device.
///
/// ``plain``: FastCDC's fixed gear, named by SHA-256, sent as they are — an account without
/// keys. For an account whose devices hold its keys the agent makes a sealed codec
/// (``init(sealedCutting:naming:seal:open:recognises:)``): the keyed chunker's cut points, the
/// keyed MAC as the name (the same 64 hexadecimal digits, so the sync engine names,
/// deduplicates and compares chunks exactly as before), each chunk sealed on its way up and
/// opened — and checked against its name — on its way down. Chunks named before the account
/// had keys (SHA-256) stay readable: a sealed codec recognises and opens both.
package struct ChunkCodec: Sendable {
    /// Whether chunks go sealed (uploads say `sealed=1`; patches and inline bytes, which the
    /// server would have to read, are not used).
    package let sealed: Bool
    /// How the container's item records are sealed and opened (``ItemRecords``): set on a
    /// device that holds the account's keys; sealing when its chunks go sealed.
    package var records: ItemRecords?
    /// What this device signs its commits with and checks the others' with (docs/Encryption.md,
    /// "Signed commits"): set on a device that holds the account's keys (it signs only where its
    /// records go sealed).
    package var signer: CommitSigner?
    /// The container's chunk keys of every epoch held, newest first (empty without keys): what
    /// a public link's manifest derives each chunk's own key from (``LinkManifest``).
    package var heldKeys: [ChunkKeys] = []
    let choosing: @Sendable (Int) -> ContentChunker
    let sealing: (@Sendable (UnsafeRawBufferPointer, String, Bool) throws -> Data)?
    private let opening: (@Sendable (UnsafeRawBufferPointer, String) throws -> Data)?
    private let recognising: (@Sendable (UnsafeRawBufferPointer, String) -> Bool)?
    private let patches: Patches?
    /// Whether patches are sealed (not beside a share's keys: ``alsoSealing(_:)``).
    var patchesSealed = true

    /// How sealed patches are sealed and opened: the patch's bytes, the chunk it makes and the
    /// chunk it changes (its base).
    package struct Patches: Sendable {
        /// The stored body of a patch.
        package var seal: @Sendable (UnsafeRawBufferPointer, String, String) throws -> Data
        /// A patch's bytes from its stored body (not yet applied: the caller checks what it makes).
        package var open: @Sendable (UnsafeRawBufferPointer, String, String) throws -> Data

        /// Patches sealed by `seal` and opened by `open`.
        package init(seal: @escaping @Sendable (UnsafeRawBufferPointer, String, String) throws -> Data,
                     open: @escaping @Sendable (UnsafeRawBufferPointer, String, String) throws -> Data) {
            self.seal = seal
            self.open = open
        }
    }

    /// Plaintext chunks named by SHA-256 (an account without keys).
    package static let plain = ChunkCodec(sealed: false, choosing: ContentChunker.forFile(ofSize:), sealing: nil, opening: nil, recognising: nil, patches: nil)

    /// Whether chunks another device sealed are opened (a device that holds the account's keys,
    /// sealing or not: the account's devices need not all seal to read each other's files).
    package var opensSealed: Bool { opening != nil }

    init(sealed: Bool, choosing: @escaping @Sendable (Int) -> ContentChunker,
                 sealing: (@Sendable (UnsafeRawBufferPointer, String, Bool) throws -> Data)?,
                 opening: (@Sendable (UnsafeRawBufferPointer, String) throws -> Data)?,
                 recognising: (@Sendable (UnsafeRawBufferPointer, String) -> Bool)?, patches: Patches?) {
        self.sealed = sealed
        self.choosing = choosing
        self.sealing = sealing
        self.opening = opening
        self.recognising = recognising
        self.patches = patches
    }

    /// A sealed codec.
    /// - Parameters:
    ///   - sealedCutting: The chunker for a file of a given size (every device chooses alike).
    ///   - seal: The stored body of the chunk whose plaintext and name are given (the third
    ///     argument says whether the bytes are known unchanged since they were cut; the keyed
    ///     codecs name them again all the same, and refuse a name their keys did not make).
    ///   - open: The plaintext of a stored body asked for by a name, checked against it (a
    ///     chunk named by SHA-256 before the account had keys comes back as it is); throws
    ///     what failed.
    ///   - recognises: Whether plaintext bytes are the chunk of a name (a keyed MAC of a held
    ///     epoch, or SHA-256).
    ///   - patches: How sealed patches are sealed and opened (nil: changed chunks go whole).
    package init(sealedCutting: @escaping @Sendable (Int) -> ContentChunker,
                 seal: @escaping @Sendable (UnsafeRawBufferPointer, String, Bool) throws -> Data,
                 open: @escaping @Sendable (UnsafeRawBufferPointer, String) throws -> Data,
                 recognises: @escaping @Sendable (UnsafeRawBufferPointer, String) -> Bool,
                 patches: Patches? = nil) {
        self.init(sealed: true, choosing: sealedCutting, sealing: seal, opening: open, recognising: recognises, patches: patches)
    }

    /// A codec that cuts, names and sends chunks in plaintext, as ``plain`` does, and also opens
    /// sealed ones (`open`, `recognises` as for a sealed codec): a device that holds the keys but
    /// does not seal, reading what the account's sealing devices wrote.
    package init(readingSealed open: @escaping @Sendable (UnsafeRawBufferPointer, String) throws -> Data,
                 recognises: @escaping @Sendable (UnsafeRawBufferPointer, String) -> Bool,
                 patches: Patches? = nil) {
        self.init(sealed: false, choosing: ContentChunker.forFile(ofSize:), sealing: nil, opening: open, recognising: recognises, patches: patches)
    }

    /// Whether this device seals patches of changed chunks (a sealing codec that knows how).
    package var sealsPatches: Bool { sealed && patches != nil && patchesSealed }

    /// The stored body of the patch `bytes` that makes chunk `name` from chunk `base`.
    /// - Throws: ``ChunkCodecError`` for a codec that does not seal patches; what sealing throws.
    package func sealPatch(_ bytes: UnsafeRawBufferPointer, making name: String, from base: String) throws -> Data {
        guard sealed, let patches else { throw ChunkCodecError(name: name, reason: "this device does not seal patches") }
        return try patches.seal(bytes, name, base)
    }

    /// The bytes of the sealed patch `body` that makes chunk `name` from chunk `base` (the
    /// caller applies it and checks the result with ``recognises(_:as:)``).
    /// - Throws: ``ChunkCodecError`` for a body that does not open as that patch, or a codec
    ///   that holds no keys.
    package func openPatch(_ body: UnsafeRawBufferPointer, making name: String, from base: String) throws -> Data {
        guard let patches else { throw ChunkCodecError(name: name, reason: "it is stored as a sealed patch and this device holds no keys") }
        return try patches.open(body, name, base)
    }

    /// The chunker for a file of `size` bytes.
    package func chunker(forFileOfSize size: Int) -> ContentChunker { choosing(size) }

    /// The chunks of the file at `url`, cut and named (see ``ContentChunker/chunks(ofFileAt:)``).
    /// - Throws: The file's read errors.
    package func chunks(ofFileAt url: URL) throws -> [ContentChunk] {
        try ContentChunker.chunks(ofFileAt: url, sizeWhenOpened: nil, choosing: choosing)
    }

    /// The chunks of the file at `url`, exactly as ``chunks(ofFileAt:)`` gives them, worked out
    /// from `previous` — what this codec cut the file into before an edit — where those are
    /// found again: the cutter runs only around what changed (see ``ContentChunker``'s guided cut).
    /// - Throws: The file's read errors.
    package func chunks(ofFileAt url: URL, guidedBy previous: [ContentChunk]) throws -> [ContentChunk] {
        try ContentChunker.chunks(ofFileAt: url, guidedBy: previous, choosing: choosing)
    }

    /// The chunks of `data`, cut and named.
    package func chunks(of data: Data) -> [ContentChunk] {
        choosing(data.count).chunks(of: data)
    }

    /// Whether `bytes` are the plaintext of the chunk named `name`.
    package func recognises(_ bytes: UnsafeRawBufferPointer, as name: String) -> Bool {
        recognising?(bytes, name) ?? (ContentChunker.hash(bytes) == name)
    }

    /// What goes to the server for the chunk `name` whose plaintext is `bytes` (sealed; as it
    /// is for ``plain``). `unchanged`: the bytes are known to be the ones that were named (the
    /// file's fingerprint has not changed since it was cut) — not trusted to skip naming them
    /// again: the name may be another key's (a share's, cut before a restart).
    /// - Throws: What sealing throws; ``ChunkCodecError`` for bytes that are not the chunk named.
    package func seal(_ bytes: UnsafeRawBufferPointer, as name: String, unchanged: Bool = false) throws -> Data {
        try sealing?(bytes, name, unchanged) ?? Data(bytes)
    }

    /// The plaintext of what the server sent for the chunk `name`, checked against the name.
    /// - Throws: ``ChunkCodecError`` for bytes that are not that chunk (changed, truncated,
    ///   another chunk's, of an epoch not held).
    package func open(_ bytes: UnsafeRawBufferPointer, as name: String) throws -> Data {
        if let opening { return try opening(bytes, name) }
        guard ContentChunker.hash(bytes) == name else { throw ChunkCodecError(name: name, reason: "its bytes do not hash to its name") }
        return Data(bytes)
    }
}

/// Bytes the server sent for a chunk that are not that chunk.
package struct ChunkCodecError: Error, CustomStringConvertible {
    /// The chunk's name.
    package let name: String
    /// What failed.
    package let reason: String

    /// An error for the chunk `name`.
    package init(name: String, reason: String) {
        self.name = name
        self.reason = reason
    }

    package var description: String { "chunk \(name) is not what was asked for: \(reason)" }
}
