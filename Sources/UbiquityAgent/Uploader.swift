import Foundation
import NIOCore
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// Sends a container's local changes, for ``ContainerSync``: as commits in batches, each
/// preceded by the chunks of its contents the server lacks (the server keeps no revision whose
/// chunks it does not hold), in shared batches, and changed chunks of contents the server has
/// as patches of the chunks they replace.
///
/// One of the rooms of a container's sync (see ``ChangeFinder``). It keeps nothing between
/// rounds: what it sends comes from the sync decisions and the records of local files, and
/// what the server answered goes back into them.
struct Uploader {
    /// How many changes one commit request carries.
    static let commitBatchSize = 500

    /// Sends local changes: many in one commit request (each as a difference from its base
    /// revision's chunk list where that list is known here), just after the chunks of their
    /// contents the server lacks, read back from the files and checked, so contents changed
    /// since the scan are never sent under the old hash (their commit is refused, and the next
    /// scan sends what they became). A change the server refuses, or that gets no answer, stays for
    /// the next round, and its error is shown. Returns the container sequences of the commits
    /// the server made.
    @discardableResult
    func send(_ changes: [LocalChange], in sync: isolated ContainerSync) async throws -> [Int64] {
        var start = 0, sequences: [Int64] = []
        while start < changes.count {
            let batch = Array(changes[start..<min(changes.count, start + Self.commitBatchSize)])
            start += batch.count
            defer { sync.statusVersion &+= 1 }
            guard try await send(batch, deltas: true, sequences: &sequences, in: sync) else {
                // The server is not answering: the rest waits for the next round too.
                for change in changes[start...] { sync.state.failed(.commit(change)) }
                break
            }
        }
        return sequences
    }

