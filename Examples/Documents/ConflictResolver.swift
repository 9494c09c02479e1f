import Foundation
import Ubiquity

/// The guide's text editor's way of resolving a version conflict (its Listings 6-1 to 6-3),
/// without the user interface: show the current version and every unresolved conflict version,
/// let the user pick one, and tell the system the conflict is resolved.
@MainActor
package struct ConflictResolver {
    /// The document in conflict.
    package let document: Document

    /// Creates a resolver for a document.
    /// - Parameter document: The document whose state says `.inConflict`.
    package init(document: Document) { self.document = document }

    /// Listing 6-1's test: whether the document is in conflict (the "Resolve Conflicts" button shows).
    package var isInConflict: Bool { document.documentState.contains(.inConflict) }

    /// What the resolver's pages show: the current version first, then every unresolved conflict version.
    package var choices: [NSFileVersion] {
        let current = NSFileVersion.currentVersionOfItem(at: document.fileURL).map { [$0] } ?? []
        return current + (NSFileVersion.unresolvedConflictVersionsOfItem(at: document.fileURL) ?? [])
    }

    /// Listing 6-3: the user picked `version`. A conflict version replaces the file (in a
    /// coordinated write) and the document reverts to it; either way every other version is
    /// removed and every conflict version marked resolved, last.
    /// - Parameter version: One of ``choices``.
    /// - Throws: What replacing the file or removing the versions throws; the document is then
    ///   still in conflict and nothing is lost.
    package func resolve(keeping version: NSFileVersion) async throws {
        let url = document.fileURL
        let conflicts = NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? []
        if version.isConflict { // (the choices are the current version and the conflict versions)
            let coordinator = NSFileCoordinator(filePresenter: document)
            try await coordinator.write(itemAt: url, options: .forReplacing) { url in
                _ = try version.replaceItem(at: url)
            }
            try NSFileVersion.removeOtherVersionsOfItem(at: url)
            _ = await document.revert(toContentsOf: url)
        } else {
            try NSFileVersion.removeOtherVersionsOfItem(at: url)
        }
        for conflict in conflicts { try conflict.setResolved(true) }
    }
}
