import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization
import UbiquityFiles
import Testing
import UbiquityClient
import UbiquityCoordination
import UbiquityProtocol
import UbiquityServer
import UbiquitySync
import UbiquityTestSupport
@testable import UbiquityAgent

/// Bugs `ubiquity-chaos` found with real processes under faults, each shown here at the agent's
/// own level (docs/Reliability.md lists them).
@Suite struct ChaosFoundTests {
    /// Found with seed 1 (a reset connection mid-commit): a change sent again after a failed
    /// round carries the contents it was made with; its file had been written again and scanned
    /// since, so the file's record (fingerprint) was newer than the change. The upload trusted
    /// that record, read the file's new bytes and sent them under the old chunk's hash; the
    /// server refused the whole batch (`hashMismatch`) — again every round, for good: the
    /// device never sent anything more.
    @Test func aChangeWhoseFileMovedOnIsNotSentUnderItsOldHash() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let (sync, root) = try await laptop(base: base, dir: dir)
            let file = root.appendingPathComponent("Documents/Report.txt")
            try Data(repeating: 1, count: 40_000).write(to: file)
            // What a change made now would carry; then the file is written again (same size) and scanned.
            let before = try LocalContents.cut(file, kind: .file, scanner: await sync.scanner, relative: "Documents/Report.txt")
            try await Task.sleep(for: .milliseconds(10))
            try Data(repeating: 2, count: 40_000).write(to: file)
            try await sync.uploadStale(before, of: "Documents/Report.txt")
        }
    }

    /// Found with seed 1 after the fix above: that change, no longer sent under the old hash,
    /// was refused (`missingChunks`: its chunks were gone from the file and had never reached
    /// the server) — and sent again, refused again, every round, while the item's newer change
    /// waited behind it for good. Now the server's refusal of contents the device no longer has
    /// gives way to the newer change.
    @Test func aChangeWhoseContentsAreGoneGivesWayToTheNewerOne() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let relay = try RelayProxy.start(to: try #require(base.port))
            defer { relay.stop() }
            let laptop = try await ContainerSyncTests().device("laptop", base: URL(string: "http://127.0.0.1:\(relay.port)")!, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            func contents(_ seed: UInt8) -> Data { Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }) }
            try laptop.write("Big.bin", contents(1))
            relay.mode = .cut
            try? await laptop.sync.syncOnce() // (the round fails: the change waits, as sent)
            #expect(await !laptop.sync.isIdle)
            try laptop.write("Big.bin", contents(2))
            relay.mode = .pass
            for _ in 0..<3 where await !laptop.sync.isIdle { try await laptop.sync.syncOnce() }
            let errors = await laptop.sync.errors
            #expect(await laptop.sync.isIdle, "\(errors)")
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Big.bin")) == contents(2))
        }
    }

    /// Found with the 60-minute profile (seed 60, round 21): a push connection opened while the
    /// server was down and coming back was never answered, and the agent waited for it for
    /// ever — no timeout covers a WebSocket's opening — hearing of no change again. Here the
    /// first attempts reach a server that accepts connections and never answers; the agent
    /// gives such an attempt up and connects once the real server is reachable.
    @Test(.timeLimit(.minutes(3))) func aPushConnectionThatNeverOpensIsGivenUpAndMadeAgain() async throws {
        let dir = NSTemporaryDirectory() + "push-open-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let server = try await EmbeddedServer.start(dataDirectory: dir + "/server", account: "ada", password: "correct horse", logger: quiet)
        defer { server.cancel() }
        let port = try #require(server.url.port)
        let relay = try RelayProxy.start(to: port)
        defer { relay.stop() }
        let silent = try loopbackSocket(listening: 64) // accepts connections, never answers
        defer { close(silent.fd) }
        let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
        let home = UbiquityPaths(configuration: root.appendingPathComponent("config"), data: root.appendingPathComponent("data"), runtime: root.appendingPathComponent("run"))
        try await SyncClient(server: URL(string: "http://127.0.0.1:\(relay.port)")!).signIn(account: "ada", password: "correct horse", deviceName: "laptop", savingTo: home)
        relay.targets = [silent.port]
        // What the agent says is kept, and printed should the connection never open (once in
        // CI, under the whole suite's load, it did not within 60 s).
        let said = LogCapture(level: .info)
        let agent = Agent(paths: home, configuration: AgentConfiguration(containers: ["ABCDE12345.com.example.notes"], rescanSeconds: 60),
                          logger: said.logger(label: "agent"), pushOpenTimeout: .seconds(2))
        let running = Task { try await agent.run() }
        defer { running.cancel() }
        try await Task.sleep(for: .seconds(1)) // the first attempt waits on the silent server
        relay.targets = [port]
        let device = UbiquityContainers(paths: home, entitlements: UbiquityEntitlements(containers: ["ABCDE12345.com.example.notes"]))
        var connected = false
        var answer = "no answer"
        let deadline = ContinuousClock.now + .seconds(100)
        while !connected && ContinuousClock.now < deadline {
            let status = try await onOwnThread { Result { try device.agent.send(AgentRequest(.status), timeout: .seconds(10)).status } }
            connected = (try? status.get())?.connected == true
            answer = "\(status)"
            if !connected { try await Task.sleep(for: .milliseconds(100)) }
        }
        let log = said.lines.withLock { $0.map { "\($0.level) \($0.message) \($0.metadata)" } }.suffix(40).joined(separator: "\n")
        #expect(connected, "the push connection never opened after the server became reachable; last status: \(answer)\nthe agent said:\n\(log)")
    }

    /// Found in CI, under the whole suite's load: every push connection took longer to open
    /// than the agent waited, and each one that opened late was ignored as not the attempt in
    /// progress — until five were left behind, when the agent waited for the oldest (on a
    /// server that never answers) for ever. Here every connection's answer comes 2.5 s late and
    /// the agent waits 1 s: the wait grows, and an attempt that opens late is taken.
    @Test(.timeLimit(.minutes(2))) func aPushConnectionSlowerToOpenThanTheWaitIsTaken() async throws {
        let dir = NSTemporaryDirectory() + "push-slow-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let server = try await EmbeddedServer.start(dataDirectory: dir + "/server", account: "ada", password: "correct horse", logger: quiet)
        defer { server.cancel() }
        let relay = try RelayProxy.start(to: try #require(server.url.port))
        defer { relay.stop() }
        let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
        let home = UbiquityPaths(configuration: root.appendingPathComponent("config"), data: root.appendingPathComponent("data"), runtime: root.appendingPathComponent("run"))
        try await SyncClient(server: URL(string: "http://127.0.0.1:\(relay.port)")!).signIn(account: "ada", password: "correct horse", deviceName: "laptop", savingTo: home)
        relay.mode = .slowToAnswer
        let said = LogCapture(level: .info)
        let agent = Agent(paths: home, configuration: AgentConfiguration(containers: ["ABCDE12345.com.example.notes"], rescanSeconds: 60),
                          logger: said.logger(label: "agent"), pushOpenTimeout: .seconds(1))
        let running = Task { try await agent.run() }
        defer { running.cancel() }
        let device = UbiquityContainers(paths: home, entitlements: UbiquityEntitlements(containers: ["ABCDE12345.com.example.notes"]))
        var connected = false
        let deadline = ContinuousClock.now + .seconds(60)
        while !connected && ContinuousClock.now < deadline {
            let status = try await onOwnThread { Result { try device.agent.send(AgentRequest(.status), timeout: .seconds(10)).status } }
            connected = (try? status.get())?.connected == true
            if !connected { try await Task.sleep(for: .milliseconds(200)) }
        }
        let log = said.lines.withLock { $0.map { "\($0.level) \($0.message) \($0.metadata)" } }.suffix(40).joined(separator: "\n")
        #expect(connected, "the push connection never opened; the agent said:\n\(log)")
    }

    /// Found with seed 1: a conflict resolution the server refused once (here: no network; in
    /// the run, `notAVersion` — the device's view of the item was behind) left its error in the
    /// item's status after a later attempt succeeded, or after the conflict was resolved
    /// elsewhere: the agent never said it was idle again.
    @Test func aResolutionThatFailedOnceLeavesNoErrorOnceDone() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let relay = try RelayProxy.start(to: try #require(base.port))
            defer { relay.stop() }
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: URL(string: "http://127.0.0.1:\(relay.port)")!, dir: dir, greedy: true)
            try await makeConflict(laptop, phone)
            let url = phone.documents.appendingPathComponent("Trip.txt")
            #expect(await phone.sync.conflicts(of: "Documents/Trip.txt").count == 1 && NSFileVersion.unresolvedConflictVersionsOfItem(at: url)?.count == 1)

            for version in NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? [] { version.isResolved = true }
            try NSFileVersion.removeOtherVersionsOfItem(at: url)
            relay.mode = .cut
            try? await phone.sync.syncOnce() // (the resolution cannot reach the server)
            let failed = await phone.sync.errors
            #expect(failed.values.contains { $0.hasPrefix(ConflictReconciler.resolutionError) }, "\(failed)")
            relay.mode = .pass
            try await phone.sync.syncOnce()
            let left = await phone.sync.errors
            #expect(await phone.sync.isIdle, "\(left)")
            try await laptop.sync.syncOnce()
            #expect(await laptop.sync.conflicts(of: "Documents/Trip.txt").isEmpty)
        }
    }

    /// Found with seed 1, round 2: a file deleted between the scan and its upload made the
    /// upload throw, failing the whole round — and the changes that round had sent stayed
    /// "in flight" (see `SyncStateTests.aFailedRoundLeavesNothingInFlight`), never sent again
    /// until the agent restarted. A file gone since the scan is now left to the next scan.
    @Test func aFileDeletedBeforeItsUploadFailsNothing() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let (sync, root) = try await laptop(base: base, dir: dir)
            let file = root.appendingPathComponent("Documents/Gone.txt")
            try Data(repeating: 3, count: 40_000).write(to: file)
            let members = try LocalContents.cut(file, kind: .file, scanner: await sync.scanner, relative: "Documents/Gone.txt")
            try await sync.uploadStale(members, of: "Documents/Gone.txt", deletingFirst: true)
        }
    }

    /// Found with seed 1 (an agent killed mid-round): the server made a commit whose answer the
    /// agent never took in; the agent came back from its store without the change recorded as
    /// sent, and the file's next edit went on a stale base — the server took it for a conflict
    /// with the device's own commit (a single writer's file with a conflict version). Changes
    /// are now recorded as sent before they go.
    @Test func aCommitTheServerMadeBeforeACrashIsNotInConflictWithTheNextEdit() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let relay = try RelayProxy.start(to: try #require(base.port))
            defer { relay.stop() }
            let notes = ContainerSyncTests().notes
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
            let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let crashing = try ContainerSync(container: notes, root: root, client: SyncClient(server: URL(string: "http://127.0.0.1:\(relay.port)")!, token: token),
                                             store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
            let file = root.appendingPathComponent("Documents/Report.txt")
            try Data("first".utf8).write(to: file)
            relay.mode = .answersHeld
            let stuck = Task { try? await crashing.syncOnce() }
            let observer = SyncClient(server: base, token: token)
            let start = ContinuousClock.now
            while try await observer.changes(container: notes, since: 0).items.isEmpty {
                // (Bounded generously: the suite's start keeps a 2-core machine busy for a minute.)
                guard ContinuousClock.now - start < .seconds(90) else { Issue.record("the commit never reached the server"); return }
                try await Task.sleep(for: .milliseconds(20))
            }
            // The agent dies here (its round never ends); another starts on its store.
            let restarted = try ContainerSync(container: notes, root: root, client: SyncClient(server: base, token: token),
                                              store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
            try Data("second".utf8).write(to: file)
            try await restarted.syncOnce()
            try await restarted.syncOnce()
            let items = try await observer.changes(container: notes, since: 0).items
            #expect(items.map(\.name) == ["Report.txt"] && items.first?.conflicts == [], "\(items)")
            relay.stop()
            _ = await stuck.value
        }
    }

    /// Found with seed 4: a file moved between folders makes two events (gone from one, arrived
    /// in the other), and the watcher may hand them to two rounds, each looking at its folder
    /// alone. Arrival first, the file was taken for a new item; departure first, the item was
    /// deleted — either way the server ended with two items (one renamed "n125-429 2.txt") or
    /// lost the item's history. Now the arrival finds the record by its inode, and a departure
    /// waits one round for its arrival.
    @Test func aMoveSeenInTwoRoundsKeepsItsItem() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            try laptop.write("sub/a.txt", Data("first".utf8))
            try laptop.write("sub/b.txt", Data("second".utf8))
            try await laptop.sync.syncOnce()
            func files() async throws -> [String: ItemState] {
                let items = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items
                return Dictionary(uniqueKeysWithValues: items.filter { $0.kind != .directory && !$0.deleted }.map { ($0.id, $0) })
            }
            let before = try await files()
            #expect(before.count == 2)
            let documents = laptop.documents

            // The arrival's round first.
            try FileManager.default.moveItem(at: documents.appendingPathComponent("sub/a.txt"), to: documents.appendingPathComponent("a.txt"))
            await laptop.sync.noteChange(at: "Documents/a.txt")
            try await laptop.sync.syncOnce()
            await laptop.sync.noteChange(at: "Documents/sub/a.txt")
            try await laptop.sync.syncOnce()
            // The departure's round first.
            try FileManager.default.moveItem(at: documents.appendingPathComponent("sub/b.txt"), to: documents.appendingPathComponent("b.txt"))
            await laptop.sync.noteChange(at: "Documents/sub/b.txt")
            try await laptop.sync.syncOnce()
            #expect(await !laptop.sync.isIdle, "a departure waits a round for its arrival")
            await laptop.sync.noteChange(at: "Documents/b.txt")
            try await laptop.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(await laptop.sync.isIdle)
            // Both ends in one look (found with seed 5: the departure's wait made the arrival a new item).
            try FileManager.default.moveItem(at: documents.appendingPathComponent("a.txt"), to: documents.appendingPathComponent("sub/a.txt"))
            await laptop.sync.noteChange(at: "Documents/a.txt")
            await laptop.sync.noteChange(at: "Documents/sub/a.txt")
            try await laptop.sync.syncOnce()
            try FileManager.default.moveItem(at: documents.appendingPathComponent("sub/a.txt"), to: documents.appendingPathComponent("a.txt"))
            await laptop.sync.noteChange(at: "Documents/a.txt")
            await laptop.sync.noteChange(at: "Documents/sub/a.txt")
            try await laptop.sync.syncOnce()
            #expect(await laptop.sync.isIdle)

            let after = try await files()
            #expect(Set(after.keys) == Set(before.keys), "the same two items: \(after.values.map(\.name))")
            #expect(Set(after.values.map(\.name)) == ["a.txt", "b.txt"] && after.values.allSatisfy { $0.parent == nil }, "\(after.values.map { ($0.name, $0.parent) })")
        }
    }

    /// Found with seed 11 (three full test runs out of four on 2026-11-29): an app saves by
    /// writing a new file in another folder and renaming it over the old one, and the agent
    /// happens to look between the two — the new file is a new item, sent as such; then it is
    /// moved over the old item's file. The item there keeps its name and identity and takes
    /// the new contents, and the new item goes (it was made a second item, which clashed with
    /// the old one's name and landed as "Name 2", the old one keeping its old contents).
    @Test func aNewFileMovedOverAnotherReplacesItsContents() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            try laptop.write("sub/n.txt", Data("first".utf8))
            try await laptop.sync.syncOnce()
            let documents = laptop.documents
            try laptop.write("n.txt", Data("second".utf8))
            await laptop.sync.noteChange(at: "Documents/n.txt")
            try await laptop.sync.syncOnce() // (the new file, sent as an item of its own)
            #expect(rename(documents.appendingPathComponent("n.txt").path, documents.appendingPathComponent("sub/n.txt").path) == 0) // (over it, as rename(2) does)
            await laptop.sync.noteChange(at: "Documents/n.txt")
            await laptop.sync.noteChange(at: "Documents/sub/n.txt")
            try await laptop.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(await laptop.sync.isIdle)
            let items = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items.filter { $0.kind != .directory && !$0.deleted }
            #expect(items.count == 1 && items.first?.name == "n.txt", "\(items.map(\.name))")
            #expect(try String(contentsOf: documents.appendingPathComponent("sub/n.txt"), encoding: .utf8) == "second")
            #expect(try FileManager.default.contentsOfDirectory(atPath: documents.appendingPathComponent("sub").path) == ["n.txt"])
        }
    }

    /// Found with seed 7: an agent killed after it put a download in place and before it
    /// recorded so came back, saw the file changed and sent it as its own edit of the older
    /// revision — a spurious conflict for the author, whose later delete then lost to it (the
    /// deleted file came back on every device). See also
    /// `SyncServerTests.theCurrentContentsSentAgainOnAnOlderBaseChangeNothing`.
    @Test func aDownloadPutInPlaceButNotRecordedIsNotAnEdit() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try await editTwiceOnTheLaptop("Notes.txt", laptop, phone)
            // The phone's agent put "two" in place and was stopped before recording it.
            try phone.write("Notes.txt", Data("two".utf8))
            try await phone.sync.syncOnce()
            try await phone.sync.syncOnce()
            let items = try await phone.client.changes(container: ContainerSyncTests().notes, since: 0).items.filter { $0.name == "Notes.txt" }
            #expect(items.count == 1 && items.first?.conflicts == [], "\(items)")
            // The author's delete stands.
            try FileManager.default.removeItem(at: laptop.documents.appendingPathComponent("Notes.txt"))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(!phone.exists("Notes.txt"))
        }
    }

    /// Found with seed 21 (sign-out mid-download): an agent stopped after it put a download
    /// that renamed and changed a file in place — the new file there, the old one gone or still
    /// there — and before it recorded so came back, saw a new file and a deleted one, and sent
    /// them: the item was deleted and its contents made a new item, which collided with the
    /// author's next save (kept as "name 2.txt" by the server). The file is that item.
    @Test(arguments: [false, true]) func aRenamingDownloadPutInPlaceButNotRecordedKeepsItsItem(oldFileLeft: Bool) async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("a.txt", Data("one".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            let item = try #require(try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items.first { $0.name == "a.txt" }?.id)
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("a.txt"), to: laptop.documents.appendingPathComponent("b.txt"))
            try await laptop.sync.syncOnce()
            try laptop.write("b.txt", Data("two".utf8))
            try await laptop.sync.syncOnce()
            // The phone learns the rename and the new contents, puts them in place, and is
            // stopped before it records so (and, in one case, before it removed the old file).
            try await phone.sync.fetchOnlyForTest()
            try phone.write("b.txt", Data("two".utf8))
            if !oldFileLeft { try FileManager.default.removeItem(at: phone.documents.appendingPathComponent("a.txt")) }
            // It comes back.
            let restarted = try ContainerSync(container: ContainerSyncTests().notes, root: phone.documents.deletingLastPathComponent(), client: phone.client,
                                              store: try AgentStore(path: dir + "/phone.sqlite"), device: "phone", greedy: true)
            try await restarted.syncOnce()
            try await restarted.syncOnce()
            let page = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0)
            var files: [String] = []
            for state in page.items where state.kind == .file {
                files.append("\(state.id) \(state.name) deleted: \(state.deleted), conflicts: \(state.conflicts.count)")
            }
            #expect(files == ["\(item) b.txt deleted: false, conflicts: 0"])
            #expect(!phone.exists("a.txt") && phone.read("b.txt") == "two")
            // The author's next save is the item's next revision, under its name.
            try laptop.write("b.txt", Data("three".utf8))
            try await laptop.sync.syncOnce()
            try await restarted.syncOnce()
            #expect(phone.read("b.txt") == "three" && !phone.exists("b 2.txt"))
        }
    }

    /// Found with seed 7 (under load): an app's coordinated save made at once after the agent
    /// put a download in place — its write was waiting for the agent's — was taken for the
    /// download: the agent read the file's fingerprint after its coordinated write was over,
    /// so the record described the app's file with the download's contents. The edit was
    /// never sent, and the item's next download replaced it: **an edit lost**.
    @Test func anAppsSaveRightAfterADownloadIsSent() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("a.txt", Data("one".utf8))
            try await laptop.sync.syncOnce()
            let documents = phone.documents
            await phone.sync.setPlacedForTesting { path in
                guard path == "Documents/a.txt" else { return }
                try? Data("the phone's edit".utf8).write(to: documents.appendingPathComponent("a.txt"), options: .atomic)
            }
            try await phone.sync.syncOnce()
            await phone.sync.setPlacedForTesting(nil)
            await phone.sync.noteEverythingChanged()
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(laptop.read("a.txt") == "the phone's edit")
        }
    }

    /// Found with seeds 10 and 11 (short runs six at once): an item renamed and changed elsewhere
    /// (in the runs, renamed by the server for a name collision, then saved by another device)
    /// was brought down to its new name, then its copy at the old name was removed — with the
    /// save an app had made there a moment before: **an edit lost**. The copy at the old name
    /// now goes only if it is as the agent last saw it; a file written since stays and is sent.
    @Test func aSaveAtTheOldNameOfAnItemMovedElsewhereIsKept() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("a.txt", Data("one".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("a.txt") == "one")
            // The laptop renames it and saves it again.
            let documents = laptop.documents
            try FileManager.default.moveItem(at: documents.appendingPathComponent("a.txt"), to: documents.appendingPathComponent("b.txt"))
            try Data("two".utf8).write(to: documents.appendingPathComponent("b.txt"), options: .atomic)
            await laptop.sync.noteChange(at: "Documents/a.txt")
            await laptop.sync.noteChange(at: "Documents/b.txt")
            await laptop.sync.noteMove(from: "Documents/a.txt", to: "Documents/b.txt")
            try await laptop.sync.syncOnce()
            // The phone's app saves a.txt just as the agent has put the new contents at b.txt.
            let phoneDocuments = phone.documents
            await phone.sync.setPlacedForTesting { path in
                guard path == "Documents/b.txt" else { return }
                try? Data("the phone's edit".utf8).write(to: phoneDocuments.appendingPathComponent("a.txt"), options: .atomic)
            }
            try await phone.sync.syncOnce()
            await phone.sync.setPlacedForTesting(nil)
            #expect(phone.read("a.txt") == "the phone's edit", "the save at the old name was removed")
            #expect(phone.read("b.txt") == "two")
            await phone.sync.noteEverythingChanged()
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            let contents = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items.filter { !$0.deleted && $0.kind == .file }
            #expect(laptop.read("a.txt") == "the phone's edit", "\(contents.map(\.name))")
            #expect(laptop.read("b.txt") == "two")
        }
    }

    /// Found by the long profile (seed 60): a download that failed (a reset link) left its
    /// error on the item after the file was found holding the server's contents anyway (the
    /// device's own commit, whose answer the reset had lost): the item was in step, yet the
    /// agent never said it was idle again.
    @Test func aFailedDownloadFoundInStepLeavesNoError() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try await editTwiceOnTheLaptop("a.txt", laptop, phone)
            // The phone hears of "two", its download fails, and the file turns out to hold it.
            try await phone.sync.fetchOnlyForTest()
            await phone.sync.failDownloadForTest(of: "Documents/a.txt")
            try phone.write("a.txt", Data("two".utf8))
            try await phone.sync.syncOnce()
            #expect(await phone.sync.isIdle)
            #expect(await phone.sync.status(ofName: "Documents/a.txt")?.downloadingError == nil)
        }
    }

    /// Found with seed 1: a file moved and then saved over (a safe save replaces it with a new
    /// file) before the agent looked could not be told from a delete and a new file — the item
    /// was deleted and its contents made a new item. The watcher pairs the rename's two events
    /// and the item follows the rename, whatever is at its new place.
    @Test func aMovedFileSavedOverBeforeTheLookKeepsItsItem() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            try laptop.write("sub/c.txt", Data("first".utf8))
            try await laptop.sync.syncOnce()
            let before = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items.filter { $0.kind == .file }
            let documents = laptop.documents
            try FileManager.default.moveItem(at: documents.appendingPathComponent("sub/c.txt"), to: documents.appendingPathComponent("c.txt"))
            try Data("second".utf8).write(to: documents.appendingPathComponent("c.txt"), options: .atomic) // a new file in its place
            await laptop.sync.noteChange(at: "Documents/sub/c.txt")
            await laptop.sync.noteChange(at: "Documents/c.txt")
            await laptop.sync.noteMove(from: "Documents/sub/c.txt", to: "Documents/c.txt")
            try await laptop.sync.syncOnce()
            try await laptop.sync.syncOnce()
            let after = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items.filter { $0.kind == .file && !$0.deleted }
            #expect(after.map(\.id) == before.map(\.id) && after.map(\.name) == ["c.txt"] && after.first?.parent == nil, "\(after.map { ($0.id, $0.name) })")
            #expect(after.first?.size == 6, "its new contents went too")
        }
    }

    /// Found with seed 13 (six short runs at once) and `--database` seed 3: a file moved away —
    /// the agent recorded the move, then could not send it (no network; or it was killed) — and
    /// back, and saved over (a new file), before the agent looked again. Its record at the other
    /// place was gone and the file at its old place looked new: a new item, which collided on the
    /// server with the item itself (still at that name) and was kept as "a 2.txt", while the
    /// item went as deleted — the user's document renamed on every device.
    @Test func aFileMovedAwayAndBackAndSavedOverKeepsItsItem() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let notes = ContainerSyncTests().notes
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            try laptop.write("a.txt", Data("first".utf8))
            try await laptop.sync.syncOnce()
            let before = try await laptop.client.changes(container: notes, since: 0).items.filter { $0.kind == .file && !$0.deleted }
            #expect(before.count == 1)
            func reopened(_ client: SyncClient) throws -> ContainerSync {
                try ContainerSync(container: notes, root: URL(fileURLWithPath: dir).appendingPathComponent("laptop"), client: client,
                                  store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop", greedy: true)
            }
            // The move seen and recorded, but not sent: no network; then the agent stops.
            let documents = laptop.documents
            let offline = try reopened(SyncClient(server: URL(string: "http://127.0.0.1:1")!, token: "unused"))
            try FileManager.default.createDirectory(at: documents.appendingPathComponent("sub"), withIntermediateDirectories: true)
            try FileManager.default.moveItem(at: documents.appendingPathComponent("a.txt"), to: documents.appendingPathComponent("sub/a.txt"))
            await offline.noteChange(at: "Documents/a.txt")
            await offline.noteChange(at: "Documents/sub")
            await offline.noteChange(at: "Documents/sub/a.txt")
            try await offline.syncOnce() // (its sending fails: noted in its status, not thrown)
            #expect(await offline.errors.isEmpty == false, "the move could not be sent")
            // Moved back and saved over while no agent ran.
            try FileManager.default.moveItem(at: documents.appendingPathComponent("sub/a.txt"), to: documents.appendingPathComponent("a.txt"))
            try Data("second".utf8).write(to: documents.appendingPathComponent("a.txt"), options: .atomic)
            let restarted = try reopened(laptop.client)
            try await restarted.syncOnce()
            try await restarted.syncOnce()
            let after = try await laptop.client.changes(container: notes, since: 0).items.filter { $0.kind == .file && !$0.deleted }
            #expect(after.map(\.id) == before.map(\.id) && after.map(\.name) == ["a.txt"] && after.first?.parent == nil, "\(after.map { ($0.id, $0.name) })")
            #expect(after.first?.size == 6, "its new contents went too")
            #expect(laptop.read("a.txt") == "second" && !laptop.exists("a 2.txt"))
        }
    }

    /// The watcher pairs a rename's two events into one `moved`, also when they come in two reads.
    @Test func theWatcherPairsARenamesEvents() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("watch-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("a"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("b"), withIntermediateDirectories: true)
        try Data("x".utf8).write(to: folder.appendingPathComponent("a/f.txt"))
        let seen = Mutex<[DirectoryWatcher.Event]>([])
        let watcher = try DirectoryWatcher(root: folder) { event in seen.withLock { $0.append(event) } }
        defer { watcher.stop() }
        try FileManager.default.moveItem(at: folder.appendingPathComponent("a/f.txt"), to: folder.appendingPathComponent("b/g.txt"))
        let start = ContinuousClock.now
        while !seen.withLock({ $0.contains { if case .moved = $0 { true } else { false } } }) && ContinuousClock.now - start < .seconds(5) {
            try await Task.sleep(for: .milliseconds(10))
        }
        let root = folder.resolvingSymlinksInPath().path
        #expect(seen.withLock { $0 }.contains(.moved(from: root + "/a/f.txt", to: root + "/b/g.txt")) || seen.withLock { $0 }.contains(.moved(from: folder.path + "/a/f.txt", to: folder.path + "/b/g.txt")),
                "\(seen.withLock { $0 })")
    }

    /// Found with `--database` seed 3: the server renamed an item (a name collision), and the
    /// agent moved the file to its new name — just after the app had written it again, before
    /// the agent looked. The move recorded the file's fresh fingerprint, so the edit was never
    /// seen, never sent, and the devices disagreed for good. The record keeps the old
    /// fingerprint of a file that changed before it moved.
    @Test func anEditJustBeforeTheAgentMovesAFileIsSent() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            func contents(_ seed: UInt8, _ count: Int) -> Data { Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) }) }
            try laptop.write("Notes.txt", contents(1, 200_000)) // several chunks: its chunk list is kept
            try await laptop.sync.syncOnce()
            try await Task.sleep(for: .milliseconds(10))
            try laptop.write("Notes.txt", contents(2, 250_000)) // not looked at yet
            try await laptop.sync.relocateForTest("Documents/Notes.txt", to: "Documents/Renamed.txt")
            try await laptop.sync.syncOnce()
            let items = try await laptop.client.changes(container: ContainerSyncTests().notes, since: 0).items.filter { $0.kind == .file }
            #expect(items.map(\.name) == ["Renamed.txt"] && items.first?.size == 250_000, "\(items.map { ($0.name, $0.size) })")
            #expect(try await laptop.sync.recordMatchesFile("Documents/Renamed.txt"), "the record says what the file holds")
        }
    }

    /// Found by `ubiquity-chaos --share` (seed 12): a share accepted again starts its records
    /// afresh, and its change ids counted from 1 again — the server answered an edit with the
    /// first answer to the old change of that id, the device took it as sent, and the next
    /// download replaced it: lost. A state begun again (here: the same device's records gone)
    /// names its changes anew.
    @Test func aStateBegunAgainDoesNotReuseItsChangeIds() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let notes = ContainerSyncTests().notes
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
            func engine(_ name: String) throws -> (ContainerSync, URL) {
                let root = URL(fileURLWithPath: dir).appendingPathComponent(name)
                let sync = try ContainerSync(container: notes, root: root, client: SyncClient(server: base, token: token),
                                             store: try AgentStore(path: dir + "/\(name).sqlite"), device: "laptop", greedy: true)
                return (sync, root.appendingPathComponent("Documents/a.txt"))
            }
            let (first, a) = try engine("first")
            for text in ["one", "two"] {
                try Data(text.utf8).write(to: a)
                try await first.syncOnce()
            }
            // The same device, its records gone: it downloads the file and edits it.
            let (again, b) = try engine("again")
            try await again.syncOnce()
            #expect(try String(contentsOf: b, encoding: .utf8) == "two")
            try Data("three".utf8).write(to: b)
            try await again.syncOnce()
            try await again.syncOnce()
            let item = try await SyncClient(server: base, token: token).changes(container: notes, since: 0).items.first { $0.name == "a.txt" }
            #expect(item?.size == 5 && item?.conflicts.isEmpty == true, "the edit is the current revision: \(String(describing: item))")
            #expect(try String(contentsOf: b, encoding: .utf8) == "three")
        }
    }

    /// Found with seeds 8 and 13 (a full disk, then a kill): a scan whose store write failed
    /// dropped its file records (here: a rename) while the sync state was written with the next
    /// write; the store kept the old record beside the new one, and an agent started on it took
    /// the item for deleted — the server deleted it while its file stayed. The records a failed
    /// write had now go with the next. (The store is on a small filesystem filled to the last
    /// byte, which needs root to mount; without it the test says so and checks nothing.)
    @Test func fileRecordsAFailedStoreWriteHadAreWrittenWithTheNext() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            guard let small = try SmallDisk(at: URL(fileURLWithPath: dir).appendingPathComponent("store"), megabytes: 4) else { return }
            defer { small.unmount() }
            let disk = small.folder
            let notes = ContainerSyncTests().notes
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
            let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let documents = root.appendingPathComponent("Documents")
            func open() throws -> ContainerSync {
                try ContainerSync(container: notes, root: root, client: SyncClient(server: base, token: token), store: try AgentStore(path: disk.path + "/laptop.sqlite"), device: "laptop")
            }
            var sync: ContainerSync? = try open()
            try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
            try Data(repeating: 7, count: 100_000).write(to: documents.appendingPathComponent("a.txt"))
            try await sync?.syncOnce()

            // The disk fills; the rename's records cannot be written.
            small.fill()
            try FileManager.default.moveItem(at: documents.appendingPathComponent("a.txt"), to: documents.appendingPathComponent("b.txt"))
            try? await sync?.syncOnce() // (fails: the disk is full)
            try small.empty()
            try await sync?.syncOnce()
            sync = nil // the agent stops

            for _ in 0..<5 { // the store's records are read back in a different order each time
                let again = try open()
                try await again.syncOnce()
                let items = try await SyncClient(server: base, token: token).changes(container: notes, since: 0).items.filter { $0.kind == .file }
                #expect(items.map(\.name) == ["b.txt"] && items.allSatisfy { !$0.deleted }, "\(items.map { ($0.name, $0.deleted) })")
                #expect(FileManager.default.fileExists(atPath: documents.appendingPathComponent("b.txt").path))
            }
        }
    }
}

