import Foundation
import GRDB
import Ubiquity
import UbiquityFiles

/// What one device's container holds, as the checks compare it.
struct Snapshot: Equatable, Sendable {
    /// Files: path relative to the container → SHA-256.
    var files: [String: String] = [:]
    /// Folders (relative paths).
    var folders: Set<String> = []
    /// Temporary files left behind (a save's or a download's; an app's killed mid-save, which
    /// its device's agent removes), which must not outlive quiet.
    var strays: [String] = []
    /// Items known by metadata only (greedy agents download everything).
    var placeholders: [String] = []
    /// Per path, the SHA-256s of its unresolved conflict versions.
    var conflicts: [String: Set<String>] = [:]

    /// Reads `root` (the versions folder apart: versions are read through `NSFileVersion`).
    init(root: URL) {
        guard let names = FileManager.default.enumerator(atPath: root.path) else { return }
        while let path = names.nextObject() as? String {
            let name = (path as NSString).lastPathComponent
            let url = root.appendingPathComponent(path)
            if name == ".ubiquity-versions" {
                // Versions are read through `NSFileVersion`; what is staged there must be gone.
                for leftover in (try? FileManager.default.contentsOfDirectory(atPath: url.appendingPathComponent(".staging").path)) ?? [] {
                    strays.append(path + "/.staging/" + leftover)
                }
                names.skipDescendants()
                continue
            }
            if name.hasPrefix(".ubiquity-") || SafeSave.isTemporaryName(name) || Leftovers.isTemporary(name) {
                strays.append(path)
                names.skipDescendants()
                continue
            }
            if name.hasSuffix(".nosync") {
                // Stays on its device (a database's local store): not compared.
                names.skipDescendants()
                continue
            }
            if UbiquityPlaceholder.itemName(ofPlaceholder: name) != nil {
                placeholders.append(path)
                continue
            }
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) else { continue }
            if isFolder.boolValue {
                folders.insert(path)
            } else if let data = FileManager.default.contents(atPath: url.path) {
                files[path] = sha256(data)
                if let versions = NSFileVersion.unresolvedConflictVersionsOfItem(at: url), !versions.isEmpty {
                    conflicts[path] = Set(versions.compactMap { FileManager.default.contents(atPath: $0.url.path).map(sha256) })
                }
            }
        }
        strays.sort()
        placeholders.sort()
    }

    init() {}

    /// What of it is in the shared folder (what another account that takes part in it holds too).
    var shared: Snapshot {
        var part = Snapshot()
        part.files = files.filter { Layout.isShared($0.key) }
        part.folders = folders.filter { $0 == Layout.shared || Layout.isShared($0) }
        part.conflicts = conflicts.filter { Layout.isShared($0.key) }
        return part
    }

    /// Whether every device holds the same as the others of its account, and every account the
    /// same shared folder (`accounts`: each device's).
    static func agree(_ snapshots: [Snapshot], accounts: [String]) -> Bool {
        let groups = Checks.groups(accounts)
        return groups.allSatisfy { group in group.allSatisfy { snapshots[$0] == snapshots[group[0]] } }
            && groups.allSatisfy { snapshots[$0[0]].shared == snapshots[groups[0][0]].shared }
    }
}

/// A broken promise found by the checks.
struct Violation: Codable, Sendable, CustomStringConvertible {
    /// `lost`, `diverged`, `stray`, `placeholder`, `spuriousConflict`, `torn`, `keyValue`, `server`, `writer`, `agent`.
    var kind: String
    var detail: String
    var description: String { "\(kind): \(detail)" }
}

/// What the checks need of a device: its name, its container's folder (if signed in), and its
/// account (devices of one account hold the same; accounts hold the same shared folder).
protocol CheckedDevice {
    var name: String { get }
    var root: URL? { get }
    var account: String { get }
}

extension CheckedDevice {
    /// The harness's own account, unless the device says otherwise.
    var account: String { Harness.owner }
}

extension ChaosDevice: CheckedDevice {}

/// The invariants, checked once every fault is healed and the devices are quiet.
struct Checks {
    let devices: [any CheckedDevice]
    var violations: [Violation] = []
    /// Edits the ledgers say must survive, and how many of them were found.
    var expected = 0
    var lost = 0

