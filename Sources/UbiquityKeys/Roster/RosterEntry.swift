import Crypto
import Foundation

/// Who holds the account's root key besides its devices.
public enum Custody: UInt8, Sendable, Equatable {
    /// Standard Data Protection: also sealed to the server's escrow key.
    case standard = 1
    /// Advanced Data Protection: its devices and the recovery key only.
    case advanced = 2
}

/// One change to the account's roster.
public enum RosterChange: Sendable, Equatable {
    /// The account's first device, which signs its own entry.
    case genesis(keys: DevicePublicKeys, name: String)
    /// A device joins.
    case addDevice(keys: DevicePublicKeys, name: String)
    /// A device leaves; a new epoch begins (what is written from then on is unreadable to it).
    case removeDevice(identifier: String)
    /// A new epoch (a new root key).
    case newEpoch(UInt32)
    /// Who holds the root key; turning Advanced on begins a new epoch.
    case custody(Custody)
    /// The oldest format the account's devices may write or accept from now on (never lowered).
    case minimumFormat(UInt8)
    /// The server's escrow key under Standard custody (nil: none): it holds a copy of the root
    /// key and may add devices (a password sign-in), nothing else, and only while the custody is
    /// Standard. Set and cleared by devices alone.
    case escrow(DevicePublicKeys?)
    /// The public half of the account's recovery key (nil: none): whoever holds the recovery key
    /// may add a device — the way back in when every device is lost — and nothing else, under
    /// either custody. Set and cleared by devices alone.
    case recovery(DevicePublicKeys?)
    /// A browser a device of the roster let in under Advanced Data Protection (``WebGrant``):
    /// its signing key may sign commits — the page's own changes — from this entry until the
    /// session ends, and nothing else (no roster entry, no key). Signed by the approving
    /// device; `expires` is when its grant ends (seconds since 1970), after which a device
    /// ends the session.
    case addWebSession(keys: DevicePublicKeys, expires: UInt64)
    /// A browser's session ended (its grant expired, or a device ended it): what its key signs
    /// naming a later entry is refused, and devices close its chains as a removed device's.
    case endWebSession(identifier: String)

    /// A canonical encoding, for signing and hashing.
    var bytes: [UInt8] {
        var binding = Binding("roster change", format: RosterEntry.format, epoch: 0)
        switch self {
        case .genesis(let keys, let name):
            binding.append([0]); binding.append(keys.signing); binding.append(keys.agreement); binding.append(name)
        case .addDevice(let keys, let name):
            binding.append([1]); binding.append(keys.signing); binding.append(keys.agreement); binding.append(name)
        case .removeDevice(let identifier):
            binding.append([2]); binding.append(identifier)
        case .newEpoch(let epoch):
            binding.append([3]); binding.append(UInt64(epoch))
        case .custody(let custody):
            binding.append([4]); binding.append([custody.rawValue])
        case .minimumFormat(let format):
            binding.append([5]); binding.append([format])
        case .escrow(let keys):
            binding.append([6]); binding.append(keys?.signing ?? []); binding.append(keys?.agreement ?? [])
        case .recovery(let keys):
            binding.append([7]); binding.append(keys?.signing ?? []); binding.append(keys?.agreement ?? [])
        case .addWebSession(let keys, let expires):
            binding.append([8]); binding.append(keys.signing); binding.append(keys.agreement); binding.append(expires)
        case .endWebSession(let identifier):
            binding.append([9]); binding.append(identifier)
        }
        return binding.bytes
    }
}

/// An entry of the roster: an append-only, hash-chained list of changes, each signed by a
/// device that was in the roster when it was made. Stored by the server, written only by
/// devices; each device pins the head it has seen and refuses a roster that does not extend it.
public struct RosterEntry: Sendable, Equatable {
    /// The entries' format.
    public static let format: UInt8 = 1

    /// Its place (0 for the genesis).
    public let index: UInt64
    /// The hash of the entry before it (32 zero bytes for the genesis).
    public let previous: [UInt8]
    /// What it changes.
    public let change: RosterChange
    /// The device that signed it.
    public let signer: String
    /// The signer's Ed25519 signature over ``signedBytes``.
    public let signature: [UInt8]

    /// What is signed: format, index, previous hash, change and signer.
    public var signedBytes: [UInt8] { Self.signedBytes(index: index, previous: previous, change: change, signer: signer) }

    static func signedBytes(index: UInt64, previous: [UInt8], change: RosterChange, signer: String) -> [UInt8] {
        var binding = Binding("roster entry", format: Self.format, epoch: 0)
        binding.append(index)
        binding.append(previous)
        binding.append(change.bytes)
        binding.append(signer)
        return binding.bytes
    }

    /// The entry's hash, which the next entry names.
    public var hash: [UInt8] { Array(SHA256.hash(data: signedBytes + signature)) }

    /// An entry as read back (checked by ``Roster/verify(_:pinned:)``).
    public init(index: UInt64, previous: [UInt8], change: RosterChange, signer: String, signature: [UInt8]) {
        self.index = index
        self.previous = previous
        self.change = change
        self.signer = signer
        self.signature = signature
    }

    /// A new entry after `head`, signed by `device`.
    /// - Parameters:
    ///   - change: What it changes.
    ///   - head: The roster's last entry (nil for the genesis).
    ///   - device: The signing device's keys.
    /// - Throws: What signing throws.
    public init(_ change: RosterChange, after head: RosterEntry?, signedBy device: DeviceKeys) throws {
        index = head.map { $0.index + 1 } ?? 0
        previous = head?.hash ?? Array(repeating: 0, count: 32)
        self.change = change
        signer = device.publicKeys.deviceIdentifier
        signature = try device.sign(Self.signedBytes(index: index, previous: previous, change: change, signer: signer))
    }
}
