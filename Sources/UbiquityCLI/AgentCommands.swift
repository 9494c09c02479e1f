import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import Ubiquity
import UbiquityAgent

/// `ubiquity login`: registers this device with an account on a server.
struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Sign this device in to an account on a sync server.",
        discussion: "Stores the device's token in $XDG_CONFIG_HOME/ubiquity/credentials.json (mode 0600). Signing in to another account replaces the current one; its containers stay on disk, unavailable until it signs in again."
    )

    @Option(name: .long, help: "The server's URL, e.g. https://sync.example.org:8443.") var server: String
    @Option(name: .long, help: "The account's name.") var account: String
    @Option(name: .long, help: "This device's name (default: the host name).") var deviceName: String?
    @Flag(name: .long, help: "Read the password from standard input (one line) instead of asking.") var passwordStdin = false
    @Option(name: .long, help: "Under Advanced Data Protection, how long to wait for a device to answer and then to approve this one's code.") var waitSeconds = 600
    @Flag(name: .long, help: "Let this device in with the account's recovery key (asked for, or the next line of standard input): under Advanced Data Protection, when no device can approve it.") var recoveryKey = false

    func run() async throws {
        guard let url = URL(string: server), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
            throw ValidationError("--server must be an http:// or https:// URL")
        }
        let password = try readPassword(fromStandardInput: passwordStdin)
        let name = deviceName ?? ProcessInfo.processInfo.hostName
        let paths = UbiquityPaths()
        let previous = try? UbiquityCredentials.load(from: paths)
        let answer = try await SyncClient(server: url).signIn(account: account, password: password, deviceName: name, savingTo: paths)
        if let previous, previous.identityToken != answer.identityToken {
            print("signed out of \(previous.account) at \(previous.server.absoluteString)")
        }
        print("signed in to \(account) at \(url.absoluteString) as \(name) (device \(answer.deviceId))")
        // Then the account's keys: set up by its first device, joined by the others.
        let keys = AccountKeys(credentials: answer, paths: paths)
        let status = try await reportingKeyErrors {
            if recoveryKey { return try await keys.useRecoveryKey(try readRecoveryKey(), deviceName: name) }
            do {
                return try await keys.setUp(deviceName: name)
            } catch let error as KeySetupError where error.reason == .needsApproval {
                // Advanced Data Protection: a device of the account lets this one in by a code.
                say("the account uses Advanced Data Protection: asking its devices to let this one in (or sign in with --recovery-key)…")
                return try await keys.joinByCode(deviceName: name, timeout: .seconds(max(0, waitSeconds))) { pending in
                    say("On \(pending.approver), run:  ubiquity devices approve \(pending.code)")
                    say("waiting for the approval…")
                }
            }
        }
        print("\(status.custody == .advanced ? "Advanced" : "Standard") Data Protection; this device holds the account's keys (epoch \(status.epoch), \(status.devices.count) device\(status.devices.count == 1 ? "" : "s"))")
    }
}

/// Writes a line to standard output at once (a program reading it through a pipe sees it
/// while this one waits).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// `ubiquity logout`: signs this device out (its token is revoked on the server when it answers).
struct LogoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Sign this device out: its token is revoked and its containers become unavailable."
    )

    func run() async throws {
        let paths = UbiquityPaths()
        guard let credentials = try UbiquityCredentials.load(from: paths) else {
            print("not signed in")
            return
        }
        var revoked = true
        do {
            try await SyncClient(server: credentials.server, token: credentials.token).signOut()
        } catch let error as SyncClientError where error.status == 401 {
            // Already revoked or the account is gone: nothing to undo on the server.
        } catch {
            revoked = false
            FileHandle.standardError.write(Data("warning: the server did not revoke the token (\(error)); revoke it there with `ubiquity device revoke \(credentials.deviceId)`\n".utf8))
        }
        try UbiquityCredentials.remove(from: paths)
        print("signed out of \(credentials.account) at \(credentials.server.absoluteString)\(revoked ? "" : " (on this device only)")")
    }
}

