import Crypto
import CUbiquitySystem
import Foundation
import Hummingbird
import Logging
import HummingbirdTesting
import Testing
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityServer

/// Where a test server keeps its data. Every server test runs on each backend: SQLite always,
/// PostgreSQL when `UBIQUITY_TEST_POSTGRES` names a cluster (`.ci/postgres start` makes one).
/// Under CI (`CI` set) PostgreSQL is never skipped: without the variable those runs fail.
enum Backend: String, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    static let all: [Backend] = TestPostgres.storages.compactMap(Backend.init(rawValue:))

    var testDescription: String { rawValue }

    /// A database URL of its own for one test server: a fresh schema in the test cluster.
    static func postgresURL() throws -> String { try TestPostgres.freshURL() }
}

/// A server on a fresh data directory (or a fresh PostgreSQL schema), driven through
/// Hummingbird's router test client.
struct TestServer {
    let backend: Backend
    let directory: String
    let configuration: SyncServer.Configuration
    let server: SyncServer
    let admin: ServerAdministration
    let relay: Task<Void, Never>

    /// - Parameter postgresURL: A database of the test's own (default: a fresh schema in the test cluster).
    init(_ backend: Backend = .sqlite, postgresURL: String? = nil, signInPolicy: SignInPolicy = SignInPolicy(),
         connectionLimits: ConnectionLimits = ConnectionLimits(), requestLimits: RequestLimits = RequestLimits(), trustedProxies: TrustedProxies = TrustedProxies(),
         accountLimits: AccountLimits = AccountLimits(), accountShare: AccountShareLimits = AccountShareLimits(), directory: String? = nil,
         sealedShares: Bool = true, landingWait: Duration = .seconds(2), logger: Logger = Logger(label: "ubiquity.server")) async throws {
        self.backend = backend
        self.directory = directory ?? NSTemporaryDirectory() + "ubiquity-server-\(UUID().uuidString.prefix(8))"
        var configuration = SyncServer.Configuration(dataDirectory: self.directory, port: 0, bcryptCost: 4)
        configuration.signInPolicy = signInPolicy
        configuration.connectionLimits = connectionLimits
        configuration.requestLimits = requestLimits
        configuration.trustedProxies = trustedProxies
        configuration.accountLimits = accountLimits
        configuration.accountShare = accountShare
        configuration.sealedShares = sealedShares
        configuration.landingWait = landingWait
        if backend == .postgres { configuration.database = try postgresURL ?? Backend.postgresURL() }
        self.configuration = configuration
        server = try await SyncServer(configuration: configuration, logger: logger)
        admin = try await ServerAdministration(dataDirectory: self.directory, database: configuration.database, bcryptCost: 4)
        relay = Task { [server] in await server.relayChanges() }
    }

    /// Another instance serving the same database (PostgreSQL: the same schema).
    func secondInstance() async throws -> SyncServer {
        try await SyncServer(configuration: configuration)
    }

    /// A server with one account (password "correct horse").
    static func withAccount(_ name: String, on backend: Backend = .sqlite, accountLimits: AccountLimits = AccountLimits(), sealedShares: Bool = true) async throws -> TestServer {
        let server = try await TestServer(backend, accountLimits: accountLimits, sealedShares: sealedShares)
        _ = try await server.admin.createAccount(name: name, password: "correct horse")
        return server
    }

    /// The stored contents of an account's chunk, wherever the backend keeps them.
    func storedChunk(_ hash: String, of account: String) async throws -> Data? {
        guard let id = try await admin.accounts().first(where: { $0.name == account })?.id else { return nil }
        return try await admin.storage.chunks.load(hash: hash, account: id)
    }

    /// Stops relaying and removes the data directory (a PostgreSQL schema stays in the
    /// throwaway test cluster).
    func remove() {
        relay.cancel()
        try? FileManager.default.removeItem(atPath: directory)
        Task { [server, admin] in
            await server.close()
            await admin.close()
        }
    }

    /// Runs `body` with a client of this server.
    func run<T>(_ body: @Sendable (Client) async throws -> T) async throws -> T {
        try await server.makeApplication().test(.router) { client in try await body(Client(client: client)) }
    }
}

/// A thin JSON client over the test client.
struct Client: Sendable {
    let client: any TestClientProtocol

