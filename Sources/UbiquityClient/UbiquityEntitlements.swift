import Foundation
import Logging
import Synchronization

/// What an app may use of the signed-in account: its ubiquity containers (the first is the
/// default one) and its key-value store — the iCloud entitlements
/// `com.apple.developer.ubiquity-container-identifiers` and
/// `com.apple.developer.ubiquity-kvstore-identifier` — and, on this device, the folders it
/// shares with the user's other apps (`com.apple.security.application-groups`). Declare them in
/// code (``declare(_:)``) or in the app's document-types declaration file, under the same keys
/// (``init(contentsOf:)``).
public struct UbiquityEntitlements: Sendable, Equatable, Codable {
    /// The key of the container identifiers.
    public static let containersKey = "com.apple.developer.ubiquity-container-identifiers"
    /// The key of the key-value store identifier.
    public static let keyValueStoreKey = "com.apple.developer.ubiquity-kvstore-identifier"
    /// The key of the app groups.
    public static let applicationGroupsKey = "com.apple.security.application-groups"

    /// The containers (`TEAMID.com.example.app`), the default first.
    public var containerIdentifiers: [String]
    /// The key-value store's identifier, if the app uses one.
    public var keyValueStoreIdentifier: String?
    /// The app groups whose shared folders the app may use (`group.com.example.app`).
    public var applicationGroupIdentifiers: [String]

    /// Entitlements to `containers` (the default first), `keyValueStore` and `applicationGroups`.
    public init(containers: [String], keyValueStore: String? = nil, applicationGroups: [String] = []) {
        containerIdentifiers = containers
        keyValueStoreIdentifier = keyValueStore
        applicationGroupIdentifiers = applicationGroups
    }

    enum CodingKeys: String, CodingKey {
        case containerIdentifiers, keyValueStoreIdentifier, applicationGroupIdentifiers
    }

    /// Decodes entitlements (those written before app groups existed have none).
    /// - Throws: `DecodingError` when the containers are missing or mistyped.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        containerIdentifiers = try container.decode([String].self, forKey: .containerIdentifiers)
        keyValueStoreIdentifier = try container.decodeIfPresent(String.self, forKey: .keyValueStoreIdentifier)
        applicationGroupIdentifiers = try container.decodeIfPresent([String].self, forKey: .applicationGroupIdentifiers) ?? []
    }

    /// Reads the entitlements from a declarations file (JSON or a property list, like the
    /// document-types declaration file; other keys are ignored).
    /// - Throws: ``EntitlementsError`` saying what is wrong.
    public init(contentsOf url: URL) throws {
        let data: Data
        do { data = try Data(contentsOf: url) } catch {
            throw EntitlementsError(path: url.path, reason: "cannot be read (\(error.localizedDescription))")
        }
        let object: Any
        do {
            object = data.first(where: { !" \n\r\t".utf8.contains($0) }) == UInt8(ascii: "{")
                ? try JSONSerialization.jsonObject(with: data)
                : try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        } catch {
            throw EntitlementsError(path: url.path, reason: "is not JSON or a property list")
        }
        guard let root = object as? [String: Any] else { throw EntitlementsError(path: url.path, reason: "must be a dictionary at the top level") }
        guard let containers = root[Self.containersKey] as? [String], containers.allSatisfy(Self.isValidIdentifier) else {
            throw EntitlementsError(path: url.path, reason: "needs \(Self.containersKey): a list of container identifiers (letters, digits, “.”, “-”, “_”)")
        }
        let store = root[Self.keyValueStoreKey]
        guard store == nil || (store as? String).map(Self.isValidIdentifier) == true else {
            throw EntitlementsError(path: url.path, reason: "\(Self.keyValueStoreKey) must be an identifier")
        }
        let groups = root[Self.applicationGroupsKey]
        guard groups == nil || (groups as? [String])?.allSatisfy(Self.isValidIdentifier) == true else {
            throw EntitlementsError(path: url.path, reason: "\(Self.applicationGroupsKey) must be a list of group identifiers (letters, digits, “.”, “-”, “_”)")
        }
        self.init(containers: containers, keyValueStore: store as? String, applicationGroups: groups as? [String] ?? [])
    }

    /// Whether `identifier` can name a container: 1…255 of letters, digits, `.`, `-`, `_`.
    public static func isValidIdentifier(_ identifier: String) -> Bool {
        !identifier.isEmpty && identifier.utf8.count <= 255 && !identifier.hasPrefix(".")
            && identifier.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0)) }
    }

    private static let declared = Mutex<UbiquityEntitlements?>(nil)

    /// Why the file named by `UBIQUITY_ENTITLEMENTS` was last refused (logged once per reason).
    private static let refused = Mutex<EntitlementsError?>(nil)

    /// The app's entitlements: what ``declare(_:)`` set, else the file named by the
    /// `UBIQUITY_ENTITLEMENTS` environment variable, else none. A file that cannot be used
    /// grants nothing — as an app whose entitlements are wrong has no containers on Apple's
    /// systems — and says why in the log (an error, once for each reason), and in
    /// ``problem``.
    public static var current: UbiquityEntitlements {
        if let declared = declared.withLock({ $0 }) { return declared }
        return named(by: ProcessInfo.processInfo.environment)
    }

    /// The entitlements of the file `UBIQUITY_ENTITLEMENTS` names in `environment` (none if it
    /// names none, or one that cannot be used: see ``current``).
    static func named(by environment: [String: String]) -> UbiquityEntitlements {
        guard let path = environment["UBIQUITY_ENTITLEMENTS"] else { return UbiquityEntitlements(containers: []) }
        do {
            let loaded = try UbiquityEntitlements(contentsOf: URL(fileURLWithPath: path))
            refused.withLock { $0 = nil }
            return loaded
        } catch {
            let reason = error as? EntitlementsError ?? EntitlementsError(path: path, reason: "\(error)")
            let new = refused.withLock { refused -> Bool in
                defer { refused = reason }
                return refused != reason
            }
            if new {
                Logger(label: "ubiquity.entitlements").error("the entitlements file cannot be used: the app has no containers",
                                                            metadata: ["path": "\(path)", "reason": "\(reason.reason)"])
            }
            return UbiquityEntitlements(containers: [])
        }
    }

    /// Why the entitlements file named by `UBIQUITY_ENTITLEMENTS` could not be used when
    /// ``current`` last read it (nil: it could, or none is named).
    public static var problem: EntitlementsError? {
        refused.withLock { $0 }
    }

    /// Declares the app's entitlements (call it before the first ubiquity call).
    public static func declare(_ entitlements: UbiquityEntitlements) {
        declared.withLock { $0 = entitlements }
    }
}

/// An entitlements file that cannot be used.
public struct EntitlementsError: Error, CustomStringConvertible, Equatable {
    /// The file.
    public var path: String
    /// What is wrong.
    public var reason: String

    /// A sentence saying so.
    public var description: String { "the entitlements at \(path) \(reason)" }
}
