import Foundation
import Testing
import Ubiquity
import UbiquityProtocol
import UbiquityTestSupport

/// Coverage at running agents (issue 45; docs/Encryption.md, "Coverage under Advanced"): a
/// server that holds no key can still serve what devices sealed before — an older record again
/// under a new revision, rolling a file back — and a deletion, which carries no record, of any
/// item. Under Advanced a device takes such a state only once a signed commit names it: a forged
/// one is held back — logged, the file kept — and the truth, asked for again by id, is taken; a
/// real change, which its device signed, goes through.
@Suite(.serialized) struct HostileCoverageTests {
    /// What a device logs when it holds states back.
    static let heldBack = "states no signed commit names yet are held back"

    typealias Agent = HostileKeyValueServerTests.Agent

    /// Two sealing agents under Advanced (the laptop switched the account) and the laptop's
    /// note, "the first", on the phone: `body` gets the phone's relay, the note on each device,
    /// the phone's agent and a wait for the phone's note to read a text.
    static func withAdvancedNote(_ body: (HostileRelay, _ note: URL, _ phoneNote: URL, Agent, _ phoneHas: (String) async -> Bool) async throws -> Void) async throws {
        let setup = try await HostileContentServerTests.sealedSetup()
        defer { setup.tearDown() }
        let (laptop, phone) = (setup.laptop, setup.phone)
        let switched = try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
        #expect(switched.status == 0, "\(switched.output)")
        let laptopAgent = try Agent(laptop, in: setup.dir), phoneAgent = try Agent(phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let (onLaptop, onPhone) = try await onOwnThread { (try HostileContentServerTests.documents(of: laptop), try HostileContentServerTests.documents(of: phone)) }
        try FileManager.default.createDirectory(at: onLaptop, withIntermediateDirectories: true)
        let note = onLaptop.appendingPathComponent("Note.txt"), phoneNote = onPhone.appendingPathComponent("Note.txt")
        func phoneHas(_ text: String) async -> Bool {
            await eventuallyValue(seconds: 60) { (try? String(contentsOf: phoneNote, encoding: .utf8)) == text ? true : nil } == true
        }
        try Data("the first".utf8).write(to: note)
        #expect(await phoneHas("the first"), "\(phoneAgent.logged.suffix(2000))")
        try await body(setup.phoneRelay, note, phoneNote, phoneAgent, phoneHas)
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }

    @Test(.timeLimit(.minutes(6))) func aDeletionNoCommitNamesIsHeldBackUnderAdvanced() async throws {
        try await Self.withAdvancedNote { relay, note, phoneNote, phoneAgent, phoneHas in
            // From now on every page of changes the phone is served shows each file's new state
            // as a deletion: no record needed, and none of the keys the server does not hold.
            // (An honest state is held back too while its commit is on its way: what is looked
            // for is a holding back after the lie was told.)
            let heldBefore = HostileKeyValueServerTests.occurrences(of: Self.heldBack, in: phoneAgent)
            let told = Told()
            relay.rewrite(ChangesResponse.self, where: { $0.contains("/changes") }) { page in
                for index in page.items.indices where page.items[index].kind == .file && !page.items[index].deleted {
                    (page.items[index].deleted, page.items[index].record, page.items[index].manifest) = (true, nil, Manifest())
                    (page.items[index].digest, page.items[index].contents, page.items[index].size) = (nil, nil, 0)
                    told.count.withLock { $0 += 1 }
                }
            }
            try Data("the second".utf8).write(to: note)
            #expect(await eventuallyValue(seconds: 60) { told.count.withLock { $0 } > 0 ? true : nil } == true, "the lie was told")
            #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: Self.heldBack, moreThan: heldBefore), "\(phoneAgent.logged.suffix(3000))")
            // The file stays; the edit its device signed is asked for by id, and taken.
            #expect(FileManager.default.fileExists(atPath: phoneNote.path), "a forged deletion removed the file")
            #expect(await phoneHas("the second"), "\(phoneAgent.logged.suffix(3000))")

            // A real deletion — signed by the laptop — goes through.
            relay.tamper.withLock { $0 = nil }
            try FileManager.default.removeItem(at: note)
            #expect(await eventuallyValue(seconds: 60) { FileManager.default.fileExists(atPath: phoneNote.path) ? nil : true } == true,
                    "\(phoneAgent.logged.suffix(3000))")
        }
    }

    @Test(.timeLimit(.minutes(6))) func anOlderRecordServedAgainAsANewRevisionIsHeldBackUnderAdvanced() async throws {
        try await Self.withAdvancedNote { relay, note, _, phoneAgent, phoneHas in
            // The note's first state as the phone was served it: a genuine record, sealed by the laptop.
            let pages = relay.exchanges.withLock { $0 }.filter { $0.path.contains("/changes") }.compactMap { $0.decoded(ChangesResponse.self) }
            let first = try #require(pages.lazy.compactMap { $0.items.first { $0.kind == .file && $0.record != nil } }.first)
            try Data("the second".utf8).write(to: note)
            #expect(await phoneHas("the second"), "\(phoneAgent.logged.suffix(2000))")

            // From now on the phone's pages show each newer state of the note as its first record
            // again, under a new revision made up for it, at the newer state's place: a rollback
            // that no check of the record (it opens: the laptop sealed it there) or of the order
            // of changes can tell.
            let heldBefore = HostileKeyValueServerTests.occurrences(of: Self.heldBack, in: phoneAgent)
            let told = Told()
            relay.rewrite(ChangesResponse.self, where: { $0.contains("/changes") }) { page in
                for index in page.items.indices where page.items[index].id == first.id && page.items[index].revision != first.revision {
                    var replayed = first
                    (replayed.revision, replayed.sequence) = ("replayed" + page.items[index].revision.prefix(16), page.items[index].sequence)
                    page.items[index] = replayed
                    told.count.withLock { $0 += 1 }
                }
            }
            try Data("the third".utf8).write(to: note)
            #expect(await eventuallyValue(seconds: 60) { told.count.withLock { $0 } > 0 ? true : nil } == true, "the lie was told")
            #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: Self.heldBack, moreThan: heldBefore), "\(phoneAgent.logged.suffix(3000))")
            // Never rolled back; the laptop's signed edit is asked for by id, and taken.
            #expect(await phoneHas("the third"), "\(phoneAgent.logged.suffix(3000))")
        }
    }
}
