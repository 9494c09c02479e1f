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

    /// Asks the server to seal in place, with its escrow's keys, what it still holds of the
    /// account in plaintext (before a switch to Advanced): as long as that takes.
    package func sealInPlaceNow() async throws -> SealNowResponse {
        let body = try await send(.POST, "v1/keys/seal-in-place", raw: nil, expecting: [.ok], timeout: .minutes(30))
        return try JSONDecoder().decode(SealNowResponse.self, from: Data(body.readableBytesView))
    }

    /// Asks the server's escrow to let this device in (Standard custody only).
    package func join(_ request: JoinRequest) async throws -> KeyDirectoryResponse {
        try await json(.POST, "v1/keys/join", body: request)
    }
}

extension SyncClient {
    /// Asks the account's devices to let this one in by a code.
    package func requestToJoin(_ request: KeyRequestCreate) async throws -> KeyRequestRecord {
        try await json(.POST, "v1/keys/requests", body: request)
    }

    /// The account's pending requests to join.
    package func keyRequests() async throws -> [KeyRequestRecord] {
        let answer: KeyRequestsResponse = try await json(.GET, "v1/keys/requests")
        return answer.requests
    }

    /// Answers a request with this (roster) device's nonce.
    package func answerKeyRequest(_ id: String, nonce: [UInt8], answerer: String) async throws -> KeyRequestRecord {
        try await json(.POST, "v1/keys/requests/\(id)/answer", body: KeyRequestNonce(nonce: Data(nonce), answerer: answerer))
    }

    /// Reveals this (new) device's nonce for its request.
    package func revealKeyRequest(_ id: String, nonce: [UInt8]) async throws -> KeyRequestRecord {
        try await json(.POST, "v1/keys/requests/\(id)/reveal", body: KeyRequestNonce(nonce: Data(nonce)))
    }

    /// Gives the browser whose request is `id` the keys of containers (``WebGrantUpload``).
    package func grantBrowser(_ id: String, _ grant: WebGrantUpload) async throws {
        _ = try await send(.POST, "v1/keys/requests/\(id)/grant", body: try JSONEncoder().encode(grant), expecting: [.noContent])
    }

    /// The account's containers this device may use.
    package func containerList() async throws -> [String] {
        let answer: ContainerListResponse = try await json(.GET, "v1/containers")
        return answer.containers
    }

    /// Removes a request.
    package func removeKeyRequest(_ id: String) async throws {
        _ = try await send(.DELETE, "v1/keys/requests/\(id)", body: nil, expecting: [.noContent])
    }
}
