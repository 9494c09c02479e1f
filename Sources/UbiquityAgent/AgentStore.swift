import Foundation
import GRDB
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// The agent's own state for one account, in SQLite (GRDB, WAL): per container, the sync
/// decisions' durable part (``DeviceSyncState/Persisted``: a row per item and one for the
/// container's cursor) and the files as last seen with the items they are (a row per file).
/// A write changes only the rows of what changed, and both in one transaction, so after a
/// crash the agent resumes from a state where every file it had seen is either recorded with
/// its item or not at all.
package final class AgentStore: Sendable {
    /// One synced file, folder or package as the agent last saw it.
    package struct File: Sendable, Equatable {
        /// Its path in the container.
        package var path: String
        /// The item it is.
        package var item: String
        /// Its fingerprint then.
        package var fingerprint: LocalFingerprint
        /// Its contents then (the hash of its chunk list).
        package var content: ContentToken
        /// The server revision these contents are (downloaded, or committed from here), if
        /// known: the base a changed chunk list is sent and received against.
        package var revision: String?

        /// Creates a record.
        package init(path: String, item: String, fingerprint: LocalFingerprint, content: ContentToken, revision: String? = nil) {
            self.revision = revision
            self.path = path
            self.item = item
            self.fingerprint = fingerprint
            self.content = content
        }
    }

    let pool: DatabasePool
    /// Where ``record(_:state:touched:changed:upsert:removed:)`` writes, off the caller's thread
    /// (GRDB's asynchronous writes would use Dispatch's shared pool, see ``WorkThread``).
    private let writer = WorkThread(name: "ubq-store")

    /// Opens (or creates) the store at `path`.
    /// - Throws: GRDB's errors when the file cannot be opened or is not a database.
    package init(path: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        // Readers stay open (``releaseMemory()`` empties their caches instead of closing them):
        // a closed connection's dispatch queue is torn down on Dispatch's shared pool, which
        // wakes the process every second from then on (see ``WorkThread``).
        configuration.persistentReadOnlyConnections = true
        pool = try DatabasePool(path: path, configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE containerState (container TEXT PRIMARY KEY, persisted BLOB NOT NULL);
                CREATE TABLE localFile (
                    container TEXT NOT NULL, path TEXT NOT NULL, item TEXT NOT NULL, inode INTEGER NOT NULL,
                    size INTEGER NOT NULL, modified INTEGER NOT NULL, changed INTEGER NOT NULL, content TEXT NOT NULL,
                    PRIMARY KEY(container, path));
                CREATE INDEX localFile_item ON localFile(container, item);
                """)
        }
        migrator.registerMigration("v2-downloads-and-conflicts") { db in
            try db.execute(sql: """
                CREATE TABLE downloadRequest (container TEXT NOT NULL, item TEXT NOT NULL, PRIMARY KEY(container, item));
                CREATE TABLE conflictCopy (container TEXT NOT NULL, item TEXT NOT NULL, revision TEXT NOT NULL, PRIMARY KEY(container, item, revision));
                """)
        }
        migrator.registerMigration("v3-folders-and-packages") { db in
            try db.execute(sql: "ALTER TABLE localFile ADD COLUMN kind TEXT NOT NULL DEFAULT 'file'")
            try db.execute(sql: "ALTER TABLE localFile ADD COLUMN revision TEXT")
        }
        migrator.registerMigration("v4-a-row-per-item") { db in
            try db.execute(sql: """
                CREATE TABLE syncMeta (container TEXT PRIMARY KEY, device TEXT NOT NULL, cursor INTEGER NOT NULL, changesMade INTEGER NOT NULL);
                CREATE TABLE syncItem (container TEXT NOT NULL, item TEXT NOT NULL, remote BLOB, local BLOB, sending BLOB, queued BLOB,
                    PRIMARY KEY(container, item));
                """)
            // The state kept as one document per container until now, spread into rows.
            for row in try Row.fetchAll(db, sql: "SELECT container, persisted FROM containerState") {
                let state = try JSONDecoder().decode(DeviceSyncState.Persisted.self, from: row["persisted"] as Data)
                let items = Set(state.remote.keys).union(state.local.keys).union(state.sending.keys).union(state.queued.keys)
                try Self.write(db, container: row["container"], state: state, items: items, meta: true)
            }
            try db.execute(sql: "DROP TABLE containerState")
        }
        migrator.registerMigration("v5-signed-commits") { db in
            // This device's signed commits (docs/Encryption.md "Signed commits"), made in the
            // transaction that records what they vouch for; `position` is where the server keeps
            // each, once it said so (NULL: still to send).
            try db.execute(sql: """
                CREATE TABLE signedCommit (container TEXT NOT NULL, sequence INTEGER NOT NULL, body BLOB NOT NULL, content BLOB NOT NULL,
                    position INTEGER, PRIMARY KEY(container, sequence));
                """)
        }
        migrator.registerMigration("v6-ledger-checkpoints") { db in
            // What this device has read of each container's signed commits — its ledger (each
            // device's chain as accepted, `CommitLedger.encoded`), where it read up to, and the
            // signed changes past its cursor (`pending`, JSON) — so that a restart goes on from
            // there instead of reading every commit again. `format` is the row's (1).
            try db.execute(sql: """
                CREATE TABLE ledgerCheckpoint (container TEXT PRIMARY KEY, format INTEGER NOT NULL, position INTEGER NOT NULL,
                    ledger BLOB NOT NULL, pending BLOB NOT NULL);
                """)
        }
        migrator.registerMigration("v7-signed-outcomes") { db in
            // Each item's latest state a signed commit this device accepted names (its revision,
            // the SHA-256 of its sealed record, the container sequence, whether a deletion):
            // under Advanced a state of an item a commit has named is taken only when a commit
            // names it (docs/Encryption.md, "Coverage under Advanced").
            try db.execute(sql: """
                CREATE TABLE signedOutcome (container TEXT NOT NULL, item TEXT NOT NULL, revision TEXT NOT NULL, recordHash BLOB NOT NULL,
                    sequence INTEGER NOT NULL, deleted INTEGER NOT NULL, PRIMARY KEY(container, item)) WITHOUT ROWID;
                """)
        }
        // The shares this device keeps, each under the name its folder has here (docs/Sharing.md).
        migrator.registerMigration("v8-kept-shares") { db in
            try db.execute(sql: """
                CREATE TABLE keptShare (id TEXT PRIMARY KEY, container TEXT NOT NULL, root TEXT NOT NULL, name TEXT NOT NULL, owner TEXT NOT NULL);
                """)
        }
        // The top items of the sealed shares this account owns, by container: what is in them
        // waits for their keys after a start, however long the server takes to say which they are.
        migrator.registerMigration("v9-owned-sealed-shares") { db in
            try db.execute(sql: """
                CREATE TABLE ownedSealedShare (container TEXT NOT NULL, root TEXT NOT NULL, PRIMARY KEY(container, root)) WITHOUT ROWID;
                """)
        }
        try migrator.migrate(pool)
    }

    /// Lets SQLite free its page caches (and idle readers close) once they finish what they
    /// are doing: after large rounds, which fill them with rows not read again soon. On the
    /// store's own thread, after the writes handed to it (GRDB's `releaseMemoryEventually()`
    /// would use Dispatch's shared pool, see ``WorkThread``).
    package func releaseMemory() {
        let pool = pool
        writer.async { pool.releaseMemory() }
    }

    /// The container's sync state, or nil if it was never synced here.
    package func state(of container: String) throws -> DeviceSyncState.Persisted? {
        var interner = StringInterner()
        return try state(of: container, interning: &interner)
    }

    /// The container's sync state, or nil if it was never synced here, its strings shared
    /// through `interner` (with those of the container's ``files(of:interning:)``).
    package func state(of container: String, interning interner: inout StringInterner) throws -> DeviceSyncState.Persisted? {
        try pool.read { db -> DeviceSyncState.Persisted? in
            guard let meta = try Row.fetchOne(db, sql: "SELECT * FROM syncMeta WHERE container = ?", arguments: [container]) else { return nil }
            var state = DeviceSyncState.Persisted(device: meta["device"])
            state.cursor = meta["cursor"]
            state.changesMade = meta["changesMade"]
            let decoder = JSONDecoder()
            let rows = try Row.fetchCursor(db, sql: "SELECT item, remote, local, sending, queued FROM syncItem WHERE container = ?", arguments: [container])
            while let row = try rows.next() {
                let item = interner(row["item"] as String)
                if let data = row["remote"] as Data? {
                    var remote = try decoder.decode(ItemSnapshot.self, from: data)
                    (remote.id, remote.revision, remote.parent) = (item, interner(remote.revision), interner(remote.parent))
                    state.remote[item] = remote
                }
                if let data = row["local"] as Data? { state.local[item] = try decoder.decode(DeviceSyncState.LocalItem.self, from: data) }
                if let data = row["sending"] as Data? { state.sending[item] = try decoder.decode(LocalChange.self, from: data) }
                if let data = row["queued"] as Data? { state.queued[item] = try decoder.decode(LocalChange.self, from: data) }
            }
            return state
        }
    }

    /// Writes the rows of `items` (and, with `meta`, the cursor and change counter) as they are in `state`.
    static func write(_ db: Database, container: String, state: DeviceSyncState.Persisted, items: Set<String>, meta: Bool) throws {
        if meta {
            try db.execute(sql: """
                INSERT INTO syncMeta (container, device, cursor, changesMade) VALUES (?, ?, ?, ?)
                ON CONFLICT(container) DO UPDATE SET device = excluded.device, cursor = excluded.cursor, changesMade = excluded.changesMade
                """, arguments: [container, state.device, state.cursor, state.changesMade])
        }
        let encoder = JSONEncoder()
        // Prepared once per connection (GRDB's cache), not parsed and authorized again a row.
        let delete = try db.cachedStatement(sql: "DELETE FROM syncItem WHERE container = ? AND item = ?")
        let upsert = try db.cachedStatement(sql: """
            INSERT INTO syncItem (container, item, remote, local, sending, queued) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(container, item) DO UPDATE SET remote = excluded.remote, local = excluded.local, sending = excluded.sending, queued = excluded.queued
            """)
        for item in items {
            let remote = try state.remote[item].map { try encoder.encode($0) }, local = try state.local[item].map { try encoder.encode($0) }
            let sending = try state.sending[item].map { try encoder.encode($0) }, queued = try state.queued[item].map { try encoder.encode($0) }
            if remote == nil && local == nil && sending == nil && queued == nil {
                try delete.execute(arguments: [container, item])
            } else {
                try upsert.execute(arguments: [container, item, remote, local, sending, queued])
            }
        }
    }

    /// The container's files as last seen.
    package func files(of container: String) throws -> [String: File] {
        var interner = StringInterner()
        return try files(of: container, interning: &interner)
    }

    /// The container's files as last seen, their strings shared through `interner` (with
    /// those of the container's ``state(of:interning:)``).
    package func files(of container: String, interning interner: inout StringInterner) throws -> [String: File] {
        try pool.read { db in
            var files: [String: File] = [:]
            let rows = try Row.fetchCursor(db, sql: "SELECT * FROM localFile WHERE container = ?", arguments: [container])
            while let row = try rows.next() {
                let file = File(path: interner(row["path"] as String), item: interner(row["item"] as String),
                                fingerprint: LocalFingerprint(inode: UInt64(bitPattern: row["inode"]), size: row["size"], modified: row["modified"], changed: row["changed"],
                                                              kind: ItemKind(rawValue: row["kind"]) ?? .file),
                                content: ContentToken(row["content"] as String), revision: interner(row["revision"] as String?))
                files[file.path] = file
            }
            return files
        }
    }

    /// Records what changed of the container's sync state — the rows of the `touched` items,
    /// and the cursor and change counter if `changed` — and the files that changed (`upsert`)
    /// or went (`removed`), this device's new signed commits (`signed`) and what it has read of
    /// the container's (`checkpoint`: `.some(nil)` forgets it), in one transaction, off the
    /// caller's thread.
    /// `outcomes`: the latest states signed commits it read name (each kept unless one of a
    /// later sequence is).
    package func record(_ container: String, state: DeviceSyncState.Persisted, touched: Set<String>, changed: Bool = true,
                       upsert: [File] = [], removed: [String] = [], signed: [(sequence: Int64, upload: SignedCommitUpload)] = [],
                       checkpoint: LedgerCheckpoint?? = nil, outcomes: [SignedOutcome] = []) async throws {
        guard changed || !touched.isEmpty || !upsert.isEmpty || !removed.isEmpty || !signed.isEmpty || checkpoint != nil || !outcomes.isEmpty else { return }
        let pool = pool
        try await writer.run { try pool.write { db in
            try Self.write(db, container: container, state: state, items: touched, meta: changed)
            if let checkpoint { try Self.write(db, checkpoint: checkpoint, of: container) }
            if !outcomes.isEmpty {
                let keep = try db.cachedStatement(sql: """
                    INSERT INTO signedOutcome (container, item, revision, recordHash, sequence, deleted) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT(container, item) DO UPDATE SET revision = excluded.revision, recordHash = excluded.recordHash,
                        sequence = excluded.sequence, deleted = excluded.deleted WHERE excluded.sequence > signedOutcome.sequence
                    """)
                for outcome in outcomes {
                    try keep.execute(arguments: [container, outcome.item, outcome.revision, outcome.recordHash, outcome.sequence, outcome.deleted])
                }
            }
            for (sequence, upload) in signed {
                try db.execute(sql: "INSERT INTO signedCommit (container, sequence, body, content) VALUES (?, ?, ?, ?)",
                               arguments: [container, sequence, upload.commit, upload.content])
            }
            let delete = try db.cachedStatement(sql: "DELETE FROM localFile WHERE container = ? AND path = ?")
            for path in removed {
                try delete.execute(arguments: [container, path])
            }
            let record = try db.cachedStatement(sql: """
                INSERT INTO localFile (container, path, item, inode, size, modified, changed, content, kind, revision) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(container, path) DO UPDATE SET item = excluded.item, inode = excluded.inode, size = excluded.size,
                    modified = excluded.modified, changed = excluded.changed, content = excluded.content, kind = excluded.kind,
                    revision = excluded.revision
                """)
            for file in upsert {
                try record.execute(arguments: [container, file.path, file.item, Int64(bitPattern: file.fingerprint.inode), file.fingerprint.size,
                                               file.fingerprint.modified, file.fingerprint.changed, file.content.description, file.fingerprint.kind.rawValue, file.revision])
            }
        } }
    }

    /// The items of `container` an app asked to download that are not downloaded yet.
    package func downloadRequests(of container: String) throws -> Set<String> {
        try pool.read { db in
            Set(try String.fetchAll(db, sql: "SELECT item FROM downloadRequest WHERE container = ?", arguments: [container]))
        }
    }

    /// Records that an app asked for `item` to be downloaded (`requested`), or that it is done.
    package func setDownloadRequested(_ requested: Bool, container: String, item: String) throws {
        try pool.write { db in
            if requested {
                try db.execute(sql: "INSERT OR IGNORE INTO downloadRequest (container, item) VALUES (?, ?)", arguments: [container, item])
            } else {
                try db.execute(sql: "DELETE FROM downloadRequest WHERE container = ? AND item = ?", arguments: [container, item])
            }
        }
    }

    /// Per item, the conflict revisions the agent put in the item's version store.
    package func conflictCopies(of container: String) throws -> [String: Set<String>] {
        try pool.read { db in
            var copies: [String: Set<String>] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT item, revision FROM conflictCopy WHERE container = ?", arguments: [container]) {
                copies[row["item"], default: []].insert(row["revision"])
            }
            return copies
        }
    }

    /// Records that the conflict `revision` of `item` is in its version store (`present`), or no longer.
    package func setConflictCopy(_ present: Bool, container: String, item: String, revision: String) throws {
        try pool.write { db in
            if present {
                try db.execute(sql: "INSERT OR IGNORE INTO conflictCopy (container, item, revision) VALUES (?, ?, ?)", arguments: [container, item, revision])
            } else {
                try db.execute(sql: "DELETE FROM conflictCopy WHERE container = ? AND item = ? AND revision = ?", arguments: [container, item, revision])
            }
        }
    }
}

// This device's signed commits.
extension AgentStore {
    /// The newest of this device's signed commits of `container` (its chain's head), if any.
    package func lastSignedCommit(of container: String) throws -> Data? {
        try pool.read { db in
            try Data.fetchOne(db, sql: "SELECT body FROM signedCommit WHERE container = ? ORDER BY sequence DESC LIMIT 1", arguments: [container])
        }
    }

    /// This device's signed commits of `container` the server has not said it keeps, oldest
    /// first, at most `limit`: their sequences and what is sent.
    package func unsentSignedCommits(of container: String, limit: Int) throws -> [(sequence: Int64, upload: SignedCommitUpload)] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT sequence, body, content FROM signedCommit WHERE container = ? AND position IS NULL ORDER BY sequence LIMIT ?",
                             arguments: [container, limit]).map { (sequence: $0["sequence"], upload: SignedCommitUpload(commit: $0["body"], content: $0["content"])) }
        }
    }

    /// Records where the server keeps this device's commits of `container` (by sequence).
    package func markSent(_ positions: [(sequence: Int64, position: Int64)], of container: String) async throws {
        let pool = pool
        try await writer.run { try pool.write { db in
            for (sequence, position) in positions {
                try db.execute(sql: "UPDATE signedCommit SET position = ? WHERE container = ? AND sequence = ?", arguments: [position, container, sequence])
            }
            // What the server keeps is not kept here too: only the chain's head, which the next
            // commit follows (the store stays the size of what is unsent).
            try db.execute(sql: """
                DELETE FROM signedCommit WHERE container = ? AND position IS NOT NULL
                    AND sequence < (SELECT MAX(sequence) FROM signedCommit WHERE container = ?)
                """, arguments: [container, container])
        } }
    }

    /// The format of the rows ``write(_:checkpoint:of:)`` writes.
    static let ledgerCheckpointFormat = 1

    /// What this device had read of `container`'s signed commits when it last kept it (nil:
    /// nothing kept, or a row of another format — then it reads them from the start).
    package func ledgerCheckpoint(of container: String) throws -> LedgerCheckpoint? {
        try pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT format, position, ledger, pending FROM ledgerCheckpoint WHERE container = ?", arguments: [container]),
                  row["format"] as Int == Self.ledgerCheckpointFormat else { return nil }
            return LedgerCheckpoint(position: row["position"], ledger: row["ledger"], pending: row["pending"])
        }
    }

    /// Keeps what this device has read of `container`'s signed commits (nil: forgets it, so
    /// that the next run reads them from the start), in `db`'s transaction.
    /// Written with the sync state it goes with (``record(_:state:touched:changed:upsert:removed:signed:checkpoint:)``):
    /// a restart finds the two as they were together.
    static func write(_ db: Database, checkpoint: LedgerCheckpoint?, of container: String) throws {
        guard let checkpoint else {
            try db.execute(sql: "DELETE FROM ledgerCheckpoint WHERE container = ?", arguments: [container])
            return
        }
        try db.execute(sql: """
            INSERT INTO ledgerCheckpoint (container, format, position, ledger, pending) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(container) DO UPDATE SET format = excluded.format, position = excluded.position, ledger = excluded.ledger,
                pending = excluded.pending
            """, arguments: [container, Self.ledgerCheckpointFormat, checkpoint.position, checkpoint.ledger, checkpoint.pending])
    }
}

/// An item's latest state a signed commit names, as a device's store keeps it.
package struct SignedOutcome: Sendable, Equatable {
    /// The item.
    package var item: String
    /// Its revision.
    package var revision: String
    /// SHA-256 of its sealed record (32 zero bytes: none — a deletion, or a state from before records were sealed).
    package var recordHash: Data
    /// The container sequence the server made it at.
    package var sequence: Int64
    /// Whether it is a deletion.
    package var deleted: Bool

    /// An outcome.
    package init(item: String, revision: String, recordHash: Data, sequence: Int64, deleted: Bool) {
        self.item = item
        self.revision = revision
        self.recordHash = recordHash
        self.sequence = sequence
        self.deleted = deleted
    }

    /// One as the store's `signedOutcome` table keeps it.
    init(row: Row) {
        self.init(item: row["item"], revision: row["revision"], recordHash: row["recordHash"], sequence: row["sequence"], deleted: row["deleted"])
    }
}

extension AgentStore {
    /// The latest signed outcomes kept of `items` of `container`, by item (those never named are absent).
    /// Every item's latest signed outcome kept for `container` (what a checkpoint restates).
    package func allSignedOutcomes(of container: String) throws -> [String: SignedOutcome] {
        try pool.read { db in
            var found: [String: SignedOutcome] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT item, revision, recordHash, sequence, deleted FROM signedOutcome WHERE container = ?", arguments: [container]) {
                found[row["item"]] = SignedOutcome(row: row)
            }
            return found
        }
    }

    package func signedOutcomes(of container: String, items: [String]) throws -> [String: SignedOutcome] {
        guard !items.isEmpty else { return [:] }
        return try pool.read { db in
            var found: [String: SignedOutcome] = [:]
            for start in stride(from: 0, to: items.count, by: 500) {
                let slice = Array(items[start..<min(items.count, start + 500)])
                let marks = Array(repeating: "?", count: slice.count).joined(separator: ",")
                for row in try Row.fetchAll(db, sql: "SELECT item, revision, recordHash, sequence, deleted FROM signedOutcome WHERE container = ? AND item IN (\(marks))",
                                            arguments: StatementArguments([container] + slice)) {
                    found[row["item"]] = SignedOutcome(row: row)
                }
            }
            return found
        }
    }
}

/// What a device had read of a container's signed commits, as its store keeps it: its ledger
/// (`CommitLedger.encoded`), the place in the server's record of commits it read up to, and
/// the signed changes past its cursor (JSON: item → container sequences).
package struct LedgerCheckpoint: Sendable, Equatable {
    /// Where in the server's record of commits it read up to.
    package var position: Int64
    /// The ledger's bytes.
    package var ledger: Data
    /// The signed changes past the cursor.
    package var pending: Data
}

// The shares this device keeps in step (docs/Sharing.md, "On a participant's devices").
extension AgentStore {
    /// The shares kept here, by container.
    package func keptShares() throws -> [String: [ShareScope]] {
        try pool.read { db in
            var kept: [String: [ShareScope]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT id, container, root, name, owner FROM keptShare ORDER BY id") {
                kept[row["container"], default: []].append(ShareScope(id: row["id"], root: row["root"], name: row["name"], owner: row["owner"]))
            }
            return kept
        }
    }

    /// Records that `scope` of `container` is kept here.
    package func keep(_ scope: ShareScope, of container: String) throws {
        try pool.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO keptShare (id, container, root, name, owner) VALUES (?, ?, ?, ?, ?)",
                           arguments: [scope.id, container, scope.root, scope.name, scope.owner])
        }
    }

    /// The top items of the sealed shares this account owns in `container`, as last read.
    package func ownedSealedShareRoots(of container: String) throws -> Set<String> {
        try pool.read { db in Set(try String.fetchAll(db, sql: "SELECT root FROM ownedSealedShare WHERE container = ?", arguments: [container])) }
    }

    /// Records the top items of the sealed shares this account owns in `container`.
    package func setOwnedSealedShareRoots(_ roots: Set<String>, of container: String) throws {
        try pool.write { db in
            try db.execute(sql: "DELETE FROM ownedSealedShare WHERE container = ?", arguments: [container])
            for root in roots.sorted() {
                try db.execute(sql: "INSERT INTO ownedSealedShare (container, root) VALUES (?, ?)", arguments: [container, root])
            }
        }
    }

    /// Forgets a share kept here, and everything recorded of it under `key` (its engine's
    /// ``ContainerSync/storeKey``).
    package func forgetShare(_ id: String, key: String) throws {
        try pool.write { db in
            try db.execute(sql: "DELETE FROM keptShare WHERE id = ?", arguments: [id])
            for table in ["localFile", "downloadRequest", "conflictCopy", "syncMeta", "syncItem", "signedCommit", "ledgerCheckpoint", "signedOutcome"] {
                try db.execute(sql: "DELETE FROM \(table) WHERE container = ?", arguments: [key])
            }
        }
    }
}
