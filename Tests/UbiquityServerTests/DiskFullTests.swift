import Foundation
import Logging
import Synchronization
import Testing
import UbiquityTestSupport
#if canImport(Glibc)
import Glibc
#endif
import UbiquityProtocol
@testable import UbiquityServer

/// A small file system of the test's own, mounted for the test (root only).
struct SmallDisk {
    let path: String

    static let available: Bool = {
        let probe = NSTemporaryDirectory() + "ubiquity-probe-\(getpid())"
        mkdir(probe, 0o700)
        defer { rmdir(probe) }
        guard mount("tmpfs", probe, "tmpfs", 0, "size=1m") == 0 else { return false }
        umount(probe)
        return true
    }()

    init(megabytes: Int) throws {
        path = NSTemporaryDirectory() + "ubiquity-small-disk-\(UUID().uuidString.prefix(8))"
        mkdir(path, 0o700)
        guard mount("tmpfs", path, "tmpfs", 0, "size=\(megabytes)m") == 0 else {
            throw SyncError(.internalServerError, "mount", "cannot mount a tmpfs at \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Writes a file that takes the rest of the space; its path.
    func fill() -> String {
        let filler = path + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        defer { close(fd) }
        let block = [UInt8](repeating: 0x55, count: 4096)
        while block.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) > 0 {}
        return filler
    }

    func remove() {
        umount2(path, Int32(MNT_DETACH))
        rmdir(path)
    }
}

/// The server's disk fills up: every route that writes answers 507 `noSpace` as JSON (never an
/// empty 500), the log says so with the request's id, nothing half-written stays, and once there
/// is room again everything works and nothing was lost.
@Suite(.enabled(if: SmallDisk.available, "needs root to mount a small tmpfs"))
struct DiskFullTests {
    @Test func aFullDiskIsAnswered507AndLosesNothing() async throws {
        let disk = try SmallDisk(megabytes: 6); defer { disk.remove() }
        let capture = LogCapture()
        let server = try await TestServer(directory: disk.path + "/data", logger: capture.logger()); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            let folder = ItemUpdate(baseRevision: nil, name: "Before", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            #expect(try await client.put(notes, "before", folder, token: laptop.token).status == .ok)
            let filler = disk.fill()

            // Batches of folders with long names until one is refused.
            var statuses: [Int] = [], committed = 1
            for batch in 0..<40 {
                let commits = (0..<200).map { index in
                    ItemCommit(item: "f\(batch)-\(index)", update: ItemUpdate(
                        baseRevision: nil, name: "folder \(batch)-\(index) " + String(repeating: "x", count: 200), kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest()))
                }
                let answer = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, json: CommitBatchRequest(commits: commits))
                statuses.append(Int(answer.status.code))
                #expect([200, 507].contains(answer.status.code), "\(answer.status): \(String(buffer: answer.body))")
                if answer.status.code == 507 {
                    #expect(answer.errorCode == "noSpace")
                    break
                }
                committed += commits.count
            }
            #expect(statuses.last == 507, "\(statuses)")
            // A chunk and a sign-in on the full disk: stored, or refused the same way.
            for answer in [try await client.upload(Array(repeating: 7, count: 200_000), token: laptop.token),
                           try await client.send(.post, "/v1/sign-in", json: SignInRequest(account: "ann", password: "correct horse", deviceName: "phone"))] {
                #expect([200, 201, 507].contains(answer.status.code), "\(answer.status): \(String(buffer: answer.body))")
                if answer.status.code == 507 { #expect(answer.errorCode == "noSpace") }
            }
            // Reading still works.
            #expect(try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&limit=1", token: laptop.token).status == .ok)

            // Room again: the refused batch goes through, and everything before it is there.
            unlink(filler)
            let again = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, json: CommitBatchRequest(commits: [
                ItemCommit(item: "after", update: ItemUpdate(baseRevision: nil, name: "After", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())),
            ]))
            #expect(again.status == .ok, "\(String(buffer: again.body))")
            var items: [ItemState] = [], since: Int64 = 0
            while true {
                let page = try await client.changes(notes, since: since, token: laptop.token)
                items += page.items
                guard page.more else { break }
                since = page.sequence
            }
            #expect(Set(items.map(\.id)).count == committed + 1)
        }
        // Each refusal was logged with the request's id.
        let refusals = capture.lines.withLock { $0 }.filter { $0.metadata["status"] == "507" }
        #expect(!refusals.isEmpty)
        #expect(refusals.allSatisfy { $0.metadata["hb.request.id"] != nil && $0.level >= .warning })
    }
}
