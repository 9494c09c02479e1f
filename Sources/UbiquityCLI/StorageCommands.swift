import ArgumentParser
import Foundation
import UbiquityServer

/// `ubiquity storage migrate`: chunk contents from the database's rows into the object store.
struct StorageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storage",
        abstract: "Manage where chunk contents are kept.",
        subcommands: [Migrate.self])

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "migrate",
            abstract: "Move chunk contents kept in the database's rows into the object store.",
            discussion: """
                Start every server instance with --object-store first (they then read chunks from both places), then run this with the same --database and --object-store. \
                Each chunk is checked against its name before it moves; damaged ones stay for `ubiquity fsck`. Safe to stop at any point and to run again: it goes on where it stopped. \
                Exits 1 when damaged chunks were left.
                """)

        @OptionGroup var storage: StorageOptions

        func run() async throws {
            guard storage.objectStore != nil else { throw ValidationError("give --object-store (and --database): where the chunks go") }
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
    }
}
