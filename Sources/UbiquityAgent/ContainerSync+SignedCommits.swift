import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

// Signed commits (issue 45, docs/Encryption.md "Signed commits"): once a batch's answer is in,
// a device whose records go sealed signs what the server made of it, keeps the commit in the
// transaction that records the answer, and sends it; what it could not send goes with the next
// round.
extension ContainerSync {
    /// One change the server made of this device's batch, as a commit names it.
    struct MadeChange {
        var item: String
        var folder: String?
        /// The sealed record sent (nil: none, a deletion).
        var record: Data?
        var revision: String
        var base: String?
        var deleted: Bool
        var conflict: Bool
        /// The container's sequence the server made it at.
        var sequence: Int64
    }

    /// What this device has read of the container's signed commits: every device's chain as
    /// its ledger accepted it, where it read up to, and the signed changes past its cursor.
    struct SignedHistory {
        var ledger: CommitLedger
        /// The place in the server's record of commits read up to.
        var position: Int64 = 0
        /// The container sequences of signed changes past the cursor, by item.
        var pending: [String: [Int64]] = [:]
    }

    /// The SHA-256 of each state's sealed record (32 zero bytes: none), by item: what a signed
    /// commit names of it, taken before the records are opened (and dropped).
    static func recordHashes(of states: [ItemState]) -> [String: [UInt8]] {
        Dictionary(states.map { ($0.id, CommitContent.recordHash(of: $0.record)) }, uniquingKeysWith: { $1 })
    }

    /// The signed commit of `made` after this device's last (nil: this device does not sign —
    /// no keys, or its records are not sealed — or nothing was made and it is not `closing`).
    func signedCommit(of made: [MadeChange], closing: Bool = false) throws -> (commit: SignedCommit, content: CommitPayload)? {
        guard let signer = codec.signer, codec.records?.seals == true, !made.isEmpty || closing else { return nil }
        let content = CommitContent(outcomes: made.map {
            CommitContent.Outcome(item: $0.item, folder: $0.folder, recordHash: CommitContent.recordHash(of: $0.record), revision: $0.revision,
                                  base: $0.base, deleted: $0.deleted, conflict: $0.conflict, sequence: $0.sequence)
        })
        // (After a commit whose write failed, if there is one: it goes first.)
        return (try signer.sign(content, container: container, after: try unsavedSigned.last?.commit ?? lastSignedCommit(), seen: seenHeads(of: signer)),
                .changes(content))
    }

    /// The other devices' heads as this device accepted them, which its next commit names: a
    /// device shown that commit but not one of those (a server hiding it from some devices)
    /// refuses it. At most ``SignedCommit/maximumSeen``, the chains of ended terms first (a
    /// closing commit names where it closes them).
    func seenHeads(of signer: CommitSigner) -> [String: CommitHead] {
        var seen = (signedHistory?.ledger.heads ?? [:]).filter { $0.key != signer.device }
        if seen.count > SignedCommit.maximumSeen {
            let ended = Set((signer.roster?.endedTerms ?? []).map(\.signer))
            seen = Dictionary(uniqueKeysWithValues: seen.sorted { (ended.contains($0.key) ? 1 : 0, $0.value.sequence) > (ended.contains($1.key) ? 1 : 0, $1.value.sequence) }
                .prefix(SignedCommit.maximumSeen).map { ($0.key, $0.value) })
        }
        return seen
    }

    /// Signs what a resolution the server answered made — the kept revision current at a new
    /// sequence, the other versions gone — as any change of this device is signed (`answer` as
    /// it came, its record sealed; `replaced`: the revision that was current before, the base
    /// unless it is the one kept), keeps the commit with the state learnt and sends it. The
    /// resolution is made either way: a failure is logged (a commit whose write failed goes
    /// with the next write, as a batch's does).
    func signResolution(_ answer: ItemState, replaced: String?) async {
        let made = MadeChange(item: answer.id, folder: answer.parent, record: answer.record, revision: answer.revision,
                              base: replaced == answer.revision ? nil : replaced, deleted: answer.deleted, conflict: false, sequence: answer.sequence)
        do {
            guard let signed = try signedCommit(of: [made]) else { return }
            try await persist(signed: signed)
        } catch {
            logger.error("a resolution could not be signed", metadata: ["container": "\(container)", "item": "\(answer.id)", "error": "\(error)"])
            return
        }
        await sendSignedCommits()
    }

