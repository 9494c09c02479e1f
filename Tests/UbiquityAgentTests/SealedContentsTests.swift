import Crypto
import Foundation
import GRDB
import Logging
import Testing
import UbiquityTestSupport
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
    /// How a test device's container handles chunks.
    enum Chunks {
        /// Sealed with the account's keys.
        case sealing
        /// In plaintext, the sealed ones of other devices opened (keys held, not sealing).
        case reading
        /// In plaintext, keys not looked at (an agent of before).
        case plain
    }

    /// `name`'s device with a container sync over its store and folder in `dir` (signed in
    /// first unless it was): keys set up by the account's first device, joined by the escrow by
    /// the next, as the agent does.
    func keyedDevice(_ name: String, base: URL, dir: String, chunks: Chunks, greedy: Bool = true) async throws -> Device {
        let home = URL(fileURLWithPath: dir).appendingPathComponent(name)
        let paths = UbiquityPaths(configuration: home.appendingPathComponent("config"), data: home.appendingPathComponent("data"))
        var credentials = try UbiquityCredentials.load(from: paths)
        if credentials == nil {
            credentials = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: name, savingTo: paths)
        }
        let signedIn = try #require(credentials)
        let client = SyncClient(server: base, token: signedIn.token)
        let keys = SessionKeys(keys: AccountKeys(credentials: signedIn, paths: paths, client: client), deviceName: name, logger: Logger(label: "test"))
        var codecs: (@Sendable (String) async throws -> ChunkCodec)?
        if chunks != .plain {
            let sealing = chunks == .sealing
            codecs = { try await keys.codec(of: $0, sealing: sealing) }
        }
        let root = home.appendingPathComponent("container")
        let sync = try ContainerSync(container: notes, root: root, client: client, store: try AgentStore(path: dir + "/\(name).sqlite"),
                                     device: name, greedy: greedy, codecs: codecs)
        return Device(sync: sync, documents: root.appendingPathComponent("Documents"), client: client)
    }

    /// A device whose container seals its chunks.
    func sealingDevice(_ name: String, base: URL, dir: String) async throws -> Device {
        try await keyedDevice(name, base: base, dir: dir, chunks: .sealing)
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
            // (Every stored byte read once per name: long CPU work, on a thread of its own.)
            let found = try await onBackgroundThread {
                stored.flatMap { path, bytes in
                    (bytes.range(of: Data(marker.utf8)) == nil ? [] : ["plaintext in \(path)"])
                        + plainNames.filter { bytes.range(of: Data($0.utf8)) != nil }.map { _ in "a content hash in \(path)" }
                }
            }
            #expect(found.isEmpty, "\(found)")
            // The names the server knows are the keyed ones the devices cut.
            let store = try FileChunkStore(directory: dir + "/server/chunks")
            let names = Set(try await store.index.read { db in try String.fetchAll(db, sql: "SELECT hash FROM chunk") })
            let cut = try await laptop.sync.codec.chunks(ofFileAt: laptop.documents.appendingPathComponent("Large.txt"))
            #expect(Set(cut.map(\.hash)).isSubset(of: names))
            #expect(names.isDisjoint(with: plainNames))
        }
    }

    /// Two names of one folder that differ only by case (one file on a case-insensitive file
    /// system), sealed: the server sees one tag, refuses the second (it cannot rename a sealed
    /// item), and the device renames its own file as the server would have — "Name 2.ext" — and
    /// sends it again. Both files reach the other device, each with its contents; nothing is lost.
    @Test func aSealedNameThatClashesIsRenamedByItsDevice() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            try laptop.write("Trip.txt", Data("lower".utf8))
            try laptop.write("TRIP.txt", Data("upper".utf8))
            for _ in 0..<3 { try await laptop.sync.syncOnce() }
            try await phone.sync.syncOnce()
            let onLaptop = try FileManager.default.contentsOfDirectory(atPath: laptop.documents.path).sorted()
            let onPhone = try FileManager.default.contentsOfDirectory(atPath: phone.documents.path).sorted()
            #expect(onLaptop.count == 2 && onLaptop.contains { $0.hasSuffix(" 2.txt") }, "\(onLaptop)")
            #expect(onPhone == onLaptop, "\(onPhone)")
            let texts = Set(try onPhone.map { try String(contentsOf: phone.documents.appendingPathComponent($0), encoding: .utf8) })
            #expect(texts == ["lower", "upper"])
            let errors = await laptop.sync.errors
            #expect(errors.isEmpty, "\(errors)")
        }
    }

    /// Found by `ubiquity-chaos --sealed-share`, seed 56: a file removed and another written
    /// under its name (here: by case only, one sealed tag) in one look. The new one's change was
    /// refused as clashing before the removal reached the server, and the device renamed it
    /// "Name 2.ext" for good, though the name was about to be free. A change waits while the item
    /// that holds its name is one this device is taking away; then it goes under its own name.
    @Test func aNameThisDeviceIsFreeingIsWaitedForNotRenamed() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            for name in ["Plan.txt", "Zebra.txt"] {
                try laptop.write(name, Data("old \(name)".utf8))
            }
            try await laptop.sync.syncOnce()
            for name in ["Plan.txt", "Zebra.txt"] {
                try FileManager.default.removeItem(at: laptop.documents.appendingPathComponent(name))
                try laptop.write(name.uppercased(), Data("new \(name)".utf8))
            }
            for _ in 0..<4 { try await laptop.sync.syncOnce() }
            try await phone.sync.syncOnce()
            let onLaptop = try FileManager.default.contentsOfDirectory(atPath: laptop.documents.path).sorted()
            #expect(onLaptop == ["PLAN.TXT", "ZEBRA.TXT"], "\(onLaptop)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: phone.documents.path).sorted() == onLaptop)
            let errors = await laptop.sync.errors
            #expect(errors.isEmpty, "\(errors)")
        }
    }

    /// The server answering one sealed chunk's bytes for another (its index edited: each
    /// chunk's place and digest swapped, so its own damage check passes): the device opens and
    /// checks what comes, refuses it and writes nothing; the file it had stays as it was.
    @Test func aSealedChunkServedForAnotherIsRefusedAndNothingIsWritten() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            let first = randomBytes(300_000)
            try laptop.write("Data.bin", first)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Data.bin")) == first)

            // A new version whose chunks are all new; the server swaps two of them.
            let second = randomBytes(300_000)
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

