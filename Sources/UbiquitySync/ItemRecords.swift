import Foundation
import UbiquityKeys
import UbiquityProtocol

/// What an item's sealed record holds (format 1): everything about a revision the server need
/// not know. Sealed as compact JSON (``ItemRecords``), so a field added later is read by older
/// devices as absent.
package struct ItemRecord: Codable, Equatable, Sendable {
    /// The format this build writes.
    package static let format = 1

    /// The record's format.
    package var format: Int
    /// The item's name in its folder.
    package var name: String
    /// Its uniform type identifier.
    package var type: String?
    /// When the device last modified it (seconds since 1970).
    package var date: Double
    /// Bytes of contents (the sum of its chunks' plaintext sizes).
    package var size: Int64
    /// The content token of its plaintext manifest (``ContentToken``): what binds the chunk list
    /// the server keeps beside the record to it.
    package var contents: String
    /// Each chunk's plaintext size, in the manifest's order, as LEB128 numbers (nil: no chunks).
    package var sizes: Data?
    /// A package's members, in the manifest's order: their paths and how many chunks each has.
    package var members: [Member]?

    /// A package member as the record knows it.
    package struct Member: Codable, Equatable, Sendable {
        /// Its path inside the package (ending in `/` for an empty folder).
        package var path: String
        /// How many of the manifest's chunks are its, in order.
        package var chunks: Int

        enum CodingKeys: String, CodingKey {
            case path = "p", chunks = "k"
        }
    }

    enum CodingKeys: String, CodingKey {
        case format = "v", name = "n", type = "t", date = "d", size = "s", contents = "c", sizes = "z", members = "m"
    }
}

/// A record that does not open, or does not fit what the server says beside it. Nothing of the
/// answer that carried it is used.
package struct ItemRecordError: Error, CustomStringConvertible, Equatable {
    /// The item's identifier.
    package var item: String
    /// What failed (no name, no key: the record's contents stay unsaid).
    package var reason: String
    /// The epoch it is sealed in, when this device holds no key of it (its keys are to be read
    /// again); nil for any other failure.
    package var unheldEpoch: UInt32?

    /// An error.
    package init(item: String, reason: String, unheldEpoch: UInt32? = nil) {
        self.item = item
        self.reason = reason
        self.unheldEpoch = unheldEpoch
    }

    package var description: String { "the record of item \(item) is refused: \(reason)" }
}