    init(devices: [any CheckedDevice]) { self.devices = devices }

    private mutating func violate(_ kind: String, _ detail: String) {
        violations.append(Violation(kind: kind, detail: detail))
    }

    /// Device indices by account, in the order the accounts first appear.
    static func groups(_ accounts: [String]) -> [[Int]] {
        var order: [String] = [], members: [String: [Int]] = [:]
        for (index, account) in accounts.enumerated() {
            if members[account] == nil { order.append(account) }
            members[account, default: []].append(index)
        }
        return order.map { members[$0]! }
    }

    /// The devices' indices by account.
    private var groups: [[Int]] { Self.groups(devices.map(\.account)) }

    /// Every device's tree is the same as the others' of its account, and the shared folder the
    /// same for every account, without strays or placeholders.
    mutating func checkTrees(_ snapshots: [Snapshot]) {
        for (device, snapshot) in zip(devices, snapshots) {
            for stray in snapshot.strays { violate("stray", "\(device.name): \(stray)") }
            for placeholder in snapshot.placeholders { violate("placeholder", "\(device.name): \(placeholder) was never downloaded") }
        }
        let groups = self.groups
        for group in groups { compare(group.map { (devices[$0], snapshots[$0]) }) }
        if groups.count > 1 { compare(groups.map { (devices[$0[0]], snapshots[$0[0]].shared) }) }
    }

    /// Reports where each of `held` differs from the first.
    private mutating func compare(_ held: [(device: any CheckedDevice, snapshot: Snapshot)]) {
        guard let (firstDevice, first) = held.first else { return }
        let devices = [firstDevice]
        for (device, snapshot) in held.dropFirst() {
            let paths = Set(first.files.keys).union(snapshot.files.keys)
            for path in paths.sorted() where first.files[path] != snapshot.files[path] {
                violate("diverged", "\(path): \(devices[0].name) \(first.files[path].map { String($0.prefix(12)) } ?? "absent"), \(device.name) \(snapshot.files[path].map { String($0.prefix(12)) } ?? "absent")")
            }
            for folder in first.folders.symmetricDifference(snapshot.folders).sorted() {
                violate("diverged", "folder \(folder) on only one of \(devices[0].name) and \(device.name)")
            }
            for path in Set(first.conflicts.keys).union(snapshot.conflicts.keys).sorted() where first.conflicts[path] != snapshot.conflicts[path] {
                violate("diverged", "\(path)'s unresolved conflicts: \(first.conflicts[path]?.count ?? 0) on \(devices[0].name), \(snapshot.conflicts[path]?.count ?? 0) on \(device.name)")
            }
        }
    }

    /// Each writer's own files are on every device exactly as its ledger says.
    mutating func checkOwnedFiles(_ snapshots: [Snapshot], models: [LedgerModel]) {
        for (device, model) in zip(devices, models) {
            for save in model.torn { violate("torn", "\(device.name): an app killed mid-save left \(save)") }
            let prefix = Layout.owned(by: device.name) + "/"
            for (holder, snapshot) in zip(devices, snapshots) where holder.account == device.account {
                let actual = snapshot.files.filter { $0.key.hasPrefix(prefix) }
                for (path, sha) in model.files.sorted(by: { $0.key < $1.key }) {
                    expected += 1
                    if actual[path] == sha { continue }
                    if snapshot.conflicts[path]?.contains(sha) == true {
                        violate("spuriousConflict", "\(path) (written only by \(device.name)) has its latest contents as a conflict version on \(holder.name)")
                    } else {
                        lost += 1
                        violate("lost", "\(path) by \(device.name): \(actual[path] == nil ? "absent" : "other contents") on \(holder.name)")
                    }
                }
                for path in actual.keys.sorted() where model.files[path] == nil {
                    violate("unexpected", "\(path) on \(holder.name): not in \(device.name)'s ledger (deleted or moved away)")
                }
            }
        }
    }

