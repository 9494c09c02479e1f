import Foundation
import Testing
import Ubiquity
import UbiquityProtocol
import UbiquityTestSupport

/// A downgrade at running agents (issue 45): once the account's devices require everything
/// sealed (`ubiquity protection require-sealed`), a state the server serves in plaintext — a
/// folder of its own put in, a folder shown under a name of its choosing — is refused: logged, the
/// page not taken, nothing written; once the truth is told everything arrives. Before the
/// requirement such a state is what an older build left, and taken.
@Suite(.serialized) struct HostileDowngradeTests {
    typealias Agent = HostileKeyValueServerTests.Agent

    enum Attack: String, CaseIterable, Sendable {
        /// A plaintext folder the server made up, in a page of real changes.
        case folderPutIn
        /// A renamed folder's state served in plaintext, under a name the server chose.
        case folderRenamedInPlaintext
    }

    @Test(arguments: Attack.allCases) func aPlaintextStateServedOnceEverythingIsSealedIsRefused(attack: Attack) async throws {
        let setup = try await HostileContentServerTests.sealedSetup()
        defer { setup.tearDown() }
        let (laptop, phone, relay) = (setup.laptop, setup.phone, setup.phoneRelay)
        let required = try await laptop.running(["protection", "require-sealed"])
        #expect(required.status == 0 && required.output.contains("plaintext:  refused"), "\(required.output)")

        let laptopAgent = try Agent(laptop, in: setup.dir), phoneAgent = try Agent(phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let (onLaptop, onPhone) = try await onOwnThread { (try HostileContentServerTests.documents(of: laptop), try HostileContentServerTests.documents(of: phone)) }
        try FileManager.default.createDirectory(at: onLaptop, withIntermediateDirectories: true)
        try Data("the first".utf8).write(to: onLaptop.appendingPathComponent("Note.txt"))
        try FileManager.default.createDirectory(at: onLaptop.appendingPathComponent("Folder"), withIntermediateDirectories: true)
        #expect(await eventuallyValue(seconds: 60) {
            (try? String(contentsOf: onPhone.appendingPathComponent("Note.txt"), encoding: .utf8)) == "the first"
                && FileManager.default.fileExists(atPath: onPhone.appendingPathComponent("Folder").path) ? true : nil
        } == true, "\(phoneAgent.logged.suffix(2000))")

        // From now on every page of changes the phone is served carries the lie.
        let told = Told()
        relay.rewrite(ChangesResponse.self, where: { $0.contains("/changes") }) { page in
            switch attack {
            case .folderPutIn:
                guard var made = page.items.first(where: { $0.record != nil }) else { return }
                (made.id, made.revision, made.name, made.kind, made.parent) = ("madeup0000000000", "madeup0000000000r", "Put in by the server", .directory, nil)
                (made.record, made.manifest, made.digest, made.size, made.conflicts) = (nil, Manifest(), nil, 0, [])
                page.items.append(made)
            case .folderRenamedInPlaintext:
                guard let index = page.items.firstIndex(where: { $0.kind == .directory && $0.record != nil }) else { return }
                (page.items[index].record, page.items[index].name) = (nil, "Renamed by the server")
            }
            told.count.withLock { $0 += 1 }
        }
        try Data("the second".utf8).write(to: onLaptop.appendingPathComponent("Second.txt"))
        try FileManager.default.moveItem(at: onLaptop.appendingPathComponent("Folder"), to: onLaptop.appendingPathComponent("Renamed folder"))
        #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: "require every item sealed (a downgrade)"), "\(phoneAgent.logged.suffix(3000))")
        #expect(told.count.withLock { $0 } > 0, "the lie was told")
        let shown = try FileManager.default.contentsOfDirectory(atPath: onPhone.path)
        #expect(!shown.contains("Put in by the server") && !shown.contains("Renamed by the server"), "\(shown)")
        #expect(try String(contentsOf: onPhone.appendingPathComponent("Note.txt"), encoding: .utf8) == "the first")

        // The truth: the second file and the folder's new name arrive, and nothing the server made up.
        relay.tamper.withLock { $0 = nil }
        let truth = ["Note.txt", "Renamed folder", "Second.txt"]
        #expect(await eventuallyValue(seconds: 60) {
            (try? FileManager.default.contentsOfDirectory(atPath: onPhone.path).sorted()) == truth
                && (try? String(contentsOf: onPhone.appendingPathComponent("Second.txt"), encoding: .utf8)) == "the second" ? true : nil
        } == true, "\((try? FileManager.default.contentsOfDirectory(atPath: onPhone.path)) ?? []) \(phoneAgent.logged.suffix(2000))")
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }
}
