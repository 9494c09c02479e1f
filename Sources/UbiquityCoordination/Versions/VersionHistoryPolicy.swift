import Foundation
import UbiquityFiles

/// How long a document's local history keeps earlier versions, and how densely — macOS
/// Versions' rule by default: every version from the last hour, one per hour for the last day,
/// one per day for the last month, none older.
///
/// Each tier covers versions up to an age; within it, one version (the newest) is kept per
/// `spacing`-long slot of the calendar (slots are fixed, so a version kept once stays kept as it
/// ages through the tier). A spacing of 0 keeps them all. Versions older than the last tier go,
/// except that the version added last is never thinned.
public struct VersionHistoryPolicy: Sendable, Equatable {
    /// One age range and its spacing.
    public struct Tier: Sendable, Equatable {
        /// The oldest age (in seconds) this tier covers.
        public var upTo: TimeInterval
        /// Keep one version per slot this long (seconds); 0 keeps every version.
        public var spacing: TimeInterval
        /// Creates a tier.
        /// - Parameters:
        ///   - upTo: The oldest age it covers, in seconds.
        ///   - spacing: One version per slot this long, or 0 for all.
        public init(upTo: TimeInterval, spacing: TimeInterval) {
            self.upTo = upTo
            self.spacing = spacing
        }
    }

    /// The tiers, youngest first.
    public var tiers: [Tier]

    /// Creates a policy.
    /// - Parameter tiers: The tiers, youngest first.
    public init(tiers: [Tier]) { self.tiers = tiers.sorted { $0.upTo < $1.upTo } }

    /// All from the last hour, hourly for a day, daily for 30 days.
    public static let standard = VersionHistoryPolicy(tiers: [
        Tier(upTo: 3_600, spacing: 0), Tier(upTo: 86_400, spacing: 3_600), Tier(upTo: 30 * 86_400, spacing: 86_400),
    ])

    /// The indices of `dates` to keep at `now`.
    /// - Parameters:
    ///   - dates: When each version was made.
    ///   - now: The time to judge ages by.
    public func indicesToKeep(_ dates: [Date], now: Date) -> Set<Int> {
        var kept: Set<Int> = []
        var slots: Set<String> = []
        for index in dates.indices.sorted(by: { dates[$0] > dates[$1] }) {
            let age = max(0, now.timeIntervalSince(dates[index]))
            guard let (number, tier) = tiers.enumerated().first(where: { age <= $0.element.upTo }) else { continue }
            if tier.spacing <= 0 {
                kept.insert(index)
            } else if slots.insert("\(number):\(Int((dates[index].timeIntervalSince1970 / tier.spacing).rounded(.down)))").inserted {
                kept.insert(index)
            }
        }
        return kept
    }
}

extension NSFileVersion {
    /// Keeps the item's present contents as a local-history version (discardable, sharing its
    /// files with the item by hard link — saves replace files, never change them in place),
    /// then thins the history by `policy`. Call it inside a coordinated write of the item,
    /// before replacing it.
    /// - Parameters:
    ///   - url: The item (nothing happens if it does not exist).
    ///   - policy: How to thin.
    ///   - now: The time to judge ages by.
    /// - Returns: The new version, or nil if there was no item.
    @discardableResult
    public class func preserveCurrentVersion(ofItemAt url: URL, policy: VersionHistoryPolicy = .standard, now: Date = Date()) throws -> NSFileVersion? {
        let item = url.standardizedFileURL
        guard let status = try POSIX.status(item.path) else { return nil }
        let version = try add(
            ofItemAt: item, contents: item, conflict: false, savingComputer: thisComputer,
            modificationDate: status.modificationDate, byMoving: false, discardable: true, allowLink: true)
        try thinLocalHistory(ofItemAt: item, policy: policy, now: now)
        return version
    }

    /// Removes local-history versions (discardable, non-conflict) that `policy` no longer keeps.
    /// Versions added with ``addOfItem(at:withContentsOf:options:)`` and conflict versions are
    /// never thinned.
    /// - Parameters:
    ///   - url: The item.
    ///   - policy: How to thin.
    ///   - now: The time to judge ages by.
    public class func thinLocalHistory(ofItemAt url: URL, policy: VersionHistoryPolicy, now: Date = Date()) throws {
        let store = try VersionStore(item: url.standardizedFileURL)
        try store.thin { records in
            let history = records.filter { $0.kind == .other && $0.isDiscardable }
            var keep = policy.indicesToKeep(history.map(\.modificationDate), now: now)
            // The version added last is never thinned (whatever the clocks say).
            if let newest = history.indices.max(by: { history[$0].addedDate < history[$1].addedDate }) { keep.insert(newest) }
            return Set(history.indices.filter { !keep.contains($0) }.map { history[$0].id })
        }
    }
}
