import Foundation
import Hummingbird
import HummingbirdBcrypt
import HummingbirdTesting
import HTTPTypes
import NIOCore
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// Sign-in as an attacker tries it: guessing passwords (one after the other, and all at once),
/// from one address across accounts, with long passwords and large bodies.
@Suite struct SignInTests {
    /// A policy with few free attempts, so that tests reach the blocks quickly.
    static func strict(account: Int = 5, address: Int = 1_000) -> SignInPolicy {
        var policy = SignInPolicy()
        policy.accountAttempts = account
        policy.addressAttempts = address
        policy.refusalDelay = .milliseconds(10)
        return policy
    }

    /// ``strict(account:address:)`` whose blocks outlast a slow run's checks (a first block of
    /// one second could end, under a loaded machine, before the test looks at it).
    static func lasting(account: Int = 5, address: Int = 1_000) -> SignInPolicy {
        var policy = strict(account: account, address: address)
        policy.firstBlock = 600
        return policy
    }

    func attempt(_ client: Client, _ account: String, _ password: String) async throws -> Client.Answer {
        try await client.send(.post, "/v1/sign-in", json: SignInRequest(account: account, password: password, deviceName: "guess"))
    }

    @Test(arguments: Backend.all) func guessesAreRefusedBeforeAnyPasswordIsChecked(backend: Backend) async throws {
        let server = try await TestServer(backend, signInPolicy: Self.lasting(account: 5))
        defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse")
        let hasher = server.server.services.signIns.hasher
        try await server.run { client in
            for _ in 0..<5 {
                #expect(try await attempt(client, "ada", "wrong password").status == .unauthorized)
            }
            let checked = hasher.checks.value
            // Past the free attempts: 429 with Retry-After, no password checked — the right one neither.
            let refused = try await attempt(client, "ada", "wrong password")
            #expect(refused.status == .tooManyRequests && refused.errorCode == "tooManyAttempts")
            #expect(Int(refused.headers[.retryAfter] ?? "") ?? 0 >= 1)
            #expect(try await attempt(client, "ADA", "correct horse").status == .tooManyRequests, "case buys no attempts")
            #expect(hasher.checks.value == checked)
            #expect(try await server.admin.blockedSignIns().map(\.who) == ["ada"])

            // The operator lifts it; the right password works, and clears the count.
            #expect(try await server.admin.unblockSignIn(account: "ada"))
            #expect(try await attempt(client, "ada", "correct horse").status == .ok)
            #expect(try await attempt(client, "ada", "wrong password").status == .unauthorized)
        }
    }

    @Test(arguments: Backend.all) func guessesMadeAtOnceAreAllCounted(backend: Backend) async throws {
        let server = try await TestServer(backend, signInPolicy: Self.lasting(account: 5))
        defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse")
        let hasher = server.server.services.signIns.hasher
        let statuses = try await server.run { client in
            try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<20 { group.addTask { try await attempt(client, "ada", "wrong password").status } }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
        }
        #expect(statuses.filter { $0 == .unauthorized }.count == 5 && statuses.filter { $0 == .tooManyRequests }.count == 15)
        #expect(hasher.checks.value == 5, "five checks, not twenty")
    }

    @Test func blocksGrowTwiceAsLongUpToTheLongest() {
        let policy = Self.strict(account: 5)
        #expect(policy.block(attempts: 5, free: 5) == nil)
        #expect((6...9).map { policy.block(attempts: $0, free: 5) } == [1, 2, 4, 8])
        #expect(policy.block(attempts: 40, free: 5) == policy.longestBlock)
    }

    @Test func addressesCountByHostOrByIPv6Network() throws {
        func key(_ address: String) throws -> String? { SignInPolicy.addressKey(try SocketAddress(ipAddress: address, port: 1)) }
        #expect(try key("203.0.113.7") == "address:203.0.113.7")
        #expect(try key("::ffff:203.0.113.7") == "address:203.0.113.7")
        #expect(try key("2001:db8:1:2::1") == key("2001:db8:1:2:ffff::9"))
        #expect(try key("2001:db8:1:2::1") != key("2001:db8:1:3::1"))
    }

    /// One address guessing across many accounts is stopped too (a live server: the address is the connection's).
    @Test func oneAddressGuessingManyAccountsIsBlocked() async throws {
        let server = try await TestServer(.sqlite, signInPolicy: Self.lasting(account: 1_000, address: 4))
        defer { server.remove() }
        try await server.server.makeApplication().test(.live) { client in
            let client = Client(client: client)
            for index in 0..<4 {
                #expect(try await attempt(client, "user\(index)", "guess").status == .unauthorized)
            }
            let refused = try await attempt(client, "user9", "guess")
            #expect(refused.status == .tooManyRequests)
            #expect(try await server.admin.blockedSignIns().map(\.who) == ["127.0.0.1"])
            #expect(try await server.admin.unblockSignIn(account: nil, addresses: ["127.0.0.1"]))
            #expect(try await attempt(client, "user9", "guess").status == .unauthorized)
        }
    }

