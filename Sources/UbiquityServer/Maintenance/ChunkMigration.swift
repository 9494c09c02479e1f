import Foundation

/// How far `ubiquity storage migrate` got.
package struct ChunkMigrationProgress: Sendable {
    /// Packs written, chunks and bytes moved into the object store so far.
    package var packs: Int, chunks: Int, bytes: Int64
    /// Chunks and bytes still in the database (uploads made meanwhile among them).
    package var leftChunks: Int64, leftBytes: Int64
    /// Chunks whose bytes do not match their names: left in the database for `ubiquity fsck`.
    package var damaged: [(account: Int64, hash: String)]
}

extension ServerAdministration {
    /// Moves the chunk contents kept in the database's rows into the object store
    /// (``ObjectChunkStore/migrate(progress:)``): resumable, each chunk checked before it
    /// moves, safe to stop at any point and to run while servers serve.
    /// - Throws: ``SyncError`` `noObjectStore` when the storage has no object store.
    package func migrateChunks(progress: @escaping @Sendable (ChunkMigrationProgress) -> Void) async throws -> ChunkMigrationProgress {
        guard let store = storage.chunks as? ObjectChunkStore else {
            throw SyncError(.badRequest, "noObjectStore", "nothing to migrate to: give --database and --object-store")
        }
        @Sendable func report(_ packed: ObjectChunkStore.Packed, _ left: (chunks: Int64, bytes: Int64)) -> ChunkMigrationProgress {
            ChunkMigrationProgress(packs: packed.packs, chunks: packed.chunks, bytes: packed.bytes, leftChunks: left.chunks, leftBytes: left.bytes, damaged: packed.damaged)
        }
        let done = try await store.migrate { progress(report($0, $1)) }
        return report(done, try await store.waiting())
    }
}
