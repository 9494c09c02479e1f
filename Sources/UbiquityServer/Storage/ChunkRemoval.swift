import Foundation
import Logging

/// Removing chunks the database no longer lists (garbage collection, sealing in place) from
/// storage, without losing one an upload listed again meanwhile.
///
/// The database unlists a chunk in one transaction and the bytes go after it. A device whose
/// commit names that chunk in between is told it is missing and sends it again; if its upload
/// stores the bytes before the removal reaches them and lists them after, the database lists a
/// chunk whose bytes are gone (found by `ubiquity-chaos`: a revision nobody could download).
/// So once the bytes are removed, the database is asked again: a chunk it lists now whose bytes
/// are not there is forgotten as a damaged one is (``SyncDatabase/chunkLost(accountId:hash:)``):
/// its revisions wait for it and the device that has it sends it again. (A read of such a chunk
/// does the same: ``VerifiedChunks/vanished(_:account:)``.)
enum ChunkRemoval {
    /// Removes `hashes` from `chunks`, then forgets any the database lists again and no longer
    /// has the bytes of. Returns those that could not be removed, with why.
    static func remove(_ hashes: [(account: Int64, hash: String)], database: any SyncDatabase, chunks: any ChunkStorage,
                       logger: Logger) async -> [(account: Int64, hash: String, error: any Error)] {
        let chunks = (chunks as? VerifiedChunks)?.base ?? chunks // (its reads would forget a lost chunk themselves)
        var left: [(account: Int64, hash: String, error: any Error)] = []
        var removed: [Int64: [String]] = [:]
        for (account, hash) in hashes {
            do {
                try await chunks.remove(hash: hash, account: account)
                removed[account, default: []].append(hash)
            } catch { left.append((account, hash, error)) }
        }
        for (account, hashes) in removed.sorted(by: { $0.key < $1.key }) {
            do {
                let absent = Set(try await database.missingChunks(accountId: account, hashes: hashes))
                for hash in hashes where !absent.contains(hash) {
                    guard try await chunks.load(hash: hash, account: account) == nil else { continue } // stored again after the removal
                    let changed = try await database.chunkLost(accountId: account, hash: hash)
                    // (Not its name: a plaintext chunk's is the SHA-256 of its bytes.)
                    logger.warning("a chunk was sent again while it was removed: asked of the devices once more", metadata: [
                        "account": "\(account)", "containers": "\(changed.keys.sorted())",
                    ])
                }
            } catch {
                logger.error("cannot check removed chunks against the database; a read of a lost one will find it", metadata: [
                    "account": "\(account)", "error": "\(error)",
                ])
            }
        }
        return left
    }
}
