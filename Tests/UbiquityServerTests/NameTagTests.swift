import Foundation
import Testing
import UbiquityTestSupport
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Names of one folder never clash, however each came, in an account whose keys the server
/// holds (Standard), both backends: a plaintext name (a device that does not seal, or of an
/// older build) is compared with sealed names — and indexed — by its tag, so that it meets a
/// sealed name, a name sealed in place and a name from before keys alike; the plaintext item
/// is the one renamed (a sealed one cannot be), and a sealed name meeting a plaintext one is
/// refused for its device to rename.
@Suite struct NameTagTests {
    @Test(arguments: Backend.all) func plaintextAndSealedNamesMeetByTheirTags(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop"), phone = try await client.signIn("ada", device: "phone")
            // From before the account had keys: a plaintext name, indexed by its key.
            _ = try await client.commit(notes, "old", fileUpdate("Old.txt", []), token: phone.token)
            let root = try await SealedKeyValueServerTests().setUpKeys(client, laptop)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            func sealed(_ name: String, item: String) throws -> ItemUpdate {
                try records.sealed(ItemUpdate(baseRevision: nil, name: name, kind: .file, modificationDate: 1, manifest: Manifest(chunks: [])),
                                   item: item, manifest: Manifest(chunks: []))
            }
            // The account's first keys index its names from before by their tags (at once, not
            // waiting for them to be sealed): a sealed name meets them.
            let oldTag = records.tag("Old.txt", parent: nil)
            for _ in 0..<100 where try await server.admin.database.plaintextNamedItems(accountId: 1, container: notes).first?.key != oldTag {
                try await Task.sleep(for: .milliseconds(50))
            }
            let meeting = try await client.put(notes, "probe", try sealed("old.TXT", item: "probe"), token: laptop.token)
            #expect(meeting.status == .conflict && meeting.errorCode == "nameTaken", "\(String(buffer: meeting.body))")
            // A sealed name, then the same name in plaintext from another item (either order of
            // ids): the plaintext one is renamed.
            _ = try await client.commit(notes, "mmm", try sealed("Trip.txt", item: "mmm"), token: laptop.token)
            for other in ["aaa", "zzz"] {
                let plain = try await client.commit(notes, other, fileUpdate("TRIP.txt", []), token: phone.token)
                #expect(plain.item.name == (other == "aaa" ? "TRIP 2.txt" : "TRIP 3.txt"), "\(other): \(plain.item.name)")
            }
            // A sealed name meeting a plaintext one (indexed by its tag): refused, nothing renamed.
            let clash = try await client.put(notes, "sss", try sealed("trip 2.TXT", item: "sss"), token: laptop.token)
            #expect(clash.status == .conflict && clash.errorCode == "nameTaken", "\(String(buffer: clash.body))")
            // A plaintext name meeting one from before keys (indexed by its own key): renamed.
            #expect(try await client.commit(notes, "new", fileUpdate("OLD.txt", []), token: phone.token).item.name == "OLD 2.txt")
            // Sealed in place, the old name is a tag: a plaintext name still meets it.
            let escrow = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: server.directory + "/escrow.key")).key
            #expect(try await server.admin.sealInPlace(escrow: escrow, settle: 0).revisions == 4)
            #expect(try await client.commit(notes, "newer", fileUpdate("old.txt", []), token: phone.token).item.name == "old 3.txt")
            // Every name opens to what it is, once each.
            let names = try await client.changes(notes, token: laptop.token).items.map { try records.opened($0).name }
            #expect(names.sorted() == ["OLD 2.txt", "Old.txt", "TRIP 2.txt", "TRIP 3.txt", "Trip.txt", "old 3.txt"], "\(names)")
        }
    }
}
