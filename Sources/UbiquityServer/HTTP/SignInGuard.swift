import Crypto
import Foundation
import Hummingbird
import HummingbirdBcrypt
import Logging
import NIOCore
import NIOPosix
import Synchronization
import UbiquityProtocol

/// How many sign-in attempts an account name and an address get, and how long they wait
/// after that.
///
/// Each attempt counts, before any password is checked, against its account name and its
/// address (an IPv6 address by its /64: one host holds a whole /64). Past the free attempts of a
/// window, each further attempt blocks its key for twice as long as the one before, from
/// ``firstBlock`` up to ``longestBlock``; a blocked key is answered 429 with `Retry-After` at
/// once — after ``refusalDelay``, as long as a check takes. A sign-in that succeeds clears its account's count and takes its own attempt back from
/// its address's (an office behind one address is not blocked by its own users).
package struct SignInPolicy: Sendable {
    /// Free attempts per account name in a window.
    package var accountAttempts = 10
    /// Free attempts per address in a window.
    package var addressAttempts = 30
    /// How long attempts are remembered: a key's count starts again after this long without one.
    package var window: TimeInterval = 15 * 60
    /// The first block past the free attempts.
    package var firstBlock: TimeInterval = 1
    /// The longest block.
    package var longestBlock: TimeInterval = 15 * 60
    /// How long a refusal waits before it is answered — about what checking a password takes,
    /// so that a blocked client gets its 429s no faster than its 401s and cannot turn cheap
    /// refusals into a flood; at most ``delayedRefusals`` wait at once (the rest are answered at once).
    package var refusalDelay: Duration = .milliseconds(250)
    /// How many refusals may wait at once.
    package var delayedRefusals = 512

    /// The policy of a public server.
    package init() {}

    /// How long a key with `attempts` attempts (of which `free` are free) is blocked; nil: not.
    func block(attempts: Int, free: Int) -> TimeInterval? {
        guard attempts > free else { return nil }
        return min(longestBlock, firstBlock * pow(2, Double(min(attempts - free - 1, 30))))
    }

    /// The key of an account name (names are compared as typed, lowercased, so that case does
    /// not buy more attempts).
    static func accountKey(_ name: String) -> String { "account:" + name.lowercased() }

    /// The key of an address: IPv4 whole, IPv6 by its first 64 bits.
    static func addressKey(_ address: SocketAddress) -> String? {
        switch address {
        case .v4(let v4):
            // `s_addr` holds the address in network order: its bytes in memory are a.b.c.d.
            return "address:" + withUnsafeBytes(of: v4.address.sin_addr.s_addr) { $0.map(String.init).joined(separator: ".") }
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            // An IPv4 client reached over an IPv6 socket (::ffff:a.b.c.d) is that IPv4 address.
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
                return "address:" + bytes[12..<16].map(String.init).joined(separator: ".")
            }
            let groups = stride(from: 0, to: 8, by: 2).map { String(format: "%x", UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1])) }
            return "address:" + groups.joined(separator: ":") + "::/64"
        case .unixDomainSocket:
            return nil
        }
    }
}

/// Checks sign-ins: throttling by ``SignInPolicy`` before any password is checked, passwords
/// checked by ``PasswordHasher``, every refusal logged with the account name and the address
/// (never the password).
struct SignInGuard: Sendable {
    let database: any SyncDatabase
    let hasher: PasswordHasher
    let policy: SignInPolicy
    let logger: Logger
    /// How many attempts between two prunings of keys not tried for a day.
    static let pruneEvery = 1_000
    /// The largest sign-in body read (a name, a password, a device name, a few containers).
    static let bodyLimit = 64 << 10
    /// The longest password taken (longer ones are refused, as a wrong password is).
    static let longestPassword = 1024
    private let counted = ManagedAtomicCounter()
    private let waiting = ManagedAtomicCounter()

