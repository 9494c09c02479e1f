import Synchronization
import Foundation
import Hummingbird
import Logging
import NIOCore
import UbiquityProtocol

/// How much of the server one account's requests may take at once.
package struct AccountShareLimits: Sendable, Equatable {
    /// Requests of one account handled at once; the next ones wait their turn, in order.
    /// Default 8: half of a PostgreSQL pool (16), more than one device's transfers (4 at once
    /// each way) need.
    package var working = 8
    /// Requests of one account waiting for their turn; more are answered 429
    /// `tooManyRequests` with `Retry-After: 1`. Default 512.
    package var waiting = 512

    /// The default limits.
    package init() {}
}

/// Each account's share of the server: at most ``AccountShareLimits/working`` of its requests
/// are handled at once, the others wait in order, and past ``AccountShareLimits/waiting``
/// waiting it is told to come back (429 with `Retry-After`). So one account — a client in a
/// loop, a stolen token, many devices catching up together — cannot take every database
/// connection and keep other accounts' requests waiting (docs/Security.md, "One account cannot
/// slow the others"). A push connection (a WebSocket, open for hours) is not counted.
///
/// Memory: an account is remembered only while it has requests under way or waiting
/// (``Turns``).
final class AccountShare: Sendable {
    private let limits: AccountShareLimits
    private let turns: Turns<Int64>
    private let metrics: ServerMetrics?
    private let refusals = RefusalLog()

    /// - Parameter metrics: Where the requests that waited and those refused are counted.
    init(limits: AccountShareLimits = AccountShareLimits(), metrics: ServerMetrics? = nil) {
        self.limits = limits
        self.metrics = metrics
        turns = Turns(slots: limits.working, waitingLimit: limits.waiting)
    }

    /// Runs `work` in one of `device`'s account's turns (after waiting for one if its share is
    /// taken).
    /// - Throws: ``SyncError`` 429 `tooManyRequests` when too many of the account's requests
    ///   already wait; whatever `work` throws.
    func run<T>(for device: DeviceAuth, address: SocketAddress?, logger: Logger, _ work: () async throws -> T) async throws -> T {
        guard let waited = await turns.take(device.accountId) else {
            metrics?.count(.accountShareRefusals)
            refusals.note("account busy", address: address, detail: "the account of device \(device.deviceId) (\(SafeText.escaped(device.deviceName))) has \(limits.working) requests under way and \(limits.waiting) waiting", logger: logger)
            throw SyncError(.tooManyRequests, "tooManyRequests", "this account has too many requests under way: try again shortly", retryAfter: 1)
        }
        if waited { metrics?.count(.accountShareWaits) }
        let lease = Lease(turns: turns, account: device.accountId)
        defer { lease.end() }
        return try await Self.$lease.withValue(lease) { try await work() }
    }

    /// The turn the running request holds, if it runs in one.
    @TaskLocal static var lease: Lease?

    /// A request's turn, which it may give back while it only waits (``away(_:)``).
    final class Lease: Sendable {
        let turns: Turns<Int64>
        let account: Int64
        private let held = Mutex(true)

        init(turns: Turns<Int64>, account: Int64) {
            self.turns = turns
            self.account = account
        }

        /// Gives the turn back, if held.
        func end() {
            if held.withLock({ held in defer { held = false }; return held }) { turns.giveBack(account) }
        }

        /// Takes a turn again (after ``end()``).
        /// - Throws: ``SyncError`` 429 when too many of the account's requests wait.
        func retake() async throws {
            guard await turns.take(account) != nil else {
                throw SyncError(.tooManyRequests, "tooManyRequests", "this account has too many requests under way: try again shortly", retryAfter: 1)
            }
            held.withLock { $0 = true }
        }
    }

    /// Runs `body` — which only waits (for something another request does) — without the
    /// request's turn, then takes a turn again: a request that waits long must not keep the
    /// account's other requests (among them the one it waits for) from running.
    static func away<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        guard let lease else { return try await body() }
        lease.end()
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        try await lease.retake()
        return try result.get()
    }

    /// How many of `account`'s requests are handled now, and how many wait (for tests).
    func load(of account: Int64) -> (working: Int, waiting: Int) {
        let load = turns.load(of: account)
        return (load.taken, load.waiting)
    }
}