/// The sealed codec on its own: what it names, cuts, seals and opens, and what it refuses.
@Suite struct SealedChunkCodecTests {
    let container = "ABCDE12345.com.example.notes"

    @Test func itNamesCutsSealsAndOpensAndReadsChunksFromBeforeTheKeys() throws {
        let first = AccountRootKey(epoch: 0), second = AccountRootKey(epoch: 1)
        let old = try #require(ChunkCodec.sealed(container: container, rootKeys: [first]))
        let codec = try #require(ChunkCodec.sealed(container: container, rootKeys: [first, second]))
        #expect(codec.sealed && !ChunkCodec.plain.sealed)
        let bytes = randomBytes(200_000)

        // Cut by the keyed chunker and named by the newest epoch's keyed MAC: not FastCDC, not SHA-256.
        let chunks = codec.chunks(of: bytes)
        let keys = second.chunkKeys(container: container)
        #expect(chunks.count > 1 && chunks.allSatisfy { $0.length <= KeyedChunker.Sizes.standard.maximum })
        #expect(chunks.map { $0.offset + $0.length }.dropLast() == Array(KeyedChunker(keys: keys, sizes: .standard).boundaries(of: bytes).dropLast()))
        let piece = bytes[chunks[0].offset..<chunks[0].offset + chunks[0].length]
        #expect(chunks[0].hash == keys.identifier(of: piece).description)
        #expect(Set(chunks.map(\.hash)).isDisjoint(with: ChunkCodec.plain.chunks(of: bytes).map(\.hash)))
        #expect(codec.chunks(of: bytes) == chunks, "every device cuts and names alike")

        // Sealed and opened again; a flipped bit, another chunk's bytes, a wrong name are refused.
        let sealed = try piece.withUnsafeBytes { try codec.seal($0, as: chunks[0].hash) }
        #expect(try sealed.withUnsafeBytes { try codec.open($0, as: chunks[0].hash) } == piece)
        var flipped = sealed
        flipped[flipped.count / 2] ^= 1
        #expect(throws: ChunkCodecError.self) { try flipped.withUnsafeBytes { try codec.open($0, as: chunks[0].hash) } }
        #expect(throws: ChunkCodecError.self) { try sealed.withUnsafeBytes { try codec.open($0, as: chunks[1].hash) } }
        #expect(throws: ChunkCodecError.self) { try piece.withUnsafeBytes { try codec.seal($0, as: chunks[1].hash) } }

        // A chunk of an older epoch opens while its key is held; not by a device that holds only the newer.
        let oldChunks = old.chunks(of: bytes)
        let oldPiece = bytes[oldChunks[0].offset..<oldChunks[0].offset + oldChunks[0].length]
        let oldSealed = try oldPiece.withUnsafeBytes { try old.seal($0, as: oldChunks[0].hash) }
        #expect(try oldSealed.withUnsafeBytes { try codec.open($0, as: oldChunks[0].hash) } == oldPiece)
        #expect(oldPiece.withUnsafeBytes { codec.recognises($0, as: oldChunks[0].hash) })
        let newerOnly = try #require(ChunkCodec.sealed(container: container, rootKeys: [second]))
        #expect(throws: ChunkCodecError.self) { try oldSealed.withUnsafeBytes { try newerOnly.open($0, as: oldChunks[0].hash) } }
        // Another container's keys open nothing of this one.
        let elsewhere = try #require(ChunkCodec.sealed(container: "ABCDE12345.com.example.other", rootKeys: [first, second]))
        #expect(throws: ChunkCodecError.self) { try sealed.withUnsafeBytes { try elsewhere.open($0, as: chunks[0].hash) } }

        // A chunk named by SHA-256 before the account had keys is read as it is — and only if it hashes right.
        let legacy = ChunkCodec.plain.chunks(of: bytes)[0]
        let legacyBytes = bytes[legacy.offset..<legacy.offset + legacy.length]
        #expect(try legacyBytes.withUnsafeBytes { try codec.open($0, as: legacy.hash) } == legacyBytes)
        #expect(legacyBytes.withUnsafeBytes { codec.recognises($0, as: legacy.hash) })
        var damaged = Data(legacyBytes)
        damaged[0] ^= 1
        #expect(throws: ChunkCodecError.self) { try damaged.withUnsafeBytes { try codec.open($0, as: legacy.hash) } }
        #expect(!damaged.withUnsafeBytes { codec.recognises($0, as: legacy.hash) })
        // The plain codec reads nothing sealed.
        #expect(throws: ChunkCodecError.self) { try sealed.withUnsafeBytes { try ChunkCodec.plain.open($0, as: chunks[0].hash) } }
    }

