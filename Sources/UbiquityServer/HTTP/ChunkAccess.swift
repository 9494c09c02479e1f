import Foundation
import UbiquityProtocol

/// Which chunks a device may read: its account's, and — for a device limited to some
/// containers — those the containers' items name, or that a named chunk's sealed patch needs.
extension SyncServices {
    /// Checks that `hashes` are well formed and chunks the device's account has — and, for a
    /// device limited to some containers, chunks that items of those containers name (a chunk
    /// of another container is answered as absent: its existence is not told).
    /// - Throws: ``SyncError`` 400 for a malformed hash, 404 naming the first chunk it lacks.
    func requireChunks(_ hashes: [String], of device: DeviceAuth) async throws {
        var named: (@Sendable ([String]) async throws -> Set<String>)?
        if let containers = device.containers {
            let database = database, account = device.accountId
            named = { hashes in try await database.chunksNamed(accountId: account, containers: containers, hashes: hashes) }
        }
        try await requireChunks(hashes, of: device, named: named)
    }

    /// Checks that `hashes` are well formed and chunks the device's account has — and, with
    /// `named` (which of some hashes the items the device may read name), that each is named or
    /// needed to make a named one (a chunk it may not read is answered as absent).
    /// - Throws: ``SyncError`` 400 for a malformed hash, 404 naming the first chunk it lacks.
    func requireChunks(_ hashes: [String], of device: DeviceAuth, named: (@Sendable ([String]) async throws -> Set<String>)?) async throws {
        for hash in hashes { try Validate.hash(hash) }
        let lacking = Set(try await database.missingChunks(accountId: device.accountId, hashes: hashes))
        if let absent = hashes.first(where: lacking.contains) { throw SyncError.noSuchChunk(absent) }
        if let chunksNamed = named {
            let readable = try await readableChunks(Set(hashes), of: device, named: chunksNamed)
            if let outside = hashes.first(where: { !readable.contains($0) }) { throw SyncError.noSuchChunk(outside) }
        }
    }

    /// Which of `asked` the device lacks as far as it may know: those its account does not
    /// have, and — for a device limited to some containers — those no item of its containers
    /// names (another container's chunk is answered as absent: that it exists is not told; the
    /// device sends it, and the server keeps the one copy).
    func missingChunks(_ asked: [String], of device: DeviceAuth) async throws -> [String] {
        let lacking = Set(try await database.missingChunks(accountId: device.accountId, hashes: asked))
        guard let containers = device.containers else { return asked.filter(lacking.contains) }
        let database = database, account = device.accountId
        let readable = try await readableChunks(Set(asked).subtracting(lacking), of: device) { hashes in
            try await database.chunksNamed(accountId: account, containers: containers, hashes: hashes)
        }
        return asked.filter { !readable.contains($0) }
    }

    /// Which of `hashes` (chunks the account has) the device may read: those `chunksNamed`
    /// says are named, and those a named chunk's sealed patch needs.
    private func readableChunks(_ hashes: Set<String>, of device: DeviceAuth, named chunksNamed: @Sendable ([String]) async throws -> Set<String>) async throws -> Set<String> {
        guard !hashes.isEmpty else { return [] }
        var named = try await chunksNamed(Array(hashes))
        // A chunk a named chunk's sealed patch changes (and so on down its bases) is read to
        // make that one: it may be read too. Walked up from each unnamed chunk, by the
        // chunks stored as patches of it, to one that is named.
        var frontier = Dictionary(uniqueKeysWithValues: hashes.subtracting(named).map { ($0, Set([$0])) })
        for _ in 0..<Self.maximumPatchDepth where !frontier.isEmpty {
            let patching = try await database.chunksPatching(accountId: device.accountId, bases: Array(frontier.keys))
            guard !patching.isEmpty else { break }
            let reached = try await chunksNamed(Array(patching.keys))
            var next: [String: Set<String>] = [:]
            for (made, base) in patching {
                let origins = frontier[base] ?? []
                if reached.contains(made) { named.formUnion(origins) } else { next[made, default: []].formUnion(origins) }
            }
            frontier = next.filter { !$0.value.isSubset(of: named) }
        }
        return named.intersection(hashes)
    }

    /// The bytes of chunk `hash` of the device's account (listed in its index: see ``requireChunks(_:of:)``).
    func loadChunk(_ hash: String, of device: DeviceAuth) async throws -> [UInt8] {
        guard let data = try await chunks.load(hash: hash, account: device.accountId) else { throw SyncError.noSuchChunk(hash) }
        return [UInt8](data)
    }
}
