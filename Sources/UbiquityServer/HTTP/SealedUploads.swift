import Foundation
import Hummingbird
import UbiquityKeys
import UbiquityProtocol

/// What the server needs to know of an account's keys to take sealed data: its custody (from the
/// roster it keeps), and whether an upload says its chunks are sealed.
extension SyncServices {
    /// The account's roster as it stands (nil: no keys set up yet).
    /// - Throws: ``SyncError`` `badRoster` when the stored roster does not verify.
    func roster(ofAccount accountId: Int64) async throws -> Roster? {
        let stored = try await database.accountKeys(accountId: accountId, recipients: [])
        guard !stored.roster.isEmpty else { return nil }
        do {
            return try Roster.verify(stored.roster.map { try RosterEntry(encoded: $0) })
        } catch {
            throw SyncError(.conflict, "badRoster", "the account's stored roster does not verify: \(error)")
        }
    }

    /// The account's custody as its roster says (nil: no roster yet).
    /// - Throws: ``SyncError`` `badRoster` when the stored roster does not verify.
    func custody(ofAccount accountId: Int64) async throws -> Custody? {
        try await roster(ofAccount: accountId)?.custody
    }

    /// Why the account takes no name or value in plaintext, if it takes none: it is under
    /// Advanced Data Protection (the server could not seal them), or its devices require
    /// everything sealed (``Roster/sealedOnlyFormat``: a plaintext one would be refused by
    /// every device as a downgrade).
    /// (Read as ``AccountFacts`` keeps it for the device's account.)
    func sealedOnly(_ device: DeviceAuth) async throws -> String? {
        guard let roster = try await accountFacts.roster(of: device, load: { try await roster(ofAccount: device.accountId) }) else { return nil }
        if roster.custody == .advanced { return "the account uses Advanced Data Protection" }
        if roster.requiresSealing { return "the account's devices require everything sealed" }
        return nil
    }

    /// Refuses, under Advanced Data Protection or once the account's devices require everything
    /// sealed, updates that would keep a name in plaintext: each but a deletion carries a
    /// sealed record there (a device of an older build, or one told not to seal, is told to
    /// update). The roster is read only when an update has no record.
    /// - Throws: ``SyncError`` 409 `sealedOnly`.
    func refusePlaintext(_ updates: [ItemUpdate], of device: DeviceAuth) async throws {
        guard updates.contains(where: { $0.record == nil && $0.deleted != true }) else { return }
        if let why = try await sealedOnly(device) {
            throw SyncError(.conflict, "sealedOnly", "\(why): its devices seal every name (update this device's ubiquity)")
        }
    }

    /// Whether an upload's chunks are sealed (`?sealed=1`): only an account whose devices hold
    /// its keys sends them.
    /// - Throws: ``SyncError`` 409 `noKeys` for an account with no keys set up; 400 for another value.
    func sealedUpload(_ request: Request, device: DeviceAuth) async throws -> Bool {
        switch request.uri.queryParameters["sealed"].map(String.init) {
        case nil, "0": return false
        case "1":
            // Whether keys are set up at all (not their custody): no signature checked per upload.
            guard try await !database.accountKeys(accountId: device.accountId, recipients: []).roster.isEmpty else {
                throw SyncError(.conflict, "noKeys", "sealed chunks come from an account whose devices hold its keys; this one has none set up")
            }
            return true
        default: throw SyncError.badRequest("invalidSealed", "sealed is 0 or 1")
        }
    }
}
