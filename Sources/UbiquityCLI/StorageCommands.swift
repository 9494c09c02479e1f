import ArgumentParser
import Foundation
import Synchronization
import UbiquityServer

/// `ubiquity storage migrate`: chunk contents from the database's rows into the object store, or
/// a whole embedded installation (`--from-data`) into PostgreSQL and the object store.
struct StorageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storage",
        abstract: "Manage where chunk contents are kept.",
        subcommands: [Migrate.self])

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "migrate",
            abstract: "Move chunk contents kept in the database's rows into the object store, or an embedded installation into PostgreSQL and the object store.",
            discussion: """
                Chunks in PostgreSQL's rows: start every server instance with --object-store first (they then read chunks from both places), then run this with the same --database and --object-store. \
                An embedded installation (--from-data DIR: ubiquity.sqlite and its chunk folder) into an empty --database: run this while its server serves, as often as you like (it moves the chunks stored so far, the bulk of the bytes); \
                then stop the server and every command on DIR and run it with --final (it copies every table, moves what came since, checks every count, and lets `ubiquity serve --database … --object-store …` start). \
                DIR is only read; keep its escrow.key and give it to serve with --escrow-key. \
                Each chunk is checked against its name before it moves; damaged ones stay for `ubiquity fsck`. Safe to stop at any point and to run again: it goes on where it stopped. \
                Exits 1 when damaged chunks were left.
                """)

        @OptionGroup var storage: StorageOptions

        @Option(name: .long, help: "An embedded installation's data directory to move into --database and --object-store.")
        var fromData: String?

        @Flag(name: .long, help: "With --from-data: every server and command on it is stopped; copy the tables and finish the move.")
        var final = false

        func run() async throws {
            guard storage.objectStore != nil else { throw ValidationError("give --object-store (and --database): where the chunks go") }
            if let fromData { return try await moveInstallation(fromData) }
            guard !final else { throw ValidationError("--final finishes a move --from-data") }
            let done = try await storage.withAdministration { admin in
                try await admin.migrateChunks { progress in
                    print("moved \(progress.chunks) chunk(s), \(progress.bytes) bytes, in \(progress.packs) pack(s); \(progress.leftChunks) chunk(s), \(progress.leftBytes) bytes still in the database")
                }
            }
            for chunk in done.damaged.prefix(20) { print("damaged, left in the database: account \(chunk.account) \(chunk.hash)") }
            if done.damaged.count > 20 { print("… and \(done.damaged.count - 20) more") }
            print(done.damaged.isEmpty ? "done" : "done; \(done.damaged.count) damaged chunk(s) left: run ubiquity fsck --repair")
            if !done.damaged.isEmpty { throw ExitCode(1) }
        }
    
        /// `--from-data`: a pass while the embedded server serves, or the final one.
        func moveInstallation(_ directory: String) async throws {
            let clock = ContinuousClock(), start = clock.now
            let shown = Mutex(start)
            let done = try await storage.withAdministration { admin in
                try await InstallationMove.run(from: directory, into: admin, final: final) { progress in
                    let now = clock.now
                    guard shown.withLock({ last in
                        guard now - last >= .seconds(2) else { return false }
                        last = now
                        return true
                    }) else { return }
                    print("moved \(progress.chunks) chunk(s), \(progress.bytes) bytes, in \(progress.packs) pack(s)")
                }
            }
            if done.finished && done.rows.isEmpty && done.packs == 0 && done.movedBefore == 0 {
                print("this database was filled from an embedded installation already: nothing to do")
                return
            }
            for (table, rows) in done.rows.sorted(by: { $0.key < $1.key }) where rows > 0 { print("copied \(table): \(rows) row(s)") }
            print("moved \(done.chunks) chunk(s), \(done.bytes) bytes, in \(done.packs) pack(s) (\(done.movedBefore) moved before) in \(clock.now - start)")
            for chunk in (done.damaged + done.missing).prefix(20) { print("not moved: account \(chunk.account) \(chunk.hash)") }
            if done.finished {
                print("done: serve with --database and --object-store" + (FileManager.default.fileExists(atPath: directory + "/escrow.key") ? " and --escrow-key \(directory)/escrow.key" : ""))
            } else {
                print("the server may go on serving; stop it (and every command on \(directory)) and run this again with --final")
            }
            if !done.damaged.isEmpty || !done.missing.isEmpty {
                print("\(done.damaged.count) damaged and \(done.missing.count) missing chunk(s) not moved: run ubiquity fsck --repair on the new storage")
                throw ExitCode(1)
            }
        }
    }
}
