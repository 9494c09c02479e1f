import Foundation

/// The kinds of fault the harness injects.
enum FaultKind: String, CaseIterable, Codable, Sendable {
    /// SIGKILL an agent, start it again 0–2 s later.
    case agentKill
    /// SIGKILL the server, start it again 0–3 s later (devices reconnect through their relays).
    case serverKill
    /// SIGKILL a device's writer — an app killed mid-save, mid-move, with a document open or a
    /// coordinated write held — and start it again 0–2 s later (it recovers from its ledger).
    case appKill
    /// A device's network gone for 1–5 s (open connections reset, new ones refused).
    case cut
    /// A device's network silent for 1–8 s (bytes held, no error).
    case stall
    /// A device's network at about 10 KB/s for 2–8 s.
    case drip
    /// A device's connections each delayed on their own for 2–8 s (requests reordered).
    case jitter
    /// Every open connection of a device reset at once.
    case reset
    /// A device offline for a long stretch (a quarter to a half of the round).
    case offline
    /// A device's disk full for 2–6 s (its home is a small filesystem of its own).
    case diskFull
    /// The server's disk full for 1–4 s.
    case serverDiskFull
    /// Thousands of files made and removed in a device's folder at once: more file events than
    /// the kernel queues for the agent's watcher.
    case flood
    /// A device signed out of the account (`ubiquity logout`) for 2–6 s, then in again as a new
    /// device of the same account (`ubiquity login`), its agent running throughout.
    case signOut
    /// `ubiquity seal-in-place` run on the server's storage beside the running servers (every
    /// plaintext revision, however young, sealed in place with the escrow key while devices
    /// edit from them), SIGKILLed 0–2 s in unless it ends first.
    case sealInPlace
    /// With `--share`: the owner removes the other account from the shared folder, and 2–6 s
    /// later invites it again and it accepts (its devices' agents see the folder go and come).
    case shareRemoval
    /// With `--share`: a file in the shared folder moved (renamed inside it) on one of the
    /// owner's devices, and that device's agent SIGKILLed at once, started again 0–2 s later.
    case moveKill
    /// With `--object-store`: the object store stopped for 1–4 s, then started again.
    case storeDown
    /// With `--object-store`: the servers' link to the object store silent for 1–5 s.
    case storeStall
    /// With `--object-store`: the object store answering every new request 503 `SlowDown` for
    /// 1–4 s (open connections reset).
    case storeErrors
    /// With `--object-store`: requests reach the object store (PUTs land) but no answer comes
    /// back for 1–3 s; then the connections reset.
    case storeLostAnswers

    /// How often it is picked (out of the sum).
    var weight: Int {
        switch self {
        case .agentKill: 5
        case .serverKill: 2
        case .appKill: 3
        case .cut: 4
        case .stall: 3
        case .drip: 2
        case .jitter: 2
        case .reset: 3
        case .offline: 1
        case .diskFull: 2
        case .serverDiskFull: 1
        case .flood: 1
        case .signOut: 1
        case .sealInPlace: 2
        case .shareRemoval: 1
        case .moveKill: 2
        case .storeDown: 3
        case .storeStall: 5
        case .storeErrors: 5
        case .storeLostAnswers: 5
        }
    }

    /// Whether it needs a folder shared with another account (`--share`).
    var needsShare: Bool { self == .shareRemoval || self == .moveKill }
    /// Whether it needs an object store (`--object-store`).
    var needsObjectStore: Bool { [.storeDown, .storeStall, .storeErrors, .storeLostAnswers].contains(self) }
}
