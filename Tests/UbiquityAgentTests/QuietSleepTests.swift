import Foundation
import Testing
@testable import UbiquityAgent

/// The agent's long waits (`quietSleep`) end at their deadline, or at once when cancelled.
@Suite struct QuietSleepTests {
    @Test func itEndsAtItsDeadline() async throws {
        let start = ContinuousClock.now
        try await quietSleep(for: .milliseconds(30))
        #expect(ContinuousClock.now - start >= .milliseconds(30))
    }

    @Test func cancellingEndsItWithCancellationError() async throws {
        let sleeper = Task { try await quietSleep(for: .seconds(600)) }
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
    }
}
