import Foundation
import Logging
import Synchronization
import UbiquityFiles

extension NSNotification.Name {
    /// Posted (on the default notification center, object the default file manager, no
    /// user info) after the ubiquity identity changes: the user signed in, out, or to another
    /// account. Read the new ``Foundation/FileManager/ubiquityIdentityToken`` then.
    public static let NSUbiquityIdentityDidChange = NSNotification.Name("NSUbiquityIdentityDidChangeNotification")
}

extension FileManager {
    /// An opaque token for the signed-in account (equal tokens: the same account), or nil when
    /// this user is not signed in (`ubiquity login`). Fast: it reads one small file. Reading it
    /// also starts watching for sign-in changes, posted as ``NSNotification/Name/NSUbiquityIdentityDidChange``.
    public var ubiquityIdentityToken: (any NSCoding & NSCopying & NSObjectProtocol)? {
        UbiquityIdentity.shared.token.map { NSString(string: $0) }
    }
}

/// Watches the signed-in account's identity for one set of ``UbiquityPaths``: ``token`` reads
/// it; a change (sign-in, sign-out, another account) is posted as
/// ``NSNotification/Name/NSUbiquityIdentityDidChange`` once ``startWatching()`` ran (the first
/// read of ``token`` starts it). Changes are seen through inotify on the configuration folder
/// (where `ubiquity login` writes the credentials); where inotify cannot be used, by a `stat` of
/// the credentials file every half second.
public final class UbiquityIdentity: Sendable {
    /// For this process's environment (what `FileManager.default.ubiquityIdentityToken` uses).
    public static let shared = UbiquityIdentity(paths: UbiquityPaths())

    /// The paths watched.
    public let paths: UbiquityPaths
    private let notificationCenter: NotificationCenter
    private let state = Mutex<(stamp: String?, token: String?, watching: Watching?)>((nil, nil, nil))

    /// How changes are followed.
    private enum Watching {
        case events(DirectoryWatcher)
        case polling(any DispatchSourceTimer)

        func stop() {
            switch self {
            case .events(let watcher): watcher.stop()
            case .polling(let timer): timer.cancel()
            }
        }
    }

    /// Watches the credentials under `paths`, posting to `notificationCenter`.
    public init(paths: UbiquityPaths, notificationCenter: NotificationCenter = .default) {
        self.paths = paths
        self.notificationCenter = notificationCenter
    }

    deinit { state.withLock { $0.watching?.stop() } }

    /// The signed-in account's identity token, or nil (also nil when the credentials cannot be read).
    public var token: String? {
        startWatching()
        return refresh().token
    }

    /// Starts following sign-in changes (idempotent).
    public func startWatching() {
        state.withLock { state in
            guard state.watching == nil else { return }
            state.stamp = Self.stamp(paths)
            state.token = UbiquityCredentials.signedIn(in: paths)?.identityToken
            let changed: @Sendable () -> Void = { [weak self] in
                guard let self else { return }
                let (changed, _) = self.refresh()
                if changed { self.notificationCenter.post(name: .NSUbiquityIdentityDidChange, object: FileManager.default) }
            }
            do {
                // Private like the credentials (`ubiquity login` makes it so too).
                try FileManager.default.createDirectory(at: paths.configuration, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                state.watching = .events(try DirectoryWatcher(root: paths.configuration) { _ in changed() })
            } catch {
                Logger(label: "ubiquity.identity").warning("cannot watch the configuration folder; checking the sign-in every half second",
                                                          metadata: ["folder": "\(paths.configuration.path)", "error": "\(error)"])
                let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
                timer.schedule(deadline: .now() + .milliseconds(500), repeating: .milliseconds(500), leeway: .milliseconds(100))
                timer.setEventHandler(handler: changed)
                timer.resume()
                state.watching = .polling(timer)
            }
        }
    }

    /// Re-reads the identity if the file changed; returns whether the token changed, and the token.
    @discardableResult
    func refresh() -> (changed: Bool, token: String?) {
        let stamp = Self.stamp(paths)
        return state.withLock { state in
            guard stamp != state.stamp else { return (false, state.token) }
            state.stamp = stamp
            let token = UbiquityCredentials.signedIn(in: paths)?.identityToken
            defer { state.token = token }
            return (token != state.token, token)
        }
    }

    /// What identifies the credentials file's present version: inode, size and change time.
    static func stamp(_ paths: UbiquityPaths) -> String? {
        var info = stat()
        guard stat(paths.credentials.path, &info) == 0 else { return nil }
        return "\(info.st_ino):\(info.st_size):\(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec)"
    }
}