    /// This device's newest signed commit here (read from the store the first time).
    func lastSignedCommit() throws -> SignedCommit? {
        if let head = signedHead { return head }
        let head = try store.lastSignedCommit(of: storeKey).map { try SignedCommit(encoded: $0) }
        signedHead = .some(head)
        return head
    }

    /// Sends the signed commits the server has not said it keeps, oldest first. A failure is
    /// logged and left for the next round (the commits stay in the store).
    func sendSignedCommits() async {
        do {
            while true {
                let unsent = try store.unsentSignedCommits(of: storeKey, limit: SignedCommitsRequest.maximumCount)
                guard !unsent.isEmpty else { return }
                let positions = try await client.sendSignedCommits(container: container, unsent.map(\.upload))
                try await store.markSent(zip(unsent, positions).map { (sequence: $0.sequence, position: $1) }, of: storeKey)
                // A commit of this device the ledger has not read, kept at or before the place
                // it read up to: the server's record of commits began again (restored from a
                // backup, moved to another database). What was read is forgotten, and read
                // again from the start: else the commits at places already passed went unread.
                if let history = signedHistory, let device = codec.signer?.device,
                   zip(unsent, positions).contains(where: { $1 <= history.position && (history.ledger.heads[device]?.sequence ?? 0) < UInt64(clamping: $0.sequence) }) {
                    logger.warning("the server's record of signed commits began again; reading it from the start", metadata: ["container": "\(container)"])
                    signedHistory = nil
                    signedHistoryChanges += 1
                }
            }
        } catch {
            logger.warning("signed commits not sent", metadata: ["container": "\(container)", "error": "\(error)"])
        }
    }

    /// Checks a page of changes (after `cursor`, complete up to `high`; `final`: the last page
    /// of this fetch) against the signed commits, and returns the states of items it had to ask
    /// for by id (to be taken with the page). The commits kept since the last look are read and
    /// accepted by the ledger first: a forged, withheld, forked or replayed commit refuses the
    /// page. Then each signed change up to `high` must be reflected: a page that shows its item
    /// as of an earlier sequence serves an older state again (`replayed`); one that leaves it out
    /// (the last page, or a change the cursor is already past: its commit came late) has the
    /// item asked for by id, and refused if the server still shows it older — or leaves out an
    /// item this device has alive (only deleted items are ever collected). Nothing to check
    /// without the account's roster. `readUpTo`: where the container's signed commits end, as
    /// the push that brought the page said (none past it: none is asked for).
    /// - Throws: ``EncryptionError`` naming what failed; the server's errors.
    func checkSigned(_ items: [ItemState], recordHashes: [String: [UInt8]], since cursor: Int64, upTo high: Int64, final: Bool, readUpTo end: Int64? = nil) async throws -> [ItemState] {
        guard var history = try await readSignedCommits(knownEnd: end) else { return items }
        let read = history.pending
        let shown = Dictionary(items.map { ($0.id, $0.sequence) }, uniquingKeysWith: max)
        func known(_ item: String) -> Int64 { state.persisted.remote[item]?.sequence ?? Int64.min }
        var missing: [String: Int64] = [:]
        for (item, sequences) in history.pending {
            for sequence in sequences where sequence <= high {
                if let at = shown[item] {
                    guard at >= sequence else { throw Self.hidden(item, sequence, shownAt: at, upTo: high) }
                } else if known(item) < sequence, final || sequence <= cursor {
                    missing[item] = max(missing[item] ?? sequence, sequence)
                }
            }
        }
        var fetched: [ItemState] = []
        var hashes = recordHashes
        // A state held back until a commit named it, as new as the signed change: taken as it
        // came (whether the commit names it is checked below, as for any state).
        let heldNow = missing.compactMap { item, sequence in awaitingSignature[item].flatMap { $0.state.sequence >= sequence ? $0 : nil } }
        if !heldNow.isEmpty {
            let latest = try latestOutcomes(of: heldNow.map(\.state.id))
            for held in heldNow where isCovered(held.state, recordHash: held.recordHash, named: latest[held.state.id]) {
                fetched.append(held.state)
                hashes[held.state.id] = held.recordHash
                missing[held.state.id] = nil
            }
        }
        let asked = Array(missing.keys)
        for start in stride(from: 0, to: asked.count, by: ItemsFetchRequest.maximumCount) {
            let raw = try await client.items(container: container, ids: Array(asked[start..<min(asked.count, start + ItemsFetchRequest.maximumCount)]))
            hashes.merge(Self.recordHashes(of: raw)) { $1 }
            fetched += try opened(raw)
        }
        let got = Dictionary(fetched.map { ($0.id, $0.sequence) }, uniquingKeysWith: max)
        for (item, sequence) in missing {
            if let at = got[item] {
                guard at >= sequence else { throw Self.hidden(item, sequence, shownAt: at, upTo: high) }
            } else if let had = state.persisted.remote[item], !had.deleted {
                throw Self.hidden(item, sequence, shownAt: nil, upTo: high)
            } // (else: a deleted item the server has since collected)
        }
        let taken = try uncoveredHeldBack(items + fetched, recordHashes: hashes)
        let takenAt = Dictionary(taken.map { ($0.id, $0.sequence) }, uniquingKeysWith: max)
        // What is reflected now is not looked at again — but a deletion held back is not taken:
        // its item is asked for again next round, and the truth, once told, is taken.
        for (item, sequences) in history.pending {
            let reflected = max(takenAt[item] ?? Int64.min, known(item))
            let collected = missing[item] != nil && got[item] == nil
            let left = sequences.filter { $0 > high || ($0 > reflected && !collected) }
            history.pending[item] = left.isEmpty ? nil : left
        }
        signedHistory = history
        if history.pending != read { signedHistoryChanges += 1 } // (the store keeps it again)
        return taken
    }

