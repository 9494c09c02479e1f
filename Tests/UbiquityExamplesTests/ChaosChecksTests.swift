import Foundation
import Testing
@testable import UbiquityChaos

/// The harness's checks fail when they must: a database row a device committed and another
/// lacks, a value no device wrote, a device still waiting for a log, a torn save, a ledger
/// killed mid-step. (A harness that cannot fail proves nothing; `ChaosHarnessTests` shows it
/// for a file lost end to end.)
@Suite struct ChaosChecksTests {
    struct Device: CheckedDevice {
        var name: String
        var root: URL? { nil }
        var account = "ada"
    }

    let devices = [Device(name: "device0"), Device(name: "device1")]

    private func entry(_ device: String, _ step: Int, _ operation: LedgerEntry.Operation, _ path: String, sha: String? = nil, value: String? = nil) -> LedgerEntry {
        LedgerEntry(device: device, step: step, operation: operation, path: path, sha256: sha, value: value, via: nil, time: Double(step))
    }

    @Test func databasesThatAgreeAndHoldEveryCommittedRowPass() {
        let models = [LedgerModel([entry("device0", 1, .row, "note/device0-1", value: "a"), entry("device0", 2, .row, "tally/t0", value: "a")]),
                      LedgerModel([entry("device1", 1, .row, "note/device1-1", value: "b"), entry("device1", 2, .row, "note/device1-1", value: nil)])]
        let rows = ["note/device0-1": "a", "tally/t0": "a"]
        var checks = Checks(devices: devices)
        checks.checkDatabases([DatabaseState(rows: rows), DatabaseState(rows: rows)], models: models)
        #expect(checks.violations.isEmpty && checks.lost == 0 && checks.expected == 1, "\(checks.violations)")
    }

    @Test func aMissingRowAnInventedValueAndAWaitingLogAreViolations() {
        let models = [LedgerModel([entry("device0", 1, .row, "note/device0-1", value: "a")]),
                      LedgerModel([entry("device1", 1, .row, "note/device1-1", value: "b"), entry("device1", 2, .row, "note/device1-1", value: nil)])]
        var checks = Checks(devices: devices)
        checks.checkDatabases([DatabaseState(rows: ["note/device0-1": "a", "note/device1-1": "b", "tally/t1": "zzz"]),
                               DatabaseState(rows: [:], waiting: ["d9": "segment 3 not here yet"], differences: ["note/x"])], models: models)
        let kinds = checks.violations.map(\.kind)
        #expect(checks.lost == 1, "device0's note absent on device1")
        #expect(kinds.filter { $0 == "lost" }.count == 1)
        #expect(kinds.contains("diverged") && kinds.contains("unexpected"), "rows differ; a deleted row is still on device0: \(checks.violations)")
        #expect(checks.violations.contains { $0.kind == "database" && $0.detail.contains("tally/t1 = zzz") }, "a value no device committed")
        #expect(checks.violations.contains { $0.kind == "database" && $0.detail.contains("waits for d9") })
        #expect(checks.violations.contains { $0.kind == "database" && $0.detail.contains("disagrees with its logs") })
    }

    @Test func aTornSaveIsAViolation() {
        let models = [LedgerModel([entry("device0", 1, .write, "Documents/device0/a.txt", sha: "1111"),
                                   entry("device0", 2, .torn, "Documents/device0/a.txt", sha: "2222"),
                                   entry("device0", 2, .observe, "Documents/device0/a.txt", sha: "2222")]),
                      LedgerModel()]
        var checks = Checks(devices: devices)
        let snapshot = { () -> Snapshot in var snapshot = Snapshot(); snapshot.files = ["Documents/device0/a.txt": "2222"]; return snapshot }()
        checks.checkOwnedFiles([snapshot, snapshot], models: models)
        #expect(checks.violations.map(\.kind) == ["torn"], "\(checks.violations)")
    }

    /// With a folder shared between accounts, each account's devices hold the same as each
    /// other (not as the other account's), and every account the same shared folder.
    @Test func accountsAreComparedOnTheirOwnFilesAndOnTheSharedFolder() {
        let devices = [Device(name: "device0"), Device(name: "device1", account: "bob")]
        func snapshot(_ files: [String: String]) -> Snapshot {
            var snapshot = Snapshot()
            snapshot.files = files
            snapshot.folders = [Layout.shared]
            return snapshot
        }
        let ada = snapshot(["Documents/device0/a.txt": "1111", "Documents/shared/note-0.txt": "2222"])
        let bob = snapshot(["Documents/device1/b.txt": "3333", "Documents/shared/note-0.txt": "2222"])
        var checks = Checks(devices: devices)
        checks.checkTrees([ada, bob])
        #expect(checks.violations.isEmpty && Snapshot.agree([ada, bob], accounts: ["ada", "bob"]), "\(checks.violations)")
        var apart = bob
        apart.files["Documents/shared/note-0.txt"] = "4444"
        checks = Checks(devices: devices)
        checks.checkTrees([ada, apart])
        #expect(checks.violations.map(\.kind) == ["diverged"] && !Snapshot.agree([ada, apart], accounts: ["ada", "bob"]), "\(checks.violations)")
        #expect(!Snapshot.agree([ada, bob], accounts: ["ada", "ada"]), "one account's devices hold the same")
    }

    @Test func anIntentLastInTheLedgerDoesNotCountAsAnEdit() {
        let model = LedgerModel([entry("device0", 1, .write, "Documents/device0/a.txt", sha: "1111"),
                                 entry("device0", 2, .intent, "Documents/device0/a.txt", sha: "2222")])
        #expect(model.files == ["Documents/device0/a.txt": "1111"], "what a step meant to write is not what it wrote")
    }
}
