import ArgumentParser
import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol
import UbiquityServer

#if canImport(Glibc)
import Glibc
#endif

/// Where a server keeps everything: `--data DIR` (embedded SQLite and chunk files) or
/// `--database postgres://…` (PostgreSQL, shared by any number of server instances).
struct StorageOptions: ParsableArguments {
    @Option(name: .long, help: "The data directory: embedded database and chunks.")
    var data = "./ubiquity-data"

    @Option(name: .long, help: ArgumentHelp(
        "A PostgreSQL URL, postgres://USER@HOST:PORT/DB[?sslmode=…&search_path=SCHEMA], instead of --data.",
        discussion: "The password may come from PGPASSWORD rather than the URL."))
    var database: String?

    @Option(name: .long, help: ArgumentHelp(
        "Keep chunk contents in an S3-compatible object store: http[s]://HOST[:PORT]/BUCKET[/PREFIX][?region=R&style=path|virtual]. Needs --database.",
        discussion: "Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or --object-store-credentials; never from a flag."))
    var objectStore: String?

    @Option(name: .long, help: "A credentials file in AWS's shared form ([default] aws_access_key_id = …, aws_secret_access_key = …), readable by its owner only.")
    var objectStoreCredentials: String?

    /// The object store's settings, when one is given.
    func objectStoreSettings() throws -> ObjectStoreSettings? {
        guard let objectStore else {
            if objectStoreCredentials != nil { throw ValidationError("--object-store-credentials needs --object-store") }
            return nil
        }
        guard database != nil else { throw ValidationError("--object-store keeps its index in PostgreSQL: give --database postgres://… too") }
        return try ObjectStoreSettings(url: objectStore, credentialsFile: objectStoreCredentials)
    }

    /// Runs `body` with the server's administration, then closes its connections.
    func withAdministration<T: Sendable>(_ body: (ServerAdministration) async throws -> T) async throws -> T {
        let admin = try await ServerAdministration(dataDirectory: data, database: database, objectStore: try objectStoreSettings())
        do {
            let result = try await body(admin)
            await admin.close()
            return result
        } catch {
            await admin.close()
            throw error
        }
    }

    /// How the storage shows in messages (no password).
    var shown: String {
        guard let database else { return "data: \(data)" }
        let shown = "database: " + ((try? PostgresLocation(url: database).redacted) ?? "postgres")
        guard let objectStore else { return shown }
        return shown + ", object store: " + (ObjectStoreSettings.shown(objectStore) ?? "(not a URL)")
    }
}