/// `ubiquity status`: the account this device is signed in to, and whether the server answers.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show the signed-in account, the server's and the agent's state (containers, queues, errors).")

    func run() async throws {
        guard let credentials = try UbiquityCredentials.load(from: UbiquityPaths()) else {
            print("not signed in (ubiquity login --server URL --account NAME)")
            return
        }
        print("account:  \(credentials.account)")
        print("server:   \(credentials.server.absoluteString)")
        print("device:   \(credentials.deviceName) (\(credentials.deviceId))")
        var failed = false
        do {
            let account = try await SyncClient(server: credentials.server, token: credentials.token).account()
            print("storage:  \(account.usedBytes) of \(account.quotaBytes) bytes used")
            print("keys:     \(await Self.protection(credentials))")
        } catch let error as SyncClientError {
            print("server:   \(error.code == "unreachable" ? "unreachable" : "refused: \(error.message)")")
            failed = true
        }
        do {
            guard let status = try AgentConnection().send(AgentRequest(.status), timeout: .seconds(5)).status else { throw AgentError(.noAnswer, "no status") }
            print("agent:    running, \(status.connected ? "connected for pushes" : "not connected for pushes"), \(status.greedy ? "downloads everything" : "downloads on demand")")
            for container in status.containers {
                let when = container.lastSync.map { "last round \(String(format: "%.1f", Date().timeIntervalSince1970 - $0)) s ago" } ?? "no round yet"
                print("  \(container.identifier): \(container.items) items, \(container.queued) queued, \(container.idle ? "in step" : "syncing"), \(when)")
                print("    \(container.path)")
                for (item, error) in container.errors.sorted(by: { $0.key < $1.key }) { print("    error: \(item): \(error)") }
                for item in container.pending ?? [] where item.reason != .failed {
                    print("    pending: \(item.path): \(Self.describe(item.reason))\(item.detail.map { " (\($0))" } ?? "")")
                }
                if let count = container.pendingCount, count > (container.pending?.count ?? 0) {
                    print("    … \(count - (container.pending?.count ?? 0)) more pending")
                }
            }
            for (store, error) in (status.keyValueErrors ?? [:]).sorted(by: { $0.key < $1.key }) { print("  key-value store \(store): \(error)") }
        } catch let error as AgentError {
            print("agent:    \(error.message)")
        }
        if failed { throw ExitCode(2) }
    }

    /// The account's data protection and this device's part in it, in words (the reason when
    /// it cannot be told).
    static func protection(_ credentials: UbiquityCredentials) async -> String {
        do {
            let status = try await AccountKeys(credentials: credentials, paths: UbiquityPaths()).status()
            return "\(status.custody == .advanced ? "Advanced" : "Standard") Data Protection, "
                + (status.holdsCurrentKey ? "this device holds the current key" : "this device does not hold the current key (ubiquity protection status)")
        } catch let error as KeySetupError {
            return error.description
        } catch {
            return "cannot be checked: \(error)"
        }
    }

    /// Why an item waits, in words.
    static func describe(_ reason: PendingItem.Reason) -> String {
        switch reason {
        case .sending: "being sent to the server"
        case .waitingToSend: "waits for its previous change to be answered"
        case .uploading: "uploading"
        case .downloading: "downloading"
        case .downloadRequested: "download requested"
        case .failed: "failed"
        }
    }
}

/// `ubiquity agent`: the per-user sync agent (run it under systemd: `contrib/systemd/ubiquity-agent.service`).
struct AgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Keep this user's ubiquity containers in step with the server (one agent per user and device).",
        discussion: """
            Settings: $XDG_CONFIG_HOME/ubiquity/agent.json ({"containers": [...], "greedy": false, "rescanSeconds": 60}). \
            Containers live in $XDG_DATA_HOME/ubiquity/accounts/<identity>/containers/<id> (<identity>: the account's identity \
            token; documents in its Documents folder); \
            apps and `ubiquity ls/download/evict` talk to the agent over $XDG_RUNTIME_DIR/ubiquity/agent.sock. \
            Stops cleanly on SIGTERM or SIGINT.
            """
    )

    @Flag(name: .long, help: "Download every item at once (the Mac's behaviour) instead of on demand.") var greedy = false
    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.") var logLevel = "info"

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else { throw ValidationError("unknown log level \(logLevel)") }
        var logger = Logger(label: "ubiquity.agent")
        logger.logLevel = level
        let paths = UbiquityPaths()
        var settings = try AgentConfiguration.load(from: paths.agentConfiguration)
        if greedy { settings.greedy = true }
        let agent = Agent(paths: paths, configuration: settings, logger: logger)
        var group = ServiceGroupConfiguration(services: [.init(service: agent)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        group.maximumGracefulShutdownDuration = .seconds(10) // then what is left is cancelled: a SIGTERM always ends it
        try await ServiceGroup(configuration: group).run()
    }
}

