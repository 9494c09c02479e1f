import Synchronization
import Testing
import UbiquityAgentProtocol
@testable import UbiquityAgent

/// A client following statuses that reads slowly misses no item: it gets each item's latest
/// status, however many changes came meanwhile, and the agent holds one status per item for it.
@Suite struct StatusMailboxTests {
    final class Gone: Sendable {
        let value = Atomic<Bool>(false)
    }

    static func status(_ path: String, percent: Double) -> UbiquityItemStatus {
        UbiquityItemStatus(container: "ABCDE12345.com.example.notes", path: path, size: 100, downloaded: percent == 100, current: percent == 100,
                           downloading: percent < 100, downloadRequested: false, uploaded: true, uploading: false,
                           percentDownloaded: percent, percentUploaded: 100, conflicts: 0, downloadingError: nil, uploadingError: nil)
    }

    @Test func aSlowReaderGetsEveryItemsLatestStatus() async throws {
        let gone = Gone()
        var mailbox: StatusMailbox? = StatusMailbox { gone.value.store(true, ordering: .sequentiallyConsistent) }
        var stream: AsyncStream<AgentResponse>? = mailbox!.stream()
        mailbox!.post((0..<3).map { Self.status("/c/Documents/\($0).txt", percent: 0) })
        // A thousand messages' worth of changes before the client reads again (the agent's
        // former buffer kept the newest 64 and dropped the rest: item 0's last word among them).
        for step in 1...1_000 {
            mailbox!.post([Self.status("/c/Documents/\(step % 3).txt", percent: Double(step % 100))])
        }
        mailbox!.post([Self.status("/c/Documents/0.txt", percent: 100), Self.status("/c/Documents/new.txt", percent: 5)])
        var reader = stream!.makeAsyncIterator()
        let first = try #require(await reader.next())
        #expect(first.items?.map(\.path) == ["/c/Documents/0.txt", "/c/Documents/1.txt", "/c/Documents/2.txt", "/c/Documents/new.txt"])
        #expect(first.items?.map(\.percentDownloaded) == [100, 0, 98, 5]) // item 0 set to 100 after the loop; items 1 and 2 last changed at steps 1,000 and 998

        // Later changes come as they are posted; a finished mailbox ends the stream.
        mailbox!.post([Self.status("/c/Documents/1.txt", percent: 100)])
        #expect(try #require(await reader.next()).items?.map(\.path) == ["/c/Documents/1.txt"])
        mailbox!.finish()
        #expect(await reader.next() == nil)

        // The client gone (its stream released): the agent is told, to forget it.
        let before = gone.value.load(ordering: .sequentiallyConsistent)
        #expect(!before)
        reader = AsyncStream<AgentResponse> { $0.finish() }.makeAsyncIterator()
        stream = nil
        mailbox = nil
        let after = gone.value.load(ordering: .sequentiallyConsistent)
        #expect(after)
    }

    @Test func theFirstAnswerComesEvenForAnEmptyContainer() async throws {
        let mailbox = StatusMailbox {}
        mailbox.post([])
        var reader = mailbox.stream().makeAsyncIterator()
        #expect(try #require(await reader.next()).items == [])
        // Then nothing until something changes.
        mailbox.post([Self.status("/c/Documents/a.txt", percent: 50)])
        #expect(try #require(await reader.next()).items?.count == 1)
    }
}