/// How a container's item records are sealed and opened on a device that holds the account's
/// keys (docs/Encryption.md, "Sealed item records"): the sync engine works with plaintext
/// updates and states; at the client's edge an update becomes what the server may know plus a
/// sealed record (``sealed(_:item:manifest:)``), and a state with a record is opened and
/// checked (``opened(_:)``) before anything local changes.
package struct ItemRecords: Sendable {
    private let sealing: (@Sendable (Data, _ item: String, _ parent: String) throws -> Data)?
    private let opening: @Sendable (Data, _ item: String, _ parent: String) throws -> Data
    private let tagging: @Sendable (_ name: String, _ parent: String) -> String
    private let sealedSize: @Sendable (Int) -> Int
    /// Tags that also name an item (an owner's container keys, for what it named before the
    /// item was shared): a name shown with one of them is its name too.
    private var otherTagging: [@Sendable (_ name: String, _ parent: String) -> String] = []

    /// Whether `shown` is the tag of `name` in `parent`.
    private func isTag(_ shown: String, of name: String, in parent: String) -> Bool {
        tagging(name, parent) == shown || otherTagging.contains { $0(name, parent) == shown }
    }

    /// Records sealed by `seal` (nil: this device opens them only), opened by `open`, both bound
    /// to the item and its folder (`""` at the top); names tagged by `tag`; a chunk of a
    /// plaintext size declared at `sealedSize` of it.
    package init(seal: (@Sendable (Data, String, String) throws -> Data)?, open: @escaping @Sendable (Data, String, String) throws -> Data,
                 tag: @escaping @Sendable (String, String) -> String, sealedSize: @escaping @Sendable (Int) -> Int) {
        self.sealing = seal
        self.opening = open
        self.tagging = tag
        self.sealedSize = sealedSize
    }

    /// Whether this device seals the records it sends.
    package var seals: Bool { sealing != nil }

    /// Whether a state, conflict version or revision must come with a sealed record (the
    /// account's devices raised it to `Roster.sealedOnlyFormat`): one served in plaintext is a
    /// downgrade — the server naming an item, or putting in one of its own — and refused. A
    /// deletion needs none.
    package var sealedOnly = false

    /// Whether a conflict version sealed in an epoch of which no key is held is passed over
    /// rather than refusing its item: a share's records on a participant's device, where its
    /// owner's device may have sealed a version with the container's keys before the share's
    /// reached it (that version is the owner's alone; everything else of the item is shown).
    package var passesOverUnheldConflicts = false

    /// Refuses a plaintext state of `item` when ``sealedOnly``.
    private func refuseDowngrade(item: String, what: String) throws {
        guard sealedOnly else { return }
        throw ItemRecordError(item: item, reason: "\(what) came in plaintext, and the account's devices require every item sealed (a downgrade)")
    }

    /// The name-clash tag the server sees for `name` in the folder `parent`.
    package func tag(_ name: String, parent: String?) -> String { tagging(name, parent ?? "") }

    // MARK: Up

    /// What a plaintext update goes as: the record sealed beside what the server needs
    /// (``ItemUpdate/record``). `manifest` is the whole plaintext manifest (the update may
    /// carry a delta instead); a delta's added chunks are declared at their sealed sizes.
    /// - Throws: ``ItemRecordError`` on a device that does not seal, or what sealing threw.
    package func sealed(_ update: ItemUpdate, item: String, manifest: Manifest) throws -> ItemUpdate {
        guard let sealing else { throw ItemRecordError(item: item, reason: "this device does not seal records") }
        let chunks = manifest.allChunks
        let record = ItemRecord(format: ItemRecord.format, name: update.name, type: update.type, date: update.modificationDate,
                                size: chunks.reduce(0) { $0 + $1.size }, contents: ContentToken.of(manifest, kind: update.kind).description,
                                sizes: chunks.isEmpty ? nil : LEB128.encode(chunks.map { UInt64(max(0, $0.size)) }),
                                members: update.kind == .package ? (manifest.members ?? []).map { ItemRecord.Member(path: $0.path, chunks: $0.chunks.count) } : nil)
        var wire = update
        wire.name = tagging(update.name, update.parent ?? "")
        wire.type = nil
        wire.modificationDate = 0
        wire.contents = nil
        if let delta = update.manifestDelta {
            wire.manifestDelta = ChunkListDelta(operations: delta.operations.map { operation in
                if case .add(let hash, let length) = operation { return .add(hash: hash, length: sealedSize(length)) }
                return operation
            })
            wire.manifest = Manifest()
        } else {
            wire.manifest = wireManifest(manifest, kind: update.kind)
        }
        wire.record = try sealing(try Self.encoder.encode(record), item, update.parent ?? "")
        return wire
    }

    /// The manifest the server keeps: chunks at their sealed sizes, a package's members named by
    /// their positions.
    private func wireManifest(_ manifest: Manifest, kind: ItemKind) -> Manifest {
        func wire(_ chunks: [ChunkReference]) -> [ChunkReference] {
            chunks.map { ChunkReference(hash: $0.hash, size: Int64(sealedSize(Int($0.size)))) }
        }
        switch kind {
        case .directory: return Manifest()
        case .file: return Manifest(chunks: wire(manifest.chunks ?? []))
        case .package:
            return Manifest(members: (manifest.members ?? []).enumerated().map { index, member in
                ManifestMember(path: member.path.hasSuffix("/") ? "\(index)/" : "\(index)", chunks: wire(member.chunks))
            })
        }
    }

    // MARK: Down

    /// `state` as its device made it: the current revision's record and every conflict
    /// version's opened, the manifest rebuilt with the plaintext sizes and members and checked
    /// against the record's content token. A state without a record is returned as it is.
    /// - Throws: ``ItemRecordError`` for a record that does not open (changed, moved to another
    ///   item or folder, of a key not held), whose name-clash tag is not its name's, or whose
    ///   chunk list is not the one beside it.
    package func opened(_ state: ItemState) throws -> ItemState {
        var opened = state
        if state.record == nil, !state.deleted { try refuseDowngrade(item: state.id, what: "its state") }
        if let sealed = state.record {
            let record: ItemRecord
            do {
                record = try open(sealed, item: state.id, parent: state.parent)
            } catch let error as ItemRecordError where error.unheldEpoch != nil && passesOverUnheldConflicts && state.deleted {
                // A share's item its owner deleted with a record sealed with the container's keys:
                // gone all the same (nothing of it is shown).
                opened.record = nil
                opened.conflicts = []
                return opened
            }
            guard isTag(state.name, of: record.name, in: state.parent ?? "") else {
                throw ItemRecordError(item: state.id, reason: "the name the server shows is not its name's tag")
            }
            opened.name = record.name
            opened.type = record.type
            opened.modificationDate = record.date
            opened.size = record.size
            opened.record = nil
            opened.contents = nil // (bytes inline beside a sealed record could only be sealed ones: never taken for the file's)
            if state.digest != nil { opened.digest = record.contents } // a brief answer: the manifest left out
            if let delta = state.manifestDelta {
                opened.manifestDelta = try plaintext(delta, record: record, item: state.id)
            } else if state.digest == nil {
                opened.manifest = try plaintext(state.manifest, kind: state.kind, record: record, item: state.id)
            }
        }
        opened.conflicts = try state.conflicts.compactMap { version in
            guard let sealed = version.record else {
                try refuseDowngrade(item: state.id, what: "its conflict version \(version.revision)")
                return version
            }
            let parent = version.parent ?? state.parent
            let record: ItemRecord
            do {
                record = try open(sealed, item: state.id, parent: parent)
            } catch let error as ItemRecordError where error.unheldEpoch != nil && passesOverUnheldConflicts {
                return nil // (a share's: sealed by its owner's device with the container's keys — the owner's alone)
            }
            var opened = version
            opened.modificationDate = record.date
            opened.size = record.size
            opened.record = nil
            if version.digest != nil {
                opened.digest = record.contents
            } else {
                opened.manifest = try plaintext(version.manifest, kind: state.kind, record: record, item: state.id)
            }
            return opened
        }
        return opened
    }

    /// What a listing shows of an item from its sealed `record`: its name, size and date, the
    /// record opened for `item` in `parent` and its name checked against the name-clash tag
    /// shown beside it (`shown`). The manifest is not read.
    /// - Throws: ``ItemRecordError``, as ``opened(_:)``.
    package func listed(_ record: Data, item: String, parent: String?, shown: String) throws -> (name: String, size: Int64, date: Double) {
        // The listing's fields read straight from the JSON (``ItemRecord/listing(_:)``), the
        // whole record decoded only for what that does not read.
        let bytes = try openedBytes(record, item: item, parent: parent)
        let listed: (format: Int, name: String, size: Int64, date: Double)
        if let fast = ItemRecord.listing(bytes) {
            listed = fast
        } else {
            let whole = try Self.decode(bytes, item: item)
            listed = (whole.format, whole.name, whole.size, whole.date)
        }
        try Self.checkFormat(listed.format, item: item)
        guard isTag(shown, of: listed.name, in: parent ?? "") else {
            throw ItemRecordError(item: item, reason: "the name the server shows is not its name's tag")
        }
        return (listed.name, listed.size, listed.date)
    }

    /// An earlier revision as its device made it (its name, size and date from its record).
    /// - Throws: ``ItemRecordError``, as ``opened(_:)``.
    package func opened(_ revision: ItemRevision, item: String) throws -> ItemRevision {
        try openedRevision(revision, item: item)?.opened ?? revision
    }

    /// An earlier revision's contents as its device made them, the manifest checked.
    /// - Throws: ``ItemRecordError``, as ``opened(_:)``.
    package func opened(_ revision: RevisionContentsResponse, item: String) throws -> RevisionContentsResponse {
        guard let (opened, record) = try openedRevision(revision, item: item) else { return revision }
        var contents = opened
        contents.manifest = try plaintext(revision.manifest, kind: revision.kind, record: record, item: item)
        return contents
    }

    /// An earlier revision with its name, size and date from its record, and the record; nil
    /// when it has none.
    private func openedRevision<Revision: SealedRevision>(_ revision: Revision, item: String) throws -> (opened: Revision, record: ItemRecord)? {
        guard let sealed = revision.record else {
            try refuseDowngrade(item: item, what: "its revision \(revision.revision)")
            return nil
        }
        let record = try open(sealed, item: item, parent: revision.parent)
        var opened = revision
        (opened.name, opened.size, opened.modificationDate, opened.record) = (record.name, record.size, record.date, nil)
        return (opened, record)
    }

    private func open(_ sealed: Data, item: String, parent: String?) throws -> ItemRecord {
        try Self.decode(try openedBytes(sealed, item: item, parent: parent), item: item)
    }

    /// A sealed record's JSON, opened for `item` in `parent`.
    private func openedBytes(_ sealed: Data, item: String, parent: String?) throws -> Data {
        do {
            return try opening(sealed, item, parent ?? "")
        } catch let error as ItemRecordError {
            throw error
        } catch {
            throw ItemRecordError(item: item, reason: "it does not open (\(error))")
        }
    }

    /// A record from its JSON, of a format this build reads.
    static func decode(_ bytes: Data, item: String) throws -> ItemRecord {
        guard let record = try? decoder.decode(ItemRecord.self, from: bytes) else {
            throw ItemRecordError(item: item, reason: "it opens but is not a record")
        }
        try checkFormat(record.format, item: item)
        return record
    }

    private static func checkFormat(_ format: Int, item: String) throws {
        guard format >= 1 else { throw ItemRecordError(item: item, reason: "format \(format) is not one this device reads") }
    }

    /// The plaintext manifest from the one the server keeps and the record: same chunks, their
    /// plaintext sizes, a package's member paths — and its token the record's.
    private func plaintext(_ wire: Manifest, kind: ItemKind, record: ItemRecord, item: String) throws -> Manifest {
        let sizes = try record.sizes.map { try LEB128.decode($0, item: item) } ?? []
        let chunks = wire.allChunks
        guard chunks.count == sizes.count else {
            throw ItemRecordError(item: item, reason: "its record lists \(sizes.count) chunk(s), the server \(chunks.count)")
        }
        let references = zip(chunks, sizes).map { ChunkReference(hash: $0.hash, size: Int64($1)) }
        let manifest: Manifest
        switch kind {
        case .directory:
            manifest = Manifest()
        case .file:
            guard wire.members == nil else { throw ItemRecordError(item: item, reason: "a file's chunk list has members") }
            manifest = Manifest(chunks: references)
        case .package:
            let members = record.members ?? [], wireMembers = wire.members ?? []
            guard members.count == wireMembers.count, zip(members, wireMembers).allSatisfy({ $0.chunks == $1.chunks.count }) else {
                throw ItemRecordError(item: item, reason: "its members are not the ones the server lists")
            }
            var start = 0
            manifest = Manifest(members: members.map { member in
                defer { start += member.chunks }
                return ManifestMember(path: member.path, chunks: Array(references[start..<(start + member.chunks)]))
            })
        }
        guard ContentToken.of(manifest, kind: kind) == ContentToken(record.contents) else {
            throw ItemRecordError(item: item, reason: "the chunk list beside it is not the one it names")
        }
        return manifest
    }

    /// A delta from the server with its added chunks at their plaintext sizes (by their
    /// positions in the list it makes). What it makes is checked against the record's content
    /// token where the whole list is rebuilt (the device's own copy of the base is needed).
    private func plaintext(_ delta: ChunkListDelta, record: ItemRecord, item: String) throws -> ChunkListDelta {
        let sizes = try record.sizes.map { try LEB128.decode($0, item: item) } ?? []
        var position = 0
        return ChunkListDelta(operations: try delta.operations.map { operation in
            switch operation {
            case .copy(_, let count):
                guard count > 0 else { throw ItemRecordError(item: item, reason: "its chunk list's difference is malformed") }
                position += count
                return operation
            case .add(let hash, _):
                guard position < sizes.count else { throw ItemRecordError(item: item, reason: "its chunk list's difference is longer than the record's") }
                defer { position += 1 }
                return .add(hash: hash, length: Int(sizes[position]))
            }
        })
    }

    private static let decoder = JSONDecoder()

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
}