    /// Sends one batch of changes, adding the sequences of the commits made to `sequences`;
    /// false if the server did not answer. Changes refused for chunks the server turned out
    /// to lack (collected, or damaged, since it was asked) go once more after those chunks,
    /// unless `retrying`.
    private func send(_ batch: [LocalChange], deltas: Bool, retrying: Bool = false, sequences: inout [Int64], in sync: isolated ContainerSync) async throws -> Bool {
        // `plain`: each update as this device made it; `commits`: as it goes (its record sealed).
        var sent: [(change: LocalChange, members: [LocalMember])] = [], commits: [ItemCommit] = [], plain: [ItemUpdate] = []
        var inlineBytes = 0, inlinedItems = Set<String>()
        for change in batch {
            let members: [LocalMember]
            do {
                members = change.deleted ? [] : try contents(for: change, in: sync)
            } catch {
                // Unreadable now (removed meanwhile, no permission): the next scan says what it became.
                sync.state.failed(.commit(change))
                sync.errors[change.item] = "cannot read it: \(error)"
                continue
            }
            var update: ItemUpdate
            var inlined = false
            // A small file's bytes go with its commit (as a whole chunk list: a delta would save nothing).
            if inlineBytes < Self.commitInlineBytes, let contents = inlineContents(of: change, members: members, in: sync) {
                update = self.update(for: change, members: members, delta: false, in: sync)
                update.contents = contents
                inlineBytes += contents.count
                inlined = true
            } else {
                update = self.update(for: change, members: members, delta: deltas, in: sync)
            }
            do {
                commits.append(ItemCommit(item: change.item, update: try wire(update, of: change.item, members: members, in: sync)))
            } catch {
                sync.state.failed(.commit(change))
                sync.errors[change.item] = "cannot seal its record: \(error)"
                continue
            }
            if inlined { inlinedItems.insert(change.item) }
            sent.append((change, members))
            plain.append(update)
        }
        guard !commits.isEmpty else { return true }
        let results: [CommitResult]
        var announced = Set<String>()
        do {
            let sending = sent.filter { !inlinedItems.contains($0.change.item) }
            // Announced first (the others start fetching while the server is asked what it lacks).
            announced = await announce(sending, of: commits, in: sync)
            let uploads = try await contentsBeforeCommit(of: sending, in: sync)
            // A small edit's patches go with the commit (plaintext: the server makes the chunks).
            let patches = try await upload(uploads, announced: announced, patchesInline: !sync.codec.sealed, in: sync)
            do {
                results = try await sync.client.commit(container: sync.container, batch: commits, brief: true, terse: true, patches: patches)
            } catch let error as SyncClientError where patches != nil && [400, 404, 413].contains(error.status) {
                // The server could not make them (an old chunk it no longer has): the usual way.
                sync.logger.debug("patches with the commit refused: sent the usual way", metadata: ["container": "\(sync.container)", "error": "\(error)"])
                try await upload(uploads, announced: announced, in: sync)
                results = try await sync.client.commit(container: sync.container, batch: commits, brief: true, terse: true)
            }
            await withdraw(announced, in: sync)
        } catch let error as SyncClientError {
            await withdraw(announced, in: sync)
            sync.failed(commits: sent.map(\.change), error)
            return error.status != 0
        }
        var accepted: [(change: LocalChange, members: [LocalMember], answer: CommitResponse)] = [], whole: [LocalChange] = []
        var lacking: [Upload] = []
        for ((entry, update), result) in zip(zip(sent, plain), results) {
            var full = result.commit
            if let answer = full {
                do {
                    full = try sync.opened(answer)
                } catch {
                    // The server's answer does not open (or not to this item): the change waits
                    // for the next round, as if unanswered.
                    sync.logger.error("a commit's answer was refused", metadata: ["container": "\(sync.container)", "error": "\(error)"])
                    sync.failed(.commit(entry.change), SyncClientError(status: 502, code: "recordRefused", message: "\(error)"))
                    continue
                }
            }
            if let answer = full ?? result.committed.map({ Self.answer($0, to: update, of: entry.change, members: entry.members, editor: sync.share != nil ? sync.account : nil) }) {
                accepted.append((entry.change, entry.members, answer))
            } else if result.error?.code == "nameTaken", try await renameClashing(entry.change, in: sync) {
                // Renamed here ("Name 2.ext"): its change under the new name goes next round.
            } else if deltas, result.error?.code == "deltaBaseUnknown" {
                sync.state.failed(.commit(entry.change))
                whole.append(entry.change) // the server lacks the base: the whole chunk list goes
            } else if result.error?.code == "missingChunks", sync.files.file(of: entry.change.item)?.content != entry.change.content {
                // Contents this device no longer has (written again, or deleted, since the
                // change was made — it was sent again after a failed round): the server never
                // committed it and never will; the newer change goes in its place.
                abandon(entry.change, in: sync)
            } else if !retrying, result.error?.code == "missingChunks", let missing = result.error?.missingChunks, !missing.isEmpty,
                      let path = sync.files.path(of: entry.change.item) {
                sync.state.failed(.commit(entry.change))
                lacking.append(Upload(item: entry.change.item, members: entry.members, missing: Set(missing), url: sync.root.appendingPathComponent(path)))
            } else {
                sync.failed(.commit(entry.change), SyncClientError(status: 409, code: result.error?.code ?? "refused", message: result.error?.message ?? "the server refused the change"))
            }
        }
        do {
            // A change the server had already (its first answer was lost) answers with what its
            // revision still lacks.
            let uploads = accepted.compactMap { entry -> Upload? in
                guard !entry.answer.missingChunks.isEmpty, let path = sync.files.path(of: entry.change.item) else { return nil }
                return Upload(item: entry.change.item, members: entry.members, missing: Set(entry.answer.missingChunks), url: sync.root.appendingPathComponent(path))
            }
            try await upload(uploads + lacking, in: sync)
        } catch let error as SyncClientError {
            sync.failed(commits: accepted.map(\.change), error) // sent again: the server answers as before
            return error.status != 0
        }
        var upsert: [AgentStore.File] = [], made: [ContainerSync.MadeChange] = []
        let records = Dictionary(commits.map { ($0.item, $0.update.record) }, uniquingKeysWith: { first, _ in first })
        for entry in accepted {
            made.append(ContainerSync.MadeChange(item: entry.change.item, folder: entry.answer.item.parent, record: records[entry.change.item] ?? nil,
                                                 revision: entry.answer.revision, base: entry.change.base, deleted: entry.change.deleted,
                                                 conflict: entry.answer.outcome == "conflict", sequence: entry.answer.item.sequence))
            sync.errors[entry.change.item] = nil
            sync.noteSentAgain(entry.change.item)
            if let path = sync.files.path(of: entry.change.item) {
                sync.noteAttributes([.ubiquitousItemIsUploadedKey, .ubiquitousItemIsUploadingKey], at: path)
            }
            if var file = sync.files.file(of: entry.change.item), file.content == entry.change.content, !entry.change.deleted {
                file.revision = entry.answer.revision
                sync.files[file.path] = file
                upsert.append(file)
            }
            var snapshot = ContainerSync.snapshot(entry.answer.item)
            if snapshot.content == entry.change.content { snapshot.content = entry.change.content } // the file's token, not a copy
            sync.state.committed(CommitAnswer(changeId: entry.change.changeId, revision: entry.answer.revision, item: snapshot))
            sequences.append(entry.answer.item.sequence)
        }
        // What the server made of the batch, signed and kept with the answer, then sent.
        let signed = try sync.signedCommit(of: made)
        try await sync.persist(upsert: upsert, signed: signed)
        if signed != nil { await sync.sendSignedCommits() }
        if !whole.isEmpty { _ = try await send(whole, deltas: false, retrying: retrying, sequences: &sequences, in: sync) }
        let again = Set(lacking.map(\.item))
        if !again.isEmpty { _ = try await send(sent.map(\.change).filter { again.contains($0.item) }, deltas: deltas, retrying: true, sequences: &sequences, in: sync) }
        return true
    }

