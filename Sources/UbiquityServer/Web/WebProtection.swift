import Foundation
import Hummingbird
import UbiquityKeys
import UbiquityProtocol

/// `GET /web/api/protection`: the account's data protection as its roster says it is — what the
/// Devices page shows beside the signed-in devices. Read only: every change to the keys is
/// signed by a device (`ubiquity protection`, `devices`, `recovery-key`).
struct WebProtectionResponse: Codable, ResponseEncodable {
    /// A device holding the account's keys.
    struct KeyDevice: Codable, Equatable {
        var id: String
        var name: String
    }

    /// A device waiting to join by a code.
    struct Waiting: Codable, Equatable {
        var name: String
        var created: Double
        /// Whether a device answered it (the new device then shows a code to type there).
        var answered: Bool
    }

    /// `standard`, `advanced`, or nil when no device has set the keys up.
    var custody: String?
    var epoch: UInt32
    var devices: [KeyDevice]
    var removed: Int
    /// Whether the account has a recovery key.
    var recoveryKey: Bool
    var waiting: [Waiting]
    /// Whether the account's devices require everything sealed (`ubiquity protection require-sealed`).
    var sealedOnly = false
    /// Web browsers a device let in under Advanced whose sessions have not ended: their keys
    /// sign the page's changes until then.
    var webSessions: [WebSessionEntry] = []

    /// A browser a device let in.
    struct WebSessionEntry: Codable, Equatable {
        var id: String
        /// The name of the device that let it in.
        var approver: String
        /// When its grant ends (seconds since 1970).
        var expires: Double
    }
}

extension SyncServices {
    /// The Devices page's data protection.
    func addWebProtectionRoutes(to api: RouterGroup<SyncContext>) {
        api.get("protection") { _, context in
            let device = try context.requireDevice()
            let stored = try await database.accountKeys(accountId: device.accountId, recipients: [])
            let waiting = try await database.keyRequests(accountId: device.accountId, since: Date().timeIntervalSince1970 - KeyLimits.requestLifetime)
                .map { WebProtectionResponse.Waiting(name: $0.request.name, created: $0.request.created, answered: $0.request.answerer != nil) }
            guard !stored.roster.isEmpty else {
                return WebProtectionResponse(custody: nil, epoch: 0, devices: [], removed: 0, recoveryKey: false, waiting: waiting)
            }
            let roster: Roster
            do { roster = try Roster.verify(try stored.roster.map { try RosterEntry(encoded: $0) }) } catch {
                throw SyncError(.conflict, "badRoster", "the account's stored roster does not verify: \(error)")
            }
            return WebProtectionResponse(custody: roster.custody == .advanced ? "advanced" : "standard", epoch: roster.epoch,
                                         devices: roster.members.map { .init(id: $0.key, name: $0.value.name) }.sorted { ($0.name, $0.id) < ($1.name, $1.id) },
                                         removed: roster.removed.count, recoveryKey: roster.recovery != nil, waiting: waiting,
                                         sealedOnly: roster.requiresSealing,
                                         webSessions: roster.webSessions.filter { $0.value.until == nil }.sorted { $0.key < $1.key }.map { id, term in
                                             .init(id: id, approver: roster.members[term.approver]?.name ?? "a removed device", expires: Double(term.expires))
                                         })
        }
    }
}
