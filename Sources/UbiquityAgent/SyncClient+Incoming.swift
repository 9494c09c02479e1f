import Foundation
import NIOCore
import NIOHTTP1
import UbiquityProtocol

/// Expiry answer of an announcement (`{"expires": SECONDS}`).
private struct IncomingExpiry: Decodable {
    var expires: Double
}

// Incoming revisions (docs/SyncProtocol.md, "Incoming revisions"): what a device uploads is
// announced before its chunks, and the others fetch them as they land. Not through shares:
// a participant's devices get a shared item at its commit, as before.
extension SyncClient {
    /// Announces `update` as the revision of `item` this device is uploading now.
    /// - Returns: When the announcement expires unless ``incomingLanded(container:item:)`` keeps it.
    @discardableResult
    package func announceIncoming(container: String, item: String, update: ItemUpdate) async throws -> Double {
        try refusedThroughShare("announcing an upload")
        let answer: IncomingExpiry = try await json(.PUT, "v1/containers/\(container)/incoming/\(item)", body: update)
        return answer.expires
    }

    /// Says that more chunks of the announced revision of `item` are stored (the others fetch
    /// them), and keeps the announcement.
    package func incomingLanded(container: String, item: String) async throws {
        try refusedThroughShare("announcing an upload")
        _ = try await send(.POST, "v1/containers/\(container)/incoming/\(item)/landed", body: nil, expecting: [.ok])
    }

    /// Withdraws the announcement of `item` (committed, or given up).
    package func withdrawIncoming(container: String, item: String) async throws {
        try refusedThroughShare("announcing an upload")
        _ = try await send(.DELETE, "v1/containers/\(container)/incoming/\(item)", body: nil, expecting: [.noContent])
    }

    /// The revisions other devices are uploading into `container` now.
    package func incoming(container: String) async throws -> [IncomingRevision] {
        try refusedThroughShare("announcing an upload")
        let answer: IncomingResponse = try await json(.GET, "v1/containers/\(container)/incoming")
        return answer.incoming
    }
}
