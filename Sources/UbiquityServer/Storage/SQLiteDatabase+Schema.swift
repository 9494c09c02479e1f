import Foundation
import GRDB
import UbiquityProtocol
import UbiquitySync

// The embedded database's schema, one migration per change (never edited once released).
extension SQLiteDatabase {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE account (
                    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, passwordHash TEXT NOT NULL,
                    identityToken TEXT NOT NULL UNIQUE, quotaBytes INTEGER NOT NULL, created REAL NOT NULL);
                CREATE TABLE device (
                    id TEXT PRIMARY KEY, accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                    name TEXT NOT NULL, tokenHash TEXT NOT NULL UNIQUE, containers TEXT,
                    created REAL NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
                CREATE TABLE container (
                    id INTEGER PRIMARY KEY, accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                    identifier TEXT NOT NULL, sequence INTEGER NOT NULL DEFAULT 0, UNIQUE(accountId, identifier));
                CREATE TABLE item (
                    containerId INTEGER NOT NULL REFERENCES container(id) ON DELETE CASCADE, id TEXT NOT NULL,
                    currentRevision TEXT NOT NULL, sequence INTEGER NOT NULL, PRIMARY KEY(containerId, id));
                CREATE INDEX item_sequence ON item(containerId, sequence);
                CREATE TABLE revision (
                    id TEXT PRIMARY KEY, containerId INTEGER NOT NULL REFERENCES container(id) ON DELETE CASCADE,
                    itemId TEXT NOT NULL, baseRevision TEXT, deviceId TEXT NOT NULL, deviceName TEXT NOT NULL,
                    name TEXT NOT NULL, parent TEXT, kind TEXT NOT NULL, size INTEGER NOT NULL,
                    modificationDate REAL NOT NULL, type TEXT, manifest BLOB NOT NULL, deleted INTEGER NOT NULL,
                    complete INTEGER NOT NULL, state TEXT NOT NULL, created REAL NOT NULL);
                CREATE INDEX revision_item ON revision(containerId, itemId, state);
                CREATE TABLE revisionChunk (
                    revisionId TEXT NOT NULL REFERENCES revision(id) ON DELETE CASCADE, accountId INTEGER NOT NULL,
                    hash TEXT NOT NULL, PRIMARY KEY(revisionId, hash));
                CREATE INDEX revisionChunk_hash ON revisionChunk(accountId, hash);
                CREATE TABLE chunk (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                    size INTEGER NOT NULL, created REAL NOT NULL, PRIMARY KEY(accountId, hash));
                """)
        }
        migrator.registerMigration("v2-key-value") { db in
            try db.execute(sql: """
                CREATE TABLE kvStore (
                    id INTEGER PRIMARY KEY, accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                    identifier TEXT NOT NULL, sequence INTEGER NOT NULL DEFAULT 0, UNIQUE(accountId, identifier));
                CREATE TABLE kv (
                    storeId INTEGER NOT NULL REFERENCES kvStore(id) ON DELETE CASCADE, key TEXT NOT NULL,
                    value BLOB, size INTEGER NOT NULL, timestamp REAL NOT NULL, deviceId TEXT NOT NULL,
                    deviceName TEXT NOT NULL, sequence INTEGER NOT NULL, PRIMARY KEY(storeId, key));
                CREATE INDEX kv_sequence ON kv(storeId, sequence);
                """)
        }
        migrator.registerMigration("v3-change-ids") { db in
            try db.execute(sql: """
                ALTER TABLE revision ADD COLUMN changeId TEXT;
                CREATE UNIQUE INDEX revision_change ON revision(containerId, itemId, deviceId, changeId) WHERE changeId IS NOT NULL;
                """)
        }
        migrator.registerMigration("v4-digests") { db in
            // Each revision's content token, so brief answers need not decode its manifest
            // (revisions from before have none: their manifests are decoded).
            try db.execute(sql: "ALTER TABLE revision ADD COLUMN digest TEXT")
        }
        migrator.registerMigration("v5-used-bytes") { db in
            // Each account's stored bytes, kept by the chunks' own inserts and deletes: a quota
            // check reads one number instead of adding up every chunk the account has.
            try db.execute(sql: """
                ALTER TABLE account ADD COLUMN usedBytes INTEGER NOT NULL DEFAULT 0;
                UPDATE account SET usedBytes = (SELECT COALESCE(SUM(size), 0) FROM chunk WHERE chunk.accountId = account.id);
                CREATE TRIGGER chunk_stored AFTER INSERT ON chunk BEGIN
                    UPDATE account SET usedBytes = usedBytes + NEW.size WHERE id = NEW.accountId;
                END;
                CREATE TRIGGER chunk_removed AFTER DELETE ON chunk BEGIN
                    UPDATE account SET usedBytes = usedBytes - OLD.size WHERE id = OLD.accountId;
                END;
                """)
        }
        migrator.registerMigration("v6-revision-parent") { db in
            // A folder's items found by their folder (the names a commit settles against),
            // not by walking every item of the container.
            try db.execute(sql: "CREATE INDEX revision_parent ON revision(containerId, parent)")
        }
        migrator.registerMigration("v7-manifests-apart") { db in
            // A large file's manifest (about 300 KB of JSON for 64 MiB) in its revision's row made
            // every read of the row (a page of changes, an item's state) read it, and every
            // update of the row (demoted, completed) write it again: manifests live apart.
            try db.execute(sql: """
                CREATE TABLE revisionManifest (
                    revisionId TEXT PRIMARY KEY NOT NULL REFERENCES revision(id) ON DELETE CASCADE, manifest BLOB NOT NULL);
                INSERT INTO revisionManifest (revisionId, manifest) SELECT id, manifest FROM revision;
                ALTER TABLE revision DROP COLUMN manifest;
                """)
        }
        migrator.registerMigration("v8-revision-chunks-without-rowid") { db in
            // A revision's chunk references in one tree keyed by revision and hash (and the index
            // by hash), not a row-id tree plus two indexes: a large file's commit (a reference per
            // chunk, 4,000 for 64 MiB) writes a third less.
            try db.execute(sql: """
                CREATE TABLE revisionChunkByRevision (
                    revisionId TEXT NOT NULL REFERENCES revision(id) ON DELETE CASCADE, accountId INTEGER NOT NULL,
                    hash TEXT NOT NULL, PRIMARY KEY(revisionId, hash)) WITHOUT ROWID;
                INSERT INTO revisionChunkByRevision (revisionId, accountId, hash) SELECT revisionId, accountId, hash FROM revisionChunk;
                DROP TABLE revisionChunk;
                ALTER TABLE revisionChunkByRevision RENAME TO revisionChunk;
                CREATE INDEX revisionChunk_hash ON revisionChunk(accountId, hash);
                """)
        }
        migrator.registerMigration("v9-waiting-chunks") { db in
            // The index of every chunk reference by hash took a random page per reference: a
            // large file's commit (4,000 references) dirtied most of it, megabytes written and
            // synced for a 1-byte edit. What a hash must find is only the revisions still waiting
            // for that chunk (to complete them when it arrives): those few references are kept
            // apart, and the index goes (garbage collection joins the references once instead).
            try db.execute(sql: """
                CREATE TABLE revisionWaiting (
                    accountId INTEGER NOT NULL, hash TEXT NOT NULL, revisionId TEXT NOT NULL REFERENCES revision(id) ON DELETE CASCADE,
                    PRIMARY KEY(accountId, hash, revisionId)) WITHOUT ROWID;
                CREATE INDEX revisionWaiting_revision ON revisionWaiting(revisionId);
                INSERT INTO revisionWaiting (accountId, hash, revisionId)
                    SELECT revisionChunk.accountId, revisionChunk.hash, revisionChunk.revisionId FROM revisionChunk
                    JOIN revision ON revision.id = revisionChunk.revisionId
                    LEFT JOIN chunk ON chunk.accountId = revisionChunk.accountId AND chunk.hash = revisionChunk.hash
                    WHERE revision.complete = 0 AND chunk.hash IS NULL;
                DROP INDEX revisionChunk_hash;
                """)
        }
        migrator.registerMigration("v10-sign-in-attempts") { db in
            // Attempts per account name and per address, counted before any password is
            // checked, and blocks (SignInGuard); kept here so that every instance and the
            // operator's `ubiquity account unblock` see the same.
            try db.execute(sql: """
                CREATE TABLE signInAttempt (
                    key TEXT PRIMARY KEY, attempts INTEGER NOT NULL, lastAttempt REAL NOT NULL,
                    blockedUntil REAL NOT NULL DEFAULT 0) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v11-item-name-index") { db in
            // A commit's name-clash check read every live item of the folder (109 ms a commit
            // into a folder of 10,000): each item now carries its folder and its name's key
            // (NameCollision), indexed, so the check looks up a few keys instead.
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN parentKey TEXT NOT NULL DEFAULT '';
                ALTER TABLE item ADD COLUMN nameKey TEXT NOT NULL DEFAULT '';
                """)
            let rows = try Row.fetchCursor(db, sql: """
                SELECT item.containerId, item.id, revision.name, revision.parent, revision.deleted
                FROM item JOIN revision ON revision.id = item.currentRevision
                """)
            let update = try db.makeStatement(sql: "UPDATE item SET parentKey = ?, nameKey = ? WHERE containerId = ? AND id = ?")
            var keys: [(Int64, String, String, String)] = []
            while let row = try rows.next() {
                let key = NameCollision.indexKeys(name: row["name"], parent: row["parent"], deleted: row["deleted"])
                keys.append((row["containerId"], row["id"], key.parent, key.name))
            }
            for (container, item, parent, name) in keys { try update.execute(arguments: [parent, name, container, item]) }
            try db.execute(sql: "CREATE INDEX item_name ON item(containerId, parentKey, nameKey)")
        }
        migrator.registerMigration("v12-container-chunks") { db in
            // Which chunks each container's revisions name, once each: a device whose token is
            // limited to some containers reads only those chunks (chunks are the account's,
            // shared by its containers). An edit adds only its new chunks.
            try db.execute(sql: """
                CREATE TABLE containerChunk (
                    containerId INTEGER NOT NULL REFERENCES container(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                    PRIMARY KEY (containerId, hash)) WITHOUT ROWID;
                INSERT OR IGNORE INTO containerChunk (containerId, hash)
                    SELECT revision.containerId, revisionChunk.hash FROM revisionChunk JOIN revision ON revision.id = revisionChunk.revisionId;
                """)
        }
        migrator.registerMigration("v13-account-figures") { db in
            // What the quota counts besides chunks, kept as counters the rules (ServerRules)
            // update: key-value bytes, what revisions cost (their record, name and manifest),
            // and the declared bytes of chunks committed revisions wait for (one row per chunk,
            // so a chunk waited for twice is counted once); and the account's items.
            try db.execute(sql: """
                ALTER TABLE account ADD COLUMN keyValueBytes INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE account ADD COLUMN metadataBytes INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE account ADD COLUMN pendingBytes INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE account ADD COLUMN itemCount INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE revision ADD COLUMN cost INTEGER NOT NULL DEFAULT 0;
                CREATE TABLE pendingChunk (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL, size INTEGER NOT NULL,
                    PRIMARY KEY(accountId, hash)) WITHOUT ROWID;
                UPDATE revision SET cost = \(RevisionCost.record) + LENGTH(CAST(name AS BLOB))
                    + COALESCE((SELECT LENGTH(manifest) FROM revisionManifest WHERE revisionId = revision.id), 0);
                UPDATE account SET
                    keyValueBytes = (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kvStore ON kvStore.id = kv.storeId WHERE kvStore.accountId = account.id),
                    metadataBytes = (SELECT COALESCE(SUM(revision.cost), 0) FROM revision JOIN container ON container.id = revision.containerId
                                     WHERE container.accountId = account.id),
                    itemCount = (SELECT COUNT(*) FROM item JOIN container ON container.id = item.containerId WHERE container.accountId = account.id);
                """)
            // The chunks revisions wait for, at the sizes their manifests declare.
            let waiting = try Row.fetchAll(db, sql: "SELECT accountId, hash, revisionId FROM revisionWaiting ORDER BY revisionId")
            var manifests: [String: [String: Int64]] = [:]
            for row in waiting {
                let revision: String = row["revisionId"]
                if manifests[revision] == nil {
                    let stored = try Data.fetchOne(db, sql: "SELECT manifest FROM revisionManifest WHERE revisionId = ?", arguments: [revision]) ?? Data()
                    let manifest = (try? JSONDecoder().decode(Manifest.self, from: stored)) ?? Manifest() // (unreadable: counted as 0 bytes)
                    manifests[revision] = Dictionary(manifest.allChunks.map { ($0.hash, $0.size) }) { first, _ in first }
                }
                try db.execute(sql: "INSERT OR IGNORE INTO pendingChunk (accountId, hash, size) VALUES (?, ?, ?)",
                               arguments: [row["accountId"] as Int64, row["hash"] as String, manifests[revision]?[row["hash"] as String] ?? 0])
            }
            try db.execute(sql: "UPDATE account SET pendingBytes = (SELECT COALESCE(SUM(size), 0) FROM pendingChunk WHERE accountId = account.id)")
        }
        migrator.registerMigration("v14-device-last-seen") { db in
            // When each device was last heard from (the web interface's Devices page).
            try db.execute(sql: "ALTER TABLE device ADD COLUMN lastSeen REAL")
        }
        migrator.registerMigration("v15-public-links") { db in
            // Links anyone may download a published revision from (the token kept as a hash).
            try db.execute(sql: """
                CREATE TABLE publicLink (
                    id TEXT PRIMARY KEY, accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                    container TEXT NOT NULL, item TEXT NOT NULL, revision TEXT NOT NULL, name TEXT NOT NULL,
                    tokenHash TEXT NOT NULL UNIQUE, created REAL NOT NULL, expires REAL NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
                CREATE INDEX publicLink_account ON publicLink(accountId, created);
                """)
        }
        migrator.registerMigration("v16-account-admin") { db in
            // Operators: accounts that may use the web interface's administration page.
            try db.execute(sql: "ALTER TABLE account ADD COLUMN admin INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v17-account-keys") { db in
            // Each account's roster and the sealed copies of its root key (issue 45), and the
            // server's own settings (the escrow key's identifier, so every instance uses one).
            try db.execute(sql: """
                CREATE TABLE rosterEntry (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, idx INTEGER NOT NULL, body BLOB NOT NULL,
                    PRIMARY KEY(accountId, idx));
                CREATE TABLE keyEnvelope (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, epoch INTEGER NOT NULL, recipient TEXT NOT NULL,
                    sender TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY(accountId, epoch, recipient));
                CREATE TABLE serverSetting (name TEXT PRIMARY KEY, value TEXT NOT NULL);
                """)
        }
        migrator.registerMigration("v18-key-requests") { db in
            // Devices asking to join by a code (issue 45): kept ten minutes.
            try db.execute(sql: """
                CREATE TABLE keyRequest (
                    id TEXT PRIMARY KEY, accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, deviceId TEXT NOT NULL,
                    signing BLOB NOT NULL, agreement BLOB NOT NULL, name TEXT NOT NULL, commitment BLOB NOT NULL, created REAL NOT NULL,
                    answerer TEXT, answerNonce BLOB, revealNonce BLOB);
                CREATE INDEX keyRequest_account ON keyRequest(accountId, created);
                """)
        }
        migrator.registerMigration("v19-sealed-key-values") { db in
            // Sealed key-value changes (issue 45): the change as its device sealed it; `value`
            // is then empty for a value and NULL for a removal, as before.
            try db.execute(sql: "ALTER TABLE kv ADD COLUMN sealed BLOB")
        }
        migrator.registerMigration("v20-sealed-patches") { db in
            // A chunk stored as a sealed patch (issue 45): the chunk it changes, which is kept
            // while the chunk is (a device made the patch; the server cannot make the chunk).
            try db.execute(sql: "ALTER TABLE chunk ADD COLUMN base TEXT")
        }
        migrator.registerMigration("v21-item-records") { db in
            // A revision's sealed item record (issue 45): its name, date, type and sizes,
            // sealed by its device; the server keeps it as it is.
            try db.execute(sql: "ALTER TABLE revision ADD COLUMN record BLOB")
        }
        migrator.registerMigration("v22-signed-commits") { db in
            // Devices' signed commits (issue 45), as sent, in the order they came: `total` is
            // the container's bytes of commits up to and with this one.
            try db.execute(sql: """
                CREATE TABLE signedCommit (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, container TEXT NOT NULL, position INTEGER NOT NULL,
                    device TEXT NOT NULL, sequence INTEGER NOT NULL, hash BLOB NOT NULL, body BLOB NOT NULL, content BLOB NOT NULL,
                    total INTEGER NOT NULL, PRIMARY KEY(accountId, container, position), UNIQUE(accountId, container, device, sequence));
                """)
        }
        migrator.registerMigration("v23-sealed-in-place") { db in
            // Revisions the server sealed in place (issue 45's upgrade): devices may hold the
            // manifest they had before, so it is no delta base. The revisions still to seal are
            // found by an index of their own.
            try db.execute(sql: """
                ALTER TABLE revision ADD COLUMN sealedInPlace INTEGER NOT NULL DEFAULT 0;
                CREATE INDEX revision_unsealed ON revision(containerId, created) WHERE record IS NULL;
                """)
        }
        migrator.registerMigration("v24-web-grants") { db in
            // Browsers approved under Advanced (issue 45): a request says whether a browser
            // asks; a device's grant (the containers' keys sealed to the browser) is kept for
            // the browser's session until it expires.
            try db.execute(sql: """
                ALTER TABLE keyRequest ADD COLUMN kind TEXT;
                CREATE TABLE webGrant (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, deviceId TEXT NOT NULL,
                    body BLOB NOT NULL, signature BLOB NOT NULL, containers TEXT NOT NULL, expires REAL NOT NULL,
                    PRIMARY KEY(accountId, deviceId));
                """)
        }
        migrator.registerMigration("v25-link-manifests") { db in
            // Public links under Advanced (issue 45): the manifest a device sealed for the
            // link's page (its key rides in the link's fragment, never here).
            try db.execute(sql: "ALTER TABLE publicLink ADD COLUMN manifest BLOB")
        }
        migrator.registerMigration("v26-commit-checkpoints") { db in
            // Checkpoints of signed commits (issue 45): a part's place, and where its checkpoint
            // starts when part 0 named every device's last kept commit; a container's last whole
            // checkpoint, the commits before which are dropped.
            try db.execute(sql: """
                ALTER TABLE signedCommit ADD COLUMN checkpointStart INTEGER;
                ALTER TABLE signedCommit ADD COLUMN checkpointPart INTEGER;
                ALTER TABLE signedCommit ADD COLUMN checkpointParts INTEGER;
                CREATE TABLE commitCheckpoint (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, container TEXT NOT NULL,
                    start INTEGER NOT NULL, dropped INTEGER NOT NULL, size INTEGER NOT NULL, PRIMARY KEY(accountId, container));
                """)
        }
        migrator.registerMigration("v27-shares") { db in
            // Sharing with other accounts (issue 46): a share is one item of its owner's
            // container; each invitation to it (to a name with an account or not) is a row.
            try db.execute(sql: """
                CREATE TABLE share (
                    id TEXT PRIMARY KEY, accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                    container TEXT NOT NULL, item TEXT NOT NULL, epoch INTEGER NOT NULL, created REAL NOT NULL,
                    UNIQUE(accountId, container, item));
                CREATE TABLE shareParticipant (
                    id TEXT PRIMARY KEY, shareId TEXT NOT NULL REFERENCES share(id) ON DELETE CASCADE,
                    accountId INTEGER REFERENCES account(id) ON DELETE CASCADE, name TEXT NOT NULL, role TEXT NOT NULL,
                    state TEXT NOT NULL, invited REAL NOT NULL, expires REAL NOT NULL, changed REAL NOT NULL);
                CREATE INDEX shareParticipant_share ON shareParticipant(shareId, name);
                CREATE INDEX shareParticipant_account ON shareParticipant(accountId);
                CREATE INDEX share_owner ON share(accountId, container);
                """)
        }
        migrator.registerMigration("v28-share-exits") { db in
            // Items moved out of a share (issue 46): its participants are told each is gone.
            try db.execute(sql: """
                CREATE TABLE shareExit (
                    shareId TEXT NOT NULL REFERENCES share(id) ON DELETE CASCADE, item TEXT NOT NULL, sequence INTEGER NOT NULL,
                    PRIMARY KEY (shareId, sequence, item)) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v29-revision-editor") { db in
            // Who made a revision through a share (issue 46): the participant's account name,
            // kept with it (NULL: the container's owner).
            try db.execute(sql: "ALTER TABLE revision ADD COLUMN editor TEXT")
        }
        migrator.registerMigration("v30-sharing-keys") { db in
            // The keys of sharing (issue 46): each account's sharing identity (its private keys
            // sealed under the account's root key) and each share's key envelopes.
            try db.execute(sql: """
                CREATE TABLE sharingIdentity (
                    accountId INTEGER PRIMARY KEY REFERENCES account(id) ON DELETE CASCADE,
                    signing BLOB NOT NULL, agreement BLOB NOT NULL, sealed BLOB NOT NULL, updated REAL NOT NULL);
                CREATE TABLE shareKey (
                    shareId TEXT NOT NULL REFERENCES share(id) ON DELETE CASCADE, epoch INTEGER NOT NULL,
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, envelope BLOB NOT NULL,
                    PRIMARY KEY (shareId, epoch, accountId)) WITHOUT ROWID;
                CREATE INDEX shareKey_account ON shareKey(accountId);
                """)
        }
        migrator.registerMigration("v31-incoming") { db in
            // Revisions devices are uploading now (issue 48, IncomingStorage): announced before
            // their chunks, so that other devices fetch them as they land.
            try db.execute(sql: """
                CREATE TABLE incoming (
                    accountId INTEGER NOT NULL REFERENCES account(id) ON DELETE CASCADE, container TEXT NOT NULL, item TEXT NOT NULL,
                    deviceId TEXT NOT NULL, deviceName TEXT NOT NULL, body BLOB NOT NULL, touched REAL NOT NULL, expires REAL NOT NULL,
                    PRIMARY KEY (accountId, container, item, deviceId));
                CREATE INDEX incoming_expires ON incoming(expires);
                """)
        }
        migrator.registerMigration("v32-account-generation") { db in
            // What every commit reads of its account and seldom changes — its roster, its key
            // envelopes, the shares it owns — is kept in memory per generation (issue 49,
            // AccountFacts): the database itself counts each change of them.
            var statements = ["ALTER TABLE account ADD COLUMN generation INTEGER NOT NULL DEFAULT 0"]
            for table in ["rosterEntry", "keyEnvelope", "share"] {
                for (event, row) in [("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")] {
                    statements.append("""
                        CREATE TRIGGER \(table)_generation_\(event.lowercased()) AFTER \(event) ON \(table)
                        BEGIN UPDATE account SET generation = generation + 1 WHERE id = \(row).accountId; END
                        """)
                }
            }
            for statement in statements { try db.execute(sql: statement) }
        }
        return migrator
    }
}