/// `ubiquity serve`: the sync server.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the sync server (accounts, containers, items, chunks): embedded storage, or PostgreSQL to scale out.",
        discussion: "Stops gracefully on SIGTERM or SIGINT. Create accounts with `ubiquity account create`. With --database, run as many instances as you like on the same database: each pushes every instance's changes to its devices."
    )

    @OptionGroup var storage: StorageOptions

    @Option(name: .long, help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(name: .long, help: "The port to listen on (0: any free port, printed when listening).")
    var port = 8443

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    @Option(name: .long, help: "How many days replaced revisions and deleted items stay recoverable.")
    var retentionDays = 30.0

    @Option(name: .long, help: "A PEM certificate chain: serve HTTPS (needs --tls-key).")
    var tlsCert: String?

    @Option(name: .long, help: "The certificate's PEM private key.")
    var tlsKey: String?

    @Option(name: .long, help: "The oldest TLS version spoken: 1.2 or 1.3 (1.0 and 1.1 never are).")
    var tlsMinimum = MinimumTLSVersion.v1_2.rawValue

    @Option(name: .long, help: "Connections open at once; more are closed as soon as they are accepted.")
    var maxConnections = ConnectionLimits().maximum

    @Option(name: .long, help: "Seconds a connection may sit with nothing read or written before it is closed.")
    var idleTimeout = 90

    @Option(name: .long, help: "Seconds from a request's first byte to the end of its head (else 408).")
    var headerTimeout = 20

    @Option(name: .long, help: "Seconds a request body gets before the bytes received extend it.")
    var bodyTimeout = 20

    @Option(name: .long, help: "Each this many bytes of body received extend its time by a second.")
    var minBodyRate = RequestLimits().minimumBodyRate

    @Option(name: .long, help: "Requests of one account handled at once; the next ones wait their turn.")
    var accountRequests = AccountShareLimits().working

    @Option(name: .long, help: "Requests of one account waiting for their turn; more are answered 429.")
    var accountWaiting = AccountShareLimits().waiting

    @Option(name: .long, help: ArgumentHelp(
        "The escrow key's file (Standard Data Protection; default: escrow.key in --data's folder).",
        discussion: "Made on first start (mode 0600), never in the database: back it up apart from the database. Every instance on one --database needs the same file."))
    var escrowKey: String?

    @Option(name: .long, help: "A reverse proxy (address or network, e.g. 10.0.0.0/8) whose X-Forwarded-For is believed; may be repeated.")
    var trustedProxy: [String] = []

    @Option(name: .long, help: ArgumentHelp(
        "Every this many minutes, seal in place what Standard accounts stored before their containers sealed (0: only by `ubiquity seal-in-place`).",
        discussion: "Names, sizes and dates go into sealed records and plaintext chunks are sealed with the escrow key; nothing is uploaded again."))
    var sealInPlaceMinutes = 10

    @Flag(name: .long, inversion: .prefixedNo, help: ArgumentHelp("Share items sealed with their account's keys (their owners' devices seal them again with each share's keys).",
                                                                  discussion: "On by default; --no-sealed-shares refuses to share them (409 sealedShare). docs/Sharing.md, \"Keys\"."))
    var sealedShares = true

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else { throw ValidationError("unknown log level \(logLevel)") }
        SyncServer.limitRetainedMemory() // a process that serves for months gives back what it frees
        var logger = Logger(label: "ubiquity.server")
        logger.logLevel = level
        var configuration = SyncServer.Configuration(dataDirectory: storage.data, host: host, port: port)
        configuration.database = storage.database
        configuration.objectStore = try storage.objectStoreSettings()
        configuration.escrowKeyFile = escrowKey
        configuration.retention = retentionDays * 86_400
        guard sealInPlaceMinutes >= 0 else { throw ValidationError("--seal-in-place-minutes is 0 or more") }
        configuration.sealInPlaceInterval = sealInPlaceMinutes == 0 ? nil : .seconds(sealInPlaceMinutes * 60)
        configuration.sealedShares = sealedShares
        guard maxConnections > 0, idleTimeout > 0, headerTimeout > 0, bodyTimeout > 0, minBodyRate > 0, accountRequests > 0, accountWaiting >= 0 else {
            throw ValidationError("connection and request limits are positive numbers")
        }
        configuration.connectionLimits.maximum = maxConnections
        configuration.connectionLimits.idleTimeout = .seconds(idleTimeout)
        configuration.requestLimits.headerTimeout = .seconds(headerTimeout)
        configuration.requestLimits.bodyTimeout = .seconds(bodyTimeout)
        configuration.requestLimits.minimumBodyRate = minBodyRate
        configuration.accountShare.working = accountRequests
        configuration.accountShare.waiting = accountWaiting
        do {
            configuration.trustedProxies = try TrustedProxies(trustedProxy)
        } catch let error as SyncError {
            throw ValidationError(error.message)
        }
        switch (tlsCert, tlsKey) {
        case (let certificate?, let key?): configuration.tls = (certificate, key)
        case (nil, nil): break
        default: throw ValidationError("--tls-cert and --tls-key go together")
        }
        guard let minimum = MinimumTLSVersion(rawValue: tlsMinimum) else { throw ValidationError("--tls-minimum is 1.2 or 1.3") }
        configuration.tlsMinimum = minimum
        let scheme = configuration.tls == nil ? "http" : "https"
        let server = try await SyncServer(configuration: configuration, logger: logger)
        let shownHost = host
        let shownStorage = storage.shown
        try await server.run { port in
            FileHandle.standardOutput.write(Data("ubiquity server listening on \(scheme)://\(shownHost):\(port) (\(shownStorage))\n".utf8))
        }
    }
}