    /// The account `name` if `password` is its password. Throws ``SyncError`` 429 when the
    /// name or `address` is blocked, 401 when the name is unknown or the password wrong (the
    /// same work and the same answer either way), 503 when too many passwords wait to be
    /// checked.
    func check(account name: String, password: String, address: SocketAddress?) async throws -> (id: Int64, identityToken: String) {
        let now = Date()
        let accountKey = SignInPolicy.accountKey(name)
        let addressKey = address.flatMap(SignInPolicy.addressKey)
        let keys = [accountKey] + (addressKey.map { [$0] } ?? [])
        let from = addressKey.map { String($0.dropFirst("address:".count)) } ?? "unknown"
        let shown = SafeText.escaped(name) // a stranger's text: no line breaks or escapes into the log
        if counted.increment() % Self.pruneEvery == 0 {
            _ = try await database.pruneSignInAttempts(before: now.addingTimeInterval(-max(policy.window, 24 * 3600)))
        }
        // Already blocked: refused at once, and only read (a flood of refusals writes nothing).
        if let until = try await database.signInAttempts(keys: keys).values.map(\.blockedUntil).max(), until > now.timeIntervalSince1970 {
            logger.notice("sign-in refused: blocked", metadata: ["account": "\(shown)", "address": "\(from)", "retryAfter": "\(Int((until - now.timeIntervalSince1970).rounded(.up)))"])
            await delayRefusal()
            throw SyncError.tooManyAttempts(retryAfter: until - now.timeIntervalSince1970)
        }
        let standing = try await database.countSignInAttempt(keys: keys, now: now, windowStart: now.addingTimeInterval(-policy.window))
        // Past the free attempts: blocked from now, and refused.
        var longest: TimeInterval = 0
        for (key, attempts) in standing {
            let free = key == accountKey ? policy.accountAttempts : policy.addressAttempts
            guard let block = policy.block(attempts: attempts.attempts, free: free) else { continue }
            try await database.blockSignIn(key: key, until: now.addingTimeInterval(block))
            longest = max(longest, block)
        }
        if longest > 0 {
            logger.warning("sign-in blocked: too many attempts", metadata: ["account": "\(shown)", "address": "\(from)", "seconds": "\(Int(longest))"])
            await delayRefusal()
            throw SyncError.tooManyAttempts(retryAfter: longest)
        }
        guard let account = try await database.credentials(of: name) else {
            try await hasher.verifyDecoy(password) // the same work whether the account exists or not
            logger.notice("sign-in failed: unknown account", metadata: ["account": "\(shown)", "address": "\(from)"])
            throw SyncError.signInFailed
        }
        let checked = try await hasher.verify(password, against: account.passwordHash)
        guard checked.matches else {
            logger.notice("sign-in failed: wrong password", metadata: ["account": "\(shown)", "address": "\(from)"])
            throw SyncError.signInFailed
        }
        if let upgraded = checked.upgraded {
            try await database.setPasswordHash(accountId: account.id, hash: upgraded)
            logger.info("password hash upgraded", metadata: ["account": "\(shown)"])
        }
        try await database.signInSucceeded(clearing: [accountKey], forgiving: addressKey.map { [$0] } ?? [])
        return (account.id, account.identityToken)
    }

    /// Holds a refusal for ``SignInPolicy/refusalDelay`` (without a thread), unless
    /// ``SignInPolicy/delayedRefusals`` are held already.
    private func delayRefusal() async {
        guard waiting.increment(below: policy.delayedRefusals) else { return }
        defer { waiting.decrement() }
        try? await Task.sleep(for: policy.refusalDelay) // cancelled: the client went, nothing to answer
    }
}

/// An atomic counter (a lock around an integer: sign-ins are not a hot path).
final class ManagedAtomicCounter: Sendable {
    private let state = Mutex(0)
    /// Adds one; the new count.
    func increment() -> Int { state.withLock { $0 += 1; return $0 } }
    /// Adds one if the count is below `limit`; whether it did.
    func increment(below limit: Int) -> Bool {
        state.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }
    /// Takes one away.
    func decrement() { state.withLock { $0 -= 1 } }
    /// The count.
    var value: Int { state.withLock { $0 } }
}

