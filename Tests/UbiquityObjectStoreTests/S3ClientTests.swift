import Foundation
import Logging
import NIOCore
import Testing
@testable import UbiquityObjectStore
import UbiquityTestSupport

/// A client for a fresh prefix of the test store's bucket (`TestObjectStore`).
enum TestStore {
    static func client(secret: String? = nil, retry: S3Client.RetryPolicy = S3Client.RetryPolicy()) throws -> S3Client {
        let store = try TestObjectStore.fresh()
        var credentials = try ObjectStoreCredentials.read(file: store.credentialsFile)
        if let secret { credentials.secretAccessKey = secret }
        return S3Client(location: try ObjectStoreLocation(parsing: store.url), credentials: credentials, retry: retry)
    }

    /// A client straight to the store, a relay in front of it, and a client through the relay
    /// (same prefix and credentials) — for faults between client and store.
    static func relayed(retry: S3Client.RetryPolicy, timeout: TimeAmount = .seconds(60)) throws -> (direct: S3Client, relay: RelayProxy, through: S3Client) {
        let store = try TestObjectStore.fresh()
        let location = try ObjectStoreLocation(parsing: store.url), credentials = try ObjectStoreCredentials.read(file: store.credentialsFile)
        let relay = try RelayProxy.start(to: location.port ?? 80)
        var relayed = location
        relayed.port = relay.port
        return (S3Client(location: location, credentials: credentials), relay, S3Client(location: relayed, credentials: credentials, retry: retry, timeout: timeout))
    }
}

@Suite(.enabled(if: TestObjectStore.configured, "needs SeaweedFS: eval \"$(.ci/seaweedfs start)\""))
struct S3ClientTests {
    func bytes(_ count: Int, _ seed: UInt8 = 0) -> ByteBuffer {
        ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
    }

    @Test func objectsArePutReadInRangesAndRemoved() async throws {
        let store = try TestStore.client()
        defer { Task { try? await store.shutdown() } }
        try await store.createBucket() // there already, and ours: fine
        let body = bytes(300_000)
        let etag = try await store.put("packs/one", body: body, ifAbsent: true)
        #expect(etag.count == 32)
        #expect(try await store.get("packs/one") == body)
        #expect(try await store.get("packs/one", range: 1000..<1100) == body.getSlice(at: 1000, length: 100))
        #expect(try await store.get("packs/one", range: 299_990..<300_000) == body.getSlice(at: 299_990, length: 10))
        let info = try #require(try await store.head("packs/one"))
        #expect(info.size == 300_000 && info.etag == etag)

        // A conditional write over it is refused — unless it carries these very bytes (a try
        // whose answer was lost, tried again).
        await #expect(throws: ObjectStoreError.alreadyExists(key: "packs/one")) {
            try await store.put("packs/one", body: bytes(10), ifAbsent: true)
        }
        #expect(try await store.put("packs/one", body: body, ifAbsent: true) == etag)
        #expect(try await store.get("packs/one") == body, "the object is untouched")