/// `ubiquity account create|list|quota|delete|blocked|unblock`.
struct AccountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account",
        abstract: "Manage the server's accounts (on its data directory or database; the server may be running).",
        subcommands: [Create.self, List.self, Quota.self, Admin.self, Delete.self, Blocked.self, Unblock.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create an account.")
        @Argument(help: "The account's name.") var name: String
        @OptionGroup var storage: StorageOptions
        @Flag(name: .long, help: "Read the password from standard input (one line) instead of asking.") var passwordStdin = false
        @Option(name: .long, help: "Storage quota in bytes.") var quota: Int64 = 5 << 30
        @Flag(name: .long, help: "Make it an operator: its web interface shows the administration page.") var admin = false

        func run() async throws {
            let password = try readPassword(fromStandardInput: passwordStdin)
            let account = try await storage.withAdministration { [name, quota, admin] in
                let account = try await $0.createAccount(name: name, password: password, quotaBytes: quota)
                if admin { _ = try await $0.setAdmin(ofAccount: name, admin: true) }
                return account
            }
            print("created account \(account.name) (identity \(account.identityToken))\(admin ? ", an operator" : "")")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List accounts and their devices.")
        @OptionGroup var storage: StorageOptions

        func run() async throws {
            try await storage.withAdministration { admin in
                for account in try await admin.accounts() {
                    print("\(SafeText.escaped(account.name))\tquota \(account.quotaBytes) bytes\(account.admin ? "\toperator" : "")")
                    for device in try await admin.devices(ofAccount: account.name) {
                        print("  device \(device.id)\t\(SafeText.escaped(device.name))\(device.revoked ? "\t(revoked)" : "")")
                    }
                }
            }
        }
    }

    struct Quota: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set an account's storage quota.")
        @Argument(help: "The account's name.") var name: String
        @Argument(help: "The quota in bytes.") var bytes: Int64
        @OptionGroup var storage: StorageOptions

        func run() async throws {
            guard try await storage.withAdministration({ [name, bytes] in try await $0.setQuota(ofAccount: name, bytes: bytes) }) else {
                throw ValidationError("no account named \(SafeText.escaped(name))")
            }
            print("account \(SafeText.escaped(name)): quota \(bytes) bytes")
        }
    }

    struct Admin: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make an account an operator of the server (the web interface's administration page), or no longer.")
        @Argument(help: "The account's name.") var name: String
        @Flag(name: .long, help: "Take the operator's role away.") var remove = false
        @OptionGroup var storage: StorageOptions

        func run() async throws {
            guard try await storage.withAdministration({ [name, remove] in try await $0.setAdmin(ofAccount: name, admin: !remove) }) else {
                throw ValidationError("no account named \(SafeText.escaped(name))")
            }
            print("account \(SafeText.escaped(name)): \(remove ? "no longer an operator" : "an operator")")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete an account with its devices, items and chunks.")
        @Argument(help: "The account's name.") var name: String
        @OptionGroup var storage: StorageOptions

        func run() async throws {
            guard try await storage.withAdministration({ [name] in try await $0.deleteAccount(named: name) }) else {
                throw ValidationError("no account named \(name)")
            }
            print("deleted account \(name)")
        }
    }
}

extension AccountCommand {
    struct Blocked: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the account names and addresses whose sign-ins are refused now (too many attempts).")
        @OptionGroup var storage: StorageOptions

