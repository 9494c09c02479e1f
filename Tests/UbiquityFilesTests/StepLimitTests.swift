import Testing
import UbiquityTestSupport

/// The tests' named steps: a step that never ends fails at its name, without being waited for.
@Suite struct StepLimitTests {
    @Test func aStepThatNeverEndsFailsAtItsName() async throws {
        let started = ContinuousClock.now
        await #expect(throws: StepTookTooLong.self) {
            try await step("waiting for nothing", within: .milliseconds(200)) {
                // Ignores its cancellation, like a connection that never closes (a task of its own
                // that sleeps ten minutes, uncancelled).
                await Task { try? await Task.sleep(for: .seconds(600)) }.value
            }
        }
        // Not waited for. (Long before the body would end: in a full run on two cores the
        // timer's task once got to run only 31 s later.)
        #expect(ContinuousClock.now - started < .seconds(300))
        #expect(try await step("answering", within: .seconds(30)) { 42 } == 42)
        await #expect(throws: CancellationError.self) {
            try await step("throwing", within: .seconds(30)) { throw CancellationError() }
        }
    }
}
