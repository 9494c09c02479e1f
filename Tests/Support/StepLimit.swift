import Synchronization

/// A step of a test that took longer than it may.
public struct StepTookTooLong: Error, CustomStringConvertible {
    /// What the step was doing.
    public var step: String
    /// How long it was allowed.
    public var limit: Duration
    public var description: String { "\(step): not done within \(limit)" }
}

/// Runs `body` and answers what it answers, or throws ``StepTookTooLong`` naming `step` once
/// `limit` has passed. The body is then cancelled and not waited for: a step that ignores its
/// cancellation (a connection that never ends) still fails here, at its own name, rather than
/// hanging the test until its time limit says only that it took too long.
public func step<T: Sendable>(_ step: String, within limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = StepRace<T>()
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        race.start(continuation,
                   Task { race.answer(await Result(catching: { try await body() })) },
                   Task {
                       guard (try? await Task.sleep(for: limit)) != nil else { return }
                       race.answer(.failure(StepTookTooLong(step: step, limit: limit)))
                   })
    }
}

/// The body and the timer of a ``step(_:within:_:)``: the first to answer resumes the caller
/// and cancels the other.
private final class StepRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var result: Result<T, any Error>?
        var tasks: [Task<Void, Never>] = []
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, _ work: Task<Void, Never>, _ timer: Task<Void, Never>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            state.tasks = [work, timer]
            guard let result = state.result else { state.continuation = continuation; return nil }
            return result
        }
        if let early { finish(continuation, early) }
    }

    func answer(_ result: Result<T, any Error>) {
        let waiting = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard state.result == nil else { return nil }
            state.result = result
            defer { state.continuation = nil }
            return state.continuation
        }
        if let waiting { finish(waiting, result) }
    }

    private func finish(_ continuation: CheckedContinuation<T, any Error>, _ result: Result<T, any Error>) {
        for task in state.withLock({ $0.tasks }) { task.cancel() }
        continuation.resume(with: result)
    }
}

extension Result where Failure == any Error {
    /// The outcome of an asynchronous throwing call.
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