    /// `states` without those no signed commit covers, under Advanced (docs/Encryption.md,
    /// "Coverage under Advanced"): the server holds no key there, yet it could serve a genuine
    /// older record again under a new revision or sequence (rolling a file back on every
    /// device), or a deletion, which carries no record, of any item. So a state of an item a
    /// commit this device accepted has named, and any deletion of an item it holds alive, is
    /// taken only when the latest signed outcome of the item names exactly it — its revision and
    /// the hash of its sealed record, or its deletion. One not covered is **held back**: not
    /// taken, the local file kept, logged; the signed change it stands for is not counted as
    /// reflected, so once its commit is read (usually a few milliseconds behind the state) the
    /// state held is taken as it came if the commit names it, and otherwise the item is asked
    /// for again by id, and the truth, once told, is taken. Items no commit ever
    /// named (from before devices signed) are taken as they are; under Standard nothing is held
    /// back (the escrow signs whatever the server makes).
    func uncoveredHeldBack(_ states: [ItemState], recordHashes: [String: [UInt8]]) throws -> [ItemState] {
        guard codec.signer?.roster?.custody == .advanced, !states.isEmpty else { return states }
        let latest = try latestOutcomes(of: states.map(\.id))
        var taken: [ItemState] = []
        var held: [String] = []
        for state in states {
            let hash = recordHashes[state.id] ?? CommitContent.recordHash(of: nil)
            if isCovered(state, recordHash: hash, named: latest[state.id]) {
                taken.append(state)
                awaitingSignature[state.id] = nil
            } else {
                held.append(state.id)
                awaitingSignature[state.id] = (state, hash)
            }
        }
        if !held.isEmpty {
            logger.notice("states no signed commit names yet are held back: the files stay as they are until one does",
                          metadata: ["container": "\(container)", "items": "\(held.count)", "first": "\(held[0])"])
        }
        return taken
    }

    /// Each of `items`' latest signed outcome: kept in the store, or read since the last write.
    func latestOutcomes(of items: [String]) throws -> [String: SignedOutcome] {
        var latest = try store.signedOutcomes(of: storeKey, items: items)
        for item in items {
            if let unsaved = unsavedOutcomes[item], unsaved.sequence > latest[item]?.sequence ?? Int64.min { latest[item] = unsaved }
        }
        return latest
    }

    /// Whether `state` (its sealed record hashing to `recordHash`) may be taken under Advanced,
    /// `named` being its item's latest signed outcome (``uncoveredHeldBack(_:recordHashes:)``).
    func isCovered(_ state: ItemState, recordHash: [UInt8], named: SignedOutcome?) -> Bool {
        let had = self.state.persisted.remote[state.id]
        // (What this device already holds as it is: nothing to take or hold.)
        if let had, had.revision == state.revision, had.deleted == state.deleted { return true }
        if state.deleted {
            let holdsAlive = had.map { !$0.deleted } ?? false
            return !holdsAlive || (named.map { $0.deleted && $0.revision == state.revision } ?? false)
        }
        guard let named, named.recordHash != Data(count: 32) || named.deleted else {
            return true // (never named by a sealed commit: from before devices signed)
        }
        return !named.deleted && named.revision == state.revision && Data(recordHash) == named.recordHash
    }

