import Foundation
import Synchronization
import UbiquityCoordination

/// The ubiquity containers of one user on this machine, as an app sees them: where they are,
/// which items are ubiquitous, and the agent's downloads and evictions. ``shared`` serves
/// `FileManager`'s ubiquity methods; an instance of your own (other ``UbiquityPaths``, other
/// ``UbiquityEntitlements``) suits tests and tools.
public struct UbiquityContainers: Sendable {
    /// Where this user's ubiquity data is.
    public let paths: UbiquityPaths
    /// What the app may use.
    public let entitlements: UbiquityEntitlements

    /// The containers under `paths`, as `entitlements` allow.
    public init(paths: UbiquityPaths = UbiquityPaths(), entitlements: UbiquityEntitlements = .current) {
        self.paths = paths
        self.entitlements = entitlements
    }

    /// This process's: its environment's paths and the app's declared entitlements.
    public static var shared: UbiquityContainers { UbiquityContainers(paths: UbiquityIdentity.shared.paths, entitlements: .current) }

    /// The agent that keeps these containers in step.
    public var agent: AgentConnection { AgentConnection(paths: paths) }

    /// The signed-in account's identity token, or nil.
    public var identityToken: String? { UbiquityCredentials.signedIn(in: paths)?.identityToken }

    // MARK: Containers

    /// The local folder of a container of the signed-in account (created if missing, with its
    /// `Documents` subfolder), or nil when nobody is signed in or the app is not entitled to it.
    /// `nil` asks for the app's first entitled container. The agent is told to keep it in step
    /// (if it is not running, the container syncs once it starts); coordinated reads of its
    /// items that are not downloaded wait for their download from then on.
    public func url(forContainer identifier: String?) -> URL? {
        guard let token = identityToken, let identifier = identifier ?? entitlements.containerIdentifiers.first,
              entitlements.containerIdentifiers.contains(identifier), UbiquityEntitlements.isValidIdentifier(identifier) else { return nil }
        let root = paths.container(identifier, account: token)
        do {
            try FileManager.default.createDirectory(at: root.appendingPathComponent("Documents"), withIntermediateDirectories: true)
        } catch {
            return nil
        }
        installDownloader()
        // A hint: an agent that is not running finds the container's folder when it starts.
        _ = try? agent.send(AgentRequest(.register, container: identifier), timeout: .seconds(2))
        return root
    }

    /// The container `url` is in (for the signed-in account), with the item's path in it, or nil.
    /// The name a container is shown by: the last component of its identifier
    /// (`ABCDE12345.com.example.Notes` → `Notes`).
    /// - Parameter identifier: The container's identifier.
    package static func displayName(ofContainer identifier: String) -> String {
        identifier.split(separator: ".").last.map(String.init) ?? identifier
    }

    public func location(of url: URL) -> (container: String, root: URL, relativePath: String)? {
        guard let token = identityToken else { return nil }
        let containers = paths.account(token).appendingPathComponent("containers").standardizedFileURL.path + "/"
        let path = url.standardizedFileURL.path
        guard path.hasPrefix(containers) else { return nil }
        let rest = path.dropFirst(containers.count)
        guard let identifier = rest.split(separator: "/", maxSplits: 1).first.map(String.init), !identifier.isEmpty else { return nil }
        let relative = rest.dropFirst(identifier.count).drop { $0 == "/" }
        return (identifier, URL(fileURLWithPath: containers + identifier), String(relative))
    }

    /// Whether `url` names an item kept in step: inside a container of the signed-in account,
    /// there (downloaded or as a placeholder), and not excluded from sync (a `.nosync` name).
    public func isUbiquitousItem(at url: URL) -> Bool {
        guard let location = location(of: url), !location.relativePath.isEmpty else { return false }
        if Self.isExcludedFromSync(location.relativePath) { return false }
        return FileManager.default.fileExists(atPath: url.path) || FileManager.default.fileExists(atPath: UbiquityPlaceholder.url(for: url).path)
    }

