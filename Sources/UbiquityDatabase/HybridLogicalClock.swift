import Foundation

/// A hybrid-logical-clock timestamp: wall-clock milliseconds and a counter that orders events
/// within one millisecond (or while a remote clock is ahead). Ordered by time, then counter;
/// records of different devices with equal timestamps are ordered by device id where they are
/// compared (``ChangeLogRecord/orderedBefore(_:)``).
public struct HLCTimestamp: Comparable, Hashable, Codable, Sendable, CustomStringConvertible {
    /// Milliseconds since 1970 (UTC), as the clock that made it believed.
    public var milliseconds: Int64
    /// Orders events that share a millisecond.
    public var counter: UInt16

    /// A timestamp.
    /// - Parameters:
    ///   - milliseconds: Milliseconds since 1970.
    ///   - counter: The order within that millisecond.
    public init(milliseconds: Int64, counter: UInt16 = 0) {
        self.milliseconds = milliseconds
        self.counter = counter
    }

    /// The earliest timestamp.
    public static let zero = HLCTimestamp(milliseconds: 0)

    public static func < (lhs: HLCTimestamp, rhs: HLCTimestamp) -> Bool {
        (lhs.milliseconds, lhs.counter) < (rhs.milliseconds, rhs.counter)
    }

    /// `milliseconds.counter`.
    public var description: String { "\(milliseconds).\(counter)" }
}

/// A hybrid logical clock (Kulkarni et al.): timestamps that follow the wall clock when it moves
/// forward, never go backwards when it does not, and come after every timestamp this device has
/// seen from others — so a transaction's timestamp orders it after everything it could have
/// depended on, on every device, even when their clocks disagree.
///
/// Not synchronized: one per database, used inside its writer.
public struct HybridLogicalClock: Sendable {
    /// The latest timestamp made or seen.
    public private(set) var latest: HLCTimestamp
    private let wallClock: @Sendable () -> Int64

    /// A clock starting after `latest` (what the device's logs last recorded).
    /// - Parameters:
    ///   - latest: The latest timestamp already made or seen.
    ///   - wallClock: Milliseconds since 1970 (inject one in tests).
    public init(latest: HLCTimestamp = .zero, wallClock: @escaping @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }) {
        self.latest = latest
        self.wallClock = wallClock
    }

    /// A timestamp for a local event (a transaction), after every earlier one.
    public mutating func tick() -> HLCTimestamp {
        let now = wallClock()
        latest = now > latest.milliseconds ? HLCTimestamp(milliseconds: now) : Self.following(latest)
        return latest
    }

    /// Takes in a timestamp seen from another device (an imported record): later local events
    /// come after it. Returns the clock's new latest timestamp.
    /// - Parameter remote: The other device's timestamp.
    @discardableResult
    public mutating func receive(_ remote: HLCTimestamp) -> HLCTimestamp {
        let now = wallClock()
        let top = max(now, latest.milliseconds, remote.milliseconds)
        if top == now && now > latest.milliseconds && now > remote.milliseconds {
            latest = HLCTimestamp(milliseconds: now)
        } else {
            latest = Self.following(max(latest, remote))
        }
        return latest
    }

    /// The timestamp just after `timestamp` (the next counter, or the next millisecond once the
    /// counter is spent: 65,536 events in one millisecond move the clock on by one).
    static func following(_ timestamp: HLCTimestamp) -> HLCTimestamp {
        timestamp.counter == .max ? HLCTimestamp(milliseconds: timestamp.milliseconds + 1) : HLCTimestamp(milliseconds: timestamp.milliseconds, counter: timestamp.counter + 1)
    }
}
