import Crypto
import Foundation
import GRDB
import Logging
import Testing
import UbiquityClient
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityAgent
@testable import UbiquityServer

/// A container's chunks sealed end to end (issue 45's data path): devices holding the account's
/// keys cut files with the keyed chunker, name chunks by a keyed MAC, seal them before they leave
/// and open and check them when they come; the server keeps only sealed bytes, under names that
/// are no content hash.
extension ContainerSyncTests {
    /// A device whose container seals its chunks with the account's keys (set up by the first,
    /// joined by the escrow by the next, as the agent does).
    func sealingDevice(_ name: String, base: URL, dir: String) async throws -> Device {
        let home = URL(fileURLWithPath: dir).appendingPathComponent(name)
        let paths = UbiquityPaths(configuration: home.appendingPathComponent("config"), data: home.appendingPathComponent("data"))
        let credentials = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: name, savingTo: paths)
        let client = SyncClient(server: base, token: credentials.token)
        let keys = SessionKeys(keys: AccountKeys(credentials: credentials, paths: paths, client: client), deviceName: name, logger: Logger(label: "test"))
        let root = home.appendingPathComponent("container")
        let sync = try ContainerSync(container: notes, root: root, client: client, store: try AgentStore(path: dir + "/\(name).sqlite"),
                                     device: name, greedy: true, codecs: { try await keys.codec(of: $0) })
        return Device(sync: sync, documents: root.appendingPathComponent("Documents"), client: client)
    }

    /// Every byte the server keeps: its data folder's files, read whole.
    func serverBytes(_ dir: String) throws -> [(path: String, bytes: Data)] {
        let folder = dir + "/server"
        let paths = FileManager.default.enumerator(atPath: folder)?.compactMap { $0 as? String } ?? []
        return try paths.compactMap { path in
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: folder + "/" + path, isDirectory: &isDirectory), !isDirectory.boolValue else { return nil }
            return (path, try Data(contentsOf: URL(fileURLWithPath: folder + "/" + path)))
        }
    }

    @Test func sealedContentsTravelAndTheServerKeepsNeitherThemNorTheirHashes() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            var random = SystemRandomNumberGenerator()
            let marker = "the-plaintext-marker-\(UUID().uuidString)"
            let note = Data("\(marker) in a small note".utf8)
            // A large file: text the marker is repeated through (so any plaintext chunk holds it).
            var large = Data()
            while large.count < 3_000_000 { large.append(Data("\(marker) \(UInt64.random(in: 0...UInt64.max, using: &random))\n".utf8)) }
            try laptop.write("Note.txt", note)
            try laptop.write("Large.txt", large)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Note.txt")) == note)
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Large.txt")) == large)

            // An edit in the middle travels as chunks of its own, sealed too.
            var edited = large
            edited.replaceSubrange(1_500_000..<1_500_010, with: Data("EDITED....".utf8))
            try laptop.write("Large.txt", edited)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Large.txt")) == edited)
            let sealedOnBoth = (await laptop.sync.codec.sealed, await phone.sync.codec.sealed)
            #expect(sealedOnBoth == (true, true))

            // The server keeps no plaintext, and no chunk is named by its SHA-256 (nor is any
            // file): the names are keyed MACs the server cannot make.
            let plainNames = Set([note, large, edited].flatMap { ChunkCodec.plain.chunks(of: $0).map(\.hash) }
                                 + [note, large, edited].map { SHA256.hash(data: $0).lowercaseHex })
            let stored = try serverBytes(dir)
            #expect(!stored.isEmpty)
            for (path, bytes) in stored {
                #expect(bytes.range(of: Data(marker.utf8)) == nil, "plaintext in \(path)")
                for name in plainNames {
                    #expect(bytes.range(of: Data(name.utf8)) == nil, "a content hash in \(path)")
                }
            }
            // The names the server knows are the keyed ones the devices cut.
            let store = try FileChunkStore(directory: dir + "/server/chunks")
            let names = Set(try await store.index.read { db in try String.fetchAll(db, sql: "SELECT hash FROM chunk") })
            let cut = try await laptop.sync.codec.chunks(ofFileAt: laptop.documents.appendingPathComponent("Large.txt"))
            #expect(Set(cut.map(\.hash)).isSubset(of: names))
            #expect(names.isDisjoint(with: plainNames))
        }
    }

    /// The server answering one sealed chunk's bytes for another (its index edited: each
    /// chunk's place and digest swapped, so its own damage check passes): the device opens and
    /// checks what comes, refuses it and writes nothing; the file it had stays as it was.
    @Test func aSealedChunkServedForAnotherIsRefusedAndNothingIsWritten() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            var random = SystemRandomNumberGenerator()
            let first = Data((0..<300_000).map { _ in UInt8.random(in: 0...255, using: &random) })
            try laptop.write("Data.bin", first)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Data.bin")) == first)

            // A new version whose chunks are all new; the server swaps two of them.
            let second = Data((0..<300_000).map { _ in UInt8.random(in: 0...255, using: &random) })
            try laptop.write("Data.bin", second)
            try await laptop.sync.syncOnce()
            let fresh = try await laptop.sync.codec.chunks(ofFileAt: laptop.documents.appendingPathComponent("Data.bin")).map(\.hash)
            let store = try FileChunkStore(directory: dir + "/server/chunks")
            try await store.index.write { db in
                let rows = try fresh.prefix(2).map { hash in try #require(try Row.fetchOne(db, sql: "SELECT pack, offset, length, digest FROM chunk WHERE hash = ?", arguments: [hash])) }
                for (hash, row) in zip(fresh.prefix(2), rows.reversed()) {
                    try db.execute(sql: "UPDATE chunk SET pack = ?, offset = ?, length = ?, digest = ? WHERE hash = ?",
                                   arguments: [row["pack"], row["offset"], row["length"], row["digest"], hash])
                }
            }
            try? await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Data.bin")) == first, "the swapped chunks are never written")
            let problems = await phone.sync.downloadErrors.values.joined(separator: " ")
            #expect(problems.contains("not the chunk asked for") || problems.contains("damaged"), "\(problems)")
        }
    }
}
