import Foundation
import Synchronization
import UbiquityKeys

/// What the server reads of an account on every commit and that seldom changes — its roster
/// (whether it takes plaintext names), the escrow's root keys of it (to tag plaintext names),
/// the shares it owns (whom to tell) — kept in memory per account and generation.
///
/// The generation is counted by the database itself: triggers add one to the account's row at
/// every insert, update or delete of its roster entries, key envelopes and shares, in the
/// transaction that makes it. Each request reads it with its device's token
/// (``DeviceAuth/generation``, the same row read), so a fact kept under a generation is exactly
/// as fresh as one read from the database at that moment — on every server instance, since
/// each reads the generation from the one database. A fact is read after its generation, never
/// before: what is kept under a generation is never older than it.
///
/// Before it, a plaintext commit made three more round trips to the database than its
/// transaction: the roster twice and the owned shares once (issue 49). Bounded: at most
/// ``capacity`` accounts, all forgotten when full (each refills on its next request).
final class AccountFacts: Sendable {
    /// A value read, or nil: not read at this generation yet.
    struct Known<Value: Sendable>: Sendable {
        var value: Value
    }

    private struct Entry: Sendable {
        var generation: Int64
        var roster: Known<Roster?>?
        var escrowKeys: Known<[AccountRootKey]?>?
        var ownedShares: Known<[StoredShare]>?
    }

    /// The most accounts kept.
    static let capacity = 10_000

    private let entries = Mutex<[Int64: Entry]>([:])

    /// A cache.
    init() {}

    /// How many accounts are kept now.
    var count: Int { entries.withLock { $0.count } }

    /// The account's roster (nil: no keys set up), read by `load` unless kept at `device`'s generation.
    func roster(of device: DeviceAuth, load: () async throws -> Roster?) async throws -> Roster? {
        try await fact(of: device, get: \.roster, set: { $0.roster = $1 }, load: load)
    }

    /// The escrow's root keys of the account (nil: none open), read by `load` unless kept.
    func escrowKeys(of device: DeviceAuth, load: () async throws -> [AccountRootKey]?) async throws -> [AccountRootKey]? {
        try await fact(of: device, get: \.escrowKeys, set: { $0.escrowKeys = $1 }, load: load)
    }

    /// The shares the account owns, read by `load` unless kept.
    func ownedShares(of device: DeviceAuth, load: () async throws -> [StoredShare]) async throws -> [StoredShare] {
        try await fact(of: device, get: \.ownedShares, set: { $0.ownedShares = $1 }, load: load)
    }

    /// A fact kept at the device's generation, or read (and kept: a failed read is not). A
    /// device whose generation is not known reads it every time.
    private func fact<Value: Sendable>(of device: DeviceAuth, get: (Entry) -> Known<Value>?, set: (inout Entry, Known<Value>) -> Void,
                                       load: () async throws -> Value) async throws -> Value {
        guard let generation = device.generation else { return try await load() }
        let account = device.accountId
        if let kept = entries.withLock({ entries in entries[account].flatMap { $0.generation == generation ? get($0) : nil } }) {
            return kept.value
        }
        let value = try await load()
        entries.withLock { entries in
            if let entry = entries[account], entry.generation > generation { return } // (a newer one is kept: this may be older)
            if entries[account] == nil, entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            var entry = entries[account].flatMap { $0.generation == generation ? $0 : nil } ?? Entry(generation: generation)
            set(&entry, Known(value: value))
            entries[account] = entry
        }
        return value
    }
}