/// An earlier revision as the server lists or sends it: what its sealed record stands in for.
private protocol SealedRevision {
    var revision: String { get }
    var name: String { get set }
    var size: Int64 { get set }
    var modificationDate: Double { get set }
    var record: Data? { get set }
    var parent: String? { get }
}

extension ItemRevision: SealedRevision {}
extension RevisionContentsResponse: SealedRevision {}

/// Unsigned LEB128: 7 bits a byte, least significant first, the high bit saying more follow —
/// a chunk size of up to 2 MiB in 3 bytes.
enum LEB128 {
    static func encode(_ values: [UInt64]) -> Data {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(values.count * 3)
        for var value in values {
            while value >= 0x80 {
                bytes.append(UInt8(value & 0x7f) | 0x80)
                value >>= 7
            }
            bytes.append(UInt8(value))
        }
        return Data(bytes)
    }

    static func decode(_ data: Data, item: String) throws -> [UInt64] {
        var values: [UInt64] = [], value: UInt64 = 0, shift: UInt64 = 0
        for byte in data {
            guard shift < 63 else { throw ItemRecordError(item: item, reason: "its chunk sizes are malformed") }
            value |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 {
                values.append(value)
                value = 0
                shift = 0
            } else {
                shift += 7
            }
        }
        guard shift == 0 else { throw ItemRecordError(item: item, reason: "its chunk sizes are truncated") }
        return values
    }
}

