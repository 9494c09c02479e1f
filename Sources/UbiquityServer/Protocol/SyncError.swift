import Foundation
import UbiquityKeys
import UbiquityProtocol
import GRDB
import Hummingbird
import PostgresNIO

extension HTTPResponse.Status {
    /// 507 Insufficient Storage (WebDAV's, used for a full quota or disk).
    static var insufficientStorage: Self { .init(code: 507, reasonPhrase: "Insufficient Storage") }
}

/// An error the server answers with: an HTTP status, a stable code and a message. Nothing is
/// changed when a request fails with one.
package struct SyncError: Error, HTTPResponseError, CustomStringConvertible, Equatable {
    /// The HTTP status.
    package var status: HTTPResponse.Status
    /// A stable machine-readable code (`invalidName`, `forbidden`, …).
    package var code: String
    /// What went wrong.
    package var message: String
    /// When to try again, in seconds (`Retry-After`), for a refusal that passes.
    package var retryAfter: Int?
    /// The chunks a refused commit names that the account does not hold (`missingChunks`).
    package var missingChunks: [String]?

    /// Creates an error.
    package init(_ status: HTTPResponse.Status, _ code: String, _ message: String, retryAfter: Int? = nil, missingChunks: [String]? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
        self.missingChunks = missingChunks
    }

    /// The error body's value (also one refused commit's of a batch).
    package var body: ErrorResponse.Body { ErrorResponse.Body(code: code, message: message, missingChunks: missingChunks) }

    /// A one-line description.
    package var description: String { "\(status.code) \(code): \(message)" }

    /// The JSON error body.
    package func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = jsonBody()
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfter { headers[.retryAfter] = "\(retryAfter)" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    /// The JSON error body's bytes: `{"error":{"code":…,"message":…}}` (and `missingChunks`).
    func jsonBody() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Strings cannot fail to encode.
        return (try? encoder.encode(ErrorResponse(error: body))) ?? Data()
    }

    static func badRequest(_ code: String, _ message: String) -> SyncError { SyncError(.badRequest, code, message) }
    static let unauthorized = SyncError(.unauthorized, "unauthorized", "a valid device token is required (Authorization: Bearer …)")
    static let signInFailed = SyncError(.unauthorized, "signInFailed", "unknown account or wrong password")
    /// Too many sign-in attempts for the account or from the address: 429 with `Retry-After`.
    static func tooManyAttempts(retryAfter seconds: TimeInterval) -> SyncError {
        SyncError(.tooManyRequests, "tooManyAttempts", "too many sign-in attempts; try again later", retryAfter: max(1, Int(seconds.rounded(.up))))
    }
    /// The server has more of this work waiting than it takes: 503 with `Retry-After`.
    static func busy(retryAfter seconds: Int) -> SyncError {
        SyncError(.serviceUnavailable, "busy", "the server is busy; try again shortly", retryAfter: seconds)
    }
    static func forbidden(_ container: String) -> SyncError {
        SyncError(.forbidden, "forbidden", "this device is not entitled to container \(container)")
    }
    static let notFound = SyncError(.notFound, "notFound", "no such item")
    static func quotaExceeded(used: Int64, quota: Int64, adding: Int64) -> SyncError {
        SyncError(.insufficientStorage, "quotaExceeded", "the account's storage quota of \(quota) bytes would be exceeded (\(used) used, \(adding) more)")
    }
    /// A commit that names chunks the account does not hold: 409 `missingChunks`, naming
    /// them. Contents are uploaded before the commit that names them (the server never keeps a
    /// revision whose chunks nobody sent, or counts chunks it does not have).
    static func missingChunks(_ missing: [String]) -> SyncError {
        SyncError(.conflict, "missingChunks",
                  "the commit names \(missing.count) chunk(s) the account does not hold; upload them, then commit again: \(missing.prefix(8).joined(separator: ", "))\(missing.count > 8 ? ", …" : "")",
                  missingChunks: missing)
    }
    /// The server's disk (or its database's) is full: 507 `noSpace`. Nothing was changed; the
    /// request can be sent again once there is room.
    static let noSpace = SyncError(.insufficientStorage, "noSpace", "the server is out of disk space")

    /// Whether `error` says a disk is full: SQLite's `SQLITE_FULL`, PostgreSQL's `53100
    /// disk_full`, `ENOSPC`/`EDQUOT` from the file system.
    static func isStorageFull(_ error: any Error) -> Bool {
        if let error = error as? DatabaseError { return error.resultCode == .SQLITE_FULL }
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] == "53100" }
        if let error = error as? POSIXError { return error.code == .ENOSPC || error.code == .EDQUOT }
        if let error = error as? CocoaError { return error.code == .fileWriteOutOfSpace }
        let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? any Error
        return underlying.map(isStorageFull) ?? false
    }

    static let chunkNotFound = SyncError(.notFound, "notFound", "no such chunk")

    /// The account has no chunk `hash`.
    static func noSuchChunk(_ hash: String) -> SyncError { SyncError(.notFound, "notFound", "no such chunk: \(hash)") }
}

