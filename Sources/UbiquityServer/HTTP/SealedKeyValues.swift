import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol

extension KeyValueEntry {
    /// An entry from its stored columns: `stored` is a value's JSON (empty beside a sealed value,
    /// nil for a removal), `sealed` the change as its device sealed it.
    init(stored: Data?, sealed: Data?, key: String, timestamp: Double, deviceName: String, sequence: Int64) throws {
        if let sealed {
            self.init(key: key, timestamp: timestamp, deviceName: deviceName, sequence: sequence)
            self.sealed = sealed
            removed = stored == nil
        } else {
            self.init(key: key, value: try stored.map { try JSONDecoder().decode(PropertyListValue.self, from: $0) },
                      timestamp: timestamp, deviceName: deviceName, sequence: sequence)
        }
    }
}

extension ServerEscrow {
    /// The root keys the escrow holds for an account (Standard custody), opened for one
    /// request and forgotten with it: nil under Advanced, or for an account with no roster.
    /// - Throws: ``SyncError`` when the stored roster does not read or an envelope does not open.
    func rootKeys(ofAccount accountId: Int64, database: any SyncDatabase) async throws -> [AccountRootKey]? {
        let stored = try await database.accountKeys(accountId: accountId, recipients: [EscrowKey.escrowRecipient])
        guard !stored.roster.isEmpty, let account = try await database.identityToken(ofAccount: accountId) else { return nil }
        do {
            let entries = try stored.roster.map { try RosterEntry(encoded: $0) }
            guard try Roster.verify(entries).custody == .standard else { return nil }
            return try key.rootKeys(roster: entries, envelopes: stored.envelopes.map { (UInt32(clamping: $0.epoch), $0.sender, $0.body) }, account: account)
        } catch let error as EncryptionError {
            throw SyncError(.conflict, "escrowUnusable", "the account's keys do not open with this server's escrow: \(error)")
        }
    }
}

/// Key-value entries opened for the web interface (Standard custody): sealed values opened with
/// the escrow's keys, plaintext ones as they are.
struct OpenedKeyValues {
    /// The values, each under its key as the app named it.
    var entries: [KeyValueEntry] = []
    /// Sealed values the server could not open (Advanced custody, or damaged).
    var sealed = 0

    /// Opens `entries` of `store`: removals left out.
    init(_ entries: [KeyValueEntry], store: String, rootKeys: [AccountRootKey]?, logger: Logger) {
        let keys = rootKeys.flatMap { try? KeyValueKeys(store: store, rootKeys: $0) }
        for entry in entries {
            guard let sealedChange = entry.sealed else {
                if entry.value != nil { self.entries.append(entry) }
                continue
            }
            guard entry.removed != true else { continue }
            guard let keys else {
                sealed += 1
                continue
            }
            do {
                let opened = try keys.open(sealedChange, storedName: entry.key)
                guard let bytes = opened.value else { continue }
                var plain = entry
                plain.key = opened.key
                plain.value = try JSONDecoder().decode(PropertyListValue.self, from: bytes)
                plain.sealed = nil
                plain.removed = nil
                self.entries.append(plain)
            } catch {
                sealed += 1
                logger.warning("a sealed key-value change did not open with the escrow's keys", metadata: ["store": "\(store)", "error": "\(error)"])
            }
        }
    }
}
