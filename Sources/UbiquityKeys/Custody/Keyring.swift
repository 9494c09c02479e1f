import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What one device keeps of its account's keys, in a file of its own (mode 0600, format 1,
/// refused if others can read it): its device keys, the roster head it has seen (pinned: a
/// roster that does not extend it is refused), and every epoch's root key it holds.
public struct Keyring: Sendable {
    /// The file's format.
    public static let fileFormat = 1

    /// The account (its identity token) these keys belong to.
    public let account: String
    /// This device's keys.
    public let device: DeviceKeys
    /// The last roster head this device accepted.
    public private(set) var pinned: RosterHead?
    private var rootKeys: [UInt32: AccountRootKey] = [:]

    /// A new keyring for `account`, with new device keys.
    public init(account: String) {
        self.account = account
        device = DeviceKeys()
    }

    /// This device's identifier in the roster.
    public var deviceIdentifier: String { device.publicKeys.deviceIdentifier }

    /// The epochs whose root key this device holds, oldest first.
    public var epochs: [UInt32] { rootKeys.keys.sorted() }

    /// The root key of `epoch`, if this device holds it.
    public func rootKey(epoch: UInt32) -> AccountRootKey? { rootKeys[epoch] }

    /// Keeps `root` (a new epoch this device made, or one opened from an envelope).
    public mutating func add(_ root: AccountRootKey) { rootKeys[root.epoch] = root }

    /// Checks the roster the server served against the head this device pinned, and pins its
    /// new head.
    /// - Throws: ``Roster/verify(_:pinned:)``'s refusals (`.rosterNotExtended` for a roster rolled
    ///   back, forked or rewritten since this device saw it).
    @discardableResult
    public mutating func accept(_ entries: [RosterEntry]) throws -> Roster {
        let roster = try Roster.verify(entries, pinned: pinned)
        pinned = roster.head
        return roster
    }

    /// Opens the envelopes sealed to this device whose sender the roster vouches for: a device
    /// that is or was in it, or the escrow it names now. Envelopes this device cannot open are
    /// refused one by one (the others are still taken).
    /// - Returns: The refusals, each naming its epoch and sender.
    public mutating func take(_ envelopes: [(epoch: UInt32, sender: String, body: Data)], roster: Roster) -> [EncryptionError] {
        var refusals: [EncryptionError] = []
        for envelope in envelopes where rootKeys[envelope.epoch] == nil {
            let sender = envelope.sender == EscrowKey.escrowRecipient ? roster.escrow : roster.everyDevice[envelope.sender]
            guard let sender else {
                refusals.append(EncryptionError(.badSignature, "the root key of epoch \(envelope.epoch) was sealed by \(envelope.sender), which the roster does not vouch for"))
                continue
            }
            do {
                let root = try KeyEnvelope.open(envelope.body, account: account, recipient: device, sender: sender)
                guard root.epoch == envelope.epoch else { throw EncryptionError(.authenticationFailed, "an envelope filed under epoch \(envelope.epoch) holds epoch \(root.epoch)") }
                rootKeys[root.epoch] = root
            } catch let error as EncryptionError {
                refusals.append(error)
            } catch {
                refusals.append(EncryptionError(.authenticationFailed, "the root key of epoch \(envelope.epoch) does not open: \(error)"))
            }
        }
        return refusals
    }

    private struct File: Codable {
        var format: Int
        var account: String
        var signing: Data
        var agreement: Data
        var pinnedIndex: UInt64?
        var pinnedHash: Data?
        var rootKeys: [String: Data]
    }

    /// Writes the keyring to `url` (mode 0600, replaced atomically, synced).
    /// - Throws: ``EncryptionError`` `.keyFileUnusable` when it cannot be written.
    public func write(to url: URL) throws {
        let (signing, agreement) = device.privateBytes
        let file = File(format: Self.fileFormat, account: account, signing: Data(signing), agreement: Data(agreement),
                        pinnedIndex: pinned?.index, pinnedHash: pinned.map { Data($0.hash) },
                        rootKeys: Dictionary(uniqueKeysWithValues: rootKeys.map { (String($0.key), $0.value.withUnsafeBytes { Data($0) }) }))
        try PrivateFile.write(try JSONEncoder().encode(file), to: url)
    }

    /// Reads a keyring written by ``write(to:)``.
    /// - Throws: ``EncryptionError`` `.keyFileUnusable`: missing, readable by others, another
    ///   format, or damaged.
    public init(contentsOf url: URL) throws {
        let data = try PrivateFile.read(url, what: "keyring")
        guard let file = try? JSONDecoder().decode(File.self, from: data), file.signing.count == 32, file.agreement.count == 32,
              (file.pinnedIndex == nil) == (file.pinnedHash == nil) else {
            throw EncryptionError(.keyFileUnusable, "the keyring at \(url.path) is damaged")
        }
        guard file.format == Self.fileFormat else { throw EncryptionError(.keyFileUnusable, "the keyring at \(url.path) is in format \(file.format)") }
        account = file.account
        device = DeviceKeys(signing: Array(file.signing), agreement: Array(file.agreement))
        if let index = file.pinnedIndex, let hash = file.pinnedHash { pinned = RosterHead(index: index, hash: Array(hash)) }
        for (epoch, bytes) in file.rootKeys {
            guard let number = UInt32(epoch) else { throw EncryptionError(.keyFileUnusable, "the keyring at \(url.path) is damaged") }
            rootKeys[number] = try AccountRootKey(epoch: number, bytes: bytes)
        }
    }
}

/// Files only their owner may read: written whole (0600 from the start, synced, renamed into
/// place, the folder synced), refused when read if others could read them.
enum PrivateFile {
    static func write(_ data: Data, to url: URL) throws {
        let folder = url.deletingLastPathComponent()
        let temporary = folder.appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString)")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw EncryptionError(.keyFileUnusable, "cannot write the keys at \(url.path): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written == data.count, synced else {
            try? FileManager.default.removeItem(at: temporary) // what is left of a failed write
            throw EncryptionError(.keyFileUnusable, "cannot write the keys at \(url.path)")
        }
        guard rename(temporary.path, url.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: temporary) // what is left of a failed write
            throw EncryptionError(.keyFileUnusable, "cannot put the keys in place at \(url.path): \(reason)")
        }
        let directory = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory) // the rename on disk too
            close(directory)
        }
    }

    static func read(_ url: URL, what: String) throws -> Data {
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        guard let mode = attributes?[.posixPermissions] as? Int else { throw EncryptionError(.keyFileUnusable, "no \(what) at \(url.path)") }
        guard mode & 0o077 == 0 else { throw EncryptionError(.keyFileUnusable, "the \(what) at \(url.path) is readable by others (mode \(String(mode, radix: 8))): not used") }
        guard let data = try? Data(contentsOf: url) else { throw EncryptionError(.keyFileUnusable, "the \(what) at \(url.path) cannot be read") }
        return data
    }
}
