import Foundation
import Synchronization
import UbiquityProtocol

/// Block signatures (``ChunkSignature``) of plaintext chunks this device made or received by an
/// edit lately, worked out from their bytes here: the next edit of the same place goes up as a
/// patch made against one of them without asking the server for it (one round trip less while
/// a document is edited in one place). At most ``capacity`` signatures, the oldest going first;
/// in memory only. A signature kept here was made from bytes checked against the chunk's name —
/// and a patch made from a wrong one is refused by the server, which checks what it makes.
package final class ChunkSignatureCache: Sendable {
    /// The most signatures kept (about 2 KiB each for a chunk of 128 KiB).
    package let capacity: Int
    private let state = Mutex<(signatures: [String: ChunkSignature], order: [String])>(([:], []))

    /// A cache of at most `capacity` signatures.
    package init(capacity: Int = 1_024) {
        self.capacity = capacity
    }

    /// Keeps the signature of chunk `hash`, whose bytes are `bytes` (checked by the caller).
    package func note(_ bytes: [UInt8], as hash: String) {
        guard bytes.count >= 2 * ChunkSignature.standardBlockSize, state.withLock({ $0.signatures[hash] == nil }) else { return }
        let signature = ChunkSignature(of: bytes, hash: hash)
        state.withLock { state in
            guard state.signatures.updateValue(signature, forKey: hash) == nil else { return }
            state.order.append(hash)
            if state.order.count > capacity { state.signatures[state.order.removeFirst()] = nil }
        }
    }

    /// The signature of chunk `hash`, if kept.
    package subscript(hash: String) -> ChunkSignature? {
        state.withLock { $0.signatures[hash] }
    }
}