        try await store.delete("packs/one")
        try await store.delete("packs/one") // gone already: fine
        #expect(try await store.head("packs/one") == nil)
        await #expect(throws: ObjectStoreError.notFound(key: "packs/one")) { try await store.get("packs/one") }
    }

    @Test func listingsComeInPagesAndBatchDeletesEmptyThem() async throws {
        let store = try TestStore.client()
        defer { Task { try? await store.shutdown() } }
        let keys = (0..<25).map { String(format: "chunks/acct/%03d", $0) } + ["other/x", "chunks/acct/with space & <xml>"]
        for key in keys { try await store.put(key, body: bytes(100 + key.count, UInt8(key.count))) }

        var pages: [[String]] = [], token: String?
        repeat {
            let page = try await store.list(prefix: "chunks/", continuationToken: token, maxKeys: 10)
            pages.append(page.objects.map(\.key))
            token = page.continuationToken
        } while token != nil
        #expect(pages.map(\.count) == [10, 10, 6], "\(pages)")
        let listed = try await store.listAll(prefix: "chunks/")
        #expect(listed.map(\.key) == keys.filter { $0.hasPrefix("chunks/") }.sorted())
        #expect(listed.allSatisfy { $0.size == 100 + $0.key.count && $0.lastModified != nil })

        let failed = try await store.delete(keys + ["never/there"])
        #expect(failed.isEmpty, "\(failed)")
        #expect(try await store.listAll().isEmpty)
    }

    @Test func aWrongSignatureIsRefusedAtOnceAndNotRetried() async throws {
        let store = try TestStore.client(secret: "not-the-secret")
        defer { Task { try? await store.shutdown() } }
        do {
            _ = try await store.put("x", body: bytes(10))
            Issue.record("a request signed with the wrong secret was taken")
        } catch ObjectStoreError.refused(let status, let code, _) {
            #expect(status == 403 && code == "SignatureDoesNotMatch", "\(status) \(code)")
        }
        #expect(store.requestsSent == ["PUT": 1], "a refusal is not tried again")
    }

    /// A conditional PUT that landed but whose answer was lost (the connection died first) is
    /// tried again; the store then says an object is there — ours: the write counts as done, not
    /// as a clash. (With the check of the object's bytes off, this PUT throws `alreadyExists`.)
    @Test func aPutWhoseAnswerWasLostIsTriedAgainAndCountsAsDone() async throws {
        let (direct, relay, store) = try TestStore.relayed(retry: S3Client.RetryPolicy(attempts: 8, baseDelay: .milliseconds(200), maximumDelay: .milliseconds(400)),
                                                          timeout: .seconds(1))
        defer { relay.stop(); Task { try? await store.shutdown(); try? await direct.shutdown() } }
        relay.mode = .answersHeld
        let healed = Task {
            try await Task.sleep(for: .milliseconds(1500))
            relay.mode = .pass
        }
        let body = bytes(50_000, 7)
        let etag = try await store.put("packs/landed", body: body, ifAbsent: true)
        try await healed.value
        #expect(try await direct.get("packs/landed") == body)
        #expect(try await direct.head("packs/landed")?.etag == etag)
    }

    /// A store answering 503 `SlowDown` (a relay in front of the real one, answering for it) is
    /// tried again, with growing waits, until it takes the request.
    @Test func aStoreThatSaysSlowDownIsTriedAgainUntilItTakesTheRequest() async throws {
        let (direct, relay, store) = try TestStore.relayed(retry: S3Client.RetryPolicy(attempts: 10, baseDelay: .milliseconds(100), maximumDelay: .milliseconds(400)))
        defer { relay.stop(); Task { try? await store.shutdown(); try? await direct.shutdown() } }
        relay.mode = .slowDown
        let healed = Task {
            try await Task.sleep(for: .milliseconds(800))
            relay.mode = .pass
        }
        try await store.put("busy", body: bytes(1_000, 3))
        try await healed.value
        #expect(try await direct.get("busy") == bytes(1_000, 3))
        #expect((store.requestsSent["PUT"] ?? 0) > 1, "answered SlowDown first: \(store.requestsSent)")
    }

    @Test func anUnreachableStoreIsTriedAgainThenSaidUnavailable() async throws {
        // A port nothing listens on (bound, then closed).
        let location = ObjectStoreLocation(scheme: "http", host: "127.0.0.1", port: 9, bucket: "ubiquity-test")
        let store = S3Client(location: location, credentials: ObjectStoreCredentials(accessKeyID: "a", secretAccessKey: "b"),
                             retry: S3Client.RetryPolicy(attempts: 3, baseDelay: .milliseconds(20), maximumDelay: .milliseconds(50)), timeout: .seconds(5))
        defer { Task { try? await store.shutdown() } }
        do {
            _ = try await store.head("x")
            Issue.record("an unreachable store answered")
        } catch ObjectStoreError.unavailable(let why) {
            #expect(why.contains("after 3 tries"), "\(why)")
        }
        #expect(store.requestsSent == ["HEAD": 3])
    }
}
