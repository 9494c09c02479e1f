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

    /// A commit reaches every connected device of its account that may use its container, but
    /// the one that made it — also devices that connected after the account's last commit (the
    /// targets kept per container are made again), and none that went away.
    @Test func aCommitReachesTheDevicesThatMayUseItsContainerAndNoOther() async {
        let notifier = ChangeNotifier()
        func device(_ id: String, _ containers: [String]? = nil, account: Int64 = 1) -> DeviceAuth {
            DeviceAuth(deviceId: id, deviceName: id, accountId: account, containers: containers)
        }
        /// What waits in `mailbox` now (a marker posted behind it ends the wait).
        func waiting(_ mailbox: PushMailbox) async -> [PushEvent] {
            mailbox.post(.connected)
            return await mailbox.next()?.map(\.event).filter { $0 != .connected } ?? []
        }
        let (_, all) = notifier.subscribe(device("all"))
        let (_, origin) = notifier.subscribe(device("origin"))
        notifier.publish(account: 1, container: "A", sequence: 1, except: "origin")
        let (limitedId, limited) = notifier.subscribe(device("limited", ["B"]))
        let (_, late) = notifier.subscribe(device("late", ["A"]))
        let (_, stranger) = notifier.subscribe(device("stranger", account: 2))
        notifier.publish(account: 1, container: "A", sequence: 2, except: "origin")
        notifier.publish(account: 1, container: "B", sequence: 1, except: "origin")
        let (a2, b1) = (PushEvent(type: "changed", container: "A", sequence: 2), PushEvent(type: "changed", container: "B", sequence: 1))
        #expect(await waiting(all) == [a2, b1])
        #expect(await waiting(origin) == [])
        #expect(await waiting(limited) == [b1])
        #expect(await waiting(late) == [a2])
        #expect(await waiting(stranger) == [])
        notifier.unsubscribe(limitedId)
        notifier.publish(account: 1, container: "B", sequence: 2)
        #expect(await limited.next() == nil, "a connection gone hears nothing more")
        #expect(await waiting(all) == [PushEvent(type: "changed", container: "B", sequence: 2)])
    }

    /// Paced connections share one clock: each wait ends at its time (at most a tick early),
    /// however many wait at once.
    @Test func theSharedClockWakesEachWaitAtItsTime() async {
        let clock = PushClock()
        let start = ContinuousClock.now
        let offsets = (0..<300).map { Duration.milliseconds(($0 * 7) % 160) }
        let early = await withTaskGroup(of: Bool.self) { group in
            for offset in offsets {
                group.addTask {
                    await clock.sleep(until: start + offset)
                    return ContinuousClock.now - start < offset - PushClock.tick
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(early == 0, "no wait ends more than a tick before its time")
        #expect(clock.waiting == 0)
        // The clock stops when nothing waits, and starts again for the next wait.
        let again = ContinuousClock.now + .milliseconds(30)
        await clock.sleep(until: again)
        #expect(ContinuousClock.now >= again - PushClock.tick)
    }

    /// A device woken from idle by a commit (with every other idle device of its account) waits
    /// a random half to all of the pace before its next message, so that the devices' messages
    /// spread over the pace; one that keeps hearing changes waits the whole pace.
    @Test func aDeviceWokenFromIdleWaitsAPartOfThePace() {
        let pace = Duration.milliseconds(100)
        var waits: Set<Duration> = []
        for _ in 0..<20 {
            var pacer = PushPacer()
            let woken = pacer.notBefore + .seconds(1)
            pacer.delivered(at: woken, pace: pace)
            #expect(pacer.notBefore >= woken + pace / 2 && pacer.notBefore <= woken + pace)
            waits.insert(pacer.notBefore - woken)
            let onTime = pacer.notBefore
            pacer.delivered(at: onTime, pace: pace)
            #expect(pacer.notBefore == onTime + pace)
        }
        #expect(waits.count > 1, "spread, not all alike")
    }
}
