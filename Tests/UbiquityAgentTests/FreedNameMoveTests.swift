import Foundation
import Testing
import UbiquitySync
@testable import UbiquityAgent

/// Found by `ubiquity-chaos --sealed-share` (seed 12): the server moved an item to a name a local
/// item held; the move waited ("a local item has that name") — and was never tried again once
/// that item moved on and freed the name. The device kept the item at its old name for good,
/// which in turn kept a new item of that old name from arriving: the devices disagreed, and the
/// new item's last write was on no device.
@Suite struct FreedNameMoveTests {
    @Test func aMoveThatWaitedForANameIsMadeOnceTheNameIsFree() async throws {
        let tests = ContainerSyncTests()
        try await tests.withServer { base, dir in
            let laptop = try await tests.device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await tests.device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("a.txt", Data("first".utf8))
            try laptop.write("b.txt", Data("second".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("a.txt") == "first" && phone.read("b.txt") == "second")
            // The laptop applies the server's moves item by item, in the order of their ids:
            // the earlier item takes the later one's name, and the later one moves away.
            let a = try #require(await laptop.sync.files["Documents/a.txt"]?.item)
            let b = try #require(await laptop.sync.files["Documents/b.txt"]?.item)
            let (first, second) = a < b ? ("a.txt", "b.txt") : ("b.txt", "a.txt")
            let firstText = phone.read(first), secondText = phone.read(second)
            try FileManager.default.moveItem(at: phone.documents.appendingPathComponent(second), to: phone.documents.appendingPathComponent("c.txt"))
            try FileManager.default.moveItem(at: phone.documents.appendingPathComponent(first), to: phone.documents.appendingPathComponent(second))
            try await phone.sync.syncOnce()

            try await laptop.sync.syncOnce() // the first move waits: the second item still has that name
            for _ in 0..<3 where await !laptop.sync.isIdle { try await laptop.sync.syncOnce() }
            let errors = await laptop.sync.errors
            #expect(laptop.read(second) == firstText, "the waiting move was made: \(errors)")
            #expect(laptop.read("c.txt") == secondText)
            #expect(!laptop.exists(first))
            #expect(await laptop.sync.isIdle, "\(errors)")
        }
    }
}