    /// Each device's last write to each shared file is on every device — as a file's current
    /// contents or one of its conflict versions, under that name or another (two devices that
    /// made the same name at once each keep their item: the server names one "note-0 2.txt") —
    /// or is an earlier version the server keeps of one of the shared files (`NSFileVersion`'s
    /// nonlocal versions, downloaded only when the devices do not have it).
    mutating func checkSharedFiles(_ snapshots: [Snapshot], models: [LedgerModel]) async {
        func held(_ snapshot: Snapshot) -> Set<String> {
            var hashes = Set(snapshot.files.filter { Layout.isShared($0.key) }.values)
            for (path, versions) in snapshot.conflicts where Layout.isShared(path) { hashes.formUnion(versions) }
            return hashes
        }
        let sets = snapshots.map(held)
        let everywhere = sets.dropFirst().reduce(sets.first ?? []) { $0.intersection($1) }
        var missing: [(device: String, path: String, sha: String)] = []
        for (device, model) in zip(devices, models) {
            for (path, sha) in model.lastShared.sorted(by: { $0.key < $1.key }) {
                expected += 1
                if !everywhere.contains(sha) { missing.append((device.name, path, sha)) }
            }
        }
        // A participant's write that its device kept aside when the share left it (in the
        // person's own "shared (not shared)", on every device of the account) is not lost.
        missing.removeAll { entry in
            guard let writer = devices.first(where: { $0.name == entry.device }), writer.account != devices[0].account else { return false }
            return zip(devices, snapshots).filter { $0.0.account == writer.account }.allSatisfy { _, snapshot in
                snapshot.files.contains { $0.key.hasPrefix(Layout.shared + " (not shared") && $0.value == entry.sha }
            }
        }
        guard !missing.isEmpty, let root = devices[0].root, let first = snapshots.first else { return }
        var kept = Set<String>()
        for path in first.files.keys.filter(Layout.isShared).sorted() {
            do {
                for version in try await NSFileVersion.nonlocalVersionsOfItem(at: root.appendingPathComponent(path)) {
                    let data = try NSFileCoordinator(filePresenter: nil).coordinate(readingItemAt: version.url) { try Data(contentsOf: $0) }
                    kept.insert(sha256(data))
                }
            } catch {
                violate("server", "listing or downloading \(path)'s versions failed: \(error)")
            }
        }
        for entry in missing where !kept.contains(entry.sha) {
            lost += 1
            violate("lost", "\(entry.path): \(entry.device)'s last write (\(entry.sha.prefix(12))) is on no device and not kept by the server")
        }
    }

    /// The key-value stores are the same on every device of an account (each account has its
    /// own); each device's own key holds what it last set.
    mutating func checkKeyValues(_ stores: [[String: String]], models: [LedgerModel]) {
        for group in groups { checkKeyValues(group.map { stores[$0] }, models: group.map { models[$0] }, of: group.map { devices[$0] }) }
    }

    private mutating func checkKeyValues(_ stores: [[String: String]], models: [LedgerModel], of devices: [any CheckedDevice]) {
        for (device, store) in zip(devices, stores).dropFirst() where store != stores[0] {
            violate("keyValue", "\(device.name)'s store differs from \(devices[0].name)'s: \(store.sorted { $0.key < $1.key }) vs \(stores[0].sorted { $0.key < $1.key })")
        }
        for (device, model) in zip(devices, models) {
            guard let own = model.values[Layout.ownKey(device.name)] else { continue }
            expected += 1
            for (holder, store) in zip(devices, stores) where store[Layout.ownKey(device.name)] != own.value {
                lost += 1
                violate("lost", "key \(Layout.ownKey(device.name)) = \(own.value) on \(device.name), \(store[Layout.ownKey(device.name)] ?? "absent") on \(holder.name)")
            }
        }
        // The shared key: the value set last wins (within a second: the devices' clocks are one here).
        let lasts = models.compactMap { $0.values[Layout.sharedKey] }
        if let newest = lasts.map(\.time).max(), let winner = stores.first?[Layout.sharedKey] {
            let candidates = Set(lasts.filter { $0.time >= newest - 1 }.map(\.value))
            if !candidates.contains(winner) { violate("keyValue", "key shared = \(winner), not one of the last values set (\(candidates.sorted()))") }
        }
    }