    @Test func largeFilesAreCutToTheLargeSizesAndAFileIsCutAsItsBytesAre() throws {
        let codec = try #require(ChunkCodec.sealed(container: container, rootKeys: [AccountRootKey(epoch: 0)]))
        #expect(codec.chunker(forFileOfSize: KeyedChunker.largeFileSize).maximumSize == KeyedChunker.Sizes.large.maximum)
        #expect(codec.chunker(forFileOfSize: KeyedChunker.largeFileSize - 1).maximumSize == KeyedChunker.Sizes.standard.maximum)
        let dir = try TemporaryDirectoryForCodec()
        defer { try? FileManager.default.removeItem(at: dir.url) }
        var random = SystemRandomNumberGenerator()
        var words = [UInt64](repeating: 0, count: (9 << 20) / 8)
        for index in words.indices { words[index] = random.next() }
        let bytes = words.withUnsafeBytes { Data($0) }
        let file = dir.url.appendingPathComponent("large.bin")
        try bytes.write(to: file)
        // Read a window at a time from the file, cut as the whole in memory is.
        #expect(try codec.chunks(ofFileAt: file) == codec.chunks(of: bytes))
        #expect(codec.chunks(of: bytes).allSatisfy { $0.length <= KeyedChunker.Sizes.large.maximum })
    }
}