        func run() async throws {
            let blocked = try await storage.withAdministration { try await $0.blockedSignIns() }
            let format = ISO8601DateFormatter()
            for entry in blocked { print("\(SafeText.escaped(entry.who))\tuntil \(format.string(from: entry.until))") }
            if blocked.isEmpty { print("no sign-ins are blocked") }
        }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let an account, or an address, sign in again at once (forgets its attempts).")
        @Argument(help: "The account's name.") var name: String?
        @Option(name: .long, help: "An address to unblock (IPv4, or IPv6: its /64); may be repeated.") var address: [String] = []
        @OptionGroup var storage: StorageOptions

        func validate() throws {
            if name == nil && address.isEmpty { throw ValidationError("name an account, or an address with --address") }
        }

        func run() async throws {
            let known = try await storage.withAdministration { [name, address] in try await $0.unblockSignIn(account: name, addresses: address) }
            print(known ? "unblocked" : "nothing was blocked or counted for that")
        }
    }
}

/// `ubiquity device revoke`.
struct DeviceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device",
        abstract: "Manage signed-in devices.",
        subcommands: [Revoke.self]
    )

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a device's token (see `ubiquity account list`).")
        @Argument(help: "The device's id.") var id: String
        @OptionGroup var storage: StorageOptions

        func run() async throws {
            guard try await storage.withAdministration({ [id] in try await $0.revokeDevice(id: id) }) else {
                throw ValidationError("no active device \(id)")
            }
            print("revoked device \(id)")
        }
    }
}

/// A password from standard input (one line) or, on a terminal, asked for without echo.
func readPassword(fromStandardInput: Bool) throws -> String {
    if fromStandardInput || isatty(STDIN_FILENO) == 0 {
        guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw ValidationError("no password on standard input") }
        return line
    }
    guard let typed = getpass("Password: ") else { throw ValidationError("no password") }
    return String(cString: typed)
}

/// `ubiquity recover ACCOUNT [--restore REVISION]`.
struct RecoverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "List an account's earlier revisions and deleted items still recoverable, or restore one.",
        discussion: "A restored revision becomes its item's current revision; devices get it with their next changes."
    )

    @Argument(help: "The account's name.") var account: String
    @OptionGroup var storage: StorageOptions
    @Option(name: .long, help: "How many days back revisions stay recoverable.") var retentionDays = 30.0
    @Option(name: .long, help: "The revision to make current again.") var restore: String?
    @Option(name: .long, help: "The escrow key's file (default: escrow.key in --data's folder): under Standard Data Protection, sealed names are shown opened with it, and a restore is signed with it.")
    var escrowKey: String?

    func run() async throws {
        let account = account
        let escrowPath = escrowKey ?? (storage.data as NSString).appendingPathComponent("escrow.key")
        let escrow = FileManager.default.fileExists(atPath: escrowPath) ? try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: escrowPath)).key : nil
        if let restore {
            // (Signed by the escrow under Standard, as the web page's restores are.)
            guard try await storage.withAdministration({ try await $0.restore(accountName: account, revision: restore, escrow: escrow) }) else {
                throw ValidationError("\(restore) is not a recoverable revision of \(account)'s items")
            }
            print("restored revision \(restore)")
            return
        }
        let formatter = ISO8601DateFormatter()
        let retention = retentionDays * 86_400
        for entry in try await storage.withAdministration({ try await $0.recoverable(accountName: account, retention: retention, escrow: escrow) }) {
            let when = formatter.string(from: Date(timeIntervalSince1970: entry.replacedAt))
            // A name still sealed (Advanced, or no escrow key here): its tag, and no exact size.
            let (name, size) = entry.record == nil ? (SafeText.escaped(entry.name), "\(entry.size) bytes")
                                                    : ("(sealed name, tag \(entry.name.prefix(12))…)", "~\(entry.size) bytes sealed")
            print("\(entry.revision)\t\(entry.container)\t\(name)\t\(size)\t\(entry.deviceName)\t\(when)\(entry.itemDeleted ? "\t(item deleted)" : "")")
        }
    }
}

