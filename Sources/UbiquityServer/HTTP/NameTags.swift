import Foundation
import UbiquityProtocol
import UbiquitySync

extension SyncServices {
    /// The name-clash tags of plaintext updates' names, and of the names settling them would try
    /// (``PreparedCommit/nameTags``), for an account whose keys the escrow holds (Standard): a
    /// plaintext name — from a device that does not seal, or of an older build — is then
    /// compared with the sealed names of its folder, and indexed, by its tag, so that two items
    /// never share a name there whichever way each came. Empty without keys here (none set up,
    /// Advanced) or when every update is sealed or a deletion. The keys are read as
    /// ``AccountFacts`` keeps them for the device's account.
    func nameTags(of updates: [(item: String, update: ItemUpdate)], device: DeviceAuth, container: String) async -> [String: [String]] {
        let plaintext = updates.filter { $0.update.record == nil && $0.update.deleted != true }
        guard !plaintext.isEmpty, let escrow else { return [:] }
        let (database, account) = (database, device.accountId)
        // (Keys that do not open here leave the names compared as they are, as before keys.)
        guard let rootKeys = (try? await accountFacts.escrowKeys(of: device, load: { try await escrow.rootKeys(ofAccount: account, database: database) })) ?? nil,
              let records = ItemRecords.keyed(container: container, rootKeys: rootKeys, sealing: false) else { return [:] }
        var tags: [String: [String]] = [:]
        for (item, update) in plaintext {
            tags[item] = NameCollision.candidateNames(for: update.name).map { records.tag($0, parent: update.parent) }
        }
        return tags
    }
}