    /// Reads the commits kept since the last look into the ledger (the store's checkpoint
    /// first, at the first look of this run) and returns what this device now holds of the
    /// container's history (nil: nothing to read without the account's roster).
    /// - Throws: ``EncryptionError`` for a forged, withheld, forked or replayed commit (after a
    ///   withheld or forked one the history is read from the start next time); the server's errors.
    ///
    /// `knownEnd`: where the commits end, as a push said; when this device has read up to
    /// there, nothing is asked (a server that says less than it keeps withholds, as it could by
    /// answering with less: the heads later commits name show it).
    func readSignedCommits(knownEnd: Int64? = nil) async throws -> SignedHistory? {
        guard var roster = codec.signer?.roster else { return nil }
        var rosterRead = false
        // (The store's checkpoint at the first look of this run only: later, nil means the
        // history was forgotten, and the checkpoint with it at the next write.)
        if signedHistory == nil, !signedHistoryLoaded { signedHistory = keptSignedHistory() }
        signedHistoryLoaded = true
        var history = signedHistory ?? SignedHistory(ledger: CommitLedger(container: container))
        let before = signedHistory
        // (The store keeps it again only if what was read, or is still to be checked, moved.)
        defer {
            if signedHistory?.position != before?.position || signedHistory?.pending != before?.pending || signedHistory?.ledger.heads != before?.ledger.heads {
                signedHistoryChanges += 1
            }
        }
        if let knownEnd, history.position >= knownEnd {
            signedHistory = history
            return history
        }
        while true {
            let page = try await client.signedCommits(container: container, after: history.position)
            // The commits after the place read up to were dropped: the page starts at the
            // checkpoint that replaced them, whose first part gives the history's state there.
            let jumpTo = page.checkpoint.flatMap { $0 > history.position + 1 ? $0 : nil }
            for stored in page.commits {
                let commit = try SignedCommit(encoded: stored.commit)
                let content = try CommitPayload(encoded: stored.content)
                guard content.hash == commit.contentHash else {
                    throw EncryptionError(.authenticationFailed, "the content of commit \(commit.sequence) of device \(commit.device) is not what it signed")
                }
                do {
                    func take(_ roster: Roster) throws {
                        if stored.position == jumpTo {
                            guard case .checkpoint(let part) = content else {
                                throw EncryptionError(.withheld, "the server dropped commits \(history.position + 1)–\(stored.position - 1) without a checkpoint in their place")
                            }
                            try history.ledger.adopt(commit, part: part, roster: roster)
                        } else {
                            _ = try history.ledger.accept(commit, roster: roster)
                        }
                    }
                    do {
                        try take(roster)
                    } catch let error as EncryptionError where error.code == .rosterNotExtended && !rosterRead {
                        // A commit naming a roster entry past this device's: a device joined
                        // since the keys were read. The roster is read again — it must extend
                        // this one — and the commit checked against it.
                        rosterRead = true
                        roster = try await extended(roster)
                        try take(roster)
                    }
                    signedCommitsRead += 1
                } catch let error as EncryptionError where [.withheld, .forked].contains(error.code) {
                    // The server kept commits back, or showed another history: what was read
                    // may have passed the place of a commit it hid. Read from the start next
                    // time, so that once it tells the truth the whole history is taken.
                    signedHistory = nil
                    throw error
                }
                if case .checkpoint = content { checkpointsRead += 1 }
                for outcome in content.outcomes {
                    // (A checkpoint restates outcomes: nothing new for a page to show.)
                    if case .changes = content { history.pending[outcome.item, default: []].append(outcome.sequence) }
                    // (A conflict version kept beside the current revision does not replace it.)
                    if !outcome.conflict, outcome.sequence > unsavedOutcomes[outcome.item]?.sequence ?? Int64.min {
                        unsavedOutcomes[outcome.item] = SignedOutcome(item: outcome.item, revision: outcome.revision, recordHash: Data(outcome.recordHash),
                                                                      sequence: outcome.sequence, deleted: outcome.deleted)
                    }
                }
                history.position = stored.position
            }
            if !page.more { checkpointDue = page.checkpointDue == true }
            guard page.more, !page.commits.isEmpty else { break }
        }
        // (Kept before checking: what was read stays read, whatever the page turns out to be.)
        signedHistory = history
        return history
    }