/// `ubiquity gc`: what the server also does every hour.
struct GarbageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gc",
        abstract: "Forget revisions past the retention and remove chunks nothing refers to."
    )

    @OptionGroup var storage: StorageOptions
    @Option(name: .long, help: "How many days revisions stay recoverable.") var retentionDays = 30.0

    func run() async throws {
        let retention = retentionDays * 86_400
        let collected = try await storage.withAdministration { try await $0.collectGarbage(retention: retention) }
        print("removed \(collected.revisions) revision(s) and \(collected.chunks) chunk(s), \(collected.bytes) bytes")
    }
}

/// `ubiquity fsck`: the chunk store against the database.
struct CheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fsck",
        abstract: "Check every stored chunk against its hash and the database; with --repair, mend what can be.",
        discussion: "Damaged chunks are put aside (their items wait for a device to upload them again), missing ones forgotten, unreferenced ones older than an hour removed. Then every account's keys: its roster verifies, and under Standard each escrow copy opens with the escrow key file (the check of a restored key file). Exits 1 when something was wrong and not repaired. Safe while the server runs."
    )

    @OptionGroup var storage: StorageOptions
    @Flag(name: .long, help: "Mend what is found.") var repair = false
    @Option(name: .long, help: "The escrow key's file (default: escrow.key in --data's folder), to check that Standard accounts' escrow copies open with it.")
    var escrowKey: String?

    func run() async throws {
        let repair = repair
        let escrowPath = escrowKey ?? (storage.data as NSString).appendingPathComponent("escrow.key")
        let escrow = FileManager.default.fileExists(atPath: escrowPath) ? try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: escrowPath)).key : nil
        let (report, keys) = try await storage.withAdministration { admin in
            (try await admin.checkStore(repair: repair), try await admin.checkKeys(escrow: escrow))
        }
        print("checked \(report.chunksChecked) chunk(s), \(report.bytesChecked) bytes")
        func say(_ title: String, _ lines: [String]) {
            guard !lines.isEmpty else { return }
            print("\(lines.count) \(title)\(report.repaired ? " (repaired)" : ""):")
            for line in lines.prefix(20) { print("  \(line)") }
            if lines.count > 20 { print("  … and \(lines.count - 20) more") }
        }
        if let listed = report.objectsListed { print("listed \(listed) object(s) in the object store") }
        say("live pack(s) whose object is missing", report.missingPacks)
        say("object(s) no pack names, older than a day", report.unnamedObjects)
        say("damaged chunk(s)", report.damaged.map { "account \($0.account) \($0.hash) (\($0.size) bytes)" })
        say("missing chunk(s)", report.missing.map { "account \($0.account) \($0.hash) (\($0.size) bytes)" })
        say("unreferenced chunk(s)", report.unreferenced.map { "account \($0.account) \($0.hash) (\($0.size) bytes)" })
        say("chunk(s) named by uploaded items but not listed", report.unlisted.map {
            "account \($0.account) \($0.hash), e.g. \(SafeText.escaped($0.name)) (\($0.item)) in \($0.container)"
        })
        print("checked the keys of \(keys.accountsChecked) account(s) and \(keys.sealedValuesChecked) sealed key-value change(s)\(escrow == nil ? " (no escrow key file at \(escrowPath))" : "")")
        for (account, problem) in keys.problems.prefix(20) { print("  account \(SafeText.escaped(account)): \(problem)") }
        if keys.problems.count > 20 { print("  … and \(keys.problems.count - 20) more") }
        if report.isClean && keys.problems.isEmpty { print("no problems found") }
        if (!report.isClean && !report.repaired) || !keys.problems.isEmpty { throw ExitCode(1) }
    }
}
