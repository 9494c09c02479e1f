/// The document's change count, kept as identities of content states so that undoing back to
/// the saved state makes the document clean again, and an edit made during a save keeps it dirty.
struct ChangeTracker {
    private(set) var current = 0
    private(set) var saved = 0
    private var nextIdentity = 1
    private var undoHistory: [Int] = []
    private var redoHistory: [Int] = []
    private static let historyLimit = 100_000

    var isDirty: Bool { current != saved }

    mutating func record(_ kind: Document.ChangeKind) {
        switch kind {
        case .done:
            undoHistory.append(current)
            if undoHistory.count > Self.historyLimit { undoHistory.removeFirst(undoHistory.count - Self.historyLimit) }
            redoHistory.removeAll()
            current = fresh()
        case .undone:
            redoHistory.append(current)
            current = undoHistory.popLast() ?? fresh()
        case .redone:
            undoHistory.append(current)
            current = redoHistory.popLast() ?? fresh()
        case .cleared:
            saved = current
        }
    }

    /// Marks the state identified by `token` as saved.
    mutating func markSaved(_ token: Int) { saved = token }

    private mutating func fresh() -> Int {
        defer { nextIdentity += 1 }
        return nextIdentity
    }
}
