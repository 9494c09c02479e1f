import Foundation
import UbiquityKeys
import UbiquityProtocol

/// What `ubiquity fsck` found of the accounts' keys: each roster verified, and under Standard
/// each escrow copy opened with the server's escrow key — the check that a restored server (or
/// a backup of its key file) still lets the server in where Standard needs it to.
package struct KeyCheckReport: Sendable, Equatable {
    /// Accounts whose keys are set up, checked.
    package var accountsChecked = 0
    /// What is wrong, by account name (no key, no name of a file: only what failed).
    package var problems: [(account: String, problem: String)] = []

    package static func == (lhs: KeyCheckReport, rhs: KeyCheckReport) -> Bool {
        lhs.accountsChecked == rhs.accountsChecked && lhs.problems.map { "\($0.account)\u{0}\($0.problem)" } == rhs.problems.map { "\($0.account)\u{0}\($0.problem)" }
    }
}

extension ServerAdministration {
    /// Checks every account's keys: its roster verifies; under Standard, the roster names this
    /// server's escrow key and the escrow's copy of each epoch's root key opens with it (sealed by
    /// a device of the roster, for the account and epoch it is filed under).
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
            guard roster.custody == .standard, let named = roster.escrow else { continue }
            guard let escrow else {
                problem("it uses Standard Data Protection but this server has no escrow key file")
                continue
            }
            guard named == escrow.publicKeys else {
                problem("its roster names another escrow key than this server's (a key file from another server or backup?)")
                continue
            }
            let copies = Dictionary(stored.envelopes.map { ($0.epoch, $0) }, uniquingKeysWith: { $1 })
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
                    if root.epoch != UInt32(epoch) { problem("the escrow's copy filed under epoch \(epoch) holds epoch \(root.epoch)") }
                } catch {
                    problem("the escrow's copy of epoch \(epoch) does not open with this server's escrow key")
                }
            }
        }
        return report
    }
}
