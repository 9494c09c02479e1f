import DequeModule
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization
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
/// Memory: an account is remembered only while it has requests under way or waiting.
final class AccountShare: Sendable {
    private struct Account {
        var working = 0
        var waiting: Deque<CheckedContinuation<Void, Never>> = []
    }

    private let limits: AccountShareLimits
    private let metrics: ServerMetrics?
    private let accounts = Mutex<[Int64: Account]>([:])
    private let refusals = RefusalLog()

    /// - Parameter metrics: Where the requests that waited and those refused are counted.
    init(limits: AccountShareLimits = AccountShareLimits(), metrics: ServerMetrics? = nil) {
        self.limits = limits
        self.metrics = metrics
    }

    /// Runs `work` in one of `device`'s account's turns (after waiting for one if its share is
    /// taken).
    /// - Throws: ``SyncError`` 429 `tooManyRequests` when too many of the account's requests
    ///   already wait; whatever `work` throws.
    func run<T>(for device: DeviceAuth, address: SocketAddress?, logger: Logger, _ work: () async throws -> T) async throws -> T {
        try await enter(device, address: address, logger: logger)
        defer { leave(device.accountId) }
        return try await work()
    }

    /// How many of `account`'s requests are handled now, and how many wait (for tests).
    func load(of account: Int64) -> (working: Int, waiting: Int) {
        accounts.withLock { accounts in accounts[account].map { ($0.working, $0.waiting.count) } ?? (0, 0) }
    }

    private func enter(_ device: DeviceAuth, address: SocketAddress?, logger: Logger) async throws {
        enum Turn { case now, wait, refused }
        let account = device.accountId
        let turn = accounts.withLock { accounts -> Turn in
            var state = accounts[account, default: Account()]
            defer { accounts[account] = state }
            if state.working < limits.working {
                state.working += 1
                return .now
            }
            return state.waiting.count < limits.waiting ? .wait : .refused
        }
        switch turn {
        case .now:
            return
        case .refused:
            metrics?.count(.accountShareRefusals)
            refusals.note("account busy", address: address, detail: "the account of device \(device.deviceId) (\(SafeText.escaped(device.deviceName))) has \(limits.working) requests under way and \(limits.waiting) waiting", logger: logger)
            throw SyncError(.tooManyRequests, "tooManyRequests", "this account has too many requests under way: try again shortly", retryAfter: 1)
        case .wait:
            metrics?.count(.accountShareWaits)
            // Registered under the lock it was judged under: a turn handed over by `leave`
            // between the two would find no one waiting and be kept as free, so look again.
            await withCheckedContinuation { continuation in
                let now = accounts.withLock { accounts -> Bool in
                    guard var state = accounts[account] else {
                        accounts[account] = Account(working: 1)
                        return true
                    }
                    defer { accounts[account] = state }
                    if state.working < limits.working, state.waiting.isEmpty {
                        state.working += 1
                        return true
                    }
                    state.waiting.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }

    /// Ends one of `account`'s turns: the next waiting request takes it over.
    private func leave(_ account: Int64) {
        let next = accounts.withLock { accounts -> CheckedContinuation<Void, Never>? in
            guard var state = accounts[account] else { return nil }
            if let next = state.waiting.popFirst() {
                accounts[account] = state // the turn passes on: still working as many
                return next
            }
            state.working -= 1
            accounts[account] = state.working == 0 ? nil : state
            return nil
        }
        next?.resume()
    }
}