/// Rules every name, path, id and number from the network must pass.
enum Validate {
    /// A name (of an item, a package member, a device, an account): 1…255 bytes of UTF-8 in
    /// Unicode's composed form (NFC, as Apple's systems keep names), no `/`, no NUL or other
    /// control character (C0, DEL, C1), no invisible character that reorders or hides text
    /// (bidi controls, zero-width spaces, the byte-order mark …; the joiners that emoji and some
    /// scripts need are fine), no space at either end, not `.` or `..`. Answered 400
    /// `invalidName` saying which rule.
    static func name(_ name: String, field: String = "name") throws {
        let bytes = name.utf8.count
        guard bytes > 0 else { throw SyncError.badRequest("invalidName", "\(field) is empty") }
        guard bytes <= 255 else { throw SyncError.badRequest("invalidName", "\(field) is longer than 255 bytes") }
        guard !name.contains("/") else { throw SyncError.badRequest("invalidName", "\(field) contains '/'") }
        guard !name.unicodeScalars.contains("\0") else { throw SyncError.badRequest("invalidName", "\(field) contains NUL") }
        guard name != ".", name != ".." else { throw SyncError.badRequest("invalidName", "\(field) is '\(name)'") }
        if let bad = name.unicodeScalars.first(where: SafeText.isUnsafe) {
            throw SyncError.badRequest("invalidName", "\(field) contains the invisible or control character U+\(String(format: "%04X", bad.value))")
        }
        if let first = name.unicodeScalars.first, let last = name.unicodeScalars.last, first.properties.isWhitespace || last.properties.isWhitespace {
            throw SyncError.badRequest("invalidName", "\(field) begins or ends with a space")
        }
        guard name.unicodeScalars.elementsEqual(name.precomposedStringWithCanonicalMapping.unicodeScalars) else {
            throw SyncError.badRequest("invalidName", "\(field) is not in Unicode's composed form (NFC)")
        }
    }

    /// A relative path inside a package: names joined by `/`, never absolute, no `..`.
    static func memberPath(_ path: String) throws {
        guard !path.hasPrefix("/") else { throw SyncError.badRequest("invalidName", "member path \(path.debugDescription) is absolute") }
        guard path.utf8.count <= 4096 else { throw SyncError.badRequest("invalidName", "member path is longer than 4096 bytes") }
        for component in path.split(separator: "/", omittingEmptySubsequences: false) {
            try name(String(component), field: "member path component")
        }
    }