/// `ubiquity ls CONTAINER`: a container's items with their transfer and conflict state.
struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List a container's items with their sync state (asks the agent).")

    @Argument(help: "The container's identifier.") var container: String

    func run() async throws {
        let items = try AgentConnection().send(AgentRequest(.list, container: container)).items ?? []
        if items.isEmpty { print("(no items)") }
        for item in items {
            let name = URL(fileURLWithPath: item.path).lastPathComponent
            let size = item.size.map { ByteCountFormatter.string(fromByteCount: $0, countStyle: .file) } ?? "?"
            print("\(Self.state(of: item).padding(toLength: 22, withPad: " ", startingAt: 0)) \(size.padding(toLength: 10, withPad: " ", startingAt: 0)) \(name)")
        }
    }

    /// A short description of an item's state.
    static func state(of item: UbiquityItemStatus) -> String {
        var parts: [String] = []
        if item.downloading {
            parts.append("downloading \(Int(item.percentDownloaded ?? 0))%")
        } else if !item.downloaded {
            parts.append(item.downloadRequested ? "download requested" : "not downloaded")
        } else {
            parts.append(item.current ? "current" : "downloaded")
        }
        if item.uploading { parts.append("uploading \(Int(item.percentUploaded ?? 0))%") }
        if item.conflicts > 0 { parts.append("\(item.conflicts) conflict\(item.conflicts == 1 ? "" : "s")") }
        if item.downloadingError != nil || item.uploadingError != nil { parts.append("error") }
        return parts.joined(separator: ", ")
    }
}

/// Resolves a command-line path to an absolute one.
func absolutePath(_ path: String) -> String {
    URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).standardizedFileURL.path
}

/// `ubiquity download PATH`: downloads an item now, showing progress.
struct DownloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "download", abstract: "Download a container's item now (asks the agent), showing progress.")

    @Argument(help: "The item's path (in a container's Documents folder).") var path: String

    func run() async throws {
        let agent = AgentConnection()
        let path = absolutePath(path)
        _ = try agent.send(AgentRequest(.download, path: path))
        let started = Date()
        var shown = -1
        while true {
            guard let item = try agent.send(AgentRequest(.item, path: path)).items?.first else { throw ValidationError("\(path) is gone") }
            if let error = item.downloadingError { throw ValidationError("cannot download \(path): \(error)") }
            if item.downloaded {
                if shown >= 0 { FileHandle.standardError.write(Data("\rdownloading 100%\n".utf8)) }
                print("downloaded \(path) (\(item.size ?? 0) bytes) in \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
                return
            }
            let percent = Int(item.percentDownloaded ?? 0)
            if percent != shown {
                FileHandle.standardError.write(Data("\rdownloading \(percent)%".utf8))
                shown = percent
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

/// `ubiquity evict PATH`: frees an uploaded item's local copy.
struct EvictCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "evict", abstract: "Remove an uploaded item's local copy, keeping it in the container (asks the agent).")

    @Argument(help: "The item's path (in a container's Documents folder).") var path: String

    func run() async throws {
        _ = try AgentConnection().send(AgentRequest(.evict, path: absolutePath(path)))
        print("evicted \(absolutePath(path)); it downloads again on demand")
    }
}

struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Print a link anyone can download an uploaded file's current version from, for 30 days (asks the agent).",
        discussion: """
            Under Advanced Data Protection the link ends in "#k=…": the key that opens the file, \
            which browsers never send to the server. Whoever has the whole link can download the file.
            """
    )

    @Argument(help: "The file's path (in a container's Documents folder).") var path: String

    func run() async throws {
        let answer = try AgentConnection().send(AgentRequest(.publish, path: absolutePath(path)), timeout: .seconds(120))
        guard let link = answer.link else { throw ValidationError("the agent answered no link") }
        print(link.url)
        print("expires \(ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: link.expires)))")
    }
}
