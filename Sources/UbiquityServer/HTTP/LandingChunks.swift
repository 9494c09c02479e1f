import Crypto
import Foundation
import NIOCore
import Synchronization
import UbiquityProtocol

/// Chunks of uploads in progress, each as soon as it has come whole off the wire (issue 48:
/// the server as a pipe, not a stopover). A device uploads a large file in batches of 16 MiB;
/// stored and listed only once its batch is whole, a chunk would reach the account's other
/// devices a batch late — on a 20 Mbit/s uplink, seven seconds. While an account has an
/// incoming revision announced (``watch(account:until:)``), the chunks its batches carry are
/// kept here as they land, and a fetch of chunks not stored yet is answered from here.
///
/// Only ever a copy for fetching ahead: the upload goes on to store and list them as before
/// (nothing is acknowledged from here), and the fetching device's own check of each chunk
/// against its name (a sealed chunk's keyed MAC) holds as for any chunk. A plaintext chunk is
/// checked against its name here before it is given out. Kept per account, at most
/// ``capacity`` bytes in all, each chunk at most ``keptSeconds``, the oldest out first; one
/// instance's own (a fetch another instance answers waits for the stored batch).
final class LandingChunks: Sendable {
    private struct Key: Hashable {
        var account: Int64
        var hash: String
    }

    private struct Entry {
        var bytes: [UInt8]
        var sealed: Bool
        var landed: ContinuousClock.Instant
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var order: [Key] = []
        var total = 0
        /// Accounts whose chunks land here, until when (seconds since 1970).
        var watched: [Int64: Double] = [:]
        /// How many chunks of each account landed so far (what a waiting fetch compares).
        var landings: [Int64: Int] = [:]
        /// Fetches waiting for the next chunk of an account to land.
        var waiters: [Int64: [UUID: CheckedContinuation<Void, Never>]] = [:]
    }

    /// The most bytes of chunks kept.
    let capacity: Int
    /// How long a chunk is kept after it landed.
    let keptSeconds: Duration
    private let state = Mutex(State())

    init(capacity: Int = 64 << 20, keptSeconds: Duration = .seconds(60)) {
        self.capacity = capacity
        self.keptSeconds = keptSeconds
    }

    /// Lands the account's chunks until `until` (an incoming revision of it is announced).
    func watch(account: Int64, until: Double) {
        state.withLock { $0.watched[account] = max($0.watched[account] ?? 0, until) }
    }

    /// Whether the account's chunks land here now.
    func isWatched(account: Int64) -> Bool {
        let now = Date().timeIntervalSince1970
        return state.withLock { state in
            guard let until = state.watched[account] else { return false }
            if until < now { state.watched[account] = nil }
            return until >= now
        }
    }

    /// Keeps a copy of a chunk that came whole (the oldest go when more than ``capacity`` is kept).
    func land(account: Int64, hash: String, bytes: UnsafeRawBufferPointer, sealed: Bool) {
        guard bytes.count <= capacity else { return }
        let entry = Entry(bytes: Array(bytes), sealed: sealed, landed: .now)
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            let key = Key(account: account, hash: hash)
            guard state.entries[key] == nil else { return [] }
            state.entries[key] = entry
            state.order.append(key)
            state.total += entry.bytes.count
            state.landings[account, default: 0] += 1
            Self.trim(&state, capacity: capacity, before: .now - keptSeconds)
            return state.waiters.removeValue(forKey: account).map { Array($0.values) } ?? []
        }
        for waiter in waiting { waiter.resume() }
    }

    /// How many chunks of the account landed so far (give it to ``waitForLanding(account:after:upTo:)``).
    func landings(of account: Int64) -> Int {
        state.withLock { $0.landings[account] ?? 0 }
    }

    /// Returns once a chunk of the account lands after the count `seen` (at once if one did
    /// already), or after `limit`.
    func waitForLanding(account: Int64, after seen: Int, upTo limit: Duration) async {
        let id = UUID()
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            let waiter = self?.state.withLock { $0.waiters[account]?.removeValue(forKey: id) }
            waiter?.resume()
        }
        defer { timer.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard (state.landings[account] ?? 0) == seen else { return true }
                state.waiters[account, default: [:]][id] = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Whether any chunk of the account is kept.
    func holds(account: Int64) -> Bool {
        state.withLock { state in state.entries.keys.contains { $0.account == account } }
    }

    /// The kept chunks among `hashes`, each checked (a plaintext one against its name; one that
    /// fails is dropped and left out).
    func take(_ hashes: Set<String>, account: Int64) -> [String: [UInt8]] {
        let found = state.withLock { state -> [String: Entry] in
            Self.trim(&state, capacity: capacity, before: .now - keptSeconds)
            var found: [String: Entry] = [:]
            for hash in hashes { if let entry = state.entries[Key(account: account, hash: hash)] { found[hash] = entry } }
            return found
        }
        var sound: [String: [UInt8]] = [:]
        for (hash, entry) in found {
            if entry.sealed || SHA256.hash(data: entry.bytes).map({ String(format: "%02x", $0) }).joined() == hash {
                sound[hash] = entry.bytes
            } else {
                state.withLock { state in
                    if let removed = state.entries.removeValue(forKey: Key(account: account, hash: hash)) { state.total -= removed.bytes.count }
                }
            }
        }
        return sound
    }

    /// Bytes kept now.
    var keptBytes: Int { state.withLock { $0.total } }

    private static func trim(_ state: inout State, capacity: Int, before: ContinuousClock.Instant) {
        var dropped = 0
        for key in state.order {
            guard let entry = state.entries[key] else {
                dropped += 1
                continue
            }
            guard state.total > capacity || entry.landed < before else { break }
            state.entries[key] = nil
            state.total -= entry.bytes.count
            dropped += 1
        }
        if dropped > 0 { state.order.removeFirst(dropped) }
    }
}
