import Foundation
import Testing
import UbiquityTestSupport
import Crypto
import UbiquityProtocol

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `ubiquity serve` as an operator runs it: a real process on a loopback port. Started with
/// ``start(data:extraArguments:)`` or ``start(storage:createAccount:extraArguments:)``, which
/// wait for it on a thread of their own (never on the threads the tests' tasks share).
final class RunningServer: @unchecked Sendable { // its stored properties are constants
    /// Creates the account `ada` in `data`, then starts the server; waits on a thread of its own.
    static func start(data: String, extraArguments: [String] = []) async throws -> RunningServer {
        try await onOwnThread { try RunningServer(data: data, extraArguments: extraArguments) }
    }

    /// Creates the account `ada` in `data`, then starts the server logging everything it logs
    /// at `level` into `log`; waits on a thread of its own.
    static func start(data: String, logging level: String, to log: URL) async throws -> RunningServer {
        try await onOwnThread { try RunningServer(storage: ["--data", data], logLevel: level, log: log) }
    }

    /// Creates the account `ada` unless told not to, then starts the server on `storage`; waits
    /// on a thread of its own.
    static func start(storage: [String], createAccount: Bool = true, extraArguments: [String] = []) async throws -> RunningServer {
        try await onOwnThread { try RunningServer(storage: storage, createAccount: createAccount, extraArguments: extraArguments) }
    }