/// A scratch folder for the codec's file tests.
struct TemporaryDirectoryForCodec {
    let url: URL
    init() throws {
        url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("codec-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
}

/// Turning sealing on for an account whose files were synced in plaintext (the upgrade): what was
/// there stays readable on every device, a file edited from then on goes sealed, and a device
/// that joins afterwards gets everything — the old chunks as they were, the new ones opened.
extension ContainerSyncTests {
    @Test func turningSealingOnKeepsWhatWasThereAndSealsWhatComesNext() async throws {
        try await withServer { base, dir in
            // Two devices, not sealing yet: plaintext chunks named by SHA-256.
            var laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .plain)
            var phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .plain)
            let kept = randomBytes(150_000)
            let edited = randomBytes(150_000)
            try laptop.write("Kept.bin", kept)
            try laptop.write("Edited.bin", edited)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Kept.bin")) == kept)
            let store = try FileChunkStore(directory: dir + "/server/chunks")
            let plaintextNames = Set(ChunkCodec.plain.chunks(of: kept).map(\.hash) + ChunkCodec.plain.chunks(of: edited).map(\.hash))
            #expect(plaintextNames.isSubset(of: Set(try await store.index.read { db in try String.fetchAll(db, sql: "SELECT hash FROM chunk") })))

            // Sealing turned on (the agents started again with the setting): an edit goes sealed.
            laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .sealing)
            phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing)
            var changed = edited
            changed.replaceSubrange(70_000..<70_004, with: Data("EDIT".utf8))
            try laptop.write("Edited.bin", changed)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Edited.bin")) == changed)
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Kept.bin")) == kept, "untouched: nothing sent again, nothing lost")
            let sealedNames = try await laptop.sync.codec.chunks(ofFileAt: laptop.documents.appendingPathComponent("Edited.bin")).map(\.hash)
            let digests = try await store.sealedDigests(of: sealedNames, account: 1)
            #expect(digests.count == Set(sealedNames).count, "the edited file's chunks are stored sealed")

            // A device that joins now gets both: the old plaintext chunks and the new sealed ones.
            let tablet = try await sealingDevice("tablet", base: base, dir: dir)
            try await tablet.sync.syncOnce()
            #expect(try Data(contentsOf: tablet.documents.appendingPathComponent("Kept.bin")) == kept)
            #expect(try Data(contentsOf: tablet.documents.appendingPathComponent("Edited.bin")) == changed)
        }
    }
}

/// Under Advanced Data Protection a device seals its containers' chunks whatever its settings say
/// (under Standard only when `sealedContents` is on).
extension ContainerSyncTests {
    @Test func advancedSealsContentsWhateverTheSettingsSay() async throws {
        try await withServer { base, dir in
            let home = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let paths = UbiquityPaths(configuration: home.appendingPathComponent("config"), data: home.appendingPathComponent("data"))
            let credentials = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop", savingTo: paths)
            let client = SyncClient(server: base, token: credentials.token)
            let accountKeys = AccountKeys(credentials: credentials, paths: paths, client: client)
            let keys = SessionKeys(keys: accountKeys, deviceName: "laptop", logger: Logger(label: "test"))
            #expect(try await keys.codec(of: notes, sealing: false).sealed == false, "Standard, not asked to seal")
            #expect(try await keys.codec(of: notes, sealing: true).sealed, "Standard, asked to seal")
            _ = try await accountKeys.setCustody(.advanced)
            #expect(try await keys.codec(of: notes, sealing: false).sealed, "Advanced: always")
        }
    }
}