extension ItemRecords {
    /// The records of `container` on a holder of `rootKeys` (a device, or the server with the
    /// escrow's keys under Standard): sealed with the newest epoch's key when `sealing`, opened
    /// with the epoch's their header names, names tagged with the first epoch's key (so a new
    /// epoch renames nothing). Nil without keys.
    ///
    /// A record is bound to its container, item and folder, not to its revision: the server
    /// names a revision only once the record is sealed, and copies one when it restores it.
    /// Which revision is current is the signed commits' to say.
    package static func keyed(container: String, rootKeys: [AccountRootKey], sealing: Bool) -> ItemRecords? {
        guard let newest = rootKeys.max(by: { $0.epoch < $1.epoch }), let first = rootKeys.min(by: { $0.epoch < $1.epoch }) else { return nil }
        return keyed(container: container, current: newest.recordKey(container: container), naming: first.recordKey(container: container),
                     held: rootKeys.map { ($0.epoch, $0.recordKey(container: container)) }, sealing: sealing)
    }

    /// The records of a share (docs/Sharing.md, "Keys") of `container` on a holder of its `keys`:
    /// sealed with the newest epoch's key, opened with the key of the epoch their header names
    /// — or with one of `alsoOpening` (the owner's container keys, for what was sealed before
    /// the item was shared) — names tagged with the share's first epoch's key. Nil without keys.
    package static func shared(container: String, keys: [ShareKey], alsoOpening: [RecordKey] = []) -> ItemRecords? {
        guard let newest = keys.max(by: { $0.epoch < $1.epoch }), let first = keys.min(by: { $0.epoch < $1.epoch }) else { return nil }
        var records = keyed(container: container, current: newest.recordKey, naming: first.recordKey,
                            held: keys.map { ($0.epoch, $0.recordKey) } + alsoOpening.map { ($0.epoch, $0) }, sealing: true)
        records.otherTagging = alsoOpening.min { $0.epoch < $1.epoch }.map { naming in [{ naming.nameClashTag($0, parent: $1) }] } ?? []
        return records
    }

