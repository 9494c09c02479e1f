import ArgumentParser
import Foundation
import UbiquityAgent
import Ubiquity
import UbiquityFiles
import UbiquityKeys

/// The signed-in account's keys on this device, or a clear error.
func signedInKeys() throws -> AccountKeys {
    let paths = UbiquityPaths()
    guard let credentials = try UbiquityCredentials.load(from: paths) else {
        throw ValidationError("not signed in (ubiquity login --server URL --account NAME)")
    }
    return AccountKeys(credentials: credentials, paths: paths)
}

/// Runs `body`, turning the key refusals into a message and exit status 2.
func reportingKeyErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as KeySetupError {
        FileHandle.standardError.write(Data("\(error.description)\n".utf8))
        throw ExitCode(2)
    } catch let error as EncryptionError {
        FileHandle.standardError.write(Data("refused: \(error.description)\n".utf8))
        throw ExitCode(2)
    } catch let error as SyncClientError {
        FileHandle.standardError.write(Data("the server refused: \(error.description)\n".utf8))
        throw ExitCode(2)
    }
}

/// Prints where the account's protection stands.
func printProtection(_ status: ProtectionStatus) {
    print("protection: \(status.custody == .advanced ? "Advanced Data Protection (only the account's devices and its recovery key hold the keys)" : "Standard Data Protection (the server also holds a copy of the keys)")")
    print("epoch:      \(status.epoch)")
    print("this device: \(status.holdsCurrentKey ? "holds the current key" : "does not hold the current key")")
    print("recovery key: \(status.hasRecoveryKey ? "set" : "none")")
    print("devices:")
    for device in status.devices { print("  \(device.id)  \(device.name)\(device.isThisDevice ? "  (this device)" : "")") }
    if status.removed > 0 { print("  (\(status.removed) removed)") }
    for session in status.webSessions {
        print("  \(session.id)  a web browser let in by \(session.approver), until \(Date(timeIntervalSince1970: session.expires).formatted(date: .omitted, time: .shortened))")
    }
    // What this device seals: said plainly, above all before someone counts on Advanced.
    let configured = (try? AgentConfiguration.load(from: UbiquityPaths().agentConfiguration))?.sealedContents ?? AgentConfiguration().sealedContents
    let sealsContents = configured || status.custody == .advanced || status.sealedOnly
    let why = status.custody == .advanced ? "always under Advanced" : status.sealedOnly ? "always: the account requires it" : "this device's agent.json: sealedContents"
    print("sealed:     key-value stores" + (sealsContents ? "; documents' contents, names, types, sizes and dates (\(why))" : ""))
    print("plaintext:  " + (status.sealedOnly ? "refused: the account's devices require everything sealed (a plaintext name or value the server serves is a downgrade)"
                                              : "taken where the account stored it before it had keys (`ubiquity protection require-sealed` refuses it from then on)"))
    print(sealsContents ? "the server sees: which items there are, in which folders, of which kind, their padded sizes and when they change"
          : "not sealed by this device: documents' contents, names, types, sizes and dates (this device's agent.json says \"sealedContents\": false); the server seals them in place later with the escrow key")
}

/// `ubiquity protection status|advanced|standard`.
struct ProtectionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "protection",
        abstract: "Show or change the account's data protection: Standard (the server keeps a copy of the keys) or Advanced (only your devices and recovery key do).",
        subcommands: [Status.self, Advanced.self, Standard.self, RequireSealed.self])

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the account's protection, its devices and whether this device holds the keys.")

        func run() async throws {
            let keys = try signedInKeys()
            printProtection(try await reportingKeyErrors { try await keys.status() })
        }
    }

    struct Advanced: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Turn Advanced Data Protection on: a new key the server never sees; its copy of the old ones is destroyed.",
            discussion: """
                Under Advanced Data Protection nobody but the account's devices and its recovery key can read its data: \
                the server operator cannot restore access. If every device and the recovery key are lost, the data cannot \
                be recovered by anyone. Password sign-in no longer lets a new device in: a device of the account approves \
                it, or the recovery key does. Make a recovery key first (`ubiquity recovery-key create`).
                """)
        @Flag(name: .long, help: "Turn it on without a recovery key (if every device is lost, the data is lost).") var withoutRecoveryKey = false
        @Flag(name: .long, help: "Do not ask for confirmation.") var yes = false

        func run() async throws {
            let keys = try signedInKeys()
            let now = try await reportingKeyErrors { try await keys.status() }
            guard now.custody != .advanced else { print("Advanced Data Protection is already on"); return }
            guard now.hasRecoveryKey || withoutRecoveryKey else {
                throw ValidationError("make a recovery key first (ubiquity recovery-key create), or pass --without-recovery-key: if every device is lost, nothing else gets the data back")
            }
            print("Under Advanced Data Protection only your devices\(now.hasRecoveryKey ? " and your recovery key" : "") can read this account's data.")
            print("If you lose every device\(now.hasRecoveryKey ? " and the recovery key" : ""), nobody — not the server's operator — can recover it.")
            print("Public links made until now stop working (their addresses carry no key): share those files again afterwards.")
            if !yes {
                guard isatty(STDIN_FILENO) != 0 else { throw ValidationError("pass --yes to confirm when not at a terminal") }
                print("Type “advanced” to turn it on: ", terminator: "")
                guard readLine()?.trimmingCharacters(in: .whitespaces) == "advanced" else { throw ValidationError("not confirmed: nothing changed") }
            }
            printProtection(try await reportingKeyErrors { try await keys.setCustody(.advanced) })
        }
    }

    struct Standard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Turn Advanced Data Protection off: the server holds a copy of the keys again (web, password sign-in).")

        func run() async throws {
            let keys = try signedInKeys()
            printProtection(try await reportingKeyErrors { try await keys.setCustody(.standard) })
        }
    }
}

