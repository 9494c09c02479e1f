import Crypto
import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityKeys

/// Each way a server may tamper with what it stores is refused, with the failure named.
@Suite struct SealingTests {
    let root = AccountRootKey(epoch: 3)

    func refused(_ code: EncryptionError.Code, _ body: () throws -> Any) {
        expectRefused(code, body)
    }

    @Test func aChunkRoundTripsAndItsIdentifierIsAKeyedMACNotAContentHash() throws {
        let keys = root.chunkKeys(container: "A.com.example.notes")
        let plaintext = Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let (id, body) = try keys.seal(plaintext)
        #expect(try keys.open(body, as: id) == plaintext)
        #expect(id.bytes != Array(SHA256.hash(data: plaintext)), "not the content's SHA-256")
        #expect(AccountRootKey(epoch: 3).chunkKeys(container: "A.com.example.notes").identifier(of: plaintext) != id, "another account's identifier differs")
        #expect(root.chunkKeys(container: "A.com.example.other").identifier(of: plaintext) != id, "another container's too")
        #expect(body.count == Padme.paddedLength(plaintext.count + 1) + ChunkKeys.overhead)
        #expect(body.range(of: plaintext.prefix(64)) == nil, "no plaintext in the body")
        // Sealed twice: one identifier, one body (sealing is deterministic).
        let again = try keys.seal(plaintext)
        #expect(again.id == id && again.body == body)
    }

    @Test func aChangedTruncatedSplicedOrDowngradedChunkIsRefused() throws {
        let keys = root.chunkKeys(container: "A.com.example.notes")
        let (id, body) = try keys.seal(Data("the tent is in the loft".utf8))
        let (otherID, otherBody) = try keys.seal(Data("the stove is in the car".utf8))
        var flipped = body
        flipped[flipped.count - 20] ^= 1
        refused(.authenticationFailed) { try keys.open(flipped, as: id) }
        refused(.authenticationFailed) { try keys.open(body.dropLast(), as: id) }
        refused(.malformed) { try keys.open(body.prefix(3), as: id) }
        refused(.authenticationFailed) { try keys.open(otherBody, as: id) } // served for another identifier
        refused(.authenticationFailed) { try keys.open(body, as: otherID) }
        var older = body
        older[0] = 0
        refused(.unsupportedFormat) { try keys.open(older, as: id) }
        refused(.unsupportedFormat) { try keys.open(body, as: id, minimumFormat: 2) }
        // Another epoch's keys (a removed device's, or an old epoch's record replayed).
        refused(.authenticationFailed) { try AccountRootKey(epoch: 4).chunkKeys(container: "A.com.example.notes").open(body, as: id) }
    }

    /// A sealed patch opens only as the patch of its pair of chunks, in its epoch: the server
    /// naming another base for it, serving it for another chunk, or changing it is refused.
    @Test func aSealedPatchOpensOnlyForItsPairOfChunks() throws {
        let keys = root.chunkKeys(container: "A.com.example.notes")
        let (made, base, other) = (keys.identifier(of: Data("new".utf8)), keys.identifier(of: Data("old".utf8)), keys.identifier(of: Data("else".utf8)))
        let patch = Data("prefix, suffix and the bytes between".utf8)
        let sealed = try keys.sealPatch(patch, making: made, from: base)
        #expect(try keys.openPatch(sealed, making: made, from: base) == patch)
        #expect(sealed.range(of: Data("bytes between".utf8)) == nil)
        #expect(try keys.sealPatch(patch, making: made, from: base) != sealed, "a random nonce: two devices may make different patches of one pair")
        refused(.authenticationFailed) { try keys.openPatch(sealed, making: made, from: other) } // another base named
        refused(.authenticationFailed) { try keys.openPatch(sealed, making: other, from: base) } // served for another chunk
        var flipped = sealed
        flipped[flipped.count - 20] ^= 1
        refused(.authenticationFailed) { try keys.openPatch(flipped, making: made, from: base) }
        refused(.authenticationFailed) { try keys.open(sealed, as: made) } // not a chunk
        refused(.authenticationFailed) { try AccountRootKey(epoch: 4).chunkKeys(container: "A.com.example.notes").openPatch(sealed, making: made, from: base) }
    }