/// bcrypt off the event loops, a few at a time: passwords are hashed and checked on NIO's
/// blocking pool, at most ``concurrency`` at once (one core fewer than the machine has), with at most ``waitingLimit`` more waiting
/// (beyond that: 503 `busy` with `Retry-After`) — so a flood of sign-ins slows sign-ins, not
/// the server.
///
/// Passwords longer than bcrypt's 72 bytes are hashed whole: their SHA-256 (base64) is what
/// bcrypt sees, and the stored hash says so (``longPasswordPrefix``); bcrypt alone would cut
/// them. A hash stored before that, of a long password, is checked the old way once and
/// replaced.
final class PasswordHasher: Sendable {
    /// How new passwords are hashed, and the decoy's cost.
    let cost: UInt8
    /// How many passwords are hashed at once.
    let concurrency: Int
    /// How many more may wait.
    let waitingLimit: Int
    /// The hashing threads' turns (one key: all passwords share them).
    private let turns: Turns<Int>
    private let decoy = Mutex<String?>(nil)
    /// How many passwords were checked (tests see that a refusal checked none).
    let checks = ManagedAtomicCounter()

    /// The prefix of a stored hash whose password went through SHA-256 first.
    static let longPasswordPrefix = "$ubq-sha256$"
    /// The longest password bcrypt reads whole.
    static let bcryptLimit = 72

    /// A hasher of `cost` (4…31), hashing `concurrency` passwords at once — by default one core
    /// fewer than the machine has, so that the event loops always have one.
    init(cost: UInt8, concurrency: Int = max(1, System.coreCount - 1), waitingLimit: Int = 64) {
        self.cost = cost
        self.concurrency = concurrency
        self.waitingLimit = waitingLimit
        turns = Turns(slots: concurrency, waitingLimit: waitingLimit)
    }

    /// What bcrypt is given for `password`.
    static func bcryptInput(_ password: String) -> String {
        guard password.utf8.count > bcryptLimit else { return password }
        return Data(SHA256.hash(data: Data(password.utf8))).base64EncodedString()
    }

    /// The hash to store for `password`.
    func hash(_ password: String) async throws -> String {
        let cost = cost
        let hashed = try await run { Bcrypt.hash(Self.bcryptInput(password), cost: cost) }
        return password.utf8.count > Self.bcryptLimit ? Self.longPasswordPrefix + hashed : hashed
    }

    /// The same hash, made here and now (the administration commands, which run no server).
    static func hashNow(_ password: String, cost: UInt8) -> String {
        let hashed = Bcrypt.hash(bcryptInput(password), cost: cost)
        return password.utf8.count > bcryptLimit ? longPasswordPrefix + hashed : hashed
    }

    /// Whether `password` is the one `stored` was made from, and a hash to store instead when
    /// `stored` is of the old kind for a long password.
    func verify(_ password: String, against stored: String) async throws -> (matches: Bool, upgraded: String?) {
        _ = checks.increment()
        if stored.hasPrefix(Self.longPasswordPrefix) {
            let hash = String(stored.dropFirst(Self.longPasswordPrefix.count))
            return (try await run { Bcrypt.verify(Self.bcryptInput(password), hash: hash) }, nil)
        }
        let matches = try await run { Bcrypt.verify(password, hash: stored) }
        guard matches, password.utf8.count > Self.bcryptLimit else { return (matches, nil) }
        return (true, try await hash(password))
    }

    /// Does the work of checking `password` against a hash of the server's cost that no
    /// password matches: an unknown account costs what a wrong password does.
    func verifyDecoy(_ password: String) async throws {
        _ = checks.increment()
        let hash = try await decoyHash()
        _ = try await run { Bcrypt.verify(Self.bcryptInput(password), hash: hash) }
    }

    /// A hash of the server's cost that no password matches, made once.
    private func decoyHash() async throws -> String {
        if let made = decoy.withLock({ $0 }) { return made }
        let cost = cost
        let hash = try await run { Bcrypt.hash(UUID().uuidString + UUID().uuidString, cost: cost) }
        return decoy.withLock { made in
            if made == nil { made = hash }
            return made ?? hash
        }
    }

    /// Makes the decoy now (a server does this as it starts, so the first unknown account is
    /// not answered slower than the others).
    func prepareDecoy() async {
        _ = try? await decoyHash() // only a full queue fails: then the first unknown account makes it
    }

    /// Runs `work` on NIO's blocking pool in one of the hashing turns.
    /// - Throws: ``SyncError`` 503 `busy` when `waitingLimit` passwords already wait.
    private func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async throws -> T {
        guard await turns.take(0) != nil else { throw SyncError.busy(retryAfter: 1) }
        defer { turns.giveBack(0) }
        return try await NIOThreadPool.singleton.runIfActive { work() }
    }
}
