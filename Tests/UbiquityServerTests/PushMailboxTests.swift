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
        #expect(await mailbox.next()?.map(\.event) == [
            PushEvent(type: "changed", container: "A", sequence: 500), PushEvent(type: "keyValueChanged", container: "A", sequence: 7),
            PushEvent(type: "changed", container: "B", sequence: 3),
        ])
        // Later events wake a waiting reader; a finished mailbox gives what waits, then nil.
        async let later = mailbox.next()
        try? await Task.sleep(for: .milliseconds(50))
        mailbox.post(PushEvent(type: "changed", container: "A", sequence: 501))
        #expect(await later?.map(\.event) == [PushEvent(type: "changed", container: "A", sequence: 501)])
        mailbox.post(.connected)
        mailbox.finish()
        #expect(await mailbox.next()?.map(\.event) == [.connected])
        #expect(await mailbox.next() == nil)
    }

    /// Events closer together than the pace wait for it, and go as one.
    @Test func eventsCloserThanThePaceGoTogether() async {
        let mailbox = PushMailbox()
        mailbox.post(PushEvent(type: "changed", container: "A", sequence: 1))
        let started = ContinuousClock.now
        let notBefore = started + .seconds(1) // (room for a loaded machine to post meanwhile)
        async let taken = mailbox.next(notBefore: notBefore)
        try? await Task.sleep(for: .milliseconds(50))
        mailbox.post(PushEvent(type: "changed", container: "A", sequence: 2))
        mailbox.post(PushEvent(type: "changed", container: "B", sequence: 1))
        let posted = ContinuousClock.now
        let deliveries = await taken
        #expect(ContinuousClock.now >= notBefore, "not before the pace allows")
        // (On a machine so loaded that this task slept past the pace, the reader may have taken
        // the first event alone: only a post well within the pace must join it.)
        if posted < notBefore - .milliseconds(200) {
            #expect(deliveries?.map(\.event) == [PushEvent(type: "changed", container: "A", sequence: 2), PushEvent(type: "changed", container: "B", sequence: 1)])
            #expect(deliveries?.first?.text == #"{"container":"A","sequence":2,"type":"changed"}"#)
        }
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
