import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// `GET …/items/ID/revisions` and `…/revisions/REV` on both databases: an item's earlier
/// revisions newest first with who made them (not deletions, not the current one), one
/// revision's manifest to download it, and nothing of another account's or of hostile ids.
@Suite struct RevisionRouteTests {
    @Test(arguments: Backend.all) func earlierRevisionsAreListedAndEachCanBeFetched(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse")
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse")
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let first = try await client.commit(notes, "doc", fileUpdate("Plan.txt", [[1, 1]]), token: laptop.token)
            let second = try await client.commit(notes, "doc", fileUpdate("Plan.txt", [[2, 2, 2]], base: first.revision), token: phone.token)
            let third = try await client.commit(notes, "doc", fileUpdate("Plan.txt", [[3]], base: second.revision), token: laptop.token)

            let listed = try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions", token: phone.token)
            #expect(listed.status == .ok)
            let revisions = try listed.decode(ItemRevisionsResponse.self).revisions
            #expect(revisions.map(\.revision) == [second.revision, first.revision], "newest first, the current one left out")
            #expect(revisions.map(\.deviceName) == ["phone", "laptop"] && revisions.map(\.size) == [3, 2] && revisions.allSatisfy(\.uploaded))

            let fetched = try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions/\(first.revision)", token: phone.token)
            let contents = try fetched.decode(RevisionContentsResponse.self)
            #expect(contents.kind == .file && contents.manifest.chunks?.map(\.size) == [2] && contents.uploaded)
            #expect(contents.name == "Plan.txt" && contents.deviceName == "laptop" && contents.size == 2)
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions/\(third.revision)", token: phone.token).status == .ok, "the current one too")

            // A deletion is not a version; the deleted item's earlier revisions stay listed.
            _ = try await client.commit(notes, "doc", fileUpdate("Plan.txt", [], base: third.revision, deleted: true), token: laptop.token)
            let afterDelete = try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions", token: phone.token).decode(ItemRevisionsResponse.self)
            #expect(afterDelete.revisions.map(\.revision) == [third.revision, second.revision, first.revision])

            // Unknown items and revisions, hostile ids, no token, another account: nothing.
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/nothing/revisions", token: phone.token).errorCode == "notFound")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions/nothing", token: phone.token).errorCode == "notFound")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions/..%2F..%2Fetc", token: phone.token).status == .badRequest)
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions").status == .unauthorized)
            let bob = try await client.signIn("bob", device: "laptop")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions", token: bob.token).errorCode == "notFound")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/doc/revisions/\(first.revision)", token: bob.token).errorCode == "notFound")
        }
    }
}
