import Foundation
import UbiquityProtocol

extension SyncClient {
    /// The account's roster, the envelopes for `holders`, and the server's escrow key.
    package func keyDirectory(for holders: [String]) async throws -> KeyDirectoryResponse {
        try await json(.GET, "v1/keys" + (holders.isEmpty ? "" : "?for=" + holders.joined(separator: ",")))
    }

    /// Appends roster entries after the `after` this device saw, with envelopes (all or nothing;
    /// 409 `rosterChanged` when the roster moved on).
    package func appendRoster(_ request: RosterAppendRequest) async throws -> KeyDirectoryResponse {
        try await json(.POST, "v1/keys/roster", body: request)
    }

    /// Asks the server's escrow to let this device in (Standard custody only).
    package func join(_ request: JoinRequest) async throws -> KeyDirectoryResponse {
        try await json(.POST, "v1/keys/join", body: request)
    }
}