    /// Every device's database holds the same rows as the others' of its account (each account
    /// has its own), agrees with its logs, waits for nothing; each device's own notes are as it
    /// last committed them (its deleted ones gone); each tally holds a value some device of the
    /// account committed to it.
    mutating func checkDatabases(_ states: [DatabaseState], models: [LedgerModel]) {
        for group in groups { checkDatabases(group.map { states[$0] }, models: group.map { models[$0] }, of: group.map { devices[$0] }) }
    }

    private mutating func checkDatabases(_ states: [DatabaseState], models: [LedgerModel], of devices: [any CheckedDevice]) {
        for (device, state) in zip(devices, states) {
            for (author, reason) in state.waiting.sorted(by: { $0.key < $1.key }) { violate("database", "\(device.name) still waits for \(author)'s log: \(reason)") }
            for (author, problem) in state.problems.sorted(by: { $0.key < $1.key }) { violate("database", "\(device.name) cannot read \(author)'s log: \(problem)") }
            for difference in state.differences.prefix(5) { violate("database", "\(device.name)'s store disagrees with its logs: \(difference)") }
        }
        guard let first = states.first else { return }
        for (device, state) in zip(devices, states).dropFirst() where state.rows != first.rows {
            let differing = Set(first.rows.keys).union(state.rows.keys).filter { first.rows[$0] != state.rows[$0] }.sorted()
            violate("diverged", "database rows differ between \(devices[0].name) and \(device.name): \(differing.prefix(5).map { "\($0): \(first.rows[$0] ?? "absent") vs \(state.rows[$0] ?? "absent")" })")
        }
        for (device, model) in zip(devices, models) {
            for (path, value) in model.rows.sorted(by: { $0.key < $1.key }) {
                expected += 1
                for (holder, state) in zip(devices, states) where state.rows[path] != value {
                    lost += 1
                    violate("lost", "database row \(path) = \(value) committed on \(device.name): \(state.rows[path] ?? "absent") on \(holder.name)")
                }
            }
            for path in model.deletedRows.sorted() {
                for (holder, state) in zip(devices, states) where state.rows[path] != nil {
                    violate("unexpected", "database row \(path), deleted on \(device.name), is on \(holder.name)")
                }
            }
        }
        let committed = models.reduce(into: [String: Set<String>]()) { all, model in all.merge(model.sharedRowValues) { $0.union($1) } }
        for (path, value) in first.rows.sorted(by: { $0.key < $1.key }) where path.hasPrefix(ChaosDatabase.sharedTable + "/") && committed[path]?.contains(value) != true {
            violate("database", "\(path) = \(value): a value no device committed")
        }
    }

    /// The server's embedded databases pass SQLite's integrity check (server stopped).
    mutating func checkServerDatabases(data: URL) {
        for file in ["ubiquity.sqlite", "chunks/index.sqlite"] {
            let url = data.appendingPathComponent(file)
            guard FileManager.default.fileExists(atPath: url.path) else { continue }
            do {
                let queue = try DatabaseQueue(path: url.path)
                let result = try queue.read { db in
                    try String.fetchAll(db, sql: "PRAGMA integrity_check").filter { line in
                        // SQLite 3.40 (Debian 12's) reports "NULL value in T.C" for every row of a
                        // WITHOUT ROWID table whose NOT NULL column C is declared before its
                        // primary key's columns, though none is NULL: such a line counts only if
                        // a NULL is really there.
                        guard line.hasPrefix("NULL value in "), case let parts = line.dropFirst(14).split(separator: "."), parts.count == 2 else { return true }
                        return try Int.fetchOne(db, sql: "SELECT count(*) FROM \"\(parts[0])\" WHERE \"\(parts[1])\" IS NULL") != 0
                    }
                }
                if !result.isEmpty, result != ["ok"] { violate("server", "\(file): integrity check says \(result.prefix(5))") }
                try queue.close()
            } catch {
                violate("server", "\(file): \(error)")
            }
        }
    }

    mutating func record(_ kind: String, _ detail: String) { violate(kind, detail) }
}
