import Foundation
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquitySync

/// The codecs of a share (issue 46, docs/Sharing.md "Keys"): a member's device seals what it
/// sends into a shared item with the share's newest key and opens every epoch it holds — and
/// nothing sealed with the owner's container keys unless it is given them (the owner's own
/// devices, for what was sealed before the item was shared).
@Suite struct ShareCodecTests {
    static let container = "ABCDE12345.com.example.notes"
    let first = ShareKey(share: "s1", epoch: 1), second = ShareKey(share: "s1", epoch: 2)
    let account = AccountRootKey(epoch: 1) // (an account's epoch numbered as the share's)

    @Test func aSharesChunksAreSealedWithItsNewestKeyAndEveryHeldEpochOpens() throws {
        let bytes = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) })
        let older = try #require(ChunkCodec.shared([first]))
        let member = try #require(ChunkCodec.shared([first, second]))
        #expect(member.sealed && member.opensSealed)
        // Cut and named by the newest epoch's keys: other names than the first epoch's, and other than the account's.
        let owners = try #require(ChunkCodec.sealed(container: Self.container, rootKeys: [account]))
        let chunks = member.chunks(of: bytes), olderChunks = older.chunks(of: bytes), ownersChunks = owners.chunks(of: bytes)
        #expect(Set(chunks.map(\.hash)).isDisjoint(with: olderChunks.map(\.hash)) && Set(chunks.map(\.hash)).isDisjoint(with: ownersChunks.map(\.hash)))
        func sealed(_ codec: ChunkCodec, _ chunk: ContentChunk) throws -> Data {
            try bytes[chunk.offset..<(chunk.offset + chunk.length)].withUnsafeBytes { try codec.seal($0, as: chunk.hash) }
        }
        func opens(_ codec: ChunkCodec, _ body: Data, as name: String) -> Bool {
            (try? body.withUnsafeBytes { try codec.open($0, as: name) }) != nil
        }
        let newBody = try sealed(member, chunks[0]), oldBody = try sealed(older, olderChunks[0]), ownersBody = try sealed(owners, ownersChunks[0])
        #expect(opens(member, newBody, as: chunks[0].hash) && opens(member, oldBody, as: olderChunks[0].hash))
        #expect(!opens(older, newBody, as: chunks[0].hash), "a member of the first epoch only (removed since) reads nothing of the second")
        // The owner's container keys: not a member's; the owner's devices are given them to read what was sealed before sharing.
        #expect(!opens(member, ownersBody, as: ownersChunks[0].hash))
        let ownersView = try #require(ChunkCodec.shared([first, second], alsoOpening: [account.chunkKeys(container: Self.container)]))
        #expect(opens(ownersView, ownersBody, as: ownersChunks[0].hash) && opens(ownersView, newBody, as: chunks[0].hash))
        #expect(ownersView.chunks(of: bytes).map(\.hash) == chunks.map(\.hash), "what the owner's devices send is cut and named as the members'")
        // A chunk cut before the epoch changed and sent after: sealed with the keys of the epoch
        // that named it (else its name and its seal would be two epochs', and nobody could open it).
        for unchanged in [false, true] {
            let late = try bytes[olderChunks[0].offset..<(olderChunks[0].offset + olderChunks[0].length)].withUnsafeBytes {
                try member.seal($0, as: olderChunks[0].hash, unchanged: unchanged)
            }
            #expect(opens(member, late, as: olderChunks[0].hash) && opens(older, late, as: olderChunks[0].hash), "unchanged: \(unchanged)")
        }
        // On the owner's device: a share's chunks sealed with the share's keys, the container's
        // with its own — and a device that sends the container's chunks in plaintext still seals
        // the share's.
        for container in [owners, try #require(ChunkCodec.reading(container: Self.container, rootKeys: [account]))] {
            let both = container.alsoSealing([member])
            let shareBody = try bytes[chunks[0].offset..<(chunks[0].offset + chunks[0].length)].withUnsafeBytes { try both.seal($0, as: chunks[0].hash) }
            #expect(opens(member, shareBody, as: chunks[0].hash) && shareBody != bytes[chunks[0].offset..<(chunks[0].offset + chunks[0].length)])
            let ownChunk = container.chunks(of: bytes)[0]
            let ownBody = try bytes[ownChunk.offset..<(ownChunk.offset + ownChunk.length)].withUnsafeBytes { try both.seal($0, as: ownChunk.hash) }
            #expect(opens(container, ownBody, as: ownChunk.hash) && opens(both, ownBody, as: ownChunk.hash) && opens(both, shareBody, as: chunks[0].hash))
            #expect(!both.sealsPatches)
        }
        // Another share's key of the same epoch opens nothing.
        #expect(!opens(try #require(ChunkCodec.shared([ShareKey(share: "s2", epoch: 2)])), newBody, as: chunks[0].hash))
    }

    @Test func aSharesRecordsAreSealedWithItsNewestKeyAndOpenByTheirEpoch() throws {
        let update = ItemUpdate(baseRevision: nil, name: "Plan.txt", parent: "trip", kind: .file, modificationDate: 1_800_000_000, manifest: Manifest(chunks: []))
        func stored(_ wire: ItemUpdate, item: String) -> ItemState {
            var state = ItemState(id: item, revision: "r1", name: wire.name, parent: wire.parent, kind: wire.kind, size: 0, modificationDate: 0, deleted: false,
                                  uploaded: true, deviceName: "laptop", sequence: 1, manifest: wire.manifest, conflicts: [])
            state.record = wire.record
            return state
        }
        let older = try #require(ItemRecords.shared(container: Self.container, keys: [first]))
        let member = try #require(ItemRecords.shared(container: Self.container, keys: [first, second]))
        #expect(member.seals)
        // Names are tagged with the first epoch's key: a new epoch renames nothing.
        #expect(member.tag("Plan.txt", parent: "trip") == older.tag("Plan.txt", parent: "trip"))
        let account = try #require(ItemRecords.keyed(container: Self.container, rootKeys: [self.account], sealing: true))
        #expect(member.tag("Plan.txt", parent: "trip") != account.tag("Plan.txt", parent: "trip"))

        let wire = try member.sealed(update, item: "plan", manifest: update.manifest)
        #expect(try member.opened(stored(wire, item: "plan")).name == "Plan.txt")
        #expect(throws: (any Error).self) { try older.opened(stored(wire, item: "plan")) }
        let oldWire = try older.sealed(update, item: "plan", manifest: update.manifest)
        #expect(try member.opened(stored(oldWire, item: "plan")).name == "Plan.txt")
        // Sealed with the container's key (before sharing): the owner's devices only, given that key.
        let owners = try account.sealed(update, item: "plan", manifest: update.manifest)
        #expect(throws: (any Error).self) { try member.opened(stored(owners, item: "plan")) }
        let ownersView = try #require(ItemRecords.shared(container: Self.container, keys: [first, second], alsoOpening: [self.account.recordKey(container: Self.container)]))
        #expect(try ownersView.opened(stored(owners, item: "plan")).name == "Plan.txt", "the account's epoch 1 beside the share's epoch 1")
        #expect(try ownersView.opened(stored(oldWire, item: "plan")).name == "Plan.txt")
        // Bound to the item: moved to another id, refused.
        #expect(throws: (any Error).self) { try member.opened(stored(wire, item: "other")) }
    }

    /// Found by `ubiquity-chaos --sealed-share`, seed 57: an owner's device cut a file of its
    /// sealed share with the share's keys, was killed, and after its restart — the share's keys
    /// not back yet — sent the chunk through the container's codec, which trusted the name of
    /// bytes known unchanged and sealed them with the container's keys under the share's name:
    /// no device could open it (the owner's: another identifier; the participant's: other keys).
    /// A codec seals only under a name its own keys make of the bytes, whatever it is told.
    @Test func aChunkIsNeverSealedUnderANameItsKeysDidNotMake() throws {
        let bytes = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 5) })
        let share = try #require(ChunkCodec.shared([first]))
        let container = try #require(ChunkCodec.sealed(container: Self.container, rootKeys: [account]))
        let chunk = share.chunks(of: bytes)[0]
        let plaintext = bytes[chunk.offset..<(chunk.offset + chunk.length)]
        for unchanged in [false, true] {
            #expect(throws: ChunkCodecError.self, "unchanged: \(unchanged)") {
                try plaintext.withUnsafeBytes { try container.seal($0, as: chunk.hash, unchanged: unchanged) }
            }
        }
        // With the share's codec beside it (the share's keys back): sealed with the share's keys.
        let body = try plaintext.withUnsafeBytes { try container.alsoSealing([share]).seal($0, as: chunk.hash, unchanged: true) }
        #expect(try body.withUnsafeBytes { try share.open($0, as: chunk.hash) } == Data(plaintext))
    }
}