    /// The whole answer a terse one stands for: the item is what the update said, at the new
    /// revision and sequence, its contents this change's, made by `editor` (this account
    /// through a share; nil in the account's own container).
    static func answer(_ committed: CommittedRevision, to update: ItemUpdate, of change: LocalChange, members: [LocalMember], editor: String?) -> CommitResponse {
        let size = members.reduce(Int64(0)) { total, member in member.chunks.reduce(total) { $0 + Int64($1.length) } }
        var item = ItemState(id: change.item, revision: committed.revision, name: update.name, parent: update.parent, kind: update.kind, size: size,
                             modificationDate: update.modificationDate, type: update.type, deleted: false, uploaded: true, deviceName: "",
                             sequence: committed.sequence, manifest: Manifest(), conflicts: [])
        item.digest = change.content.description
        item.editor = editor
        return CommitResponse(revision: committed.revision, outcome: "current", item: item, missingChunks: [])
    }

    /// Gives up a change the server can never accept (its contents are gone from here): the
    /// item's newer change, or one made now from the file as it is, goes instead.
    func abandon(_ change: LocalChange, in sync: isolated ContainerSync) {
        sync.state.abandoned(change)
        sync.errors[change.item] = nil
        sync.logger.notice("a change whose contents are gone from this device gives way to the newer one",
                           metadata: ["container": "\(sync.container)", "item": "\(change.item)"])
        if sync.state.persisted.queued[change.item] == nil, let file = sync.files.file(of: change.item) {
            sync.state.save(item: change.item, name: change.name, parent: change.parent, kind: change.kind ?? .file, content: file.content, date: change.date)
        }
    }

    /// The change's chunk list as a difference from its base revision's, when that list is
    /// known here (a file edited since it was downloaded or sent); nil otherwise.
    func delta(for change: LocalChange, members: [LocalMember], in sync: isolated ContainerSync) -> ChunkListDelta? {
        guard change.kind ?? .file == .file, !change.deleted, let base = change.base, let new = members.first,
              let remote = sync.state.persisted.remote[change.item], remote.revision == base,
              let old = sync.localContents[remote.content]?.first else { return nil }
        return ChunkListDelta(from: old.chunks, to: new.chunks)
    }

