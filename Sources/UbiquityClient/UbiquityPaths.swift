import Foundation

/// Where a user's ubiquity data lives on this machine, by the XDG base directories:
/// configuration (the signed-in account) in `$XDG_CONFIG_HOME/ubiquity` (default
/// `~/.config/ubiquity`), containers and the agent's state in `$XDG_DATA_HOME/ubiquity`
/// (default `~/.local/share/ubiquity`), the agent's socket in `$XDG_RUNTIME_DIR` when set.
public struct UbiquityPaths: Sendable, Equatable {
    /// `…/ubiquity` under the configuration directory.
    public var configuration: URL
    /// `…/ubiquity` under the data directory.
    public var data: URL
    /// Where the agent's socket lives: `$XDG_RUNTIME_DIR/ubiquity` when set, else `…/run` under ``data``.
    public var runtime: URL

    /// The paths for `environment` (default: this process's).
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let home = environment["HOME"].map { URL(fileURLWithPath: $0) } ?? FileManager.default.homeDirectoryForCurrentUser
        func base(_ variable: String, _ fallback: String) -> URL {
            // XDG: a relative path in the variable is invalid and ignored.
            if let value = environment[variable], value.hasPrefix("/") { return URL(fileURLWithPath: value) }
            return home.appendingPathComponent(fallback)
        }
        configuration = base("XDG_CONFIG_HOME", ".config").appendingPathComponent("ubiquity")
        data = base("XDG_DATA_HOME", ".local/share").appendingPathComponent("ubiquity")
        if let value = environment["XDG_RUNTIME_DIR"], value.hasPrefix("/") {
            runtime = URL(fileURLWithPath: value).appendingPathComponent("ubiquity")
        } else {
            runtime = data.appendingPathComponent("run")
        }
    }

    /// Explicit directories (tests, or several "devices" on one machine).
    public init(configuration: URL, data: URL, runtime: URL? = nil) {
        self.configuration = configuration
        self.data = data
        self.runtime = runtime ?? data.appendingPathComponent("run")
    }

    /// The agent's local socket (in a folder only this user can enter).
    public var agentSocket: URL { runtime.appendingPathComponent("agent.sock") }

    /// The agent's settings (``AgentConfiguration``).
    public var agentConfiguration: URL { configuration.appendingPathComponent("agent.json") }

    /// The signed-in account's credentials file (mode 0600).
    public var credentials: URL { configuration.appendingPathComponent("credentials.json") }

    /// The device's keys for the signed-in account: its device keys, the roster head it pinned
    /// and the account's root keys it holds (mode 0600).
    public var keyring: URL { configuration.appendingPathComponent("keyring.json") }
    /// The sharing identities of other accounts this account's device pinned (docs/Sharing.md, "Keys").
    public var sharingPins: URL { configuration.appendingPathComponent("sharing-pins.json") }

    /// Everything kept for one account, apart from every other account's: named by the
    /// account's identity token, so signing in to another account shows none of it.
    public func account(_ identityToken: String) -> URL {
        data.appendingPathComponent("accounts").appendingPathComponent(String(identityToken.prefix(32)))
    }

    /// A container's local folder for an account (the analogue of
    /// `~/Library/Mobile Documents/<container>`); documents go in its `Documents` subfolder.
    public func container(_ identifier: String, account identityToken: String) -> URL {
        account(identityToken).appendingPathComponent("containers").appendingPathComponent(identifier)
    }

    /// The folder an app group shares among the user's apps on this machine (the analogue of
    /// `~/Library/Group Containers/<group>`): local, never synced, the same whoever is signed in.
    public func groupContainer(_ groupIdentifier: String) -> URL {
        data.appendingPathComponent("Group Containers").appendingPathComponent(groupIdentifier)
    }
}