    /// Whether a path stays local: a component ends in `.nosync`.
    public static func isExcludedFromSync(_ relativePath: String) -> Bool {
        relativePath.split(separator: "/").contains { $0.hasSuffix(".nosync") }
    }

    // MARK: Moving in and out

    /// Moves an item into a container (`flag` true; `destinationURL` inside one) or out of one
    /// (`flag` false; the item inside a container, `destinationURL` outside), as a coordinated
    /// move, so presenters of the item follow it. An item moved out that is not downloaded is
    /// downloaded first.
    /// - Throws: `CocoaError` — `.fileNoSuchFile` when the item is missing,
    ///   `.fileWriteFileExists` when the destination exists, `.ubiquitousFileUnavailable` when
    ///   the locations do not fit `flag`, or nobody is signed in.
    public func setUbiquitous(_ flag: Bool, itemAt url: URL, destinationURL: URL) throws {
        let inside = location(of: destinationURL) != nil, from = location(of: url) != nil
        guard identityToken != nil else { throw Self.unavailable("nobody is signed in (ubiquity login)") }
        if flag && !inside { throw Self.unavailable("\(destinationURL.path) is not inside a ubiquity container of the signed-in account") }
        if !flag && (!from || inside) { throw Self.unavailable("moving out of a container needs an item inside one and a destination outside") }
        if !flag && !FileManager.default.fileExists(atPath: url.path) && FileManager.default.fileExists(atPath: UbiquityPlaceholder.url(for: url).path) {
            try downloadAndWait(url)
        }
        guard FileManager.default.fileExists(atPath: url.path) else { throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: url.path]) }
        guard !FileManager.default.fileExists(atPath: destinationURL.path) else {
            throw CocoaError(.fileWriteFileExists, userInfo: [NSFilePathErrorKey: destinationURL.path])
        }
        try FileManager.default.createDirectory(at: destinationURL.deletingLastPathComponent(), withIntermediateDirectories: true)
        let coordinator = NSFileCoordinator(filePresenter: nil)
        try coordinator.coordinate(reading: [], writing: [(url, .forMoving), (destinationURL, .forReplacing)]) { _, urls in
            try FileManager.default.moveItem(at: urls[0], to: urls[1])
            coordinator.item(at: urls[0], didMoveTo: urls[1])
        }
        for touched in [url, destinationURL] {
            // A hint: without an agent, the move is seen when it starts (or by its inotify watch).
            if let container = location(of: touched)?.container { _ = try? agent.send(AgentRequest(.sync, container: container), timeout: .seconds(2)) }
        }
    }

    // MARK: Downloads and evictions

    /// Publishes an uploaded flat file: the address anyone can download its current revision
    /// from, and when that stops working.
    /// - Throws: `CocoaError(.fileNoSuchFile)` if `url` is not a ubiquitous item;
    ///   `.ubiquitousFileUnavailable` if it cannot be published (a package, not uploaded yet,
    ///   no agent, no server), saying why.
    public func publish(at url: URL) throws -> (url: URL, expires: Date) {
        guard isUbiquitousItem(at: url) else { throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: url.path]) }
        do {
            guard let link = try agent.send(AgentRequest(.publish, path: url.standardizedFileURL.path), timeout: .seconds(30)).link,
                  let address = URL(string: link.url) else { throw Self.unavailable("the agent answered no link for \(url.path)") }
            return (address, Date(timeIntervalSince1970: link.expires))
        } catch let error as AgentError {
            throw Self.cocoaError(error, url)
        }
    }

    /// Asks the agent to download the item (it stays current afterwards). Returns at once;
    /// follow the download with ``resourceValues(of:)``.
    /// - Throws: `CocoaError(.fileNoSuchFile)` if `url` is not a ubiquitous item;
    ///   `.ubiquitousFileUnavailable` if the agent is not running or refuses.
    public func startDownloading(at url: URL) throws {
        guard isUbiquitousItem(at: url) else { throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: url.path]) }
        do { _ = try agent.send(AgentRequest(.download, path: url.standardizedFileURL.path)) } catch let error as AgentError {
            throw Self.cocoaError(error, url)
        }
    }

    /// Downloads the item and returns when it is on disk (what a coordinated read waits for).
    /// - Throws: like ``startDownloading(at:)``, and when the download fails.
    public func downloadAndWait(_ url: URL) throws {
        guard isUbiquitousItem(at: url) else { throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: url.path]) }
        do { _ = try agent.send(AgentRequest(.download, path: url.standardizedFileURL.path, wait: true), timeout: nil) } catch let error as AgentError {
            throw Self.cocoaError(error, url)
        }
    }

    /// Asks the agent to remove the item's local copy (its metadata stays; it downloads again
    /// on demand). Refused for an item whose changes are not all uploaded.
    /// - Throws: `CocoaError(.fileNoSuchFile)` if `url` is not a ubiquitous item;
    ///   `.ubiquitousFileUnavailable` saying why the agent refused (or is not running).
    public func evict(at url: URL) throws {
        guard isUbiquitousItem(at: url) else { throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: url.path]) }
        do { _ = try agent.send(AgentRequest(.evict, path: url.standardizedFileURL.path)) } catch let error as AgentError {
            throw Self.cocoaError(error, url)
        }
    }

    /// Makes coordinated reads of items that are not downloaded wait for their download — also
    /// of nonlocal versions' URLs — and lets `NSFileVersion` list the versions the server keeps.
    /// Each item downloads through whichever installed containers hold it (a process may serve
    /// several users' containers — tools, tests —: one's installing never takes another's away).
    public func installDownloader() {
        Self.installed.withLock { installed in
            if !installed.contains(where: { $0.paths.agentSocket == paths.agentSocket }) { installed.append(self) }
        }
        NSFileCoordinator.ubiquitousItemDownloader = { url in
            if let (item, revision) = NSFileVersion.nonlocalVersionAddress(of: url) {
                guard let holder = Self.serving(item) else { return }
                return try holder.downloadVersion(revision, ofItemAt: item)
            }
            guard let holder = Self.serving(url), FileManager.default.fileExists(atPath: UbiquityPlaceholder.url(for: url).path) else { return }
            try holder.downloadAndWait(url)
        }
        NSFileVersion.nonlocalVersionLister = { url in try Self.serving(url)?.nonlocalVersions(ofItemAt: url) }
    }

    /// The containers whose downloader was installed, each once.
    private static let installed = Mutex<[UbiquityContainers]>([])

    /// The installed containers `url` is in, if any.
    static func serving(_ url: URL) -> UbiquityContainers? {
        installed.withLock { $0 }.first { $0.location(of: url) != nil }
    }

    /// The versions of a ubiquitous item the server keeps (its earlier revisions, newest first),
    /// or nil for an item outside the containers. An item the agent does not know yet (new
    /// here, not uploaded) has none.
    /// - Throws: `CocoaError(.fileReadNoSuchFile)` for no such item; `.ubiquitousFileUnavailable`
    ///   saying why the agent or the server could not be asked.
    package func nonlocalVersions(ofItemAt url: URL) throws -> [NonlocalVersionRecord]? {
        guard let location = location(of: url), !location.relativePath.isEmpty else { return nil }
        let exists = FileManager.default.fileExists(atPath: url.path) || FileManager.default.fileExists(atPath: UbiquityPlaceholder.url(for: url).path)
        guard exists else { throw CocoaError(.fileReadNoSuchFile, userInfo: [NSFilePathErrorKey: url.path]) }
        let response: AgentResponse
        do { response = try agent.send(AgentRequest(.versions, path: url.standardizedFileURL.path), timeout: .seconds(60)) } catch let error as AgentError {
            if error.code == .unknownItem { return [] } // not synced yet: the server has no earlier revision of it
            throw Self.cocoaError(error, url)
        }
        return (response.versions ?? []).map {
            NonlocalVersionRecord(revision: $0.revision, name: $0.name, savingComputer: $0.deviceName,
                                  modificationDate: Date(timeIntervalSince1970: $0.modificationDate), size: $0.size, originator: $0.originator)
        }
    }

    /// Downloads a nonlocal version of the item at `url` into its version store (where the
    /// version's `url` points), waiting for it.
    /// - Throws: `CocoaError(.fileNoSuchFile)` for an unknown item or revision;
    ///   `.ubiquitousFileUnavailable` saying why it could not be downloaded.
    package func downloadVersion(_ revision: String, ofItemAt url: URL) throws {
        do {
            _ = try agent.send(AgentRequest(.downloadVersion, path: url.standardizedFileURL.path, revision: revision), timeout: nil)
        } catch let error as AgentError {
            throw Self.cocoaError(error, url)
        }
    }

    /// What Apple's API throws for what the agent said: an item it does not know is no such
    /// file; anything else leaves the item unavailable, saying why.
    static func cocoaError(_ error: AgentError, _ url: URL) -> CocoaError {
        if error.code == .unknownItem {
            return CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: url.path, NSLocalizedDescriptionKey: error.message])
        }
        return unavailable(error.message)
    }

    static func unavailable(_ reason: String) -> CocoaError {
        CocoaError(.ubiquitousFileUnavailable, userInfo: [NSLocalizedDescriptionKey: reason])
    }
}

