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
        if let records = codec.records { return try records.opened(state) }
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
