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

    /// `entry` with its name, size and date from its record (`parent`: the folder listed).
    func open(_ entry: FolderEntry, in parent: String?) throws -> FolderEntry {
        guard let sealed = entry.record else { return entry }
        guard let records else { throw Self.sealedOnDevices }
        var state = ItemState(id: entry.id, revision: "", name: entry.name, parent: parent, kind: entry.kind, size: entry.size,
                              modificationDate: entry.modificationDate, deleted: false, uploaded: entry.uploaded, deviceName: entry.deviceName,
                              sequence: 0, manifest: Manifest(), conflicts: [])
        state.record = sealed
        state.digest = "" // brief: the manifest is not read
        let opened: ItemState
        do { opened = try records.opened(state) } catch { throw Self.unopenable(error) }
        var entry = entry
        (entry.name, entry.size, entry.modificationDate, entry.record) = (opened.name, opened.size, opened.modificationDate, nil)
        return entry
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

extension SyncServices {
    /// The records of `container` for the server's pages (``WebRecords``).
    func webRecords(ofAccount accountId: Int64, container: String) async throws -> WebRecords {
        let rootKeys = try await escrow?.rootKeys(ofAccount: accountId, database: database)
        return WebRecords(records: rootKeys.flatMap { ItemRecords.keyed(container: container, rootKeys: $0, sealing: true) })
    }
}