    /// Records sealed with `current`, tagged with `naming`, opened with the keys of the epoch
    /// their header names (each of `held` of that epoch tried in turn: a share's and an
    /// account's epochs are numbered alike).
    private static func keyed(container: String, current: RecordKey, naming: RecordKey, held pairs: [(UInt32, RecordKey)], sealing: Bool) -> ItemRecords {
        let held = Dictionary(grouping: pairs, by: \.0).mapValues { $0.map(\.1) }
        var seal: (@Sendable (Data, String, String) throws -> Data)?
        if sealing {
            seal = { (record: Data, item: String, parent: String) throws -> Data in
                try current.seal(record, for: RecordBinding(container: container, item: item, parent: parent, revision: ""))
            }
        }
        let open: @Sendable (Data, String, String) throws -> Data = { sealed, item, parent in
            let epoch = try RecordKey.epoch(of: sealed)
            guard let keys = held[epoch], let last = keys.last else {
                throw ItemRecordError(item: item, reason: "it is sealed in epoch \(epoch), whose key this device does not hold", unheldEpoch: epoch)
            }
            let binding = RecordBinding(container: container, item: item, parent: parent, revision: "")
            for key in keys.dropLast() {
                if let opened = try? key.open(sealed, for: binding) { return opened }
            }
            return try last.open(sealed, for: binding)
        }
        return ItemRecords(seal: seal, open: open, tag: { name, parent in naming.nameClashTag(name, parent: parent) },
                           sealedSize: { ChunkKeys.sealedSize(ofPlaintext: $0) })
    }
}