    /// Behind a trusted reverse proxy the forwarded address is what counts; from anywhere else the
    /// header changes nothing (a stranger cannot rotate it to escape the count).
    @Test func behindATrustedProxyTheForwardedAddressCounts() async throws {
        @Sendable func guess(_ client: Client, _ forwarded: String) async throws -> HTTPResponse.Status {
            try await client.send(.post, "/v1/sign-in", json: SignInRequest(account: "user-\(UUID().uuidString.prefix(6))", password: "guess", deviceName: "guess"),
                                  headers: [HTTPField.Name("X-Forwarded-For")!: forwarded]).status
        }
        let policy = Self.lasting(account: 1_000, address: 3)
        let proxied = try await TestServer(.sqlite, signInPolicy: policy, trustedProxies: try TrustedProxies(["127.0.0.0/8"]))
        defer { proxied.remove() }
        try await proxied.server.makeApplication().test(.live) { raw async throws in
            let client = Client(client: raw)
            for _ in 0..<3 { #expect(try await guess(client, "198.51.100.7, 203.0.113.5") == .unauthorized) }
            #expect(try await guess(client, "203.0.113.5") == .tooManyRequests, "the client behind the proxy is blocked")
            #expect(try await guess(client, "203.0.113.6") == .unauthorized, "another client behind the same proxy is not")
            #expect(try await proxied.admin.blockedSignIns().map(\.who) == ["203.0.113.5"])
        }
        let direct = try await TestServer(.sqlite, signInPolicy: policy)
        defer { direct.remove() }
        try await direct.server.makeApplication().test(.live) { raw async throws in
            let client = Client(client: raw)
            for index in 0..<3 { #expect(try await guess(client, "203.0.113.\(index)") == .unauthorized) }
            #expect(try await guess(client, "203.0.113.99") == .tooManyRequests, "the header is not believed")
            #expect(try await direct.admin.blockedSignIns().map(\.who) == ["127.0.0.1"])
        }
    }

    @Test func trustedProxiesAreParsedAndMatched() throws {
        let proxies = try TrustedProxies(["10.0.0.0/8", "192.168.1.7", "fd00::/8"])
        func address(_ text: String) -> SocketAddress { try! SocketAddress(ipAddress: text, port: 0) }
        #expect(proxies.contains(address("10.200.3.4")) && !proxies.contains(address("11.0.0.1")))
        #expect(proxies.contains(address("192.168.1.7")) && !proxies.contains(address("192.168.1.8")))
        #expect(proxies.contains(address("fd12::1")) && !proxies.contains(address("fe80::1")))
        #expect(proxies.contains(address("::ffff:10.1.1.1")), "IPv4 over IPv6")
        // The last hop that is not a proxy; an unreadable hop stops the walk at the proxy.
        #expect(proxies.client(peer: address("10.0.0.1"), forwardedFor: ["1.2.3.4, 5.6.7.8", "10.0.0.9"])?.ipAddress == "5.6.7.8")
        #expect(proxies.client(peer: address("10.0.0.1"), forwardedFor: ["1.2.3.4, nonsense"])?.ipAddress == "10.0.0.1")
        #expect(proxies.client(peer: address("8.8.8.8"), forwardedFor: ["1.2.3.4"])?.ipAddress == "8.8.8.8")
        #expect(throws: SyncError.self) { try TrustedProxies(["10.0.0.0/33"]) }
        #expect(throws: SyncError.self) { try TrustedProxies(["proxy.example.org"]) }
    }

    @Test(arguments: Backend.all) func longPasswordsCountWhole(backend: Backend) async throws {
        let server = try await TestServer(backend)
        defer { server.remove() }
        let long = String(repeating: "correct horse battery staple ", count: 3) // 87 bytes
        let sameStart = String(long.dropLast()) + "!"
        let account = try await server.admin.createAccount(name: "ada", password: long)
        try await server.run { client in
            #expect(try await attempt(client, "ada", long).status == .ok)
            #expect(try await attempt(client, "ada", sameStart).status == .unauthorized, "the first 72 bytes alone do not sign in")

            // A hash stored the old way (bcrypt of the long password, cut at 72 bytes) is
            // accepted once for the whole password and replaced by a whole one.
            try await server.admin.database.setPasswordHash(accountId: account.id, hash: Bcrypt.hash(long, cost: 4))
            #expect(try await attempt(client, "ada", long).status == .ok)
            let stored = try #require(try await server.admin.database.credentials(of: "ada")).passwordHash
            #expect(stored.hasPrefix(PasswordHasher.longPasswordPrefix))
            #expect(try await attempt(client, "ada", sameStart).status == .unauthorized)
        }
    }

    @Test func aLargeSignInBodyIsNotRead() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.run { client in
            let answer = try await client.send(.post, "/v1/sign-in", raw: [UInt8](repeating: UInt8(ascii: " "), count: 100 << 10), headers: [.contentType: "application/json"])
            #expect(answer.status == .contentTooLarge)
        }
    }
}
