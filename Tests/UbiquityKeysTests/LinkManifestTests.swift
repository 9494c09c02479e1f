import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// A public link's manifest under Advanced: it opens with its link's key only, unchanged; it
/// carries each chunk's own key in every epoch given — which opens that chunk and no other, and
/// is not a container key — and the keys of sealed patches and their bases.
@Suite struct LinkManifestTests {
    let old = AccountRootKey(epoch: 1), new = AccountRootKey(epoch: 2)
    let container = "A.com.example.notes"

    @Test func aManifestOpensWithItsKeyAndItsChunkKeysOpenItsChunksOnly() throws {
        let (oldKeys, newKeys) = (old.chunkKeys(container: container), new.chunkKeys(container: container))
        let first = Data(repeating: 1, count: 1000), second = Data(repeating: 2, count: 500), other = Data(repeating: 3, count: 700)
        let (firstId, firstBody) = try oldKeys.seal(first)   // sealed before the epoch changed
        let (secondId, secondBody) = try newKeys.seal(second)
        let (otherId, otherBody) = try newKeys.seal(other)   // another file's
        let manifest = try LinkManifest(name: "Plan ☕.txt", size: 1500, modificationDate: 1_800_000_000,
                                        chunks: [(firstId.description, 1000), (secondId.description, 500)], bases: [:], epochKeys: [newKeys, oldKeys])
        let (body, key) = try manifest.sealed()
        let opened = try LinkManifest.open(body, key: key)
        #expect(opened == manifest && opened.name == "Plan ☕.txt" && opened.epochs == [2, 1])
        #expect(!body.contains(Data("Plan".utf8)), "the name is sealed")

        // Each chunk opens with its own key of the epoch it was sealed in…
        func sharedKey(of name: String, epoch: UInt32) throws -> [UInt8] {
            let entry = try #require(opened.keys.first { $0.name == name })
            let index = try #require(opened.epochs.firstIndex(of: epoch))
            return Array(entry.keys[(index * 32)..<(index * 32 + 32)])
        }
        #expect(try ChunkKeys.open(firstBody, as: firstId, sharedKey: try sharedKey(of: firstId.description, epoch: 1), epoch: 1) == first)
        #expect(try ChunkKeys.open(secondBody, as: secondId, sharedKey: try sharedKey(of: secondId.description, epoch: 2), epoch: 2) == second)
        // …and no other chunk, not even under its name: the manifest holds no key of another file.
        expectRefused(.authenticationFailed) { try ChunkKeys.open(otherBody, as: otherId, sharedKey: try sharedKey(of: secondId.description, epoch: 2), epoch: 2) }
        expectRefused(.authenticationFailed) { try ChunkKeys.open(otherBody, as: secondId, sharedKey: try sharedKey(of: secondId.description, epoch: 2), epoch: 2) }
        #expect(opened.keys.map(\.name) == [firstId.description, secondId.description])
        // Not the container's keys: neither the content key nor the identifier key is in it.
        #expect(!opened.keys.contains { $0.keys.contains(Data(newKeys.content.bytes)) || $0.keys.contains(Data(newKeys.identifier.bytes)) })
    }

    @Test func anotherKeyOrAChangedManifestIsRefused() throws {
        let manifest = try LinkManifest(name: "a", size: 0, modificationDate: 0, chunks: [], bases: [:], epochKeys: [new.chunkKeys(container: container)])
        let (body, key) = try manifest.sealed()
        let (_, otherKey) = try manifest.sealed()
        expectRefused(.authenticationFailed) { try LinkManifest.open(body, key: otherKey) }
        var changed = body
        changed[changed.count / 2] ^= 1
        expectRefused(.authenticationFailed) { try LinkManifest.open(changed, key: key) }
        expectRefused(.authenticationFailed) { try LinkManifest.open(body.dropLast(), key: key) }
        var newer = body
        newer[0] = 2
        expectRefused(.unsupportedFormat) { try LinkManifest.open(newer, key: key) }
    }

    @Test func aChunkKeptAsAPatchCarriesThePatchKeyAndItsBasesKeys() throws {
        let keys = new.chunkKeys(container: container)
        let base = Data(repeating: 7, count: 4000)
        var edited = base
        edited[100] = 8
        let (baseId, _) = try keys.seal(base)
        let editedId = keys.identifier(of: edited)
        let patch = try keys.sealPatch(Data([1, 2, 3]), making: editedId, from: baseId)
        let manifest = try LinkManifest(name: "b", size: 4000, modificationDate: 0, chunks: [(editedId.description, 4000)],
                                        bases: [editedId.description: baseId.description], epochKeys: [keys])
        #expect(manifest.keys.map(\.name) == [editedId.description, baseId.description], "the base is named too")
        let entry = try #require(manifest.keys.first)
        #expect(entry.base == baseId.description && entry.patchKeys == Data(keys.sharedPatchKey(making: editedId, from: baseId)))
        // The patch key opens that patch (what the page does: AES-GCM with the pair's binding).
        let opened = try keys.openPatch(patch, making: editedId, from: baseId)
        #expect(opened == Data([1, 2, 3]))
    }

    @Test func theKeyRidesInTheFragment() throws {
        let key = (0..<32).map { UInt8($0 * 7 % 256) }
        let fragment = LinkManifest.fragment(key: key)
        #expect(fragment.hasPrefix("k=") && !fragment.dropFirst(2).contains { "=+/".contains($0) })
        #expect(LinkManifest.key(fromFragment: fragment) == key)
        #expect(LinkManifest.key(fromFragment: "x=1&" + fragment) == key)
        #expect(LinkManifest.key(fromFragment: "k=short") == nil && LinkManifest.key(fromFragment: "") == nil)
    }
}
