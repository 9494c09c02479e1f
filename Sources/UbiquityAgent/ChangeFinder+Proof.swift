import Foundation
import UbiquityProtocol
import UbiquitySync

// Whether a file whose chunk list differs from its record's holds the same bytes: contents cut
// elsewhere (by another device's chunker — one that does not seal, an earlier epoch's — or
// sealed in place by the server) are not an edit made here.
extension ChangeFinder {
    /// A file that may hold its item's contents on the server though its chunk list differs: a
    /// download put in place and not recorded (the agent stopped between), the list cut
    /// elsewhere — by another device's chunker (one that does not seal, an earlier epoch's) or
    /// sealed in place by the server. Found by `ubiquity-chaos` with sealed contents on: taken
    /// for a new item, the file clashed with the item itself and was kept as "Name 2".
    struct Unproven {
        /// Where the file is.
        var path: String
        /// The item it may be.
        var item: String
        /// The item's revision on the server, as this device knows it.
        var revision: String
        /// The file's fingerprint and its contents as cut here.
        var print: LocalFingerprint
        var content: ContentToken
        /// For a file not recorded: the item shown here's file recorded elsewhere (gone or
        /// untouched there), the file's name and folder. Nil: a recorded file changed.
        var arrived: (leftover: String?, name: String, parent: String?)?
    }

    /// What a file was proven to hold.
    enum Proof {
        /// Its item's present state on the server.
        case current(ItemState)
        /// The revision this device knows, which the server has moved on from since (the next
        /// fetch says to what): its contents are that revision's, not an edit made here.
        case known(revision: String, manifest: Manifest, kind: ItemKind)
        /// Not known yet: the server could not be asked about it now (the next look asks).
        case undecided
    }

    /// At most this many files a look checks against a revision the server has moved on from
    /// (a request each); the others stay as they were recorded, for the next look.
    static let olderRevisionsChecked = 64

    /// Of `unproven`, what each file holds, by item: its item's present state (fetched by id, a
    /// thousand a request, opened as any page's, and the file's bytes checked at each list's cut
    /// points: ``LocalContents/holds(_:kind:manifest:scanner:relative:codec:)``) — only when that
    /// is the revision this device knows; or, when the server moved on since, that known
    /// revision's contents (fetched each), so that bytes this device was sent are not sent back
    /// as an edit on a stale base. A record that does not open proves nothing. Nil: the server
    /// could not be asked (nothing is decided; the next look asks again).
    func proven(_ unproven: [Unproven], in sync: isolated ContainerSync) async -> [String: Proof]? {
        var held: [String: Proof] = [:]
        var movedOn: [Unproven] = []
        var start = 0
        while start < unproven.count {
            let group = Array(unproven[start..<min(unproven.count, start + ItemsFetchRequest.maximumCount)])
            start += group.count
            let fetched: [ItemState]
            do {
                fetched = try await sync.client.items(container: sync.container, ids: group.map(\.item))
            } catch {
                sync.logger.warning("cannot ask the server whether files hold its contents", metadata: ["container": "\(sync.container)", "error": "\(error)"])
                return nil
            }
            var states: [String: ItemState] = [:]
            for state in fetched {
                do { states[state.id] = try sync.opened(state) } catch {
                    sync.logger.error("an item's record was refused", metadata: ["container": "\(sync.container)", "item": "\(state.id)", "error": "\(error)"])
                }
            }
            for file in group {
                guard let state = states[file.item], state.kind == file.print.kind else { continue }
                guard state.revision == file.revision else {
                    movedOn.append(file) // (deleted since, too: unchanged bytes do not bring it back)
                    continue
                }
                guard state.uploaded, !state.deleted, holds(file, manifest: state.manifest, kind: state.kind, in: sync) else { continue }
                held[file.item] = .current(state)
            }
        }
        for (index, file) in movedOn.enumerated() {
            guard index < Self.olderRevisionsChecked else {
                held[file.item] = .undecided // (the next look asks)
                continue
            }
            var contents: RevisionContentsResponse
            do {
                contents = try await sync.client.revision(container: sync.container, item: file.item, revision: file.revision)
            } catch let error as SyncClientError where error.status == 404 {
                continue // (that revision is no longer kept: nothing proves the bytes are it)
            } catch {
                sync.logger.warning("cannot ask the server whether files hold its contents", metadata: ["container": "\(sync.container)", "error": "\(error)"])
                for file in movedOn[index...] { held[file.item] = .undecided }
                break
            }
            if contents.record != nil {
                do {
                    guard let records = sync.records(of: file.item) else { continue }
                    contents = try records.opened(contents, item: file.item)
                } catch {
                    sync.logger.error("an item's record was refused", metadata: ["container": "\(sync.container)", "item": "\(file.item)", "error": "\(error)"])
                    continue
                }
            }
            guard contents.uploaded, contents.kind == file.print.kind, holds(file, manifest: contents.manifest, kind: contents.kind, in: sync) else { continue }
            held[file.item] = .known(revision: file.revision, manifest: contents.manifest, kind: contents.kind)
        }
        return held
    }

