import Foundation
import UbiquitySync
import UbiquityProtocol
import Logging
import PostgresNIO

extension PostgresDatabase {
    // MARK: Schema

    static let migrations: [(String, [String])] = [
        ("v1", [
            """
            CREATE TABLE account (
                id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE, password_hash TEXT NOT NULL,
                identity_token TEXT NOT NULL UNIQUE, quota_bytes BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL)
            """,
            """
            CREATE TABLE device (
                id TEXT PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                name TEXT NOT NULL, token_hash TEXT NOT NULL UNIQUE, containers TEXT,
                created DOUBLE PRECISION NOT NULL, revoked BOOLEAN NOT NULL DEFAULT FALSE)
            """,
            "CREATE INDEX device_account ON device(account_id)",
            """
            CREATE TABLE container (
                id BIGSERIAL PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                identifier TEXT NOT NULL, sequence BIGINT NOT NULL DEFAULT 0, UNIQUE(account_id, identifier))
            """,
            """
            CREATE TABLE item (
                container_id BIGINT NOT NULL REFERENCES container(id) ON DELETE CASCADE, id TEXT NOT NULL,
                current_revision TEXT NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(container_id, id))
            """,
            "CREATE INDEX item_sequence ON item(container_id, sequence)",
            """
            CREATE TABLE revision (
                id TEXT PRIMARY KEY, container_id BIGINT NOT NULL REFERENCES container(id) ON DELETE CASCADE,
                item_id TEXT NOT NULL, base_revision TEXT, device_id TEXT NOT NULL, device_name TEXT NOT NULL,
                name TEXT NOT NULL, parent TEXT, kind TEXT NOT NULL, size BIGINT NOT NULL,
                modification_date DOUBLE PRECISION NOT NULL, type TEXT, manifest BYTEA NOT NULL, deleted BOOLEAN NOT NULL,
                complete BOOLEAN NOT NULL, state TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)
            """,
            "CREATE INDEX revision_item ON revision(container_id, item_id, state)",
            "CREATE INDEX revision_state ON revision(state, created)",
            """
            CREATE TABLE revision_chunk (
                revision_id TEXT NOT NULL REFERENCES revision(id) ON DELETE CASCADE, account_id BIGINT NOT NULL,
                hash TEXT NOT NULL, PRIMARY KEY(revision_id, hash))
            """,
            "CREATE INDEX revision_chunk_hash ON revision_chunk(account_id, hash)",
            """
            CREATE TABLE chunk (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                size BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY(account_id, hash))
            """,
            // Chunk bytes, shared by every instance. Mostly compressed already: stored as they are.
            """
            CREATE TABLE chunk_content (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                data BYTEA NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY(account_id, hash))
            """,
            "ALTER TABLE chunk_content ALTER COLUMN data SET STORAGE EXTERNAL",
            """
            CREATE TABLE kv_store (
                id BIGSERIAL PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                identifier TEXT NOT NULL, sequence BIGINT NOT NULL DEFAULT 0, UNIQUE(account_id, identifier))
            """,
            """
            CREATE TABLE kv (
                store_id BIGINT NOT NULL REFERENCES kv_store(id) ON DELETE CASCADE, key TEXT NOT NULL,
                value BYTEA, size BIGINT NOT NULL, timestamp DOUBLE PRECISION NOT NULL, device_id TEXT NOT NULL,
                device_name TEXT NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(store_id, key))
            """,
            "CREATE INDEX kv_sequence ON kv(store_id, sequence)",
        ]),
        ("v2-change-ids", [
            "ALTER TABLE revision ADD COLUMN change_id TEXT",
            "CREATE UNIQUE INDEX revision_change ON revision(container_id, item_id, device_id, change_id) WHERE change_id IS NOT NULL",
        ]),
        // Each revision's content token, so brief answers need not decode its manifest.
        ("v3-digests", [
            "ALTER TABLE revision ADD COLUMN digest TEXT",
        ]),
        // Sign-in attempts per account name and per address, and blocks (SignInGuard).
        ("v4-sign-in-attempts", [
            """
            CREATE TABLE sign_in_attempt (
                key TEXT PRIMARY KEY, attempts INTEGER NOT NULL, last_attempt DOUBLE PRECISION NOT NULL,
                blocked_until DOUBLE PRECISION NOT NULL DEFAULT 0)
            """,
        ]),
        // Each item's folder and name key (NameCollision), indexed: a commit's name-clash check
        // looks up a few keys instead of reading the folder. NULL until filled in from the
        // current revision (`fillIndexKeys`, in Swift: the key is Swift's lowercasing).
        ("v5-item-name-index", [
            "ALTER TABLE item ADD COLUMN parent_key TEXT",
            "ALTER TABLE item ADD COLUMN name_key TEXT",
            "CREATE INDEX item_name ON item(container_id, parent_key, name_key)",
        ]),
        // What the quota counts, kept as counters (ServerRules): chunk bytes (kept by the chunks'
        // own inserts and deletes, a trigger), key-value bytes, what revisions cost, and the
        // declared bytes of chunks committed revisions wait for (a row per chunk, filled in
        // from the manifests by `fillPendingChunks`); and the account's items.
        ("v6-account-figures", [
            "ALTER TABLE account ADD COLUMN used_bytes BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE account ADD COLUMN key_value_bytes BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE account ADD COLUMN metadata_bytes BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE account ADD COLUMN pending_bytes BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE account ADD COLUMN item_count BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE revision ADD COLUMN cost BIGINT NOT NULL DEFAULT 0",
            """
            CREATE TABLE pending_chunk (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL, size BIGINT NOT NULL,
                PRIMARY KEY(account_id, hash))
            """,
            "UPDATE revision SET cost = \(RevisionCost.record) + octet_length(name) + octet_length(manifest)",
            """
            UPDATE account SET
                used_bytes = (SELECT COALESCE(SUM(size), 0) FROM chunk WHERE chunk.account_id = account.id),
                key_value_bytes = (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kv_store ON kv_store.id = kv.store_id WHERE kv_store.account_id = account.id),
                metadata_bytes = (SELECT COALESCE(SUM(revision.cost), 0) FROM revision JOIN container ON container.id = revision.container_id
                                  WHERE container.account_id = account.id),
                item_count = (SELECT COUNT(*) FROM item JOIN container ON container.id = item.container_id WHERE container.account_id = account.id)
            """,
            """
            CREATE FUNCTION chunk_bytes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    UPDATE account SET used_bytes = used_bytes + NEW.size WHERE id = NEW.account_id;
                    RETURN NEW;
                END IF;
                UPDATE account SET used_bytes = used_bytes - OLD.size WHERE id = OLD.account_id;
                RETURN OLD;
            END $$
            """,
            "CREATE TRIGGER chunk_bytes AFTER INSERT OR DELETE ON chunk FOR EACH ROW EXECUTE FUNCTION chunk_bytes_changed()",
        ]),
        // When each device was last heard from (the web interface's Devices page).
        ("v7-device-last-seen", ["ALTER TABLE device ADD COLUMN last_seen DOUBLE PRECISION"]),
        // Links anyone may download a published revision from (the token kept as a hash).
        ("v8-public-links", [
            """
            CREATE TABLE public_link (
                id TEXT PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                container TEXT NOT NULL, item TEXT NOT NULL, revision TEXT NOT NULL, name TEXT NOT NULL,
                token_hash TEXT NOT NULL UNIQUE, created DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL,
                revoked BOOLEAN NOT NULL DEFAULT FALSE)
            """,
            "CREATE INDEX public_link_account ON public_link(account_id, created)",
        ]),
        // Operators: accounts that may use the web interface's administration page.
        ("v9-account-admin", ["ALTER TABLE account ADD COLUMN admin BOOLEAN NOT NULL DEFAULT FALSE"]),
        // Each account's roster and the sealed copies of its root key (issue 45), and the
        // server's own settings (the escrow key's identifier, so every instance uses one).
        ("v10-account-keys", [
            """
            CREATE TABLE roster_entry (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, idx BIGINT NOT NULL, body BYTEA NOT NULL,
                PRIMARY KEY (account_id, idx))
            """,
            """
            CREATE TABLE key_envelope (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, epoch BIGINT NOT NULL, recipient TEXT NOT NULL,
                sender TEXT NOT NULL, body BYTEA NOT NULL, PRIMARY KEY (account_id, epoch, recipient))
            """,
            "CREATE TABLE server_setting (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ]),
        // Devices asking to join by a code (issue 45): kept ten minutes.
        ("v11-key-requests", [
            """
            CREATE TABLE key_request (
                id TEXT PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, device_id TEXT NOT NULL,
                signing BYTEA NOT NULL, agreement BYTEA NOT NULL, name TEXT NOT NULL, commitment BYTEA NOT NULL, created DOUBLE PRECISION NOT NULL,
                answerer TEXT, answer_nonce BYTEA, reveal_nonce BYTEA)
            """,
            "CREATE INDEX key_request_account ON key_request(account_id, created)",
        ]),
        // Sealed key-value changes (issue 45): the change as its device sealed it; `value` is
        // then empty for a value and NULL for a removal, as before.
        ("v12-sealed-key-values", ["ALTER TABLE kv ADD COLUMN sealed BYTEA"]),
        // A sealed chunk's SHA-256 (issue 45): its name is a keyed MAC the server cannot check.
        ("v13-sealed-chunk-digests", ["ALTER TABLE chunk_content ADD COLUMN digest BYTEA"]),
        // A chunk stored as a sealed patch (issue 45): the chunk it changes, kept while it is.
        ("v14-sealed-patches", ["ALTER TABLE chunk ADD COLUMN base TEXT"]),
        // A revision's sealed item record (issue 45): name, date, type and sizes, sealed by its device.
        ("v15-item-records", ["ALTER TABLE revision ADD COLUMN record BYTEA"]),
        // Devices' signed commits (issue 45), as sent, in the order they came: `total` is the
        // container's bytes of commits up to and with this one.
        ("v16-signed-commits", [
            """
            CREATE TABLE signed_commit (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, container TEXT NOT NULL, position BIGINT NOT NULL,
                device TEXT NOT NULL, sequence BIGINT NOT NULL, hash BYTEA NOT NULL, body BYTEA NOT NULL, content BYTEA NOT NULL,
                total BIGINT NOT NULL, PRIMARY KEY (account_id, container, position), UNIQUE (account_id, container, device, sequence))
            """,
        ]),
        // Revisions the server sealed in place (issue 45's upgrade): devices may hold the manifest
        // they had before, so it is no delta base; those still to seal have an index of their own.
        ("v17-sealed-in-place", [
            "ALTER TABLE revision ADD COLUMN sealed_in_place BOOLEAN NOT NULL DEFAULT FALSE",
            "CREATE INDEX revision_unsealed ON revision(container_id, created) WHERE record IS NULL",
        ]),
        // Browsers approved under Advanced (issue 45): whether a request is a browser's, and the
        // grants kept for browsers' sessions until they expire.
        ("v18-web-grants", [
            "ALTER TABLE key_request ADD COLUMN kind TEXT",
            """
            CREATE TABLE web_grant (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, device_id TEXT NOT NULL,
                body BYTEA NOT NULL, signature BYTEA NOT NULL, containers TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL,
                PRIMARY KEY(account_id, device_id))
            """,
        ]),
        // Public links under Advanced: the manifest a device sealed for the link's page.
        ("v19-link-manifests", ["ALTER TABLE public_link ADD COLUMN manifest BYTEA"]),
        // Checkpoints of signed commits: a part's place, and where its checkpoint starts when
        // part 0 named every device's last kept commit; a container's last whole checkpoint.
        ("v20-commit-checkpoints", [
            "ALTER TABLE signed_commit ADD COLUMN checkpoint_start BIGINT, ADD COLUMN checkpoint_part BIGINT, ADD COLUMN checkpoint_parts BIGINT",
            """
            CREATE TABLE commit_checkpoint (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, container TEXT NOT NULL,
                start BIGINT NOT NULL, dropped BIGINT NOT NULL, size BIGINT NOT NULL, PRIMARY KEY (account_id, container))
            """,
        ]),
        // Sharing with other accounts (issue 46): a share is one item of its owner's container;
        // each invitation to it (to a name with an account or not) is a row.
        ("v21-shares", [
            """
            CREATE TABLE share (
                id TEXT PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                container TEXT NOT NULL, item TEXT NOT NULL, epoch BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL,
                UNIQUE (account_id, container, item))
            """,
            """
            CREATE TABLE share_participant (
                id TEXT PRIMARY KEY, share_id TEXT NOT NULL REFERENCES share(id) ON DELETE CASCADE,
                account_id BIGINT REFERENCES account(id) ON DELETE CASCADE, name TEXT NOT NULL, role TEXT NOT NULL,
                state TEXT NOT NULL, invited DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL, changed DOUBLE PRECISION NOT NULL)
            """,
            "CREATE INDEX share_participant_share ON share_participant (share_id, name)",
            "CREATE INDEX share_participant_account ON share_participant (account_id)",
            "CREATE INDEX share_owner ON share (account_id, container)",
        ]),
        // Items moved out of a share: its participants are told each is gone.
        ("v22-share-exits", [
            """
            CREATE TABLE share_exit (
                share_id TEXT NOT NULL REFERENCES share(id) ON DELETE CASCADE, item TEXT NOT NULL, sequence BIGINT NOT NULL,
                PRIMARY KEY (share_id, sequence, item))
            """,
        ]),
        // Who made a revision through a share: the participant's account name (NULL: the owner).
        ("v23-revision-editor", [
            "ALTER TABLE revision ADD COLUMN editor TEXT",
        ]),
        // The keys of sharing: each account's sharing identity (its private keys sealed under the
        // account's root key) and each share's key envelopes.
        ("v24-sharing-keys", [
            """
            CREATE TABLE sharing_identity (
                account_id BIGINT PRIMARY KEY REFERENCES account(id) ON DELETE CASCADE,
                signing BYTEA NOT NULL, agreement BYTEA NOT NULL, sealed BYTEA NOT NULL, updated DOUBLE PRECISION NOT NULL)
            """,
            """
            CREATE TABLE share_key (
                share_id TEXT NOT NULL REFERENCES share(id) ON DELETE CASCADE, epoch BIGINT NOT NULL,
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, envelope BYTEA NOT NULL,
                PRIMARY KEY (share_id, epoch, account_id))
            """,
            "CREATE INDEX share_key_account ON share_key (account_id)",
        ]),
        // Chunk contents in an object store (issue 47, `--object-store`): each pack an immutable
        // object, recorded before it is written (`writing`), `live` once written and its chunks
        // pointed at it in the same transaction, `doomed` when nothing in it is live (its object
        // goes after a grace longer than any fetch). No foreign key to the account: an account
        // removed leaves its packs to be collected. Chunks waiting to be packed stay in
        // chunk_content (`packing`: until when a packer holds them).
        ("v25-object-packs", [
            """
            CREATE TABLE pack (
                id BIGSERIAL PRIMARY KEY, account_id BIGINT NOT NULL, object_key TEXT NOT NULL UNIQUE, state TEXT NOT NULL,
                size BIGINT NOT NULL, live_bytes BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, changed DOUBLE PRECISION NOT NULL,
                claimed_until DOUBLE PRECISION)
            """,
            "CREATE INDEX pack_state ON pack (state, changed)",
            "CREATE INDEX pack_account ON pack (account_id)",
            """
            CREATE TABLE packed_chunk (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                pack_id BIGINT NOT NULL REFERENCES pack(id), pack_offset BIGINT NOT NULL, length INTEGER NOT NULL, digest BYTEA,
                created DOUBLE PRECISION NOT NULL, PRIMARY KEY (account_id, hash))
            """,
            "CREATE INDEX packed_chunk_pack ON packed_chunk (pack_id)",
            "ALTER TABLE chunk_content ADD COLUMN packing DOUBLE PRECISION",
        ]),
        // Revisions devices are uploading now (issue 48, IncomingStorage): announced before their
        // chunks, so that other devices fetch them as they land.
        ("v26-incoming", [
            """
            CREATE TABLE incoming (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, container TEXT NOT NULL, item TEXT NOT NULL,
                device_id TEXT NOT NULL, device_name TEXT NOT NULL, body BYTEA NOT NULL, touched DOUBLE PRECISION NOT NULL,
                expires DOUBLE PRECISION NOT NULL, PRIMARY KEY (account_id, container, item, device_id))
            """,
            "CREATE INDEX incoming_expires ON incoming (expires)",
        ]),
        // What every commit reads of its account and seldom changes — its roster, its key
        // envelopes, the shares it owns — is kept in memory per generation (issue 49,
        // AccountFacts): the database itself counts each change of them.
        ("v32-account-generation", [
            "ALTER TABLE account ADD COLUMN generation BIGINT NOT NULL DEFAULT 0",
            """
            CREATE FUNCTION account_generation_changed() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'DELETE' THEN
                    UPDATE account SET generation = generation + 1 WHERE id = OLD.account_id;
                    RETURN OLD;
                END IF;
                UPDATE account SET generation = generation + 1 WHERE id = NEW.account_id;
                RETURN NEW;
            END $$
            """,
        ] + ["roster_entry", "key_envelope", "share"].map {
            "CREATE TRIGGER \($0)_generation AFTER INSERT OR UPDATE OR DELETE ON \($0) FOR EACH ROW EXECUTE FUNCTION account_generation_changed()"
        }),
    ]

    /// Records the chunks incomplete revisions wait for, at the sizes their manifests declare
    /// (once, when `v6-account-figures` is applied), and the accounts' pending bytes.
    static func fillPendingChunks(_ connection: PostgresConnection, logger: Logger) async throws {
        var accounts: [Int64] = [], hashes: [String] = [], sizes: [Int64] = []
        let rows = try await connection.query("""
            SELECT revision_chunk.account_id, revision_chunk.hash, revision.manifest FROM revision_chunk
            JOIN revision ON revision.id = revision_chunk.revision_id
            LEFT JOIN chunk ON chunk.account_id = revision_chunk.account_id AND chunk.hash = revision_chunk.hash
            WHERE NOT revision.complete AND chunk.hash IS NULL
            """, logger: logger)
        for try await (account, hash, manifest) in rows.decode((Int64, String, ByteBuffer).self) {
            // (An unreadable manifest: the chunk is reserved at 0 bytes rather than not at all.)
            let declared = (try? JSONDecoder().decode(Manifest.self, from: Data(manifest.readableBytesView)))?.allChunks.first { $0.hash == hash }?.size
            accounts.append(account); hashes.append(hash); sizes.append(declared ?? 0)
        }
        for start in stride(from: 0, to: hashes.count, by: 5_000) {
            let range = start..<min(start + 5_000, hashes.count)
            let (a, h, z) = (Array(accounts[range]), Array(hashes[range]), Array(sizes[range]))
            try await connection.query("""
                INSERT INTO pending_chunk (account_id, hash, size) SELECT * FROM UNNEST(\(a)::BIGINT[], \(h)::TEXT[], \(z)::BIGINT[]) ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        try await connection.query("""
            UPDATE account SET pending_bytes = (SELECT COALESCE(SUM(size), 0) FROM pending_chunk WHERE pending_chunk.account_id = account.id)
            """, logger: logger)
    }

    /// Fills in the folder and name keys of items that have none (those from before
    /// `v5-item-name-index`), 5,000 a statement.
    static func fillIndexKeys(_ connection: PostgresConnection, logger: Logger) async throws {
        var containers: [Int64] = [], items: [String] = [], parents: [String] = [], names: [String] = []
        let rows = try await connection.query("""
            SELECT item.container_id, item.id, revision.name, revision.parent, revision.deleted
            FROM item JOIN revision ON revision.id = item.current_revision WHERE item.name_key IS NULL
            """, logger: logger)
        for try await (container, item, name, parent, deleted) in rows.decode((Int64, String, String, String?, Bool).self) {
            let keys = NameCollision.indexKeys(name: name, parent: parent, deleted: deleted)
            containers.append(container); items.append(item); parents.append(keys.parent); names.append(keys.name)
        }
        for start in stride(from: 0, to: items.count, by: 5_000) {
            let range = start..<min(start + 5_000, items.count)
            let (c, i, p, n) = (Array(containers[range]), Array(items[range]), Array(parents[range]), Array(names[range]))
            try await connection.query("""
                UPDATE item SET parent_key = keys.parent, name_key = keys.name
                FROM UNNEST(\(c)::BIGINT[], \(i)::TEXT[], \(p)::TEXT[], \(n)::TEXT[]) AS keys(container, item, parent, name)
                WHERE item.container_id = keys.container AND item.id = keys.item
                """, logger: logger)
        }
    }

    /// The first key of the migrations' advisory lock (the second names the schema).
    static let migrationLockClass: Int32 = 723_745

    /// Takes the migrations' lock of `location`'s schema until the transaction ends.
    static func lockMigrations(_ connection: PostgresConnection, location: PostgresLocation, logger: Logger) async throws {
        let schema = location.schema ?? ""
        // (Its answer read: a wait that ends in an error, a lock timeout, is thrown here.)
        for try await _ in try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLockClass), hashtext(\(schema)))", logger: logger) {}
    }

    /// Applies the migrations not yet applied (one instance at a time per schema: an advisory
    /// lock named by the schema, so deployments in other schemas of the same database — tenants,
    /// or the test suite's hundred servers — never wait on each other's migrations; seen in CI:
    /// a server's start waited more than 90 s behind others' on the one lock the whole database
    /// shared). Returns the schema the tables are in.
    static func migrate(_ connection: PostgresConnection, location: PostgresLocation) async throws -> String {
        let logger = Logger(label: "ubiquity.server.migrate")
        try await connection.query("BEGIN", logger: logger)
        do {
            try await lockMigrations(connection, location: location, logger: logger)
            // (Under the lock: two instances creating the schema at once would collide.)
            if let schema = location.schema {
                try await connection.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger: logger)
            }
            try await connection.query("CREATE TABLE IF NOT EXISTS ubiquity_migration (version TEXT PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)", logger: logger)
            var applied = Set<String>()
            for try await version in try await connection.query("SELECT version FROM ubiquity_migration", logger: logger).decode(String.self) {
                applied.insert(version)
            }
            for (version, statements) in migrations where !applied.contains(version) {
                for statement in statements { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
                if version == "v6-account-figures" { try await fillPendingChunks(connection, logger: logger) }
                try await connection.query("INSERT INTO ubiquity_migration (version, applied) VALUES (\(version), \(Date().timeIntervalSince1970))", logger: logger)
            }
            try await fillIndexKeys(connection, logger: logger)
            var schema = "public"
            for try await name in try await connection.query("SELECT current_schema()", logger: logger).decode(String.self) { schema = name }
            try await connection.query("COMMIT", logger: logger)
            return schema
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger) // a broken connection rolls back by itself
            throw error
        }
    }
}