/// `name` made on the laptop ("one") and brought to the phone, then written again on the
/// laptop ("two") and sent: the phone has not heard of "two" yet.
private func editTwiceOnTheLaptop(_ name: String, _ laptop: ContainerSyncTests.Device, _ phone: ContainerSyncTests.Device) async throws {
    try laptop.write(name, Data("one".utf8))
    try await laptop.sync.syncOnce()
    try await phone.sync.syncOnce()
    try laptop.write(name, Data("two".utf8))
    try await laptop.sync.syncOnce()
}


/// A device's container sync (no watcher: each round looks at everything) and its folder.
private func laptop(base: URL, dir: String) async throws -> (ContainerSync, URL) {
    let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
    let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
    let sync = try ContainerSync(container: ContainerSyncTests().notes, root: root, client: SyncClient(server: base, token: token),
                                 store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
    return (sync, root)
}

extension ContainerSync {
    /// Whether the record of the file at `path` names the contents the file holds.
    fileprivate func recordMatchesFile(_ path: String) throws -> Bool {
        let members = try LocalContents.cut(root.appendingPathComponent(path), kind: .file, scanner: scanner, relative: path)
        return files[path]?.content == LocalContents.token(LocalContents.manifest(members, kind: .file), kind: .file)
    }

    /// Forgets which conflict versions are on disk (an agent killed after adding them, before
    /// recording so).
    func forgetConflictCopiesForTest() throws {
        for (item, revisions) in reconciler.conflictCopies {
            for revision in revisions { try store.setConflictCopy(false, container: container, item: item, revision: revision) }
        }
        reconciler.conflictCopies = [:]
    }

    /// Records a failed download of the item at `path`, as a round whose download failed does.
    fileprivate func failDownloadForTest(of path: String) {
        guard let item = files[path]?.item else { return }
        downloadErrors[item] = "download: no answer (a test's)"
    }

    /// Sets the materialiser's test hook (see ``Materialiser/placedForTesting``).
    fileprivate func setPlacedForTesting(_ hook: ((String) -> Void)?) {
        materialiser.placedForTesting = hook
    }

    /// Fetches the server's changes and records them, without putting anything in place (an
    /// agent stopped right after its fetch).
    fileprivate func fetchOnlyForTest() async throws {
        guard let fetch = state.fetchRequest() else { throw ContainerSyncError("nothing to fetch") }
        try await perform(fetch)
        try await persist()
    }

    /// Moves the recorded file at `path` to `to` as applying the server's rename does.
    fileprivate func relocateForTest(_ path: String, to: String) async throws {
        let file = try #require(files[path])
        state.rename(item: file.item, to: LocalContents.name(of: to), date: Date().timeIntervalSince1970)
        _ = try await materialiser.relocate(file, to: to, in: self)
    }

    /// Scans, then uploads `members` (contents `path` no longer has) as a change sent again would.
    /// With `deletingFirst`, the file is deleted after the scan instead.
    fileprivate func uploadStale(_ members: [LocalMember], of path: String, deletingFirst: Bool = false) async throws {
        try await finder.scanLocalChanges(in: self)
        let item = try #require(files[path]?.item)
        if deletingFirst {
            try FileManager.default.removeItem(at: root.appendingPathComponent(path))
        } else {
            #expect(files[path]?.content != LocalContents.token(LocalContents.manifest(members, kind: .file), kind: .file), "the record is of the new contents")
        }
        let upload = Uploader.Upload(item: item, members: members, missing: Set(members.flatMap(\.chunks).map(\.hash)), url: root.appendingPathComponent(path))
        try await uploader.upload([upload], in: self)
    }
}
