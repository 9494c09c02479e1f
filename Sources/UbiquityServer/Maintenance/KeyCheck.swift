import Foundation
import UbiquityKeys
import UbiquityProtocol

/// What `ubiquity fsck` found of the accounts' keys: each roster verified, and under Standard
/// each escrow copy opened with the server's escrow key — the check that a restored server (or
/// a backup of its key file) still lets the server in where Standard needs it to.
package struct KeyCheckReport: Sendable, Equatable {
    /// Accounts whose keys are set up, checked.
    package var accountsChecked = 0
    /// Sealed key-value changes checked (opened with the escrow's keys under Standard; their
    /// form and epoch under Advanced).
    package var sealedValuesChecked = 0
    /// What is wrong, by account name (no key, no name of a file: only what failed).
    package var problems: [(account: String, problem: String)] = []

    package static func == (lhs: KeyCheckReport, rhs: KeyCheckReport) -> Bool {
        lhs.accountsChecked == rhs.accountsChecked && lhs.sealedValuesChecked == rhs.sealedValuesChecked && lhs.problems.map { "\($0.account)\u{0}\($0.problem)" } == rhs.problems.map { "\($0.account)\u{0}\($0.problem)" }
    }
}

extension ServerAdministration {
    /// Checks every account's keys: its roster verifies; under Standard, the roster names this
    /// server's escrow key and the escrow's copy of each epoch's root key opens with it (sealed by
    /// a device of the roster, for the account and epoch it is filed under). Then its sealed
    /// key-value changes: under Standard each opens with the escrow's keys (one that does not is
    /// damaged: devices would refuse it); under Advanced each has the form of one and an epoch
    /// the roster has reached.
    /// - Parameter escrow: The server's escrow key (nil: none found, which is itself a problem
    ///   for a Standard account).
    package func checkKeys(escrow: EscrowKey?) async throws -> KeyCheckReport {
        var report = KeyCheckReport()
        for account in try await database.accounts() {
            let stored = try await database.accountKeys(accountId: account.id, recipients: [KeyEnvelopeRecord.escrowRecipient])
            guard !stored.roster.isEmpty else { continue }
            report.accountsChecked += 1
            func problem(_ text: String) { report.problems.append((account.name, text)) }
            let roster: Roster
            do { roster = try Roster.verify(try stored.roster.map { try RosterEntry(encoded: $0) }) } catch {
                problem("its roster does not verify: \(error)")
                continue
            }
            guard roster.custody == .standard, let named = roster.escrow else {
                let (checked, found) = try await checkSealedValues(of: account.id, roster: roster, rootKeys: nil)
                report.sealedValuesChecked += checked
                found.forEach(problem)
                continue
            }
            guard let escrow else {
                problem("it uses Standard Data Protection but this server has no escrow key file")
                continue
            }
            guard named == escrow.publicKeys else {
                problem("its roster names another escrow key than this server's (a key file from another server or backup?)")
                continue
            }
            let copies = Dictionary(stored.envelopes.map { ($0.epoch, $0) }, uniquingKeysWith: { $1 })
            var rootKeys: [AccountRootKey] = []
            for epoch in 0...Int64(roster.epoch) {
                guard let copy = copies[epoch] else {
                    problem("the escrow holds no copy of epoch \(epoch)")
                    continue
                }
                guard let sender = roster.everyDevice[copy.sender] else {
                    problem("the escrow's copy of epoch \(epoch) was sealed by no device of the roster")
                    continue
                }
                do {
                    let root = try KeyEnvelope.open(copy.body, account: account.identityToken, recipient: escrow.keys, sender: sender)
                    if root.epoch != UInt32(epoch) { problem("the escrow's copy filed under epoch \(epoch) holds epoch \(root.epoch)") } else { rootKeys.append(root) }
                } catch {
                    problem("the escrow's copy of epoch \(epoch) does not open with this server's escrow key")
                }
            }
            let (checked, found) = try await checkSealedValues(of: account.id, roster: roster, rootKeys: rootKeys.count == Int(roster.epoch) + 1 ? rootKeys : nil)
            report.sealedValuesChecked += checked
            found.forEach(problem)
        }
        return report
    }

    /// Checks the account's sealed key-value changes: opened with `rootKeys` when the server
    /// holds them (Standard), else their form and epoch only.
    /// - Returns: How many were checked, and what is wrong.
    private func checkSealedValues(of account: Int64, roster: Roster, rootKeys: [AccountRootKey]?) async throws -> (checked: Int, problems: [String]) {
        var checked = 0, problems: [String] = []
        for store in try await database.keyValueStores(ofAccount: account) {
            let keys = try rootKeys.map { try KeyValueKeys(store: store.identifier, rootKeys: $0) }
            var damaged = 0
            for entry in try await database.keyValueChanges(accountId: account, store: store.identifier, since: 0).entries {
                guard let sealed = entry.sealed else { continue }
                checked += 1
                if let keys {
                    if (try? keys.open(sealed, storedName: entry.key)) == nil { damaged += 1 }
                } else if KeyValueKeys.epoch(of: sealed).map({ $0 > roster.epoch }) ?? true || sealed.first != KeyValueKeys.format
                            || sealed.count < KeyValueKeys.minimumSealedSize {
                    damaged += 1
                }
            }
            if damaged > 0 {
                let one = damaged == 1
                problems.append("\(damaged) sealed value\(one ? "" : "s") of key-value store \(store.identifier) "
                                + (rootKeys == nil ? (one ? "is malformed" : "are malformed") : (one ? "does not open" : "do not open") + " with the escrow's keys")
                                + " (damaged: devices refuse \(one ? "it" : "them"))")
            }
        }
        return (checked, problems)
    }
}
