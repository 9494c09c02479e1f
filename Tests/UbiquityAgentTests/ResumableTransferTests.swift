import Foundation
import Testing
import UbiquityClient
import UbiquityTestSupport
@testable import UbiquityAgent

/// A large upload or download cut short goes on where it stopped (issue 48): what the cut left in the
/// staged file is kept, checked chunk by chunk when the download is taken up again — by the
/// same agent, or by one started again — and only the rest is fetched: at most what was in
/// flight at the cut (16 MiB: four fetches of 4 MiB) comes twice.
@Suite struct ResumableTransferTests {
    static let size = 40 << 20

    /// The phone's download of a new 40 MiB file is cut once it brought about half; a phone
    /// started again (a new engine on the same store) finishes it.
    @Test(arguments: TestPostgres.storages)
    func aLargeDownloadCutShortGoesOnAfterARestart(storage: String) async throws {
        try await ContainerSyncTests().withServer(storage: storage) { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let bytes = randomBytes(Self.size)
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()

            let relay = try RelayProxy.start(to: try #require(base.port))
            defer { relay.stop() }
            let through = URL(string: "http://127.0.0.1:\(relay.port)")!
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "phone").token
            let root = URL(fileURLWithPath: dir).appendingPathComponent("phone")
            func phone() throws -> ContainerSync {
                try ContainerSync(container: ContainerSyncTests().notes, root: root, client: SyncClient(server: through, token: token),
                                  store: try AgentStore(path: dir + "/phone.sqlite"), device: "phone", greedy: true)
            }
            let first = try phone()
            let round = Task { try await first.syncOnce() }
            let deadline = ContinuousClock.now + .seconds(60)
            while relay.bytes < Int64(Self.size / 2) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            relay.mode = .cut
            let cutAt = relay.bytes
            _ = try? await round.value
            let film = root.appendingPathComponent("Documents/Film.mov")
            #expect(!FileManager.default.fileExists(atPath: film.path), "nothing half-made in place")
            let kept = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Documents").path).filter { $0.hasPrefix(".ubiquity-partial-") }
            #expect(kept.count == 1, "the cut download is kept: \(kept)")

            relay.mode = .pass
            let before = relay.bytes
            let again = try phone() // (opening the container leaves a recent partial download in place)
            try await again.syncOnce()
            #expect(try Data(contentsOf: film) == bytes)
            let sentAgain = relay.bytes - before
            // What was left, plus at most what was in flight at the cut, plus the requests' own bytes.
            let bound = Int64(Self.size) - cutAt + Int64(16 << 20) + Int64(1 << 20)
            #expect(sentAgain <= bound, "\(sentAgain) bytes after the cut at \(cutAt) of \(Self.size): more than \(bound)")
            #expect(sentAgain < Int64(Self.size), "not the whole file again")
            let left = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Documents").path).filter { $0.hasPrefix(".ubiquity-") }
            #expect(left.isEmpty, "nothing left behind: \(left)")
        }
    }

    /// A kept download whose bytes were damaged meanwhile (here: overwritten) is not trusted:
    /// its chunks are checked, the damaged ones fetched again.
    @Test func aKeptDownloadIsCheckedBeforeItIsTrusted() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let bytes = randomBytes((20 << 20))
            try laptop.write("Big.bin", bytes)
            try await laptop.sync.syncOnce()
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            // A partial download of these contents, every byte of it wrong, as a cut (and a
            // damaged disk) might have left it.
            let members = try #require(await laptop.sync.localContents.values.first { $0.count == 1 && $0[0].chunks.reduce(0) { $0 + $1.length } == bytes.count })
            let item = try #require(await laptop.sync.files["Documents/Big.bin"]?.item)
            let name = try #require(Materialiser.partial(of: item, members: members, kind: .file))
            try Data(repeating: 0xee, count: bytes.count).write(to: phone.documents.appendingPathComponent(name))
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == bytes)
        }
    }

    /// The laptop's upload of a new 40 MiB file is cut once about half went; the next round
    /// sends the rest: the server kept every chunk that came whole, the cut batches' too.
    @Test(arguments: TestPostgres.storages)
    func aLargeUploadCutShortSendsOnlyTheRest(storage: String) async throws {
        try await ContainerSyncTests().withServer(storage: storage) { base, dir in
            let relay = try RelayProxy.start(to: try #require(base.port))
            defer { relay.stop() }
            let laptop = try await ContainerSyncTests().device("laptop", base: URL(string: "http://127.0.0.1:\(relay.port)")!, dir: dir, greedy: true)
            let bytes = randomBytes(Self.size)
            try laptop.write("Film.mov", bytes)
            let direct = SyncClient(server: base, token: laptop.client.token)
            let empty = try await direct.account().usedBytes
            let start = relay.bytes
            let round = Task { try await laptop.sync.syncOnce() }
            let deadline = ContinuousClock.now + .seconds(60)
            while relay.bytes - start < Int64(Self.size / 2) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            // The link goes silent, then is cut: the server reads what reached it before the
            // resets (a reset throws away what waits unread in its socket — bytes no server
            // could keep).
            relay.mode = .stall
            try await Task.sleep(for: .milliseconds(500))
            let cutAt = relay.bytes - start
            relay.mode = .cut
            _ = try? await round.value
            // The device hears of the cut at once; the server, storing what came whole, a moment
            // later (an agent's next round waits a second or more; the suite's load makes it
            // longer): until what the account holds grew, and then stayed still for a second.
            var held = empty, changed: ContinuousClock.Instant?
            let waiting = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < waiting, changed.map({ ContinuousClock.now - $0 < .seconds(1) }) ?? true {
                try await Task.sleep(for: .milliseconds(100))
                let now = try await direct.account().usedBytes
                if now != held { (held, changed) = (now, ContinuousClock.now) }
            }
            relay.mode = .pass
            let before = relay.bytes
            try await laptop.sync.syncOnce()
            #expect(await laptop.sync.isIdle)
            let sentAgain = relay.bytes - before
            let bound = Int64(Self.size) - cutAt + Int64(16 << 20) + Int64(1 << 20)
            #expect(sentAgain <= bound, "\(sentAgain) bytes after the cut at \(cutAt) of \(Self.size): more than \(bound)")
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.mov")) == bytes)
        }
    }
}
