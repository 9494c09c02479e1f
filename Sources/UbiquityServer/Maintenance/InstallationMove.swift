import Crypto
import Foundation
import GRDB
import Logging
import NIOCore
import PostgresNIO
import UbiquityProtocol

/// How far moving an embedded installation to PostgreSQL and an object store got.
package struct InstallationMoveProgress: Sendable {
    /// Rows copied, by PostgreSQL table (the final pass; each equals the embedded table's count).
    package var rows: [String: Int] = [:]
    /// Packs written, and the chunks and bytes moved into them, in this run.
    package var packs = 0, chunks = 0, bytes: Int64 = 0
    /// Chunks an earlier run had moved already.
    package var movedBefore = 0
    /// Chunks listed whose bytes do not match their names: not moved (`ubiquity fsck --repair`
    /// on the new storage asks devices for them again).
    package var damaged: [(account: Int64, hash: String)] = []
    /// Chunks listed whose bytes are not in the chunk folder (in a pass while serving: removed
    /// meanwhile, said only by the final pass).
    package var missing: [(account: Int64, hash: String)] = []
    /// The final pass ended: the new storage may serve.
    package var finished = false
}

/// `ubiquity storage migrate --from-data DIR`: an installation on the embedded storage (SQLite
/// and a chunk folder) moved to PostgreSQL, its chunk contents into an object store.
///
/// Passes while the old server serves (`final` false) move the chunks it has so far — the
/// bulk of the bytes — and may be run as often as wanted. The final pass, with every server and
/// command on the directory stopped (it holds ``DataDirectoryLock`` alone), copies every table
/// in one transaction, moves the chunks stored since, drops those removed since, checks each
/// table's count and that every listed chunk is in the object store, and marks the move done.
/// Until then the database is marked as being filled and `ubiquity serve` refuses it.
///
/// Safe to stop at any point and to run again: a chunk is checked against its name before it
/// moves and is recorded moved in the transaction that makes its pack live (the object store's
/// write protocol); the tables' copy commits whole or not at all. The embedded installation is
/// only read.
package struct InstallationMove {
    /// The embedded tables copied, in an order their references allow, and PostgreSQL's name
    /// of each (the columns' names follow the same rule: `accountId` is `account_id`).
    static let tables: [(source: String, target: String)] = [
        ("account", "account"), ("device", "device"), ("container", "container"), ("item", "item"),
        ("revision", "revision"), ("revisionChunk", "revision_chunk"), ("chunk", "chunk"), ("pendingChunk", "pending_chunk"),
        ("kvStore", "kv_store"), ("kv", "kv"), ("signInAttempt", "sign_in_attempt"), ("publicLink", "public_link"),
        ("rosterEntry", "roster_entry"), ("keyEnvelope", "key_envelope"), ("serverSetting", "server_setting"),
        ("keyRequest", "key_request"), ("signedCommit", "signed_commit"), ("webGrant", "web_grant"),
        ("commitCheckpoint", "commit_checkpoint"), ("share", "share"), ("shareParticipant", "share_participant"),
        ("shareExit", "share_exit"), ("sharingIdentity", "sharing_identity"), ("shareKey", "share_key"),
    ]
    /// Embedded tables PostgreSQL keeps otherwise: manifests are a column of `revision`; the
    /// chunks revisions wait for and each container's chunks are found by joining
    /// `revision_chunk`. And one not moved: announced uploads last two minutes (their devices
    /// announce them again).
    static let sourceOnly: Set<String> = ["revisionManifest", "revisionWaiting", "containerChunk", "grdb_migrations", "incoming"]
    /// The tables whose ids PostgreSQL draws from a sequence (set past the copied ids).
    static let serialTables = ["account", "container", "kv_store"]
    /// The setting that marks a database being filled (`copying`) or filled (`done`).
    static let marker = "moved-from-embedded"

    let directory: String
    let source: SQLiteDatabase
    let sourceChunks: FileChunkStore
    let target: PostgresDatabase
    let store: ObjectChunkStore
    let logger: Logger

    /// Moves the installation in `directory` into `storage` (PostgreSQL with an object store).
    /// - Parameters:
    ///   - final: Every server and command on `directory` is stopped: copy the tables and finish.
    ///   - progress: Told after each pack written, and at the end.
    /// - Throws: ``SyncError``: `notAnInstallation` when `directory` holds no embedded database,
    ///   `dataDirectoryInUse` when the final pass finds it in use, `databaseNotEmpty` when the
    ///   database already holds accounts of its own, `moveUnverified` when a count differs.
    package static func run(from directory: String, into storage: ServerAdministration, final: Bool,
                            progress: @escaping @Sendable (InstallationMoveProgress) -> Void) async throws -> InstallationMoveProgress {
        guard let target = storage.storage.database as? PostgresDatabase, let store = storage.storage.chunks as? ObjectChunkStore else {
            throw SyncError(.badRequest, "noObjectStore", "nothing to move to: give --database and --object-store")
        }
        guard FileManager.default.fileExists(atPath: directory + "/ubiquity.sqlite") else {
            throw SyncError(.badRequest, "notAnInstallation", "\(directory) holds no ubiquity.sqlite: not a data directory")
        }
        let lock = try DataDirectoryLock(directory: directory, exclusive: final)
        defer { lock.release() }
        let logger = Logger(label: "ubiquity.migrate")
        let move = InstallationMove(directory: directory, source: try SQLiteDatabase(path: directory + "/ubiquity.sqlite"),
                                    sourceChunks: try FileChunkStore(directory: directory + "/chunks", logger: logger),
                                    target: target, store: store, logger: logger)
        defer { Task { [source = move.source] in await source.close() } }
        return try await move.run(final: final, progress: progress)
    }

    func run(final: Bool, progress: @escaping @Sendable (InstallationMoveProgress) -> Void) async throws -> InstallationMoveProgress {
        var done = InstallationMoveProgress()
        let state = try await target.read { db in
            try await db.rows("SELECT value FROM server_setting WHERE name = \(Self.marker)").first?.get("value", as: String.self)
        }
        if state == "done" {
            done.finished = true
            return done
        }
        if state == nil, try await target.read({ db in try await !db.rows("SELECT 1 AS one FROM account LIMIT 1").isEmpty }) {
            throw SyncError(.conflict, "databaseNotEmpty", "the database holds accounts of its own: move an installation into an empty one")
        }
        if final {
            done.rows = try await copyTables()
        } else {
            // The chunks' rows name their accounts: those first (the tables follow in the final pass).
            try await target.transaction { [self] db in
                try await setMarker("copying", db)
                _ = try await copy(table: "account", into: "account", db, upsert: true)
            }
        }
        try await moveChunks(final: final, done: &done, progress: progress)
        if final {
            try await finish(&done)
            done.finished = true
        }
        progress(done)
        return done
    }

    // MARK: Tables

    /// Every table in one transaction: what a pass before wrote is replaced (accounts are
    /// updated in place, so the chunks moved for them stay), ids' sequences set past the copied
    /// ids, and the accounts' stored bytes counted again.
    func copyTables() async throws -> [String: Int] {
        try await checkTablesKnown()
        return try await target.transaction { [self] db in
            for (_, table) in Self.tables.reversed() where table != "account" {
                try await db.rows(PostgresQuery(unsafeSQL: "DELETE FROM \(table)"))
            }
            let ids = try await source.pool.read { db in try Int64.fetchAll(db, sql: "SELECT id FROM account") }
            try await db.rows("DELETE FROM account WHERE NOT (id = ANY(\(ids)::BIGINT[]))")
            var rows: [String: Int] = [:]
            for (from, to) in Self.tables {
                rows[to] = try await copy(table: from, into: to, db, upsert: to == "account")
            }
            try await setMarker("copying", db)
            for table in Self.serialTables {
                try await db.rows(PostgresQuery(unsafeSQL: """
                    SELECT setval(pg_get_serial_sequence('\(table)', 'id'), GREATEST((SELECT COALESCE(MAX(id), 0) FROM \(table)), 1))
                    """))
            }
            // (The chunks' inserts counted their sizes again on top of the copied figure.)
            try await db.rows("UPDATE account SET used_bytes = (SELECT COALESCE(SUM(size), 0) FROM chunk WHERE chunk.account_id = account.id)")
            return rows
        }
    }

    func setMarker(_ value: String, _ db: PostgresConnection) async throws {
        try await db.rows("""
            INSERT INTO server_setting (name, value) VALUES (\(Self.marker), \(value)) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
            """)
    }

    /// Refuses a schema this move does not know: an embedded table neither copied nor kept
    /// otherwise (a new table must be added to ``tables``, or nothing would move it).
    func checkTablesKnown() async throws {
        let names = try await source.pool.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        }
        let known = Set(Self.tables.map(\.source)).union(Self.sourceOnly)
        if let unknown = names.first(where: { !known.contains($0) }) {
            throw SyncError(.internalServerError, "moveUnverified", "the embedded table \(unknown) has no place in PostgreSQL: nothing was copied")
        }
    }

    /// A value of the embedded database, as read.
    enum Cell: Sendable { case null, integer(Int64), real(Double), text(String), blob(Data) }

    /// Copies `table` into PostgreSQL's `target` (`upsert`: rows with the same key are updated),
    /// a page at a time by its primary key. Returns the rows copied.
    func copy(table: String, into target: String, _ db: PostgresConnection, upsert: Bool = false) async throws -> Int {
        let (columns, key) = try await source.pool.read { db in
            let info = try Row.fetchAll(db, sql: "SELECT name, pk FROM pragma_table_info(?)", arguments: [table])
            return (info.map { $0["name"] as String }, info.filter { ($0["pk"] as Int) > 0 }.sorted { ($0["pk"] as Int) < ($1["pk"] as Int) }.map { $0["name"] as String })
        }
        var types: [String: String] = [:]
        for row in try await db.rows("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = \(target)") {
            types[try row.get("column_name", as: String.self)] = try row.get("data_type", as: String.self)
        }
        // A revision's manifest is a table of its own in the embedded database.
        let extra = table == "revision" ? [("(SELECT manifest FROM revisionManifest WHERE revisionId = t.id)", "manifest")] : []
        let names = columns.map(Self.snakeCased) + extra.map(\.1)
        if let missing = names.first(where: { types[$0] == nil }) {
            throw SyncError(.internalServerError, "moveUnverified", "\(table).\(missing) has no column in PostgreSQL's \(target): nothing was copied")
        }
        let order = key.isEmpty ? ["rowid"] : key
        let select = "SELECT " + (columns.map { "t.\"\($0)\"" } + extra.map(\.0)).joined(separator: ", ") + ", " + order.map { "t.\"\($0)\"" }.joined(separator: ", ")
            + " FROM \"\(table)\" t"
        let after = "(" + order.map { "t.\"\($0)\"" }.joined(separator: ", ") + ") > (" + order.map { _ in "?" }.joined(separator: ", ") + ")"
        let orderBy = " ORDER BY " + order.map { "t.\"\($0)\"" }.joined(separator: ", ") + " LIMIT 1000"
        var last: [DatabaseValue]?, copied = 0
        while true {
            let sql = select + (last == nil ? "" : " WHERE " + after) + orderBy, arguments = StatementArguments(last ?? [])
            let page: [[Cell]] = try await source.pool.read { db in
                try Row.fetchAll(db, sql: sql, arguments: arguments).map { row in
                    (0..<row.count).map { index in
                        let value: DatabaseValue = row[index]
                        switch value.storage {
                        case .null: return .null
                        case .int64(let number): return .integer(number)
                        case .double(let number): return .real(number)
                        case .string(let text): return .text(text)
                        case .blob(let data): return .blob(data)
                        }
                    }
                }
            }
            guard !page.isEmpty else { return copied }
            last = page.last!.suffix(order.count).map(Self.databaseValue)
            try await insert(page.map { Array($0.prefix(names.count)) }, into: target, columns: names, types: types, key: upsert ? key.map(Self.snakeCased) : nil, db)
            copied += page.count
        }
    }

    static func databaseValue(_ cell: Cell) -> DatabaseValue {
        switch cell {
        case .null: return .null
        case .integer(let number): return number.databaseValue
        case .real(let number): return number.databaseValue
        case .text(let text): return text.databaseValue
        case .blob(let data): return data.databaseValue
        }
    }

    /// Inserts `rows` (a statement per at most 30,000 values or 8 MiB), each value bound as
    /// its PostgreSQL column's type.
    func insert(_ rows: [[Cell]], into table: String, columns: [String], types: [String: String], key: [String]?, _ db: PostgresConnection) async throws {
        var start = 0
        let rowsPerStatement = max(1, 30_000 / columns.count), largest = 8 << 20
        while start < rows.count {
            var bindings = PostgresBindings(), values: [String] = [], bytes = 0, end = start
            while end < rows.count && (end == start || (end - start < rowsPerStatement && bytes < largest)) {
                var marks: [String] = []
                for (cell, column) in zip(rows[end], columns) {
                    bytes += try Self.bind(cell, as: types[column]!, column: "\(table).\(column)", into: &bindings)
                    marks.append("$\(bindings.count)")
                }
                values.append("(" + marks.joined(separator: ", ") + ")")
                end += 1
            }
            var sql = "INSERT INTO \(table) (" + columns.joined(separator: ", ") + ") VALUES " + values.joined(separator: ", ")
            if let key {
                sql += " ON CONFLICT (" + key.joined(separator: ", ") + ") DO UPDATE SET "
                    + columns.filter { !key.contains($0) }.map { "\($0) = EXCLUDED.\($0)" }.joined(separator: ", ")
            }
            try await db.rows(PostgresQuery(unsafeSQL: sql, binds: bindings))
            start = end
        }
    }

    /// Binds `cell` as PostgreSQL's `type`; returns about how many bytes it took.
    static func bind(_ cell: Cell, as type: String, column: String, into bindings: inout PostgresBindings) throws -> Int {
        func unfit() -> SyncError { SyncError(.internalServerError, "moveUnverified", "a value of \(column) does not fit PostgreSQL's \(type): nothing was copied") }
        switch (cell, type) {
        case (.null, _): bindings.appendNull(); return 1
        case (.integer(let number), "boolean"): bindings.append(number != 0); return 1
        case (.integer(let number), "bigint"): bindings.append(number); return 8
        case (.integer(let number), "integer"):
            guard let fitting = Int32(exactly: number) else { throw unfit() }
            bindings.append(fitting); return 4
        case (.integer(let number), "double precision"): bindings.append(Double(number)); return 8
        case (.real(let number), "double precision"): bindings.append(number); return 8
        case (.real(let number), "bigint"):
            guard let whole = Int64(exactly: number) else { throw unfit() }
            bindings.append(whole); return 8
        case (.text(let text), "text"): bindings.append(text); return text.utf8.count
        case (.blob(let data), "bytea"): bindings.append(ByteBuffer(data: data)); return data.count
        case (.text(let text), "bytea"): bindings.append(ByteBuffer(string: text)); return text.utf8.count
        case (.blob(let data), "text"):
            guard let text = String(data: data, encoding: .utf8) else { throw unfit() }
            bindings.append(text); return data.count
        default: throw unfit()
        }
    }

    /// `accountId` → `account_id`.
    static func snakeCased(_ name: String) -> String {
        name.reduce(into: "") { result, character in
            if character.isUppercase { result += "_" + character.lowercased() } else { result.append(character) }
        }
    }

    // MARK: Chunks

    /// Moves every listed chunk not moved yet, a pack per ``ObjectChunkStore/Settings/packTarget``
    /// bytes of one account, each checked against its name (or its recorded digest) first.
    func moveChunks(final: Bool, done: inout InstallationMoveProgress, progress: @Sendable (InstallationMoveProgress) -> Void) async throws {
        let accounts = try await source.pool.read { db in try Int64.fetchAll(db, sql: "SELECT DISTINCT accountId FROM chunk ORDER BY accountId") }
        for account in accounts {
            var after = "", pending: [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)] = [], pendingBytes = 0
            while true {
                let hashes = try await source.pool.read { [after] db in
                    try String.fetchAll(db, sql: "SELECT hash FROM chunk WHERE accountId = ? AND hash > ? ORDER BY hash LIMIT 1000", arguments: [account, after])
                }
                guard let lastHash = hashes.last else { break }
                after = lastHash
                let moved = try await target.read { db in
                    Set(try await db.rows("SELECT hash FROM packed_chunk WHERE account_id = \(account) AND hash = ANY(\(hashes)::TEXT[])")
                        .map { try $0.get("hash", as: String.self) })
                }
                done.movedBefore += moved.count
                let rest = hashes.filter { !moved.contains($0) }
                let digests = try await sourceChunks.sealedDigests(of: rest, account: account)
                for hash in rest {
                    guard let data = try await sourceChunks.load(hash: hash, account: account) else {
                        if final { done.missing.append((account, hash)) }
                        continue
                    }
                    guard ObjectChunkStore.isSound(data, hash: hash, digest: digests[hash]) else {
                        logger.error("a chunk's bytes do not match its name: not moved (ubiquity fsck --repair on the new storage)", metadata: ["account": "\(account)"])
                        done.damaged.append((account, hash))
                        continue
                    }
                    pending.append((hash, ArraySlice(data), digests[hash]))
                    pendingBytes += data.count
                    if pendingBytes >= store.settings.packTarget {
                        try await writePack(account: account, &pending, &done)
                        pendingBytes = 0
                        progress(done)
                    }
                }
            }
            if !pending.isEmpty {
                try await writePack(account: account, &pending, &done)
                progress(done)
            }
        }
    }

    func writePack(account: Int64, _ chunks: inout [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)], _ done: inout InstallationMoveProgress) async throws {
        try await store.writePack(account: account, chunks: chunks)
        done.packs += 1
        done.chunks += chunks.count
        done.bytes += Int64(chunks.reduce(0) { $0 + $1.bytes.count })
        chunks.removeAll()
    }

    // MARK: Finishing

    /// Refuses to serve a database an unfinished move is filling (its final pass not yet ended).
    static func refuseUnfinished(_ storage: ServerStorage) async throws {
        guard let database = storage.database as? PostgresDatabase else { return }
        let state = try await database.read { db in
            try await db.rows("SELECT value FROM server_setting WHERE name = \(marker)").first?.get("value", as: String.self)
        }
        if state == "copying" {
            throw SyncError(.conflict, "moveUnfinished", "this database is being filled from an embedded installation: finish with `ubiquity storage migrate --from-data DIR --final` first")
        }
    }

    /// Drops chunks moved by a pass before and removed since (their packs' live bytes counted
    /// again: a pack left with none is doomed, collected after its grace), checks every count,
    /// and marks the move done.
    func finish(_ done: inout InstallationMoveProgress) async throws {
        let now = Date().timeIntervalSince1970
        let (sourceCounts, sourceChunks) = try await source.pool.read { db in
            var counts: [String: Int] = [:]
            for (from, to) in Self.tables { counts[to] = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \"\(from)\"") ?? 0 }
            return (counts, try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM chunk") ?? 0)
        }
        let unaccounted = done.damaged.count + done.missing.count
        try await target.transaction { [done] db in
            try await db.rows("""
                DELETE FROM packed_chunk p WHERE NOT EXISTS (SELECT 1 FROM chunk c WHERE c.account_id = p.account_id AND c.hash = p.hash)
                """)
            try await db.rows("""
                UPDATE pack SET live_bytes = COALESCE((SELECT SUM(length) FROM packed_chunk WHERE pack_id = pack.id), 0), changed = \(now) WHERE state = 'live'
                """)
            try await db.rows("UPDATE pack SET state = 'doomed' WHERE state = 'live' AND live_bytes = 0")
            for (table, count) in sourceCounts {
                let copied = try await db.rows(PostgresQuery(unsafeSQL: "SELECT COUNT(*)::BIGINT AS n FROM \(table)")).first!.get("n", as: Int64.self)
                // (server_setting holds the move's own mark besides.)
                guard copied == Int64(count) + (table == "server_setting" ? 1 : 0), done.rows[table] == count else {
                    throw SyncError(.internalServerError, "moveUnverified", "\(table) holds \(copied) rows, the embedded database \(count): run the final pass again")
                }
            }
            let packed = try await db.rows("SELECT COUNT(*)::BIGINT AS n FROM packed_chunk").first!.get("n", as: Int64.self)
            guard packed + Int64(unaccounted) == Int64(sourceChunks) else {
                throw SyncError(.internalServerError, "moveUnverified", "\(packed) chunks are in the object store of \(sourceChunks) listed: run the final pass again")
            }
            try await setMarker("done", db)
        }
        logger.notice("installation moved", metadata: ["chunks": "\(sourceChunks)", "damaged": "\(done.damaged.count)", "missing": "\(done.missing.count)"])
    }
}
