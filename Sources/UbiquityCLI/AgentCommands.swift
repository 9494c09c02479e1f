import ArgumentParser
import Foundation
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

    func run() async throws {
        guard let url = URL(string: server), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
            throw ValidationError("--server must be an http:// or https:// URL")
        }
        let password = try readPassword(fromStandardInput: passwordStdin)
        let name = deviceName ?? ProcessInfo.processInfo.hostName
        let paths = UbiquityPaths()
        let previous = try? UbiquityCredentials.load(from: paths)
        let answer = try await SyncClient(server: url).signIn(account: account, password: password, deviceName: name)
        try UbiquityCredentials(server: url, account: account, deviceId: answer.deviceId, deviceName: name,
                                token: answer.token, identityToken: answer.identityToken).save(to: paths)
        if let previous, previous.identityToken != answer.identityToken {
            print("signed out of \(previous.account) at \(previous.server.absoluteString)")
        }
        print("signed in to \(account) at \(url.absoluteString) as \(name) (device \(answer.deviceId))")
    }
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
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show the signed-in account and the server's state.")

    func run() async throws {
        guard let credentials = try UbiquityCredentials.load(from: UbiquityPaths()) else {
            print("not signed in (ubiquity login --server URL --account NAME)")
            return
        }
        print("account:  \(credentials.account)")
        print("server:   \(credentials.server.absoluteString)")
        print("device:   \(credentials.deviceName) (\(credentials.deviceId))")
        do {
            let account = try await SyncClient(server: credentials.server, token: credentials.token).account()
            print("storage:  \(account.usedBytes) of \(account.quotaBytes) bytes used")
        } catch let error as SyncClientError {
            print("server:   \(error.code == "unreachable" ? "unreachable" : "refused: \(error.message)")")
            throw ExitCode(2)
        }
    }
}
