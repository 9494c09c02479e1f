import Foundation
import HTTPTypes
import Hummingbird
import UbiquityProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `GET /web/api/admin/accounts`: every account with its quota, usage and devices.
struct WebAdminAccountsResponse: Codable, ResponseEncodable {
    var accounts: [WebAdminAccount]
}

/// An account as the administration page lists it.
struct WebAdminAccount: Codable, Sendable, Equatable {
    var name: String
    var admin: Bool
    var quotaBytes: Int64
    var usedBytes: Int64
    /// Its items not deleted, in every container.
    var items: Int64
    /// Its devices signed in now (revoked ones are not listed; `current`: the operator's browser).
    var devices: [WebDevice]
}

/// `POST /web/api/admin/accounts/:account/quota`.
struct WebQuotaRequest: Codable {
    var bytes: Int64
}

/// `GET /web/api/admin/health`: the server's state and figures.
struct WebHealthResponse: Codable, ResponseEncodable {
    /// "ok", or what is wrong (the database does not answer).
    var status: String
    /// "SQLite" or "PostgreSQL".
    var database: String
    var uptimeSeconds: Double
    var accounts: Int
    var devices: Int
    /// Push connections and page event streams open now.
    var connections: Int
    /// Since the server started.
    var requests: Int
    var clientErrors: Int
    var serverErrors: Int
    var commits: Int
    var chunkBytesReceived: Int
    /// What all accounts use (as their quotas count it) and their quotas together.
    var usedBytes: Int64
    var quotaBytes: Int64
    /// The file system that holds the chunks (nil when they are not in files).
    var diskTotalBytes: Int64?
    var diskFreeBytes: Int64?
}

extension SyncServices {
    /// The operator's pages: accounts, quotas, devices, health and storage — for accounts made
    /// operators with `ubiquity account admin` only (403 for any other).
    func addWebAdminRoutes(to api: RouterGroup<SyncContext>) {
        let operators = api.group("admin")
        operators.get("accounts") { _, context in
            _ = try await requireAdmin(context)
            let asking = try context.requireDevice()
            var listed: [WebAdminAccount] = []
            for account in try await database.accounts() {
                let usage = try await database.usage(ofAccount: account.id)
                let devices = try await database.devices(ofAccount: account.name).filter { !$0.revoked }
                listed.append(WebAdminAccount(name: account.name, admin: account.admin, quotaBytes: usage.quota, usedBytes: usage.used, items: usage.items,
                                              devices: devices.map { WebDevice(id: $0.id, name: $0.name, created: $0.created, lastSeen: $0.lastSeen, current: $0.id == asking.deviceId) }))
            }
            return WebAdminAccountsResponse(accounts: listed)
        }
        operators.post("accounts/:account/quota") { request, context -> HTTPResponse.Status in
            let admin = try await requireAdmin(context)
            let name = try context.parameters.require("account")
            let asked = try await request.decode(as: WebQuotaRequest.self, context: context)
            guard asked.bytes >= 0 else { throw SyncError.badRequest("invalidQuota", "a quota is 0 bytes or more") }
            guard try await database.setQuota(ofAccount: name, bytes: asked.bytes) else { throw SyncError(.notFound, "notFound", "no such account") }
            context.logger.notice("an account's quota was set from the web interface",
                                  metadata: ["operator": "\(admin.name)", "account": "\(name)", "bytes": "\(asked.bytes)"])
            return .noContent
        }
        operators.post("devices/:device/revoke") { _, context -> HTTPResponse.Status in
            let admin = try await requireAdmin(context)
            let id = try context.parameters.require("device")
            try Validate.identifier(id, field: "device")
            guard try await database.revokeDevice(id: id) else { throw SyncError(.notFound, "notFound", "no such device") }
            notifier.disconnect([id])
            context.logger.notice("a device was signed out by an operator", metadata: ["operator": "\(admin.name)", "device": "\(id)"])
            return .noContent
        }
        operators.get("health") { _, context in
            _ = try await requireAdmin(context)
            var status = "ok"
            do { try await database.ping() } catch { status = "the database does not answer: \(error)" }
            let accounts = try await database.accounts()
            var used: Int64 = 0, quota: Int64 = 0, devices = 0
            for account in accounts {
                let usage = try await database.usage(ofAccount: account.id)
                used += usage.used
                quota += usage.quota
                devices += try await database.devices(ofAccount: account.name).filter { !$0.revoked }.count
            }
            var disk: (total: Int64, free: Int64)?
            if let folder = chunks.folder {
                var info = statvfs()
                if statvfs(folder, &info) == 0 {
                    disk = (Int64(info.f_blocks) * Int64(info.f_frsize), Int64(info.f_bavail) * Int64(info.f_frsize))
                }
            }
            let uptime = ContinuousClock.now - metrics.started
            return WebHealthResponse(
                status: status, database: database is PostgresDatabase ? "PostgreSQL" : "SQLite",
                uptimeSeconds: Double(uptime.components.seconds) + Double(uptime.components.attoseconds) / 1e18,
                accounts: accounts.count, devices: devices, connections: notifier.listening.connections,
                requests: metrics.value(.requests), clientErrors: metrics.value(.clientErrors), serverErrors: metrics.value(.serverErrors),
                commits: metrics.value(.commits), chunkBytesReceived: metrics.value(.chunkBytesReceived),
                usedBytes: used, quotaBytes: quota, diskTotalBytes: disk?.total, diskFreeBytes: disk?.free)
        }
    }

    /// The signed-in account, when it is an operator's.
    /// - Throws: 403 `notAnOperator` for any other account.
    func requireAdmin(_ context: SyncContext) async throws -> Account {
        let device = try context.requireDevice()
        guard let account = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
        guard account.admin else {
            context.logger.notice("the administration pages were asked for by an account that is not an operator's", metadata: ["account": "\(account.name)"])
            throw SyncError(.forbidden, "notAnOperator", "this account is not an operator of the server")
        }
        return account
    }
}