    /// The chunks of a change's contents: known from the scan or a download, else cut again
    /// from the item's file (after a restart). If the file changed meanwhile, its present
    /// contents go: the next scan records them anyway.
    func contents(for change: LocalChange, in sync: isolated ContainerSync) throws -> [LocalMember] {
        if let known = sync.localContents[change.content] { return known }
        let kind = change.kind ?? .file
        guard kind != .directory, let path = sync.files.path(of: change.item) else { return [] }
        let members = try LocalContents.cut(sync.root.appendingPathComponent(path), kind: kind, scanner: sync.scanner, relative: path, codec: sync.codec(at: path))
        sync.localContents[LocalContents.token(LocalContents.manifest(members, kind: kind), kind: kind)] = members
        return members
    }

    /// The most bytes of small files one commit request carries inline.
    static let commitInlineBytes = 2 << 20

    /// The largest contents whose new chunks go without asking the server which it lacks.
    static let smallContentBytes = 64 << 10

    /// The most new bytes an edit of known contents may have for them to go without asking.
    static let smallEditBytes = 256 << 10

    /// The chunks of a batch's contents the server lacks, to send before their commit. Small
    /// contents, and edits that add little to contents known here (a few changed chunks of a
    /// large file), send the chunks not in their base revision without asking (the server
    /// skips what it has); larger contents send only those the server says it lacks (one
    /// question for the batch).
    func contentsBeforeCommit(of batch: [(change: LocalChange, members: [LocalMember])], in sync: isolated ContainerSync) async throws -> [Upload] {
        var uploads: [Upload] = [], asking: [Upload] = []
        for entry in batch {
            let chunks = entry.members.flatMap(\.chunks)
            guard !entry.change.deleted, !chunks.isEmpty, let path = sync.files.path(of: entry.change.item) else { continue }
            let base = sync.state.persisted.remote[entry.change.item].flatMap { sync.localContents[$0.content] }
            let known = base.map { Set($0.flatMap(\.chunks).map(\.hash)) } ?? []
            var missing = Set<String>(), missingBytes = 0
            for chunk in chunks where !known.contains(chunk.hash) && missing.insert(chunk.hash).inserted { missingBytes += chunk.length }
            guard !missing.isEmpty else { continue }
            let upload = Upload(item: entry.change.item, members: entry.members, missing: missing, url: sync.root.appendingPathComponent(path))
            if chunks.reduce(0, { $0 + $1.length }) <= Self.smallContentBytes || (base != nil && missingBytes <= Self.smallEditBytes) {
                uploads.append(upload)
            } else {
                asking.append(upload)
            }
        }
        guard !asking.isEmpty else { return uploads }
        let hashes = Array(Set(asking.flatMap(\.missing))).sorted()
        var lacking = Set<String>()
        for start in stride(from: 0, to: hashes.count, by: Self.missingQuestionSize) {
            lacking.formUnion(try await sync.client.missingChunks(Array(hashes[start..<min(hashes.count, start + Self.missingQuestionSize)])))
        }
        for var upload in asking {
            upload.missing.formIntersection(lacking)
            if !upload.missing.isEmpty { uploads.append(upload) }
        }
        return uploads
    }

    /// How many hashes one "which do you lack" question carries (the server takes 100,000).
    static let missingQuestionSize = 50_000

    /// The update a change becomes on the wire.
    func update(for change: LocalChange, members: [LocalMember], delta allowed: Bool, in sync: isolated ContainerSync) -> ItemUpdate {
        let kind = change.kind ?? .file
        var update = ItemUpdate(baseRevision: change.base, name: change.name, parent: change.parent, kind: kind, modificationDate: change.date,
                                manifest: LocalContents.manifest(members, kind: kind),
                                deleted: change.deleted, changeId: change.changeId.replacingOccurrences(of: "#", with: "."))
        if allowed, let delta = delta(for: change, members: members, in: sync) {
            // Only the difference from the base revision's chunk list travels.
            update.manifest = Manifest()
            update.manifestDelta = delta
        }
        return update
    }