extension FileManager {
    /// The local folder of a ubiquity container (created if needed), or nil when nobody is
    /// signed in or the app is not entitled to it; `nil` asks for the app's first entitled
    /// container. Documents go in its `Documents` subfolder. See ``UbiquityContainers``.
    public func url(forUbiquityContainerIdentifier containerIdentifier: String?) -> URL? {
        UbiquityContainers.shared.url(forContainer: containerIdentifier)
    }

    /// Moves an item into (`flag` true) or out of (`flag` false) a ubiquity container, coordinated.
    public func setUbiquitous(_ flag: Bool, itemAt url: URL, destinationURL: URL) throws {
        try UbiquityContainers.shared.setUbiquitous(flag, itemAt: url, destinationURL: destinationURL)
    }

    /// Whether the item is in a ubiquity container and kept in step.
    public func isUbiquitousItem(at url: URL) -> Bool {
        UbiquityContainers.shared.isUbiquitousItem(at: url)
    }

    /// Starts downloading a ubiquitous item that is not downloaded (or not current).
    public func startDownloadingUbiquitousItem(at url: URL) throws {
        try UbiquityContainers.shared.startDownloading(at: url)
    }

    /// Removes the local copy of a ubiquitous item that is uploaded, keeping it in the container.
    public func evictUbiquitousItem(at url: URL) throws {
        try UbiquityContainers.shared.evict(at: url)
    }

    /// A URL anyone can download a copy of an uploaded flat file from (the revision current
    /// now: later saves do not change what the link serves) until it expires, at most 30 days
    /// later; on return `outDate` (when not nil) holds that date.
    /// - Throws: `CocoaError(.fileNoSuchFile)` if `url` is not a ubiquitous item;
    ///   `.ubiquitousFileUnavailable` for a package, a file not uploaded yet, or no agent.
    public func url(forPublishingUbiquitousItemAt url: URL, expiration outDate: AutoreleasingUnsafeMutablePointer<NSDate?>?) throws -> URL {
        let (link, expires) = try UbiquityContainers.shared.publish(at: url)
        outDate?.pointee = expires as NSDate
        return link
    }
}

#if !_runtime(_ObjC)
/// Without the Objective-C runtime (Linux), an out-parameter of Apple's API is a plain pointer:
/// `&date` and `nil` are written exactly as on Apple's systems.
public typealias AutoreleasingUnsafeMutablePointer<Pointee> = UnsafeMutablePointer<Pointee>
#endif
