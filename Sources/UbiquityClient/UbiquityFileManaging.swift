import Foundation

/// `FileManager`'s ubiquity calls as a protocol, for an app that mocks them in its tests.
///
/// On Apple's platforms an app's tests can subclass `FileManager` and override these methods.
/// On Linux they are declared in an extension of `FileManager` (swift-corelibs-foundation has
/// none of them), and Swift lets a subclass override only what a class declares: write the
/// app's code against `any UbiquityFileManaging` instead, pass `FileManager.default` in the
/// app, and a mock of your own in its tests.
///
/// ```swift
/// final class Library {
///     let files: any UbiquityFileManaging
///     init(files: any UbiquityFileManaging = FileManager.default) { self.files = files }
///     var documents: URL? { files.url(forUbiquityContainerIdentifier: nil)?.appendingPathComponent("Documents") }
/// }
/// ```
public protocol UbiquityFileManaging: AnyObject {
    /// See `FileManager.url(forUbiquityContainerIdentifier:)`.
    func url(forUbiquityContainerIdentifier containerIdentifier: String?) -> URL?
    /// See `FileManager.ubiquityIdentityToken`.
    var ubiquityIdentityToken: (any NSCoding & NSCopying & NSObjectProtocol)? { get }
    /// See `FileManager.setUbiquitous(_:itemAt:destinationURL:)`.
    func setUbiquitous(_ flag: Bool, itemAt url: URL, destinationURL: URL) throws
    /// See `FileManager.isUbiquitousItem(at:)`.
    func isUbiquitousItem(at url: URL) -> Bool
    /// See `FileManager.startDownloadingUbiquitousItem(at:)`.
    func startDownloadingUbiquitousItem(at url: URL) throws
    /// See `FileManager.evictUbiquitousItem(at:)`.
    func evictUbiquitousItem(at url: URL) throws
    /// See `FileManager.url(forPublishingUbiquitousItemAt:expiration:)`.
    func url(forPublishingUbiquitousItemAt url: URL, expiration outDate: AutoreleasingUnsafeMutablePointer<NSDate?>?) throws -> URL
    /// See `FileManager.containerURL(forSecurityApplicationGroupIdentifier:)`.
    func containerURL(forSecurityApplicationGroupIdentifier groupIdentifier: String) -> URL?
}

extension FileManager: UbiquityFileManaging {}
