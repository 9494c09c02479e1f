import Foundation
import GRDB
import Testing
import UbiquityTestSupport
import UbiquityProtocol
@testable import UbiquityAgent
@testable import UbiquityServer
#if canImport(Glibc)
import Glibc
#endif

/// A chunk the server finds damaged is asked of the devices again: the device whose file holds
/// those contents sends it again, and the other device then gets the file whole.
extension ContainerSyncTests {
    @Test func aChunkTheServerFoundDamagedIsSentAgainByADeviceThatHasIt() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            let bytes = randomBytes(400_000)
            try laptop.write("Big.bin", bytes)
            try await laptop.sync.syncOnce()

            // A bit flips in the server's chunk store.
            try damageStoredChunk(dir: dir, order: "")

            // The phone cannot get it (the server does not serve damaged bytes) …
            try await phone.sync.syncOnce()
            #expect(phone.read("Big.bin") == nil)
            // … the laptop, told the item is not uploaded any more, sends the chunk again …
            try await laptop.sync.syncOnce()
            // … and the phone gets the file whole.
            for _ in 0..<3 where (try? Data(contentsOf: phone.documents.appendingPathComponent("Big.bin"))) != bytes {
                try await phone.sync.syncOnce()
            }
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == bytes)
        }
    }

    /// An edit that keeps a chunk the server has since found damaged: the commit is refused,
    /// naming that chunk; the device sends it from its file and commits again in the same
    /// round (else it would send the same refused edit forever), and the other device gets the
    /// edited file whole.
    @Test func anEditKeepingAChunkTheServerLostSendsItAndCommitsInOneRound() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            var bytes = randomBytes(400_000)
            try laptop.write("Big.bin", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("Big.bin") != nil)

            // The first chunk stored (the file's first) is damaged; a device asking for it
            // makes the server find out and put it aside.
            try damageStoredChunk(dir: dir, order: "ORDER BY pack, offset")
            let tablet = try await device("tablet", base: base, dir: dir, greedy: true)
            try await tablet.sync.syncOnce()
            #expect(tablet.read("Big.bin") == nil, "the damaged chunk is not served")

            // The laptop changes the end of the file (its first chunk kept), in one round.
            bytes[bytes.count - 1] ^= 0xff
            try laptop.write("Big.bin", bytes)
            try await laptop.sync.syncOnce()
            let errors = await laptop.sync.errors
            #expect(errors.isEmpty, "\(errors)")
            for _ in 0..<3 where (try? Data(contentsOf: phone.documents.appendingPathComponent("Big.bin"))) != bytes {
                try await phone.sync.syncOnce()
            }
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == bytes)
        }
    }

    /// Flips a bit of a chunk in the server's store (the first the index lists in `order`).
    func damageStoredChunk(dir: String, order: String) throws {
        let store = try FileChunkStore(directory: dir + "/server/chunks")
        let place = try #require(try store.index.read { db in try Row.fetchOne(db, sql: "SELECT account, pack, offset FROM chunk \(order) LIMIT 1") })
        let fd = open(store.packPath(account: place["account"], pack: place["pack"]), O_RDWR)
        defer { close(fd) }
        var byte: UInt8 = 0
        let offset = off_t(place["offset"] as Int64 + 100)
        #expect(pread(fd, &byte, 1, offset) == 1)
        byte ^= 0x80
        #expect(pwrite(fd, &byte, 1, offset) == 1)
    }
}