    static var binary: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("ubiquity")
    }

    let process = ChildProcess()
    let base: URL

    /// Creates the account `ada` (password "correct horse") in `data`, then starts the server.
    private convenience init(data: String, extraArguments: [String] = []) throws {
        try self.init(storage: ["--data", data], extraArguments: extraArguments)
    }

    /// Creates the account `ada` (password "correct horse") unless told not to, then starts the
    /// server on `storage` (`--data DIR` or `--database URL`).
    private init(storage: [String], createAccount: Bool = true, extraArguments: [String] = [], logLevel: String = "warning", log: URL? = nil) throws {
        if createAccount { try Self.createAccount(storage: storage) }
        process.executableURL = Self.binary
        // With --database, the escrow key goes in a folder of the tests' (not the working
        // directory's ./ubiquity-data), one file for every instance, as the docs ask.
        let escrow = storage.contains("--database") ? ["--escrow-key", NSTemporaryDirectory() + "ubiquity-serve-tests-\(getpid())/escrow.key"] : []
        process.arguments = ["serve"] + storage + escrow + ["--port", "0", "--log-level", logLevel] + extraArguments
        if let log {
            _ = FileManager.default.createFile(atPath: log.path, contents: nil) // opened just below, which says if it failed
            process.standardError = try FileHandle(forWritingTo: log)
        }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let (address, said) = ChildProcess.listeningAddress(in: output)
        guard let url = address else {
            process.terminate()
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "the server did not say where it listens: \(said)"])
        }
        base = url
    }

    /// `ubiquity account create NAME` on `storage` (ada unless told; password "correct horse").
    static func createAccount(storage: [String], name: String = "ada") throws {
        let create = ChildProcess()
        create.executableURL = Self.binary
        create.arguments = ["account", "create", name] + storage + ["--password-stdin"]
        let input = Pipe()
        create.standardInput = input
        create.standardOutput = FileHandle.nullDevice
        try create.run()
        input.fileHandleForWriting.write(Data("correct horse\n".utf8))
        try input.fileHandleForWriting.close()
        // Waited for by polling, within a limit: Foundation's `waitUntilExit` spins a core while
        // it waits, and a command that never ends would hold that core for the rest of the run.
        let deadline = ContinuousClock.now + .seconds(90)
        while create.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if create.isRunning {
            create.terminate()
            usleep(200_000)
            if create.isRunning { kill(create.processIdentifier, SIGKILL) }
            Issue.record("`ubiquity account create` did not end within 90 s")
            return
        }
        #expect(create.terminationStatus == 0)
    }

    deinit { if process.isRunning { process.terminate() } }

    func request(_ path: String, method: String = "GET", json: String? = nil, token: String? = nil) async throws -> (Int, String) {
        var request = URLRequest(url: URL(string: base.absoluteString + "/" + path)!) // a path may carry a query
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    /// Signs `ada` in and returns the device token.
    func token() async throws -> String {
        let (_, body) = try await request("v1/sign-in", method: "POST", json: #"{"account":"ada","password":"correct horse","deviceName":"test"}"#)
        let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
        return try #require(object?["token"] as? String)
    }

    /// Stops it with SIGTERM and reaps it on a thread of its own: called from a test's `defer`,
    /// waiting for its graceful shutdown there would hold one of the two threads every
    /// in-process server of the suite shares (seen in CI: the whole suite stalled).
    func stop() {
        process.terminate()
        let process = process
        Thread.detachNewThread { process.waitUntilExit() }
    }

    /// Stops it with SIGTERM and returns how it ended, waiting on a thread of its own.
    func stopped() async throws -> (Process.TerminationReason, Int32) {
        process.terminate()
        let process = process
        try await onOwnThread { process.waitUntilExit() }
        return (process.terminationReason, process.terminationStatus)
    }
}

@Suite(.serialized) struct ServeCommandTests {
    @Test func serveStartsWithEmbeddedStorageAndStopsGracefully() async throws {
        let dir = try TemporaryDirectory("serve"); defer { dir.remove() }
        let data = dir.file("data").path
        let server = try await RunningServer.start(data: data)
        #expect(try await server.request("health") == (200, #"{"status":"ok"}"#))
        #expect(try await server.token().count == 64)
        #expect(FileManager.default.fileExists(atPath: data + "/ubiquity.sqlite"))
        // `ubiquity fsck` beside the running server: a sound store.
        let (code, output) = try await runProcess(RunningServer.binary.path, ["fsck", "--data", data])
        #expect(code == 0 && output.contains("no problems found"), "\(output)")
        let (reason, status) = try await server.stopped()
        #expect(reason == .exit && status == 0, "a graceful shutdown")
    }

    /// The TLS version `openssl s_client` negotiates with the server at `port` when it offers
    /// only `version` (`-tls1`, `-tls1_1`, …); nil if the handshake fails.
    func handshake(port: Int, version: String) async throws -> String? {
        let (status, output) = try await runProcess("/usr/bin/openssl", ["s_client", "-connect", "127.0.0.1:\(port)", version, "-cipher", "DEFAULT:@SECLEVEL=0"])
        // "New, TLSv1.2, Cipher is …" — or "New, (NONE), Cipher is (NONE)" when refused.
        guard status == 0, let line = output.split(separator: "\n").first(where: { $0.hasPrefix("New, ") }) else { return nil }
        let version = line.dropFirst(5).prefix { $0 != "," }
        return version.hasPrefix("TLS") ? String(version) : nil
    }

    @Test func serveSpeaksHTTPSWithACertificateAndKey() async throws {
        let dir = try TemporaryDirectory("tls"); defer { dir.remove() }
        let key = dir.file("key.pem").path, certificate = dir.file("cert.pem").path
        #expect(try await runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate,
                                                      "-days", "1", "-subj", "/CN=localhost"]).0 == 0)
        let server = try await RunningServer.start(data: dir.file("data").path, extraArguments: ["--tls-cert", certificate, "--tls-key", key])
        #expect(server.base.scheme == "https")
        let (status, body) = try await runProcess("/usr/bin/curl", ["-s", "--cacert", certificate, "https://localhost:\(server.base.port!)/health"])
        #expect(status == 0 && body == #"{"status":"ok"}"#)
        #expect(try await runProcess("/usr/bin/curl", ["-s", "http://127.0.0.1:\(server.base.port!)/health"]).1 != #"{"status":"ok"}"#, "no plain HTTP")
        // TLS 1.0 and 1.1 are refused, offered by a client that allows them (OpenSSL's security
        // level 0: it negotiates 1.1 with a server that speaks it); 1.2 and 1.3 are spoken.
        #expect(try await handshake(port: server.base.port!, version: "-tls1") == nil)
        #expect(try await handshake(port: server.base.port!, version: "-tls1_1") == nil)
        #expect(try await handshake(port: server.base.port!, version: "-tls1_2") == "TLSv1.2")
        #expect(try await handshake(port: server.base.port!, version: "-tls1_3") == "TLSv1.3")
        #expect(try await server.stopped().1 == 0)

        // 1.3 only, when asked.
        let modern = try await RunningServer.start(data: dir.file("data-1.3").path, extraArguments: ["--tls-cert", certificate, "--tls-key", key, "--tls-minimum", "1.3"])
        #expect(try await handshake(port: modern.base.port!, version: "-tls1_2") == nil)
        #expect(try await handshake(port: modern.base.port!, version: "-tls1_3") == "TLSv1.3")
        #expect(try await modern.stopped().1 == 0)

        // A key that does not exist: a clear error, no server.
        let broken = ChildProcess()
        broken.executableURL = RunningServer.binary
        broken.arguments = ["serve", "--data", dir.file("data").path, "--port", "0", "--tls-cert", certificate, "--tls-key", dir.file("missing.pem").path]
        let errors = Pipe()
        broken.standardError = errors
        broken.standardOutput = FileHandle.nullDevice
        try broken.run()
        let message = try await onOwnThread {
            defer { broken.waitUntilExit() }
            return String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        #expect(broken.terminationStatus != 0 && message.contains("missing.pem"))
    }

    /// Two `ubiquity serve --database` processes on one PostgreSQL database serve the same
    /// accounts: a device signed in through one is known to the other, and sees its commits.
    @Test(.enabled(if: ServeCommandTests.storages.contains("postgres")))
    func twoServeProcessesShareOnePostgreSQLDatabase() async throws {
        let database = try Self.postgresURL()
        let first = try await RunningServer.start(storage: ["--database", database])
        let second = try await RunningServer.start(storage: ["--database", database], createAccount: false)
        #expect(first.base.port != second.base.port)
        let token = try await first.token()
        let container = "ABCDE12345.com.example.notes"
        let (status, _) = try await first.request("v1/containers/\(container)/items/doc", method: "PUT", json: """
            {"name":"a.txt","kind":"file","modificationDate":1800000000,"manifest":{"chunks":[]}}
            """, token: token)
        #expect(status == 200)
        let (seen, changes) = try await second.request("v1/containers/\(container)/changes?since=0", token: token)
        #expect(seen == 200 && changes.contains("\"name\":\"a.txt\""), "the other instance knows the device and the item: \(changes)")
        let (firstEnd, secondEnd) = (try await first.stopped(), try await second.stopped())
        #expect(firstEnd == (.exit, 0) && secondEnd == (.exit, 0))

        // A database nobody listens on: a clear error at once, naming where it looked.
        let (code, output) = try await runProcess(RunningServer.binary.path, ["serve", "--database", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "--port", "0"], includingErrors: true)
        #expect(code != 0 && output.contains("cannot connect to PostgreSQL at postgres://nobody@127.0.0.1:1/none"), "\(output)")
    }

    /// Two `ubiquity serve` processes on one PostgreSQL database keep chunk contents in one real
    /// object store (SeaweedFS): chunks one uploads, the other serves — a large batch as a pack
    /// of its own at once, small ones from the database until packed. `ubiquity fsck` lists the
    /// bucket and finds nothing wrong. A credentials file others may read is refused at start.
    @Test(.enabled(if: ServeCommandTests.storages.contains("postgres") && TestObjectStore.configured))
    func twoServeProcessesShareChunksThroughAnObjectStore() async throws {
        let database = try Self.postgresURL(), store = try TestObjectStore.fresh()
        let objectStore = ["--object-store", store.url, "--object-store-credentials", store.credentialsFile]
        let first = try await RunningServer.start(storage: ["--database", database], extraArguments: objectStore)
        let second = try await RunningServer.start(storage: ["--database", database], createAccount: false, extraArguments: objectStore)
        defer { first.stop(); second.stop() }
        let token = try await first.token()
        func chunk(_ seed: UInt64, _ size: Int) -> ChunkBatch.Chunk {
            var generator = SeededGenerator(seed: seed)
            let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
            return ChunkBatch.Chunk(hash: SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined(), bytes: bytes)
        }
        let large = (1...3).map { chunk($0, 500_000) }, small = (10...12).map { chunk($0, 2_000) }
        for batch in [large, small] {
            var upload = URLRequest(url: first.base.appendingPathComponent("v1/chunks"))
            upload.httpMethod = "POST"
            upload.httpBody = Data(ChunkBatch(batch).encoded())
            upload.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            upload.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
            let (body, response) = try await URLSession.shared.data(for: upload)
            #expect((response as? HTTPURLResponse)?.statusCode == 201, "\(String(decoding: body, as: UTF8.self))")
        }
        var fetch = URLRequest(url: second.base.appendingPathComponent("v1/chunks/fetch"))
        fetch.httpMethod = "POST"
        fetch.httpBody = try JSONEncoder().encode(ChunkFetchRequest(hashes: (large + small).map(\.hash)))
        fetch.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        fetch.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let (body, _) = try await URLSession.shared.data(for: fetch)
        let fetched = try ChunkBatch(decoding: [UInt8](body), maximumChunkSize: 1 << 22)
        #expect(fetched.chunks.map(\.hash) == (large + small).map(\.hash))
        #expect(fetched.chunks.map { Array($0.bytes) } == (large + small).map { Array($0.bytes) }, "the other instance serves every chunk whole")
        let (_, metrics) = try await first.request("metrics")
        #expect(metrics.contains("ubiquity_object_store_requests_total{method=\"PUT\"} 1\n"), "the large batch was one PUT: \(metrics)")

        let (code, output) = try await runProcess(RunningServer.binary.path, ["fsck", "--database", database] + objectStore, includingErrors: true)
        #expect(code == 0 && output.contains("listed 1 object(s) in the object store") && output.contains("no problems found"), "\(output)")

        let loose = NSTemporaryDirectory() + "loose-credentials-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: loose) }
        try FileManager.default.copyItem(atPath: store.credentialsFile, toPath: loose)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: loose)
        let (refused, said) = try await runProcess(RunningServer.binary.path, ["serve", "--database", database, "--port", "0", "--object-store", store.url,
                                                                               "--object-store-credentials", loose], includingErrors: true)
        #expect(refused != 0 && said.contains("chmod 600"), "\(said)")
        #expect(!said.contains(try String(contentsOfFile: store.credentialsFile, encoding: .utf8).split(separator: "=").last!.trimmingCharacters(in: .whitespacesAndNewlines)),
                "the secret is never printed")
    }

    /// `ubiquity storage migrate --from-data`: an embedded installation moved into PostgreSQL
    /// and the object store by the real commands — a pass while its server serves, the final
    /// pass refused until that server stops — after which `ubiquity serve` on the new storage
    /// knows the device's token and serves its item.
    @Test(.enabled(if: ServeCommandTests.storages.contains("postgres") && TestObjectStore.configured))
    func anEmbeddedInstallationMovesToPostgreSQLAndAnObjectStore() async throws {
        let dir = try TemporaryDirectory("move"); defer { dir.remove() }
        let data = dir.file("data").path, database = try Self.postgresURL(), store = try TestObjectStore.fresh()
        let target = ["--database", database, "--object-store", store.url, "--object-store-credentials", store.credentialsFile]
        let old = try await RunningServer.start(data: data)
        let token = try await old.token()
        let container = "ABCDE12345.com.example.notes"
        let (status, _) = try await old.request("v1/containers/\(container)/items/doc", method: "PUT", json: """
            {"name":"a.txt","kind":"file","modificationDate":1800000000,"manifest":{"chunks":[]}}
            """, token: token)
        #expect(status == 200)
        let migrate = [RunningServer.binary.path, "storage", "migrate", "--from-data", data] + target
        let (code, said) = try await runProcess(migrate[0], Array(migrate.dropFirst()), includingErrors: true)
        #expect(code == 0 && said.contains("run this again with --final"), "\(said)")
        let (refused, why) = try await runProcess(migrate[0], Array(migrate.dropFirst()) + ["--final"], includingErrors: true)
        #expect(refused != 0 && why.contains("is in use"), "\(why)")
        #expect(try await old.stopped() == (.exit, 0))
        let (finished, output) = try await runProcess(migrate[0], Array(migrate.dropFirst()) + ["--final"], includingErrors: true)
        #expect(finished == 0 && output.contains("copied item: 1 row(s)") && output.contains("--escrow-key \(data)/escrow.key"), "\(output)")

        let new = try await RunningServer.start(storage: ["--database", database], createAccount: false,
                                                extraArguments: Array(target.dropFirst(2)) + ["--escrow-key", data + "/escrow.key"])
        defer { new.stop() }
        let (seen, changes) = try await new.request("v1/containers/\(container)/changes?since=0", token: token)
        #expect(seen == 200 && changes.contains("\"name\":\"a.txt\""), "the device's token and item moved: \(changes)")
    }

    /// schemathesis (PyPI; `.ci/run` installs it) fuzzes every operation of docs/openapi.yaml
    /// against a live server, on each storage: no 5xx, answers as documented.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["CI"] != nil || ServeCommandTests.schemathesis != nil, "schemathesis is not installed"),
          arguments: ServeCommandTests.storages)
    func schemathesisFindsNoServerErrorsAndNoUndocumentedAnswers(storage: String) async throws {
        let schemathesis = try #require(Self.schemathesis, "CI must install schemathesis (pip install schemathesis)")
        let dir = try TemporaryDirectory("fuzz"); defer { dir.remove() }
        let server = try await RunningServer.start(storage: storage == "sqlite" ? ["--data", dir.file("data").path] : ["--database", try Self.postgresURL()])
        let token = try await server.token()
        let spec = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/openapi.yaml").path
        let run = ChildProcess()
        run.executableURL = URL(fileURLWithPath: schemathesis)
        run.currentDirectoryURL = dir.url // its cache (.schemathesis/) goes there, not into the repository
        run.arguments = ["run", spec, "--url", server.base.absoluteString, "-H", "Authorization: Bearer \(token)",
                         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                         "--max-time", "30", "--workers", "1", "--exclude-path", "/v1/push", "--exclude-path", "/v1/sign-out", "--seed", "1"]
        let output = Pipe()
        run.standardOutput = output
        run.standardError = output
        try run.run()
        // Its half a minute waited for on a thread of its own: blocking one of the two threads
        // Swift's concurrency shares here starved every other test's servers and agents (their
        // requests ran out of time together).
        let text = try await onOwnThread {
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            run.waitUntilExit()
            return text
        }
        #expect(run.terminationStatus == 0, "schemathesis found problems:\n\(text.suffix(4000))")
        #expect(text.contains("passed"))
        #expect(try await server.stopped().1 == 0)
    }

    /// SQLite always; PostgreSQL when `UBIQUITY_TEST_POSTGRES` is set, and always under CI.
    static let storages = TestPostgres.storages

    /// A fresh schema in the test cluster.
    static func postgresURL() throws -> String { try TestPostgres.freshURL(prefix: "serve") }

    static var schemathesis: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/schemathesis" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}
