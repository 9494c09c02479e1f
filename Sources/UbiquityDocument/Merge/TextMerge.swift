import Foundation

/// Three-way merging of plain text by lines, for resolving a version conflict without asking
/// the user — the first strategy the iCloud guide names.
///
/// ```swift
/// let merged = TextMerge.merge(ancestor: base, current: mine, other: theirs)
/// if merged.isClean { save(merged.text) } else { askTheUser() }
/// ```
/// Lines changed on one side only are taken from that side; lines changed the same way on
/// both sides are taken once; lines changed differently on both sides are a conflict, written
/// between `<<<<<<<`, `=======` and `>>>>>>>` markers (current first). Without a common
/// ancestor, the lines both versions share stand in for it: whatever either side has beyond
/// them is kept, so nothing is lost, but a deletion on one side cannot be told from an
/// insertion on the other.
public enum TextMerge {
    /// The outcome of a merge.
    public struct Result: Sendable, Equatable {
        /// The merged text, with conflict markers where the sides disagreed.
        public var text: String
        /// How many places both sides changed differently (0 when clean).
        public var conflicts: Int
        /// Whether every change merged without a conflict.
        public var isClean: Bool { conflicts == 0 }
    }

    /// Merges two versions of a text.
    /// - Parameters:
    ///   - ancestor: The version both descend from, if known.
    ///   - current: This device's version.
    ///   - other: The conflicting version.
    ///   - currentLabel: The label after `<<<<<<<` in conflict markers.
    ///   - otherLabel: The label after `>>>>>>>`.
    /// - Returns: The merged text and the number of conflicts.
    public static func merge(
        ancestor: String?, current: String, other: String,
        currentLabel: String = "current", otherLabel: String = "other"
    ) -> Result {
        let mine = lines(current), theirs = lines(other)
        let base = ancestor.map(lines) ?? common(mine, theirs)
        let toMine = matches(base, mine), toTheirs = matches(base, theirs)

        var output: [Substring] = []
        var conflicts = 0
        var (b, m, t) = (0, 0, 0)
        func settle(_ baseEnd: Int, _ mineEnd: Int, _ theirsEnd: Int) {
            let baseChunk = base[b..<baseEnd], mineChunk = mine[m..<mineEnd], theirsChunk = theirs[t..<theirsEnd]
            if mineChunk.elementsEqual(theirsChunk) || theirsChunk.elementsEqual(baseChunk) {
                output += mineChunk
            } else if mineChunk.elementsEqual(baseChunk) {
                output += theirsChunk
            } else {
                conflicts += 1
                output.append("<<<<<<< \(currentLabel)")
                output += mineChunk
                output.append("=======")
                output += theirsChunk
                output.append(">>>>>>> \(otherLabel)")
            }
        }
        // Lines of the ancestor that both sides kept are fixed points; between them, settle.
        for index in base.indices {
            guard let inMine = toMine[index], let inTheirs = toTheirs[index], inMine >= m, inTheirs >= t else { continue }
            settle(index, inMine, inTheirs)
            output.append(base[index])
            (b, m, t) = (index + 1, inMine + 1, inTheirs + 1)
        }
        settle(base.count, mine.count, theirs.count)
        return Result(text: output.joined(separator: "\n"), conflicts: conflicts)
    }

    static func lines(_ text: String) -> [Substring] {
        text.split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// The lines `a` and `b` share, in order (a longest common subsequence).
    static func common(_ a: [Substring], _ b: [Substring]) -> [Substring] {
        let pairs = matches(a, b)
        return a.indices.compactMap { pairs[$0] == nil ? nil : a[$0] }
    }

    /// For each line of `a`, the line of `b` it is matched with in a longest common
    /// subsequence (Myers' O(ND) difference algorithm), or nil.
    static func matches(_ a: [Substring], _ b: [Substring]) -> [Int?] {
        let n = a.count, m = b.count
        var result = [Int?](repeating: nil, count: n)
        // Common prefix and suffix first: the usual case is a few changed lines.
        var start = 0
        while start < n && start < m && a[start] == b[start] { result[start] = start; start += 1 }
        var endA = n, endB = m
        while endA > start && endB > start && a[endA - 1] == b[endB - 1] {
            endA -= 1; endB -= 1
            result[endA] = endB
        }
        let x = Array(a[start..<endA]), y = Array(b[start..<endB])
        let (xn, yn) = (x.count, y.count)
        guard xn > 0 && yn > 0 else { return result }
        let maxD = xn + yn
        let offset = maxD
        var v = [Int](repeating: 0, count: 2 * maxD + 2)
        var trace: [[Int]] = []
        search: for d in 0...maxD {
            trace.append(v)
            for k in stride(from: -d, through: d, by: 2) {
                var i = (k == -d || (k != d && v[offset + k - 1] < v[offset + k + 1])) ? v[offset + k + 1] : v[offset + k - 1] + 1
                var j = i - k
                while i < xn && j < yn && x[i] == y[j] { i += 1; j += 1 }
                v[offset + k] = i
                if i >= xn && j >= yn { trace.append(v); break search }
            }
        }
        // Walk the trace back, recording the diagonal (matching) moves.
        var i = xn, j = yn
        for d in stride(from: trace.count - 2, through: 0, by: -1) {
            let previous = trace[d]
            let k = i - j
            let previousK = (k == -d || (k != d && previous[offset + k - 1] < previous[offset + k + 1])) ? k + 1 : k - 1
            let previousI = previous[offset + previousK]
            let previousJ = previousI - previousK
            while i > previousI && j > previousJ {
                i -= 1; j -= 1
                result[start + i] = start + j
            }
            if d > 0 { (i, j) = (previousI, previousJ) }
        }
        return result
    }
}