    /// An id: 1…128 characters of letters, digits, `-`, `_`, `.`.
    static func identifier(_ id: String, field: String) throws {
        guard !id.isEmpty, id.count <= 128, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) }) else {
            throw SyncError.badRequest("invalidIdentifier", "\(field) must be 1 to 128 letters, digits, '-', '_' or '.'")
        }
    }

    /// A container identifier: `TEAMID.bundle.id` (a team id, then at least two more components).
    static func container(_ identifier: String) throws {
        let parts = identifier.split(separator: ".", omittingEmptySubsequences: false)
        let valid = identifier.utf8.count <= 255 && parts.count >= 3
            && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") } }
        guard valid else { throw SyncError.badRequest("invalidContainer", "container identifiers look like TEAMID.bundle.id") }
    }

    /// A chunk hash: 64 lowercase hexadecimal digits.
    static func hash(_ hash: String) throws {
        guard hash.utf8.count == 64, hash.utf8.allSatisfy(\.isLowercaseHexDigit) else {
            throw SyncError.badRequest("invalidHash", "chunk hashes are 64 lowercase hexadecimal digits (SHA-256)")
        }
    }

    /// The largest chunk the server accepts.
    static let maximumChunkSize: Int64 = 16 << 20

    /// Key-value changes: keys of 1…64 bytes, values within Apple's limits, finite timestamps.
    static func keyValues(_ update: KeyValueUpdate) throws {
        guard update.changes.count <= KeyValueLimits.maximumKeys else {
            throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "at most \(KeyValueLimits.maximumKeys) changes at once")
        }
        var keys = Set<String>()
        for change in update.changes {
            guard !change.key.isEmpty, change.key.utf8.count <= KeyValueLimits.maximumKeyBytes else {
                throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "keys are 1 to \(KeyValueLimits.maximumKeyBytes) bytes of UTF-8")
            }
            guard keys.insert(change.key).inserted else { throw SyncError.badRequest("duplicateKey", "key \(change.key) appears twice") }
            guard change.timestamp.isFinite, abs(change.timestamp) < 1e11 else { throw SyncError.badRequest("invalidDate", "timestamp must be seconds since 1970") }
            if let value = change.value, try KeyValueLimits.size(key: change.key, value: value) > KeyValueLimits.maximumValueBytes {
                throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "a value is at most \(KeyValueLimits.maximumValueBytes) bytes")
            }
            try sealedKeyValue(change)
        }
    }

    /// A sealed key-value change: no value beside it, whether it removes the key said, a removal
    /// small and a value within what sealing adds to Apple's limit.
    static func sealedKeyValue(_ change: KeyValueChange) throws {
        guard let sealed = change.sealed else {
            guard change.removed == nil else { throw SyncError.badRequest("invalidKeyValue", "removed goes with a sealed change") }
            return
        }
        guard change.value == nil, let removed = change.removed else {
            throw SyncError.badRequest("invalidKeyValue", "a sealed change has no value beside it and says whether it removes the key")
        }
        let limit = removed ? KeyValueKeys.maximumSealedRemoval : KeyValueLimits.maximumSealedValueBytes
        guard sealed.count <= limit else {
            throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "a sealed \(removed ? "removal" : "value") is at most \(limit) bytes")
        }
    }

    /// The largest sealed item record the server keeps (a package of many members lists their
    /// paths in it).
    static let maximumRecordBytes = 1 << 20

    /// An item update: names, paths, hashes, sizes and dates. One with a sealed record says
    /// nothing the record holds: its name is a name-clash tag, no type, date 0, no inline bytes.
    static func update(_ update: ItemUpdate) throws {
        if let record = update.record {
            guard !record.isEmpty, record.count <= maximumRecordBytes else {
                throw SyncError.badRequest("invalidRecord", "a sealed record is 1 to \(maximumRecordBytes) bytes")
            }
            guard update.name.utf8.count == 32, update.name.utf8.allSatisfy(\.isLowercaseHexDigit) else {
                throw SyncError.badRequest("invalidRecord", "with a sealed record, the name is its name-clash tag: 32 lowercase hexadecimal digits")
            }
            guard update.type == nil, update.modificationDate == 0, update.contents == nil else {
                throw SyncError.badRequest("invalidRecord", "with a sealed record, type, date and inline contents are inside it")
            }
        }
        try name(update.name)
        if let parent = update.parent { try identifier(parent, field: "parent") }
        if let base = update.baseRevision { try identifier(base, field: "baseRevision") }
        if let change = update.changeId { try identifier(change, field: "changeId") }
        guard update.modificationDate.isFinite, abs(update.modificationDate) < 1e11 else {
            throw SyncError.badRequest("invalidDate", "modificationDate must be seconds since 1970")
        }
        if let type = update.type, type.utf8.count > 255 { throw SyncError.badRequest("invalidType", "type is longer than 255 bytes") }
        let manifest = update.manifest
        switch update.kind {
        case .file:
            guard manifest.members == nil else { throw SyncError.badRequest("invalidManifest", "a file's manifest has chunks, not members") }
        case .package:
            guard manifest.chunks == nil else { throw SyncError.badRequest("invalidManifest", "a package's manifest has members, not chunks") }
        case .directory:
            guard manifest.allChunks.isEmpty else { throw SyncError.badRequest("invalidManifest", "a directory has no contents") }
        }
        var paths = Set<String>()
        for member in manifest.members ?? [] {
            if member.path.hasSuffix("/") {
                guard member.chunks.isEmpty else { throw SyncError.badRequest("invalidManifest", "member \(member.path) is an empty folder: it has no chunks") }
                try memberPath(String(member.path.dropLast()))
            } else {
                try memberPath(member.path)
            }
            guard paths.insert(member.path).inserted else { throw SyncError.badRequest("invalidManifest", "member \(member.path) appears twice") }
        }
        let chunks = manifest.allChunks
        guard chunks.count <= 100_000 else { throw SyncError.badRequest("invalidManifest", "more than 100,000 chunks") }
        for chunk in chunks {
            try hash(chunk.hash)
            guard chunk.size >= 0, chunk.size <= maximumChunkSize else {
                throw SyncError.badRequest("invalidSize", "chunk sizes are 0 to \(maximumChunkSize) bytes")
            }
        }
    }
}

extension KeyValueLimits {
    /// At most this many key-value stores per account (one per app, as on Apple's systems).
    static let maximumStoresPerAccount = 256

    /// Throws `tooManyStores` (507) when an account that has `existing` stores may not have one more.
    static func checkStoreCount(existing: Int) throws {
        guard existing < maximumStoresPerAccount else {
            throw SyncError(.insufficientStorage, "tooManyStores",
                            "an account holds at most \(maximumStoresPerAccount) key-value stores")
        }
    }

    /// Throws `keyValueQuotaViolation` (413) unless a store of `keys` keys and `bytes` bytes is
    /// within Apple's limits (`sealed`: with what sealing adds, which devices check themselves).
    static func checkStore(keys: Int, bytes: Int, sealed: Bool = false) throws {
        guard keys <= maximumKeys else {
            throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "a key-value store holds at most \(maximumKeys) keys; this would make \(keys)")
        }
        let limit = sealed ? maximumSealedTotalBytes : maximumTotalBytes
        guard bytes <= limit else {
            throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "a key-value store holds at most \(limit) bytes; this would make \(bytes)")
        }
    }
}
