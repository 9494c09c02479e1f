import Foundation
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

/// A container's sealed item records for the server's own pages (issue 45): under Standard Data
/// Protection opened — and, for what the web interface changes, sealed — with the root keys the
/// escrow holds, for one request and forgotten with it; under Advanced (no keys here) a page
/// that would have to read a record answers 409 `sealedOnDevices`. Items from before records
/// were sealed pass as they are.
struct WebRecords: Sendable {
    /// The container's records with the escrow's keys; nil without them.
    let records: ItemRecords?
    /// The account and container (what a kept record is found by, with the record).
    var account: Int64 = 0
    var container = ""
    /// What pages read from records before (nil: every record opened each time).
    var cache: OpenedRecordCache?

    /// The refusal of a page that would have to read a record no key here opens.
    static let sealedOnDevices = SyncError(.conflict, "sealedOnDevices",
                                           "this folder's names are end-to-end encrypted (Advanced Data Protection): only the account's devices read them")

    /// `item` with its records opened.
    /// - Throws: 409 `sealedOnDevices` without keys; 500 `recordUnopenable` for a record the
    ///   escrow's keys do not open (a device sealed it wrongly, or the database was changed).
    func open(_ item: ItemState) throws -> ItemState {
        guard item.record != nil || item.conflicts.contains(where: { $0.record != nil }) else { return item }
        guard let records else { throw Self.sealedOnDevices }
        do { return try records.opened(item) } catch { throw Self.unopenable(error) }
    }

    /// A folder's `entries` with their names, sizes and dates from their records: those read
    /// before taken from ``cache``, the rest opened at once on every core (a folder of ten
    /// thousand sealed names is sorted for its first page in well under the time opening them
    /// one by one takes) and kept.
    /// - Throws: 409 `sealedOnDevices` without keys; 500 `recordUnopenable` for a record the
    ///   escrow's keys do not open or whose name is not the tag shown beside it.
    func open(_ entries: [FolderEntry], in parent: String?) async throws -> [FolderEntry] {
        guard entries.contains(where: { $0.record != nil }) else { return entries }
        guard let records else { throw Self.sealedOnDevices }
        var opened = entries
        var missing: [(index: Int, key: OpenedRecordCache.Key)] = []
        for (index, entry) in entries.enumerated() {
            guard let record = entry.record else { continue }
            let key = OpenedRecordCache.Key(account: account, container: container, item: entry.id, parent: parent, shown: entry.name, record: record)
            if let known = cache?.opened(key) {
                (opened[index].name, opened[index].size, opened[index].modificationDate, opened[index].record) = (known.name, known.size, known.date, nil)
            } else {
                missing.append((index, key))
            }
        }
        // Slice k holds missing[k], missing[k + slices], …: each core a share of the folder.
        let slices = max(1, min(ProcessInfo.processInfo.activeProcessorCount, missing.count / 256))
        let keys = missing.map(\.key)
        let read = try await withThrowingTaskGroup(of: (Int, [OpenedRecordCache.Opened]).self) { group in
            for slice in 0..<slices {
                group.addTask {
                    (slice, try stride(from: slice, to: keys.count, by: slices).map { position in
                        let key = keys[position]
                        do {
                            let listed = try records.listed(key.record, item: key.item, parent: key.parent, shown: key.shown)
                            return OpenedRecordCache.Opened(name: listed.name, size: listed.size, date: listed.date)
                        } catch {
                            throw Self.unopenable(error)
                        }
                    })
                }
            }
            var read = [OpenedRecordCache.Opened?](repeating: nil, count: keys.count)
            for try await (slice, values) in group {
                for (offset, value) in values.enumerated() { read[slice + offset * slices] = value }
            }
            return read.compactMap { $0 }
        }
        guard read.count == keys.count else { throw SyncError(.internalServerError, "internal", "a folder's records were not all read") }
        for ((index, _), value) in zip(missing, read) {
            (opened[index].name, opened[index].size, opened[index].modificationDate, opened[index].record) = (value.name, value.size, value.date, nil)
        }
        cache?.keep(keys, read)
        return opened
    }

    /// An earlier revision with its record opened.
    func open(_ revision: RevisionContentsResponse, item: String) throws -> RevisionContentsResponse {
        guard revision.record != nil else { return revision }
        guard let records else { throw Self.sealedOnDevices }
        do { return try records.opened(revision, item: item) } catch { throw Self.unopenable(error) }
    }

    /// An earlier revision as listed, with its record opened.
    func open(_ revision: ItemRevision, item: String) throws -> ItemRevision {
        guard revision.record != nil else { return revision }
        guard let records else { throw Self.sealedOnDevices }
        do { return try records.opened(revision, item: item) } catch { throw Self.unopenable(error) }
    }

    /// A recoverable revision with its name, size and date from its record.
    func open(_ revision: RecoverableRevision) throws -> RecoverableRevision {
        guard revision.record != nil else { return revision }
        guard let records else { throw Self.sealedOnDevices }
        do { return try revision.opened(with: records) } catch { throw Self.unopenable(error) }
    }

    /// What a change made through the web interface goes as: its record sealed with the
    /// escrow's keys when the account has keys (its devices open it), as it is otherwise.
    func sealed(_ update: ItemUpdate, item: String) throws -> ItemUpdate {
        guard let records, records.seals else { return update }
        return try records.sealed(update, item: item, manifest: update.manifest)
    }

    private static func unopenable(_ error: any Error) -> SyncError {
        SyncError(.internalServerError, "recordUnopenable", "an item's record does not open with the account's keys (\(error))")
    }
}

extension RecoverableRevision {
    /// This revision with its name, size and date from its sealed record, opened by `records`
    /// (bound to its item and folder); as it is without a record.
    /// - Throws: ``ItemRecordError`` for a record that does not open there.
    func opened(with records: ItemRecords) throws -> RecoverableRevision {
        guard let sealed = record else { return self }
        var listed = ItemRevision(revision: revision, name: name, kind: .file, deviceName: deviceName, size: size,
                                  modificationDate: modificationDate, created: replacedAt, uploaded: uploaded)
        (listed.record, listed.parent) = (sealed, parent)
        let opened = try records.opened(listed, item: item)
        var result = self
        (result.name, result.size, result.modificationDate, result.record) = (opened.name, opened.size, opened.modificationDate, nil)
        return result
    }
}

extension SyncServices {
    /// The records of `container` for the server's pages (``WebRecords``).
    func webRecords(ofAccount accountId: Int64, container: String) async throws -> WebRecords {
        let rootKeys = try await escrow?.rootKeys(ofAccount: accountId, database: database)
        return WebRecords(records: rootKeys.flatMap { ItemRecords.keyed(container: container, rootKeys: $0, sealing: true) },
                          account: accountId, container: container, cache: openedRecords)
    }
}