    /// Uploads again the chunks the server lacks of items whose current revision is this
    /// device's local copy (the server lost a chunk of them, or found one damaged and put it
    /// aside): cut again from the files, sent only if the files still hold those contents (a
    /// file changed since sends its new contents as a change of its own).
    func uploadAgain(_ items: Set<String>, in sync: isolated ContainerSync) async throws {
        var uploads: [Upload] = []
        for item in items.sorted() {
            guard let file = sync.files.file(of: item), let path = sync.files.path(of: item), let kind = sync.state.persisted.remote[item]?.kind,
                  kind != .directory else { continue }
            let url = sync.root.appendingPathComponent(path)
            // A file that cannot be cut now (removed or replaced meanwhile) goes with its next change.
            guard let members = try? LocalContents.cut(url, kind: kind, scanner: sync.scanner, relative: path, codec: sync.codec(at: path)),
                  LocalContents.token(LocalContents.manifest(members, kind: kind), kind: kind) == file.content else { continue }
            let hashes = Array(Set(members.flatMap { $0.chunks.map(\.hash) }))
            let missing = try await sync.client.missingChunks(hashes)
            if !missing.isEmpty { uploads.append(Upload(item: item, members: members, missing: Set(missing), url: url)) }
        }
        if !uploads.isEmpty {
            sync.logger.notice("uploading again what the server lacks", metadata: ["container": "\(sync.container)", "items": "\(uploads.count)"])
        }
        try await upload(uploads, in: sync)
    }

    /// The fingerprint of the open file `handle` reads (nil if it cannot be had).
    static func fingerprint(of handle: FileHandle) -> LocalFingerprint? { LocalScanner.fingerprint(descriptor: handle.fileDescriptor) }

    /// Appends `chunk` of the flat file `handle` reads to the batch body `body` (its framing,
    /// then its bytes read into place), if the bytes are the chunk cut by the scan; false, with
    /// `body` as it was, if the file changed since. While the file keeps the fingerprint
    /// `trusted` — the one the scan recorded before it cut the file; any write changes the
    /// status-change time — they are those bytes, and are not hashed again; otherwise
    /// (`trusted` nil, or made nil here once the file is seen changed) they are checked against
    /// the chunk's hash. The server checks every chunk either way. Sealed (`codec`), the bytes
    /// are read, named again and sealed, and the sealed body goes (the server cannot check it).
    /// - Throws: The file's read errors.
    /// `prints`: where a sealing device keeps the block prints of what it sends (its next edit
    /// goes as a sealed patch made against them).
    static func read(_ chunk: ContentChunk, from handle: FileHandle, trusting trusted: inout LocalFingerprint?, into body: inout ByteBuffer,
                     codec: ChunkCodec = .plain, prints: BlockPrintCache? = nil) throws -> Bool {
        if codec.sealed { return try readSealed(chunk, from: handle, trusting: &trusted, into: &body, codec: codec, prints: prints) }
        let start = body.writerIndex
        body.writeBytes(ChunkBatch.frame(hash: chunk.hash, length: chunk.length))
        let bytesStart = body.writerIndex
        var failure: Int32 = 0
        body.writeWithUnsafeMutableBytes(minimumWritableBytes: chunk.length) { space in
            let got = SystemCall.readFully(handle.fileDescriptor, into: UnsafeMutableRawBufferPointer(rebasing: space[..<chunk.length]), at: Int64(chunk.offset))
            if got < 0 { failure = errno }
            return max(got, 0)
        }
        guard failure == 0 else {
            body.moveWriterIndex(to: start)
            throw POSIXError(POSIXErrorCode(rawValue: failure) ?? .EIO)
        }
        if let recorded = trusted, fingerprint(of: handle) != recorded { trusted = nil }
        let whole = body.writerIndex - bytesStart == chunk.length
        guard whole, trusted != nil || body.withUnsafeReadableBytes({ ContentChunker.hash(UnsafeRawBufferPointer(rebasing: $0[(bytesStart - body.readerIndex)...])) }) == chunk.hash else {
            body.moveWriterIndex(to: start)
            return false
        }
        return true
    }

