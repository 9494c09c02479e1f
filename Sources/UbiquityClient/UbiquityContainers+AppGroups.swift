import Foundation

extension UbiquityContainers {
    /// The shared folder of the app group `groupIdentifier` (created on first use, mode 0700),
    /// or nil when the app is not entitled to the group (`com.apple.security.application-groups`)
    /// or the folder cannot be made. Local to this machine and user, like Apple's group
    /// containers: not synced, and the same whichever account is signed in.
    /// - Parameter groupIdentifier: One of the app's entitled group identifiers.
    public func groupContainerURL(_ groupIdentifier: String) -> URL? {
        guard UbiquityEntitlements.isValidIdentifier(groupIdentifier),
              entitlements.applicationGroupIdentifiers.contains(groupIdentifier) else { return nil }
        let folder = paths.groupContainer(groupIdentifier)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // Made by someone else with another mode: still this user's alone.
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder.path)
        } catch {
            return nil
        }
        return folder
    }
}

extension FileManager {
    /// The container folder an app group shares among the user's apps on this machine, or nil
    /// when the app is not entitled to the group (as on iOS). Created on first use, private to
    /// the user (0700), never synced. See ``UbiquityContainers/groupContainerURL(_:)``.
    /// - Parameter groupIdentifier: A group named in the app's
    ///   `com.apple.security.application-groups` entitlement.
    public func containerURL(forSecurityApplicationGroupIdentifier groupIdentifier: String) -> URL? {
        UbiquityContainers.shared.groupContainerURL(groupIdentifier)
    }
}
