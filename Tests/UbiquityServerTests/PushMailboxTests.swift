import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// A connected device's waiting events: coalesced per container (the latest sequence says it
/// all), in the order first posted; finishing and cancelling end the wait.
@Suite struct PushMailboxTests {
    @Test func eventsWaitingTogetherAreCoalesced() async {
        let mailbox = PushMailbox()
        for sequence in 1...500 { mailbox.post(PushEvent(type: "changed", container: "A", sequence: Int64(sequence))) }
        mailbox.post(PushEvent(type: "keyValueChanged", container: "A", sequence: 7))
        mailbox.post(PushEvent(type: "changed", container: "B", sequence: 3))
        mailbox.post(PushEvent(type: "changed", container: "A", sequence: 499)) // older than what waits: kept out
        #expect(await mailbox.next() == [
            PushEvent(type: "changed", container: "A", sequence: 500), PushEvent(type: "keyValueChanged", container: "A", sequence: 7),
            PushEvent(type: "changed", container: "B", sequence: 3),
        ])
        // Later events wake a waiting reader; a finished mailbox gives what waits, then nil.
        async let later = mailbox.next()
        try? await Task.sleep(for: .milliseconds(50))
        mailbox.post(PushEvent(type: "changed", container: "A", sequence: 501))
        #expect(await later == [PushEvent(type: "changed", container: "A", sequence: 501)])
        mailbox.post(.connected)
        mailbox.finish()
        #expect(await mailbox.next() == [.connected])
        #expect(await mailbox.next() == nil)
    }

    @Test func aCancelledReaderStopsWaiting() async {
        let mailbox = PushMailbox()
        let reader = Task { await mailbox.next() }
        try? await Task.sleep(for: .milliseconds(50))
        reader.cancel()
        #expect(await reader.value == nil)
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() } // cancelled before it waits
            return await mailbox.next()
        }
        #expect(await early.value == nil)
    }
}