    /// ``read(_:from:trusting:into:codec:)`` for a sealed chunk: its plaintext read and sealed
    /// into `body` behind its framing — named again unless the file still has the fingerprint
    /// `trusted` (bytes that are not the chunk cut by the scan are never sealed under its name);
    /// false, with `body` as it was, if the file changed.
    /// - Throws: The file's read errors.
    static func readSealed(_ chunk: ContentChunk, from handle: FileHandle, trusting trusted: inout LocalFingerprint?, into body: inout ByteBuffer,
                           codec: ChunkCodec, prints: BlockPrintCache?) throws -> Bool {
        var plaintext = [UInt8](repeating: 0, count: chunk.length)
        let got = plaintext.withUnsafeMutableBytes { SystemCall.readFully(handle.fileDescriptor, into: $0, at: Int64(chunk.offset)) }
        if got < 0 { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        if let recorded = trusted, fingerprint(of: handle) != recorded { trusted = nil }
        let unchanged = trusted != nil
        guard got == chunk.length, let sealed = try? plaintext.withUnsafeBytes({ try codec.seal($0, as: chunk.hash, unchanged: unchanged) }) else { return false }
        // Its next edit goes as a sealed patch made against these.
        if codec.sealsPatches, let prints { plaintext.withUnsafeBytes { prints.note($0, as: chunk.hash) } }
        body.writeBytes(ChunkBatch.frame(hash: chunk.hash, length: sealed.count))
        body.writeBytes(sealed)
        return true
    }

    /// Sends the chunks of `wanted` that change a chunk of the same item's contents as last
    /// synced (a few edited chunks of a large file) as patches of those: the server's block
    /// signatures of the old chunks are fetched, and only the blocks that differ at neither end
    /// travel (a 1-byte edit: about 1 KiB, not 16). Returns the hashes sent so; the others,
    /// and any the server could not make (an old chunk it lacks, a block hash that collided),
    /// go whole. Chunks changed since the scan are left to the next round, as whole ones are.
    /// With `inline`, plaintext patches that make one small batch (at most
    /// ``CommitBatchRequest/maximumPatchBytes``) are not sent but put there, for the commit to carry.
    func uploadPatches(_ wanted: [(Upload, [(LocalMember, [ContentChunk])])], inline: inout ChunkPatchBatch?, in sync: isolated ContainerSync) async throws -> Set<String> {
        // The server cannot make a sealed chunk from a patch: a sealing device makes its own.
        guard !sync.codec.sealed || sync.codec.sealsPatches else { return [] }
        let codec = sync.codec
        var candidates: [(item: String, hash: String, base: String, bytes: [UInt8])] = []
        for (upload, members) in wanted {
            guard let bases = patchBases(of: upload, in: sync) else { continue }
            for (member, chunks) in members {
                let pairs = chunks.compactMap { chunk in bases[member.path]?[chunk.hash].map { (chunk, $0) } }
                // A file that cannot be opened sends these chunks whole (below), which says why if it fails.
                guard !pairs.isEmpty, let handle = try? FileHandle(forReadingFrom: member.path.isEmpty ? upload.url : upload.url.appendingPathComponent(member.path)) else { continue }
                defer { try? handle.close() } // read-only: closing cannot lose anything
                for (chunk, base) in pairs {
                    // (Sealed: only against an old chunk whose block prints this device kept.)
                    if codec.sealed, sync.prints.prints(of: base) == nil { continue }
                    // Unreadable or changed since the scan: the whole-chunk way finds out and says so.
                    guard (try? handle.seek(toOffset: UInt64(chunk.offset))) != nil,
                          let bytes = (try? handle.read(upToCount: chunk.length)).map({ [UInt8]($0) }),
                          bytes.withUnsafeBytes({ codec.recognises($0, as: chunk.hash) }) else { break }
                    candidates.append((upload.item, chunk.hash, base, bytes))
                }
            }
        }
        guard !candidates.isEmpty else { return [] }
        if codec.sealed { return try await uploadSealedPatches(candidates, in: sync) }
        // The old chunks' signatures: those of chunks this device made or received by an edit
        // lately are known here; the server is asked for the others.
        var signatures: [String: ChunkSignature] = [:]
        for base in Set(candidates.map(\.base)) { signatures[base] = sync.signatures[base] }
        let unknown = Set(candidates.map(\.base)).subtracting(signatures.keys)
        if !unknown.isEmpty {
            do {
                for signature in try await sync.client.signatures(of: Array(unknown)) where signatures[signature.hash] == nil { signatures[signature.hash] = signature }
            } catch let error as SyncClientError where error.status != 0 {
                sync.logger.debug("chunk signatures refused: the chunks go whole", metadata: ["container": "\(sync.container)", "error": "\(error)"])
                return []
            }
        }
        // (Its next edit here is made against these.)
        for candidate in candidates { sync.signatures.note(candidate.bytes, as: candidate.hash) }
        var batches: [(patches: ChunkPatchBatch, bytes: [String: Int64])] = [], batch = ChunkPatchBatch(), carried: [String: Int64] = [:], made = 0
        for candidate in candidates {
            // Worth it only when well under half the chunk travels.
            guard let signature = signatures[candidate.base], let patch = ChunkPatch(making: candidate.bytes, hash: candidate.hash, against: signature),
                  patch.middle.count + ChunkPatchBatch.framing < candidate.bytes.count / 2 else { continue }
            if made + candidate.bytes.count > ContainerSync.transferBatchBytes || batch.patches.count == ChunkBatch.maximumCount {
                batches.append((batch, carried))
                (batch, carried, made) = (ChunkPatchBatch(), [:], 0)
            }
            batch.patches.append(patch)
            carried[candidate.item, default: 0] += Int64(candidate.bytes.count)
            made += candidate.bytes.count
        }
        if !batch.patches.isEmpty { batches.append((batch, carried)) }
        if inline != nil, batches.count == 1, batches[0].patches.encoded().count <= CommitBatchRequest.maximumPatchBytes {
            inline = batches[0].patches // (sent with the commit: one round trip less)
            return Set(batches[0].patches.patches.map(\.hash))
        }
        var sent = Set<String>()
        for (patches, carried) in batches {
            do {
                try await sync.client.upload(patches)
            } catch let error as SyncClientError where [400, 404].contains(error.status) {
                // An old chunk the server no longer has, or a short block hash that collided: whole.
                sync.logger.debug("chunk patches refused: the chunks go whole", metadata: ["container": "\(sync.container)", "error": "\(error)"])
                continue
            }
            sent.formUnion(patches.patches.map(\.hash))
            for (item, bytes) in carried { sync.transfers[item]?.done += bytes }
        }
        return sent
    }

    /// Sends `candidates` as sealed patches, each made against the block prints this device
    /// kept of the old chunk (``BlockPrintCache``) and sealed; the server keeps them in place of
    /// the chunks. Returns the hashes sent so; a patch not well under half its chunk, and any the
    /// server refuses (a base it lacks, or one too many patches deep), go whole.
    func uploadSealedPatches(_ candidates: [(item: String, hash: String, base: String, bytes: [UInt8])], in sync: isolated ContainerSync) async throws -> Set<String> {
        var batches: [(patches: [(hash: String, base: String, body: Data)], bytes: [String: Int64], made: [(String, [UInt8])])] = []
        var batch: [(hash: String, base: String, body: Data)] = [], carried: [String: Int64] = [:], made: [(String, [UInt8])] = [], size = 0
        for candidate in candidates {
            guard let prints = sync.prints.prints(of: candidate.base) else { continue }
            let patch = candidate.bytes.withUnsafeBytes { PatchBody(making: $0, against: prints) }
            guard patch.middle.count + ChunkPatchBatch.framing < candidate.bytes.count / 2 else { continue }
            let body: Data
            do {
                body = try patch.encoded.withUnsafeBytes { try sync.codec.sealPatch($0, making: candidate.hash, from: candidate.base) }
            } catch {
                continue // (goes whole, which says what failed if it fails too)
            }
            if size + body.count > ContainerSync.transferBatchBytes || batch.count == ChunkBatch.maximumCount {
                batches.append((batch, carried, made))
                (batch, carried, made, size) = ([], [:], [], 0)
            }
            batch.append((candidate.hash, candidate.base, body))
            carried[candidate.item, default: 0] += Int64(candidate.bytes.count)
            made.append((candidate.hash, candidate.bytes))
            size += body.count
        }
        if !batch.isEmpty { batches.append((batch, carried, made)) }
        var sent = Set<String>()
        for (patches, carried, made) in batches {
            do {
                try await sync.client.upload(sealedPatches: patches)
            } catch let error as SyncClientError where [400, 404, 409].contains(error.status) {
                sync.logger.debug("sealed patches refused: the chunks go whole", metadata: ["container": "\(sync.container)", "error": "\(error.code)"])
                continue
            }
            sent.formUnion(patches.map(\.hash))
            // The next edit of these chunks is made against them.
            for (hash, bytes) in made { bytes.withUnsafeBytes { sync.prints.note($0, as: hash) } }
            for (item, bytes) in carried { sync.transfers[item]?.done += bytes }
        }
        return sent
    }

    /// For each member of `upload`'s item (a flat file is one, named ""), which chunk of its
    /// contents as last synced each missing chunk most likely changes (``ChunkPartners``); nil
    /// when those contents are not known here.
    func patchBases(of upload: Upload, in sync: isolated ContainerSync) -> [String: [String: String]]? {
        guard let base = sync.state.persisted.remote[upload.item].flatMap({ sync.localContents[$0.content] }) else { return nil }
        let old = Dictionary(base.map { ($0.path, $0.chunks) }, uniquingKeysWith: { first, _ in first })
        var bases: [String: [String: String]] = [:]
        for member in upload.members {
            guard let before = old[member.path] else { continue }
            bases[member.path] = ChunkPartners.of(old: before.map(\.reference), new: member.chunks.map(\.reference)).filter { upload.missing.contains($0.key) }
        }
        return bases
    }

    /// The bytes of a change's file to send inline with its commit: a flat file of at most
    /// ``ItemUpdate/maximumInlineBytes`` whose bytes on disk are still the chunks cut at the
    /// scan. Nil otherwise — then its chunks go the usual way, whose reading notices a file
    /// changed or gone since the scan (and the next scan sends what it became).
    func inlineContents(of change: LocalChange, members: [LocalMember], in sync: isolated ContainerSync) -> Data? {
        // (Sealed, the server would keep those bytes as they are: they go as sealed chunks.)
        guard !sync.codec.sealed, change.kind ?? .file == .file, !change.deleted, members.count == 1, let path = sync.files.path(of: change.item) else { return nil }
        let chunks = members[0].chunks
        let size = chunks.reduce(0) { $0 + $1.length }
        guard size <= ItemUpdate.maximumInlineBytes else { return nil }
        let data: Data
        do {
            data = try Data(contentsOf: sync.root.appendingPathComponent(path))
        } catch {
            return nil // gone or unreadable since the scan: see above
        }
        guard data.count == size else { return nil }
        let intact = data.withUnsafeBytes { bytes in
            chunks.allSatisfy { ContentChunker.hash(UnsafeRawBufferPointer(rebasing: bytes[$0.offset..<$0.offset + $0.length])) == $0.hash }
        }
        return intact ? data : nil
    }

}