/// The account's devices need not all seal: one that holds the keys but does not (its settings
/// say so) still opens what the sealing ones wrote, and they read what it wrote in plaintext.
extension ContainerSyncTests {
    @Test func aDeviceThatDoesNotSealReadsWhatTheSealingOnesWroteAndTheyReadIt() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .reading)
            let sealedFile = randomBytes(120_000)
            let plainFile = randomBytes(120_000)
            try laptop.write("FromLaptop.bin", sealedFile)
            try await laptop.sync.syncOnce()
            try phone.write("FromPhone.bin", plainFile)
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            let codecs = (await laptop.sync.codec, await phone.sync.codec)
            #expect(codecs.0.sealed && !codecs.1.sealed && codecs.1.opensSealed)
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("FromLaptop.bin")) == sealedFile, "the phone opens what the laptop sealed")
            #expect(try Data(contentsOf: laptop.documents.appendingPathComponent("FromPhone.bin")) == plainFile, "the laptop reads what the phone sent in plaintext")
            // The phone's own chunks went in plaintext, named by SHA-256 (it does not seal).
            let store = try FileChunkStore(directory: dir + "/server/chunks")
            let stored = Set(try await store.index.read { db in try String.fetchAll(db, sql: "SELECT hash FROM chunk") })
            #expect(Set(ChunkCodec.plain.chunks(of: plainFile).map(\.hash)).isSubset(of: stored))
            #expect(Set(ChunkCodec.plain.chunks(of: sealedFile).map(\.hash)).isDisjoint(with: stored))
        }
    }
}

/// A sealed chunk's edit travels as a sealed patch (issue 45): the editing device makes the patch
/// against block prints it kept of the old chunk, seals it, and the server keeps it in place of
/// the new chunk; a reader applies it to its own copy of the old chunk, and one without that copy
/// fetches it too. The old chunk outlives its revision while a patch needs it.
extension ContainerSyncTests {
    @Test func aOneByteEditOfALargeSealedFileTravelsAsASealedPatchBothWays() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            // Large enough for the large chunk sizes (about 128 KiB a chunk).
            var file = randomBytes(9 << 20)
            try laptop.write("Big.bin", file)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == file)

            // A 1-byte edit: both legs carry a sealed patch of a few KiB, not a chunk of 128.
            func edit(at offset: Int) async throws -> (up: Int, down: Int) {
                file[offset] ^= 0xff
                let (laptopBefore, phoneBefore) = (laptop.client.traffic.snapshot, phone.client.traffic.snapshot)
                try laptop.write("Big.bin", file)
                try await laptop.sync.syncOnce()
                try await phone.sync.syncOnce()
                #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == file)
                return (laptop.client.traffic.snapshot.total - laptopBefore.total, phone.client.traffic.snapshot.total - phoneBefore.total)
            }
            let first = try await edit(at: 4_500_000)
            print("sealed 1-byte edit of 9 MiB: \(first.up) bytes up, \(first.down) down")
            #expect(first.up < 24_000 && first.down < 24_000, "up \(first.up), down \(first.down)")
            // The server keeps patches in place of chunks, each with the chunk it changes.
            let database = try DatabaseQueue(path: dir + "/server/ubiquity.sqlite")
            let patched = try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM chunk WHERE base IS NOT NULL") ?? 0 }
            #expect(patched >= 1)
            // Edited again at the same place: a patch of a chunk that is itself a patch.
            let second = try await edit(at: 4_500_001)
            #expect(second.up < 24_000 && second.down < 24_000, "up \(second.up), down \(second.down)")

            // A device that joins has no old chunk of its own: it fetches the bases too.
            let tablet = try await sealingDevice("tablet", base: base, dir: dir)
            try await tablet.sync.syncOnce()
            #expect(try Data(contentsOf: tablet.documents.appendingPathComponent("Big.bin")) == file)

            // Forty days on the old revisions are gone; the chunks the patches change are not.
            let admin = try await ServerAdministration(dataDirectory: dir + "/server", bcryptCost: 4)
            let collected = try await admin.collectGarbage(now: Date().addingTimeInterval(40 * 86_400))
            await admin.close()
            #expect(collected.revisions >= 2)
            let watch = try await sealingDevice("watch", base: base, dir: dir)
            try await watch.sync.syncOnce()
            #expect(try Data(contentsOf: watch.documents.appendingPathComponent("Big.bin")) == file, "what the patches need outlived the revisions that named it")
        }
    }
}