extension ProtectionCommand {
    struct RequireSealed: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "require-sealed",
            abstract: "Require every name and value of the account sealed, for good: a plaintext one the server serves is refused as a downgrade.",
            discussion: """
                Until then the account's devices still take what it stored before it had keys, in plaintext. Under Standard \
                the server seals that in place first; the change is refused while anything is left (an older build's key-value \
                values are sealed by a device's agent when it syncs their store). It cannot be undone: every device of the \
                account then needs a build that knows it.
                """)

        func run() async throws {
            let keys = try signedInKeys()
            printProtection(try await reportingKeyErrors { try await keys.requireSealing() })
        }
    }
}

/// `ubiquity devices list|remove`.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "The devices that hold the account's keys (its roster).",
        subcommands: [List.self, Approve.self, Remove.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the account's devices.")

        func run() async throws {
            let keys = try signedInKeys()
            let status = try await reportingKeyErrors { try await keys.status() }
            for device in status.devices { print("\(device.id)  \(device.name)\(device.isThisDevice ? "  (this device)" : "")") }
            for session in status.webSessions {
                let until = Date(timeIntervalSince1970: session.expires).formatted(date: .omitted, time: .shortened)
                print("\(session.id)  a web browser, let in by \(session.approver) until \(until) (it signs the page's changes)")
            }
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Let a new device in by the code it shows (without a code: answer the devices waiting, so that they show one).",
            discussion: """
                A device signing in to an account under Advanced Data Protection shows a code and the name of the device \
                to type it on (the one that answered it: a running agent answers at once). The code is made from both \
                devices' keys: if the server put its own key in between, the codes would differ. A web browser under \
                Advanced Data Protection shows a code the same way: approved, it joins nothing, and gets for an hour the \
                keys of the account's containers (or of each --container), sealed to it.
                """)
        @Argument(help: "The eight digits the new device (or web browser) shows.") var code: String?
        @Option(name: .long, help: "A web browser under Advanced Data Protection gets the keys of this container only (repeat for more; default: every container of the account).")
        var container: [String] = []

        func run() async throws {
            let keys = try signedInKeys()
            guard let code else {
                let answered = try await reportingKeyErrors { try await keys.answerRequests() }
                print(answered.isEmpty ? "no device is waiting for an answer" : answered.map { "answered \($0.name): it now shows a code to type here" }.joined(separator: "\n"))
                return
            }
            let only = container.isEmpty ? nil : container
            let (name, status) = try await reportingKeyErrors { try await keys.approve(code: code, containers: only) }
            print("approved \(name); the account has \(status.devices.count) devices")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a device: a new key begins, which it never gets (what it already has, it keeps).",
            discussion: "Sign the removed device's token out too, on the server: `ubiquity device revoke ID`.")
        @Argument(help: "The device's identifier (or a unique beginning of it, or its name).") var device: String

        func run() async throws {
            let keys = try signedInKeys()
            let status = try await reportingKeyErrors { try await keys.removeDevice(device) }
            print("removed; the account's key is now of epoch \(status.epoch)")
        }
    }
}

/// `ubiquity recovery-key create|use`.
struct RecoveryKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recovery-key",
        abstract: "The account's recovery key: the way back in when every device is lost.",
        subcommands: [Create.self, Use.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a recovery key (replacing any other) and print it once: write it down and keep it safe.")

        func run() async throws {
            let keys = try signedInKeys()
            let (recoveryKey, _) = try await reportingKeyErrors { try await keys.createRecoveryKey() }
            print(recoveryKey.text)
            FileHandle.standardError.write(Data("Write this key down and keep it apart from your devices: it is shown once, and nothing else can let a device in if every device is lost.\n".utf8))
        }
    }

    struct Use: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let this (signed-in) device in with the recovery key, read from standard input or asked for.")
        @Option(name: .long, help: "This device's name in the roster (default: the host name).") var deviceName: String?

        func run() async throws {
            let keys = try signedInKeys()
            let recoveryKey = try readRecoveryKey()
            let status = try await reportingKeyErrors { try await keys.useRecoveryKey(recoveryKey, deviceName: deviceName ?? ProcessInfo.processInfo.hostName) }
            printProtection(status)
        }
    }
}

/// A recovery key from standard input (or asked for at a terminal), checked before use.
func readRecoveryKey() throws -> RecoveryKey {
    let text: String
    if isatty(STDIN_FILENO) == 0 {
        guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw ValidationError("no recovery key on standard input") }
        text = line
    } else {
        guard let typed = getpass("Recovery key: ") else { throw ValidationError("no recovery key") }
        text = String(cString: typed)
    }
    do {
        return try RecoveryKey(text: text)
    } catch let error as EncryptionError {
        FileHandle.standardError.write(Data("\(error.description)\n".utf8))
        throw ExitCode(2)
    }
}
