import Foundation
import Synchronization
import Hummingbird
import HummingbirdTesting
import Testing
@testable import UbiquityServer

/// One account's requests cannot take the whole server: past its share they wait their turn,
/// past the waiting room they are told to come back, and other accounts are answered meanwhile.
/// (A live server on loopback; each request on a raw connection of its own.)
@Suite struct AccountShareTests {
    typealias RawConnection = RequestLimitTests.RawConnection

    @Test func anAccountPastItsShareWaitsThenIsToldToComeBackWhileOthersAreAnswered() async throws {
        var limits = AccountShareLimits()
        limits.working = 2
        limits.waiting = 2
        // The stalled uploads below must hold their turns for the whole test, however loaded the
        // run: the slow-body guard (20 s) and the idle guard (90 s) are given longer than the test can take.
        var requestLimits = RequestLimits()
        requestLimits.bodyTimeout = .seconds(600)
        requestLimits.headerTimeout = .seconds(600)
        var connectionLimits = ConnectionLimits()
        connectionLimits.idleTimeout = .seconds(600)
        let server = try await TestServer(connectionLimits: connectionLimits, requestLimits: requestLimits, accountShare: limits); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse")
        try await server.server.makeApplication().test(.live) { client in
            let port = try #require(client.port)
            let api = Client(client: client)
            let ann = try await api.signIn("ann").token
            let bob = try await api.signIn("bob").token
            let annId = try #require(try await server.server.services.database.device(tokenHash: DeviceAuthMiddleware.hash(ann))?.accountId)
            let share = server.server.services.share
            func load() -> (working: Int, waiting: Int) { share.load(of: annId) }
            func waitFor(_ expected: (Int, Int)) async throws -> Bool {
                let deadline = ContinuousClock.now + .seconds(20)
                while load() != expected, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
                return load() == expected
            }
            func accountRequest() async throws -> RawConnection {
                let connection = try await RawConnection(port: port)
                try await connection.send("GET /v1/account HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ann)\r\n\r\n")
                return connection
            }

            // Two uploads whose bodies stall hold both of ann's turns.
            var stalled: [RawConnection] = []
            for _ in 0..<2 {
                let connection = try await RawConnection(port: port)
                try await connection.send("PUT /v1/chunks/\(String(repeating: "ab", count: 32)) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ann)\r\n"
                                          + "Content-Length: 1000\r\n\r\n" + String(repeating: "x", count: 10))
                stalled.append(connection)
            }
            #expect(try await waitFor((2, 0)), "\(load())")

            // Her next requests wait their turn, in order; the one past the waiting room is
            // told to come back (429, Retry-After) at once.
            let first = try await accountRequest()
            #expect(try await waitFor((2, 1)), "\(load())")
            let second = try await accountRequest()
            #expect(try await waitFor((2, 2)), "\(load())")
            let refused = try await accountRequest()
            let refusal = try await refused.answers(1, within: .seconds(20))
            #expect(refusal.hasPrefix("HTTP/1.1 429"), "\(refusal)")
            #expect(refusal.lowercased().contains("retry-after: 1"), "\(refusal)")
            #expect(refusal.contains(#""code":"tooManyRequests""#), "\(refusal)")
            #expect(first.text.isEmpty && second.text.isEmpty, "still waiting")

            // Another account is answered meanwhile.
            #expect(try await api.send(.get, "/v1/account", token: bob).status == .ok)

            // An upload that goes away hands its turn to the first waiting, which hands it on
            // when answered, while the other upload still holds its own.
            try await stalled[0].channel.close()
            #expect(try await first.answers(1, within: .seconds(20)).hasPrefix("HTTP/1.1 200"), "\(first.text)")
            #expect(try await second.answers(1, within: .seconds(20)).hasPrefix("HTTP/1.1 200"), "\(second.text)")
            #expect(try await waitFor((1, 0)), "\(load())")
            try await stalled[1].channel.close()
            #expect(try await waitFor((0, 0)), "every turn given back: \(load())")
            let metrics = String(buffer: try await api.send(.get, "/metrics").body)
            #expect(metrics.contains("ubiquity_account_share_waits_total 2") && metrics.contains("ubiquity_account_share_refusals_total 1"), "\(metrics)")
            for connection in [first, second, refused] { try? await connection.channel.close() }
        }
    }

    /// The turns under both the account share and the password hasher: per key, in order, a
    /// full waiting room turns away, a turn given back passes to the first waiting, a key with
    /// nothing under way is forgotten.
    @Test func turnsAreTakenInOrderPerKeyAndAFullWaitingRoomTurnsAway() async throws {
        let turns = Turns<Int>(slots: 1, waitingLimit: 2)
        #expect(await turns.take(1) == false, "a free turn: taken without waiting")
        #expect(await turns.take(2) == false, "another key has turns of its own")
        final class Order: Sendable { let values = Mutex<[Int]>([]) }
        let order = Order()
        let first = Task { let waited = await turns.take(1); order.values.withLock { $0.append(1) }; return waited }
        while turns.load(of: 1).waiting < 1 { try await Task.sleep(for: .milliseconds(1)) }
        let second = Task { let waited = await turns.take(1); order.values.withLock { $0.append(2) }; return waited }
        while turns.load(of: 1).waiting < 2 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(await turns.take(1) == nil, "the waiting room is full")
        #expect(turns.load(of: 1) == (1, 2) && order.values.withLock { $0 }.isEmpty)
        turns.giveBack(1)
        #expect(await first.value == true)
        #expect(turns.load(of: 1) == (1, 1) && order.values.withLock { $0 } == [1])
        turns.giveBack(1)
        #expect(await second.value == true)
        #expect(order.values.withLock { $0 } == [1, 2])
        turns.giveBack(1)
        turns.giveBack(2)
        #expect(turns.load(of: 1) == (0, 0) && turns.load(of: 2) == (0, 0), "nothing under way: forgotten")
    }
}
