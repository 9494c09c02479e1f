import ArgumentParser
import Foundation
import UbiquityKeys
import UbiquityServer

/// `ubiquity seal-in-place`: what `ubiquity serve` also does every ten minutes, now.
struct SealInPlaceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "seal-in-place",
        abstract: "Seal what Standard accounts stored before their containers sealed: names, sizes and dates into sealed records, plaintext chunks sealed.",
        discussion: """
            Uses the escrow key (Standard Data Protection): accounts under Advanced are left to their devices. Nothing is uploaded \
            again and devices need nothing new. Safe while the server runs; stop it at any time and run it again to go on. \
            Exits 1 when something was left (a chunk missing or damaged: `ubiquity fsck --repair` first).
            """
    )

    @OptionGroup var storage: StorageOptions
    @Option(name: .long, help: "Only this account.") var account: String?
    @Option(name: .long, help: "The escrow key's file (default: escrow.key in --data's folder).") var escrowKey: String?
    @Option(name: .long, help: "Leave revisions younger than this many minutes (a device of an older build may still edit from them).")
    var settleMinutes = 0.0

    func run() async throws {
        let path = escrowKey ?? (storage.data as NSString).appendingPathComponent("escrow.key")
        guard FileManager.default.fileExists(atPath: path) else {
            throw ValidationError("no escrow key file at \(path): point --escrow-key at the one `ubiquity serve` made")
        }
        let escrow = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: path)).key
        let (account, settle) = (account, settleMinutes * 60)
        let report = try await storage.withAdministration { admin in
            try await admin.sealInPlace(escrow: escrow, account: account, settle: settle) { report in
                print("… \(report.revisions) revision(s), \(report.chunks) chunk(s) sealed, \(report.bytes) bytes")
            }
        }
        print("sealed \(report.revisions) revision(s) of \(report.accounts) account(s) under Standard; \(report.chunks) chunk(s) sealed (\(report.bytes) bytes), \(report.removed) plaintext chunk(s) removed"
              + (report.skipped > 0 ? "; \(report.skipped) account(s) under Advanced left to their devices" : ""))
        for problem in report.problems.prefix(20) { print("  \(problem)") }
        if report.left > 0 {
            print("\(report.left) revision(s) left unsealed")
            throw ExitCode(1)
        }
    }
}