    @Test func aRecordOpensOnlyWhereItWasSealed() throws {
        let key = root.recordKey(container: "A.com.example.notes")
        let binding = RecordBinding(container: "A.com.example.notes", item: "item-1", parent: "folder-1", revision: "r7")
        let record = Data(#"{"name":"Trip.txt","size":13}"#.utf8)
        let sealed = try key.seal(record, for: binding)
        #expect(try key.open(sealed, for: binding) == record)
        #expect(sealed.range(of: Data("Trip".utf8)) == nil)
        var moved = binding; moved.parent = "folder-2"
        var swapped = binding; swapped.item = "item-2"
        var stale = binding; stale.revision = "r6"
        var elsewhere = binding; elsewhere.container = "A.com.example.other"
        for other in [moved, swapped, stale, elsewhere] { refused(.authenticationFailed) { try key.open(sealed, for: other) } }
        var flipped = sealed
        flipped[10] ^= 0x40
        refused(.authenticationFailed) { try key.open(flipped, for: binding) }
        // Records are padded: every short one has one size, longer ones few.
        #expect(Set(try (1...200).map { try key.seal(Data(repeating: 65, count: $0), for: binding).count }).count == 1)
        #expect(Set(try (300...600).map { try key.seal(Data(repeating: 65, count: $0), for: binding).count }).count <= 24, "Padmé: steps of 16 to 32 bytes here")
        // A name clash is found without the name: case and normalization folded, keyed.
        #expect(key.nameClashTag("Trip.txt", parent: "f") == key.nameClashTag("TRIP.TXT", parent: "f"))
        #expect(key.nameClashTag("Caf\u{E9}", parent: "f") == key.nameClashTag("Cafe\u{301}", parent: "f"))
        #expect(key.nameClashTag("Trip.txt", parent: "f") != key.nameClashTag("Trip.txt", parent: "g"))
        #expect(key.nameClashTag("Trip.txt", parent: "f") != AccountRootKey(epoch: 3).recordKey(container: "A.com.example.notes").nameClashTag("Trip.txt", parent: "f"))
    }

    @Test func aKeyValueChangeIsBoundToItsNameStoreAndVersionAndNamesOutliveEpochs() throws {
        let first = AccountRootKey(epoch: 0), second = AccountRootKey(epoch: 1)
        let before = try KeyValueKeys(store: "A.com.example.game", rootKeys: [first])
        let keys = try KeyValueKeys(store: "A.com.example.game", rootKeys: [first, second])
        #expect(keys.epoch == 1)
        let name = keys.storedName(of: "highestLevel")
        #expect(name == before.storedName(of: "highestLevel"), "a new epoch renames nothing")
        #expect(name.count == 43 && !name.contains("highest"))
        let (storedName, seven) = try keys.seal(key: "highestLevel", value: Data("7".utf8), version: 7)
        #expect(storedName == name)
        #expect(try keys.open(seven, storedName: name) == .init(key: "highestLevel", value: Data("7".utf8), version: 7))
        // An older epoch's change still opens; one of an epoch not held does not.
        let (_, old) = try before.seal(key: "highestLevel", value: Data("6".utf8), version: 6)
        #expect(try keys.open(old, storedName: name).version == 6)
        refused(.authenticationFailed) { try before.open(seven, storedName: name) }
        // Moved to another key, another store, or its version raised: refused.
        refused(.authenticationFailed) { try keys.open(seven, storedName: keys.storedName(of: "player")) }
        let other = try KeyValueKeys(store: "A.com.example.other", rootKeys: [first, second])
        refused(.authenticationFailed) { try other.open(seven, storedName: other.storedName(of: "highestLevel")) }
        var lied = seven
        lied[SealedHeader.size + 7] = 9 // the version in the clear, raised
        refused(.authenticationFailed) { try keys.open(lied, storedName: name) }
        // A removal is sealed too, and small.
        let (_, removal) = try keys.seal(key: "highestLevel", value: nil, version: 8)
        #expect(try keys.open(removal, storedName: name) == .init(key: "highestLevel", value: nil, version: 8))
        #expect(removal.count <= KeyValueKeys.maximumSealedRemoval)
        let (_, longest) = try keys.seal(key: String(repeating: "k", count: 64), value: nil, version: 8)
        #expect(longest.count <= KeyValueKeys.maximumSealedRemoval)
        // Without the first epoch's key there are no names.
        #expect(throws: EncryptionError.self) { try KeyValueKeys(store: "A.com.example.game", rootKeys: [second]) }
    }

    @Test func paddingHidesExactSizesWithinTwoPercentFromOneMebibyte() {
        #expect(Padme.paddedLength(1) == 1 && Padme.paddedLength(100) >= 100)
        for length in [1 << 20, (1 << 20) + 12_345, 8 << 20, 64 << 20] {
            let padded = Padme.paddedLength(length)
            #expect(padded >= length && Double(padded) <= Double(length) * 1.02)
        }
        // Every length in a range maps to few sizes.
        #expect(Set((4_000...4_200).map(Padme.paddedLength)).count <= 4)
        #expect(Padme.unpad(Padme.pad([1, 2, 0, 0])) == [1, 2, 0, 0])
        #expect(Padme.unpad([1, 2, 0]) == nil)
    }

    @Test func aChunkSealsAlikeEveryTimeAndNoKeyAndNonceSealTwoPlaintexts() async throws {
        // Deterministic: the same chunk seals to the same bytes (a device sending it again sends
        // what the server stored); another epoch or container, to other bytes.
        let keys = root.chunkKeys(container: "A.com.example.notes")
        let plaintext = Data("the same chunk".utf8)
        #expect(try keys.seal(plaintext).body == keys.seal(plaintext).body)
        #expect(try keys.seal(plaintext).body != AccountRootKey(epoch: 7).chunkKeys(container: "A.com.example.notes").seal(plaintext).body)
        #expect(try keys.seal(plaintext).body != root.chunkKeys(container: "A.com.example.other").seal(plaintext).body)
        // Each key (derived for one identifier, which names one plaintext) seals one plaintext:
        // over 100,000 different chunks, no identifier and no nonce comes twice.
        // (Long CPU work: on a thread of its own at low priority, not one the tests' tasks share.)
        let repeats = try await onBackgroundThread {
            var identifiers = Set<[UInt8]>(), nonces = Set<Data>(), repeats = 0
            for index in 0..<100_000 {
                var bytes = withUnsafeBytes(of: UInt32(index).bigEndian) { Array($0) }
                bytes.append(7)
                let (id, body) = try keys.seal(bytes)
                if !identifiers.insert(id.bytes).inserted { repeats += 1 }
                if !nonces.insert(body[SealedHeader.size..<(SealedHeader.size + 12)]).inserted { repeats += 1 }
            }
            return repeats
        }
        #expect(repeats == 0, "identifiers or nonces that came twice")
    }
}

/// Expects `body` to be refused with `code`.
func expectRefused(_ code: EncryptionError.Code, _ body: () throws -> Any) {
    do {
        _ = try body()
        Issue.record("accepted; expected \(code)")
    } catch let error as EncryptionError {
        #expect(error.code == code, "\(error)")
    } catch {
        Issue.record("\(error)")
    }
}
