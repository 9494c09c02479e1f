import UbiquityProtocol
import UbiquitySync

// Sealed item records at the client's edge (docs/Encryption.md, "Sealed item records"): every
// state the server sends is opened and checked here before the sync engine sees it.
extension ContainerSync {
    /// `state` as its device made it: its sealed records opened and checked (``ItemRecords``);
    /// as it is when nothing of it is sealed.
    /// - Throws: ``ItemRecordError`` for a record that does not open or does not fit what the
    ///   server says beside it (nothing of the answer is used), or one this device cannot open.
    func opened(_ state: ItemState) throws -> ItemState {
        if let records = codec.records {
            if let share, state.id == share.root, state.record != nil {
                // A sealed share's top item: shown under this device's name for it, once opened.
                var opened = try records.opened(state)
                if !opened.deleted { opened.name = share.name }
                return opened
            }
            guard !ownedShareCodecs.isEmpty else { return try records.opened(state) }
            let opened: ItemState
            do {
                opened = try records.opened(state)
            } catch {
                return try openedInOwnedShare(state, failure: error)
            }
            noteSealedBeforeSharing(state)
            return opened
        }
        guard state.record == nil, !state.conflicts.contains(where: { $0.record != nil }) else {
            throw ItemRecordError(item: state.id, reason: "it is sealed and this device holds no key of the account")
        }
        return state
    }

    /// Each of `states` opened (``opened(_:)-(ItemState)``).
    func opened(_ states: [ItemState]) throws -> [ItemState] { try states.map(opened) }

    /// A commit's answer with its item opened.
    func opened(_ answer: CommitResponse) throws -> CommitResponse {
        var answer = answer
        answer.item = try opened(answer.item)
        return answer
    }
}

// MARK: Mapping

extension ContainerSync {
    /// What the sync decisions keep of an item the server sent.
    static func snapshot(_ item: ItemState) -> ItemSnapshot {
        ItemSnapshot(id: item.id, revision: item.revision, name: item.name, content: item.digest.map { ContentToken($0) } ?? LocalContents.token(item.manifest, kind: item.kind),
                     deleted: item.deleted, sequence: item.sequence,
                     conflicts: item.conflicts.map { ConflictSnapshot(revision: $0.revision, content: $0.digest.map { ContentToken($0) } ?? LocalContents.token($0.manifest, kind: item.kind)) },
                     size: item.size, modificationDate: item.modificationDate, parent: item.parent, kind: item.kind, editor: item.editor)
    }

    /// The person a revision is named for — Apple's originator and most recent editor — from
    /// its ``ItemState/editor``: the participant who made it, or through a share the owner
    /// when none is named; nil when this account made it (as Apple's).
    func otherPerson(_ editor: String?) -> String? {
        guard let maker = editor ?? share?.owner, maker != account else { return nil }
        return maker
    }

    /// The person who made the current revision of `item` as this device last heard, when that
    /// is another person (``otherPerson(_:)``).
    func otherPerson(of item: String) -> String? {
        guard let remote = state.persisted.remote[item] else { return nil }
        return otherPerson(remote.editor)
    }
}
