import Foundation

/// How one list of chunks becomes another, as runs copied from the old list and chunks that are
/// new: what travels instead of a whole chunk list when a large file changes a little (a 1-byte
/// edit in 64 MiB is a few operations, not 4,000 hashes). It travels in both directions:
/// ``ItemUpdate/manifestDelta`` up, ``ItemState/manifestDelta`` down.
public struct ChunkListDelta: Sendable, Equatable, Codable {
    /// One step of rebuilding the new list.
    public enum Operation: Sendable, Equatable, Codable {
        /// Take `count` chunks of the old list from index `from`.
        case copy(from: Int, count: Int)
        /// A chunk the old list does not have there.
        case add(hash: String, length: Int)
    }

    /// The steps, in order.
    public var operations: [Operation]

    /// A delta of these steps.
    public init(operations: [Operation]) {
        self.operations = operations
    }

    /// The delta that turns `old` into `new`: consecutive chunks that follow each other in
    /// `old` too become one copy.
    public init(from old: [ChunkReference], to new: [ChunkReference]) {
        var positions: [String: [Int]] = [:]
        for (index, chunk) in old.enumerated() { positions[chunk.hash, default: []].append(index) }
        var operations: [Operation] = []
        var index = 0
        while index < new.count {
            // The longest run of `new` from here that `old` has in a row.
            var best: (from: Int, count: Int)?
            for start in positions[new[index].hash] ?? [] where old[start].size == new[index].size {
                var count = 1
                while index + count < new.count, start + count < old.count, old[start + count].hash == new[index + count].hash,
                      old[start + count].size == new[index + count].size {
                    count += 1
                }
                if count > (best?.count ?? 0) { best = (start, count) }
                if count >= 64 { break } // long enough; no need to look at every repeat
            }
            if let best {
                operations.append(.copy(from: best.from, count: best.count))
                index += best.count
            } else {
                operations.append(.add(hash: new[index].hash, length: Int(new[index].size)))
                index += 1
            }
        }
        self.operations = operations
    }

    /// The new list, rebuilt from `old`.
    /// - Throws: ``DeltaError`` when the delta copies chunks `old` does not have (or is longer
    ///   than any manifest may be).
    public func apply(to old: [ChunkReference]) throws -> [ChunkReference] {
        var result: [ChunkReference] = []
        for operation in operations {
            switch operation {
            case .copy(let from, let count):
                guard from >= 0, count > 0, from <= old.count - count else { throw DeltaError(from: from, count: count, available: old.count) }
                result.append(contentsOf: old[from..<(from + count)])
            case .add(let hash, let length):
                result.append(ChunkReference(hash: hash, size: Int64(length)))
            }
            guard result.count <= 100_000 else { throw DeltaError(from: 0, count: result.count, available: old.count) }
        }
        return result
    }

    /// The chunks the delta adds (what must be uploaded unless the server has them already).
    public var added: [(hash: String, length: Int)] {
        operations.compactMap { if case .add(let hash, let length) = $0 { (hash, length) } else { nil } }
    }
}

/// A delta that does not fit the list it is applied to.
public struct DeltaError: Error, CustomStringConvertible {
    /// Where the copy started, how many chunks it took, and how many the old list has.
    public var from: Int, count: Int, available: Int

    /// A sentence saying so.
    public var description: String {
        "the chunk list delta copies chunks \(from)..<\(from + count) of a list of \(available)"
    }
}
