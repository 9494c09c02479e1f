import Foundation
import Testing
import UbiquityTestSupport
import UbiquityProtocol
@testable import UbiquityAgent

/// Small files travel inside the JSON: up in their commit, down in the page of changes (on a
/// greedy device), so a new or changed small document is one request each way.
extension ContainerSyncTests {
    @Test func smallFilesTravelInsideTheCommitAndThePage() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            let tablet = try await device("tablet", base: base, dir: dir, greedy: false)
            func data(_ device: Device, _ path: String) -> Data? { try? Data(contentsOf: device.documents.appendingPathComponent(path)) }
            let contents = (0..<200).map { index in randomBytes(index == 0 ? 0 : 1_024) }
            for (index, data) in contents.enumerated() { try laptop.write("Small/\(index).bin", data) }
            let largest = Data(repeating: 9, count: ItemUpdate.maximumInlineBytes)
            try laptop.write("Small/largest.bin", largest)

            let sent = laptop.client.traffic.snapshot
            try await laptop.sync.syncOnce()
            let up = laptop.client.traffic.snapshot
            // The commit with every file's bytes, and the page of changes that follows it: no chunk batch.
            #expect(up.requests - sent.requests <= 2, "201 small files took \(up.requests - sent.requests) requests to go up")
            #expect(up.sent - sent.sent < 201 * 1_024 * 2, "about the bytes themselves: \(up.sent - sent.sent)")

            let before = phone.client.traffic.snapshot
            try await phone.sync.syncOnce()
            let down = phone.client.traffic.snapshot
            #expect(down.requests - before.requests == 1, "only the page of changes: \(down.requests - before.requests) requests")
            for (index, bytes) in contents.enumerated() { #expect(data(phone, "Small/\(index).bin") == bytes, "file \(index)") }
            #expect(data(phone, "Small/largest.bin") == largest)
            #expect(await phone.sync.isIdle)

            // A change of a small file already here: the page again, and nothing else.
            try laptop.write("Small/7.bin", Data("edited".utf8))
            try await laptop.sync.syncOnce()
            let again = phone.client.traffic.snapshot
            try await phone.sync.syncOnce()
            #expect(phone.client.traffic.snapshot.requests - again.requests == 1)
            #expect(phone.read("Small/7.bin") == "edited")

            // A device that downloads on demand gets metadata only: listed, not downloaded.
            try await tablet.sync.syncOnce()
            #expect(!tablet.exists("Small/1.bin") && tablet.exists("Small/.1.bin.icloud"))
            try await tablet.sync.requestDownload("Documents/Small/1.bin")
            try await tablet.sync.syncOnce()
            #expect(data(tablet, "Small/1.bin") == contents[1])
        }
    }
}