    struct Answer: Sendable {
        var status: HTTPResponse.Status
        var body: ByteBuffer
        var headers: HTTPFields = [:]
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONDecoder().decode(type, from: Data(buffer: body)) }
        var errorCode: String? { try? decode(ErrorResponse.self).error.code }
    }

    func send(_ method: HTTPRequest.Method, _ uri: String, token: String? = nil, json: (any Encodable)? = nil, raw: [UInt8]? = nil,
              headers extra: HTTPFields = [:]) async throws -> Answer {
        var headers = extra
        if let token { headers[.authorization] = "Bearer \(token)" }
        var body: ByteBuffer?
        if let json {
            headers[.contentType] = "application/json"
            body = ByteBuffer(bytes: try JSONEncoder().encode(json))
        } else if let raw {
            body = ByteBuffer(bytes: raw)
        }
        return try await client.execute(uri: uri, method: method, headers: headers, body: body) { Answer(status: $0.status, body: $0.body, headers: $0.headers) }
    }

    /// Signs in and returns the token.
    func signIn(_ account: String, _ password: String = "correct horse", device: String = "laptop", containers: [String]? = nil) async throws -> SignInResponse {
        let answer = try await send(.post, "/v1/sign-in", json: SignInRequest(account: account, password: password, deviceName: device, containers: containers))
        #expect(answer.status == .ok, "sign-in: \(String(buffer: answer.body))")
        return try answer.decode(SignInResponse.self)
    }

    func put(_ container: String, _ item: String, _ update: ItemUpdate, token: String) async throws -> Answer {
        try await send(.put, "/v1/containers/\(container)/items/\(item)", token: token, json: update)
    }

    /// Commits `update` as a device does: first uploads the chunks it names that the account
    /// lacks, of those whose bytes a test made with ``fileUpdate(_:_:base:date:deleted:)``.
    func commit(_ container: String, _ item: String, _ update: ItemUpdate, token: String) async throws -> CommitResponse {
        try await uploadKnownChunks(of: [update], token: token)
        let answer = try await put(container, item, update, token: token)
        #expect(answer.status == .ok, "commit: \(String(buffer: answer.body))")
        return try answer.decode(CommitResponse.self)
    }

    func changes(_ container: String, since: Int64 = 0, token: String) async throws -> ChangesResponse {
        try await send(.get, "/v1/containers/\(container)/changes?since=\(since)", token: token).decode(ChangesResponse.self)
    }

    /// Uploads the chunks `updates` name (in their chunk lists or differences) that the
    /// account lacks and whose bytes are known (``knownChunks``).
    func uploadKnownChunks(of updates: [ItemUpdate], token: String) async throws {
        let named = updates.flatMap { update in
            update.manifest.allChunks.map(\.hash) + (update.manifestDelta?.operations ?? []).compactMap { operation -> String? in
                if case .add(let hash, _) = operation { return hash } else { return nil }
            }
        }
        let hashes = Array(Set(named)).sorted()
        guard !hashes.isEmpty else { return }
        let missing = try await send(.post, "/v1/chunks/missing", token: token, json: MissingChunksRequest(hashes: hashes)).decode(MissingChunksResponse.self).missing
        for hash in missing {
            guard let bytes = knownChunks.withLock({ $0[hash] }) else { continue }
            let answer = try await upload(bytes, token: token)
            #expect(answer.status == .created, "upload before commit: \(String(buffer: answer.body))")
        }
    }

    func upload(_ bytes: [UInt8], token: String) async throws -> Answer {
        try await send(.put, "/v1/chunks/\(sha256(bytes))", token: token, raw: bytes)
    }

    /// Sets the account's roster up as its first device does: `laptop`'s genesis, then `phone`
    /// added by it. Returns both entries and the roster they make.
    func setUpRoster(_ laptop: DeviceKeys, _ phone: DeviceKeys, token: String) async throws -> (genesis: RosterEntry, addPhone: RosterEntry, roster: Roster) {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let addPhone = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: genesis, signedBy: laptop)
        let setUp = try await send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 0, entries: [genesis.encoded, addPhone.encoded], envelopes: []))
        #expect(setUp.status == .ok, "\(String(buffer: setUp.body))")
        return (genesis, addPhone, try Roster.verify([genesis, addPhone]))
    }

    /// What counts against the account's quota (`GET /v1/account`).
    func usage(token: String) async throws -> (used: Int64, parts: AccountUsage) {
        let account = try await send(.get, "/v1/account", token: token).decode(AccountResponse.self)
        return (account.usedBytes, try #require(account.usage))
    }
}

func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

/// A file update whose contents are `chunks`.
/// The bytes of the chunks tests named through ``fileUpdate(_:_:base:date:deleted:)``, by
/// hash: what ``Client/commit(_:_:_:token:)`` uploads before committing, as a device does (the
/// server refuses a commit naming chunks the account does not hold).
let knownChunks = Mutex<[String: [UInt8]]>([:])

/// A file's update naming `chunks` (remembered in ``knownChunks``).
func fileUpdate(_ name: String, _ chunks: [[UInt8]], base: String? = nil, date: Double = 1_800_000_000, deleted: Bool? = nil) -> ItemUpdate {
    knownChunks.withLock { known in for chunk in chunks { known[sha256(chunk)] = chunk } }
    return ItemUpdate(
        baseRevision: base, name: name, kind: .file, modificationDate: date, type: "public.plain-text",
        manifest: Manifest(chunks: chunks.map { ChunkReference(hash: sha256($0), size: Int64($0.count)) }), deleted: deleted)
}

let notes = "ABCDE12345.com.example.notes"

/// `.ci/postgres COMMAND ARGUMENTS…` (a cluster of a test's own): its exit status and output.
/// Spawned and reaped directly: Foundation's `Process.waitUntilExit` can miss the exit of a
/// script whose grandchild (the PostgreSQL server) lives on.
@discardableResult
func clusterScript(_ arguments: [String]) throws -> (status: Int32, output: String) {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".ci/postgres").path
    let outputPath = NSTemporaryDirectory() + "cluster-\(UUID().uuidString).out"
    defer { unlink(outputPath) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    // Nothing else of this process's: a cluster started here outlives a killed test run, and an
    // inherited connection to the shared test cluster would keep its transaction (and locks)
    // open for as long — the next run's migrations then wait forever.
    ubq_spawn_actions_close_from(&actions, 3)
    let argv: [UnsafeMutablePointer<CChar>?] = ([script] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid = pid_t()
    let spawned = posix_spawn(&pid, script, &actions, nil, argv, environ)
    guard spawned == 0 else { throw SyncError(.internalServerError, "spawn", "cannot run \(script): \(String(cString: strerror(spawned)))") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    return ((status >> 8) & 0xff, output)
}