/// A server that lies about a sealed patch — names another chunk as the one it changes, or
/// serves it damaged — is caught: the patch is sealed to the pair of chunks, so it opens for no
/// other base, and what it makes is checked against its name. Nothing is written; the file the
/// device had stays as it was.
extension ContainerSyncTests {
    @Test(arguments: ["another base", "damaged"])
    func aSealedPatchTheServerLiesAboutIsRefusedAndNothingIsWritten(lie: String) async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            let first = randomBytes(9 << 20)
            try laptop.write("Big.bin", first)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            var second = first
            second[4_000_000] ^= 0xff
            try laptop.write("Big.bin", second)
            try await laptop.sync.syncOnce()

            let database = try DatabaseQueue(path: dir + "/server/ubiquity.sqlite")
            let (made, realBase) = try #require(try await database.read { db in
                try Row.fetchOne(db, sql: "SELECT hash, base FROM chunk WHERE base IS NOT NULL").map { ($0["hash"] as String, $0["base"] as String) }
            })
            if lie == "another base" {
                // Another chunk of the file the phone has, which it can read: named as the base.
                let other = try #require(try await database.read { db in
                    try String.fetchOne(db, sql: "SELECT hash FROM chunk WHERE base IS NULL AND hash != ? LIMIT 1", arguments: [realBase])
                })
                try await database.write { db in try db.execute(sql: "UPDATE chunk SET base = ? WHERE hash = ?", arguments: [other, made]) }
            } else {
                // A byte of the stored patch changed, its digest with it (the server's own check passes).
                let store = try FileChunkStore(directory: dir + "/server/chunks")
                let stored = try #require(try await store.load(hash: made, account: 1))
                var changed = stored
                changed[changed.count / 2] ^= 0x01
                let damaged = changed
                try await store.index.write { db in
                    let row = try #require(try Row.fetchOne(db, sql: "SELECT pack, offset FROM chunk WHERE hash = ?", arguments: [made]))
                    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store.packPath(account: 1, pack: row["pack"])))
                    try handle.seek(toOffset: UInt64(row["offset"] as Int64))
                    try handle.write(contentsOf: damaged)
                    try handle.close()
                    try db.execute(sql: "UPDATE chunk SET digest = ? WHERE hash = ?", arguments: [Data(SHA256.hash(data: damaged)), made])
                }
            }
            try? await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == first, "nothing of the lie is written")
            let problems = await phone.sync.downloadErrors.values.joined(separator: " ")
            #expect(problems.contains("sealed patch"), "\(problems)")
        }
    }
}

/// A browser's session under Advanced ends in the roster once its grant has run out: the next
/// device that reads the keys appends the end (any device of the roster may), so nothing its key
/// signs afterwards is taken; a session still running is left alone.
extension ContainerSyncTests {
    @Test func anExpiredBrowserSessionIsEndedByTheNextDeviceThatReadsTheKeys() async throws {
        try await withServer { base, dir in
            let home = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let paths = UbiquityPaths(configuration: home.appendingPathComponent("config"), data: home.appendingPathComponent("data"))
            let credentials = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop", savingTo: paths)
            let accountKeys = AccountKeys(credentials: credentials, paths: paths, client: SyncClient(server: base, token: credentials.token))
            let keys = SessionKeys(keys: accountKeys, deviceName: "laptop", logger: Logger(label: "test"))
            _ = try await keys.current(refresh: true) // (sets the keys up)
            _ = try await accountKeys.setCustody(.advanced)
            let now = UInt64(Date().timeIntervalSince1970)
            let ranOut = DeviceKeys().publicKeys, running = DeviceKeys().publicKeys
            _ = try await accountKeys.change { _, _ in [.addWebSession(keys: ranOut, expires: now - 10), .addWebSession(keys: running, expires: now + 3_000)] }
            #expect(try await accountKeys.status().webSessions.map(\.id).sorted() == [ranOut.deviceIdentifier, running.deviceIdentifier].sorted())
            _ = try await keys.current(refresh: true)
            #expect(try await accountKeys.status().webSessions.map(\.id) == [running.deviceIdentifier], "the one that ran out is ended, the other left")
        }
    }
}