    /// Closes the chains of the terms that ended (a device removed, the escrow key replaced or
    /// gone with the switch to Advanced) here: once the roster this device holds shows one that
    /// no closing commit of the container closes yet, it reads the container's commits and
    /// signs a closing commit naming the heads it read — past which every ledger refuses what
    /// those keys sign in their closed terms (`CommitLedger.closings`). Nothing to do for a
    /// device that does not sign. A failure is logged and tried again next round.
    func closeEndedTerms() async {
        guard let roster = codec.signer?.roster, codec.records?.seals == true, !roster.endedTerms.isEmpty else { return }
        if signedHistory == nil, !signedHistoryLoaded {
            signedHistory = keptSignedHistory()
            signedHistoryLoaded = true
        }
        func unclosed() -> Set<Roster.EndedTerm> {
            (signedHistory?.ledger ?? CommitLedger(container: container)).unclosed(in: roster).subtracting(closingsSigned)
        }
        guard !unclosed().isEmpty else { return }
        do {
            // What the others closed, and every commit of the terms that ended (all kept
            // before the roster entry that ended them: the server keeps none after).
            _ = try await readSignedCommits()
            let closing = unclosed()
            guard !closing.isEmpty, let signed = try signedCommit(of: [], closing: true) else { return }
            try await persist(signed: signed)
            closingsSigned.formUnion(closing)
            logger.info("closed the chains of ended terms", metadata: ["container": "\(container)", "terms": "\(closing.count)"])
        } catch {
            logger.warning("ended terms not closed yet", metadata: ["container": "\(container)", "error": "\(error)"])
            return
        }
        await sendSignedCommits()
    }

    /// The account's roster as the server serves it now, checked entry by entry and required
    /// to extend `roster` (a roster rolled back, forked or rewritten behind it is refused).
    /// - Throws: ``EncryptionError`` naming the rule broken; the server's errors.
    func extended(_ roster: Roster) async throws -> Roster {
        let directory = try await client.keyDirectory(for: [])
        return try Roster.verify(try directory.roster.map { try RosterEntry(encoded: $0) }, pinned: roster.head)
    }

    /// What the store kept of the container's signed commits, as this device had read them
    /// (nil: nothing kept; a row that does not read is logged and the commits read from the
    /// start).
    func keptSignedHistory() -> SignedHistory? {
        do {
            guard let kept = try store.ledgerCheckpoint(of: storeKey) else { return nil }
            let ledger = try CommitLedger(encoded: kept.ledger, container: container)
            let pending = try JSONDecoder().decode([String: [Int64]].self, from: kept.pending)
            return SignedHistory(ledger: ledger, position: kept.position, pending: pending)
        } catch {
            logger.warning("the kept ledger of signed commits does not read; reading them from the start", metadata: ["container": "\(container)", "error": "\(error)"])
            return nil
        }
    }

    /// What the store is to keep of the signed commits read with the next write: nil if it
    /// kept the latest already; `.some(nil)` to forget it (the history is read from the start).
    func ledgerCheckpointToKeep() -> LedgerCheckpoint?? {
        guard signedHistoryChanges != signedHistoryKept else { return nil }
        guard let history = signedHistory else { return .some(nil) }
        do {
            let pending = try JSONEncoder().encode(history.pending)
            return .some(LedgerCheckpoint(position: history.position, ledger: history.ledger.encoded(), pending: pending))
        } catch {
            return .some(nil) // (a dictionary of texts and numbers always encodes)
        }
    }

    /// The refusal of a page that hides the signed change of `item` made at `sequence`.
    private static func hidden(_ item: String, _ sequence: Int64, shownAt: Int64?, upTo high: Int64) -> EncryptionError {
        EncryptionError(.replayed, "the server shows item \(item) " + (shownAt.map { "as of \($0)" } ?? "not at all") + " (up to \(high)), "
                        + "but a device signed a change of it at \(sequence): an older state served again, or a change hidden")
    }
}