    /// Whether the bytes at `file`'s path are exactly what `manifest` lists.
    private func holds(_ file: Unproven, manifest: Manifest, kind: ItemKind, in sync: isolated ContainerSync) -> Bool {
        LocalContents.holds(sync.root.appendingPathComponent(file.path), kind: kind, manifest: manifest, scanner: sync.scanner,
                            relative: file.path, codec: sync.codec(at: file.path))
    }

    /// For a recorded file whose bytes were cut here into another list than its record's:
    /// true when they are the record's contents still (the list it knows was cut elsewhere, and
    /// the bytes read at its cut points are it); false when they are taken for an edit; nil
    /// when this device cannot tell alone (the server is asked).
    /// Taken for an edit without reading anything: a flat file whose size changed; any file on a
    /// device that opens only plaintext chunks (every list it holds was cut as it cuts); a list
    /// sharing a chunk with the record's (the same chunker: what differs, changed); and, when
    /// the record's list is not kept, a file whose item this device knows as the server has it
    /// now (pushes live and caught up with since they came up, nothing heard of beyond what was
    /// fetched): the edit's base is current, and unchanged bytes sent again change nothing.
    func unchanged(_ record: AgentStore.File, now content: ContentToken, print: LocalFingerprint, in sync: isolated ContainerSync) -> Bool? {
        if print.kind == .file, print.size != record.fingerprint.size { return false }
        let codec = sync.codec(at: record.path)
        guard codec.opensSealed else { return false }
        guard let known = sync.localContents[record.content] else {
            // (Not while a fetch is due: pushes that have just come up, after a start or a
            // reconnection, have said nothing of what changed before them — found by
            // `ubiquity-chaos`: an agent restarted with its push connection up before its
            // first look sent hundreds of unchanged files as edits on stale bases.)
            return sync.pushesLive && !sync.fetchDue && sync.heardOf <= sync.state.persisted.cursor ? false : nil
        }
        let cut = Set((sync.localContents[content] ?? []).flatMap { $0.chunks.map(\.hash) })
        if known.contains(where: { $0.chunks.contains { cut.contains($0.hash) } }) { return false }
        return LocalContents.holds(sync.root.appendingPathComponent(record.path), kind: print.kind, manifest: LocalContents.manifest(known, kind: print.kind),
                                   scanner: sync.scanner, relative: record.path, codec: codec)
    }

    /// Says at debug level why a recorded file's bytes are taken for an edit made here: what
    /// its record and the server's state (as this device knows it) say of it.
    func noteEdit(_ record: AgentStore.File, print: LocalFingerprint, in sync: isolated ContainerSync) {
        let remote = sync.state.persisted.remote[record.item]
        sync.logger.debug("bytes taken for an edit made here", metadata: [
            "path": "\(record.path)", "item": "\(record.item)", "recorded": "\(record.revision ?? "none")", "known": "\(remote?.revision ?? "none")",
            "size": "\(record.fingerprint.size)→\(print.size)", "pending": "\(sync.state.hasLocalChanges(record.item))",
        ])
    }
}
