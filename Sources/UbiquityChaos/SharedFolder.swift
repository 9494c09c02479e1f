import Foundation
import Synchronization
import Ubiquity
import UbiquityTestSupport

/// `--share`: the folder every device writes into is the first account's, shared (read-write)
/// with a second account, whose device writes into it too. Each round the owner removes the
/// other account and invites it again, and one of the owner's devices is killed just after a
/// move inside the folder; the checks hold each account to its own files and both to the
/// shared folder (docs/Reliability.md, docs/Sharing.md).
extension Harness {
    /// The harness's account.
    static let owner = "ada"
    /// The account the shared folder is shared with (`--share`: the last device's).
    static let participant = "bob"

    /// The owner's devices.
    var owners: [ChaosDevice] { devices.filter { !$0.isParticipant } }
    /// The participant's devices.
    var participants: [ChaosDevice] { devices.filter(\.isParticipant) }

    /// Makes the shared folder on the owner's first device, shares it with the participant's
    /// account, accepts on the participant's device, and waits until it is on every one of them.
    func shareFolder() async throws {
        guard let owner = owners.first, owner.root != nil, !participants.isEmpty else {
            throw ChaosError("--share needs at least two devices: the last is the other account's")
        }
        try FileManager.default.createDirectory(at: owner.root!.appendingPathComponent(Layout.shared), withIntermediateDirectories: true)
        try await invite()
        try await accept()
        note("shared \(Layout.shared) with \(Self.participant)")
    }

    /// Asks an owner's device whose agent runs to share the folder with the participant (its
    /// agent must know the folder first: asked again each half second, for up to a minute).
    func invite() async throws {
        try await retrying("sharing \(Layout.shared) with \(Self.participant)") {
            guard let owner = self.owners.first(where: { $0.agentIsRunning && $0.root != nil }) else { throw ChaosError("no owner's agent runs") }
            let folder = owner.root!.appendingPathComponent(Layout.shared).path
            _ = try await blocking { try owner.containers.agent.send(AgentRequest(.share, path: folder, participant: Self.participant), timeout: .seconds(30)) }
        }
    }

    /// Accepts the owner's invitation on a participant's device, and waits until the folder is
    /// on every participant's device.
    func accept() async throws {
        try await retrying("accepting \(Self.owner)'s invitation") {
            guard let guest = self.participants.first(where: \.agentIsRunning) else { throw ChaosError("no participant's agent runs") }
            let shares = try await blocking { try guest.containers.agent.send(AgentRequest(.shares), timeout: .seconds(30)).shares ?? [] }
            guard let invitation = shares.first(where: { $0.standing == .invited && $0.owner == Self.owner }) else {
                if shares.contains(where: { $0.standing == .joined && $0.owner == Self.owner }) { return }
                throw ChaosError("no invitation yet")
            }
            _ = try await blocking { try guest.containers.agent.send(AgentRequest(.answerInvitation, share: invitation.id, accept: true), timeout: .seconds(30)) }
        }
        try await retrying("the shared folder reaching \(Self.participant)'s devices") {
            for device in self.participants where !(device.root.map { FileManager.default.fileExists(atPath: $0.appendingPathComponent(Layout.shared).path) } ?? false) {
                throw ChaosError("not on \(device.name) yet")
            }
        }
    }

    /// Removes the participant from the shared folder (through an owner's device).
    func removeParticipant() async throws {
        try await retrying("removing \(Self.participant)") {
            guard let owner = self.owners.first(where: { $0.agentIsRunning && $0.root != nil }) else { throw ChaosError("no owner's agent runs") }
            let folder = owner.root!.appendingPathComponent(Layout.shared).path
            do {
                _ = try await blocking { try owner.containers.agent.send(AgentRequest(.removeParticipant, path: folder, participant: Self.participant), timeout: .seconds(30)) }
            } catch let error as AgentError where error.message.contains("is not in that share") {
                return // removed already: an earlier try went through, its answer lost with a killed agent
            }
        }
    }

    /// `body`, tried again each half second until it does not throw, for up to a minute.
    private func retrying(_ what: String, _ body: @escaping @Sendable () async throws -> Void) async throws {
        let start = ContinuousClock.now
        while true {
            do { return try await body() } catch {
                guard ContinuousClock.now - start < .seconds(60) else { throw ChaosError("\(what): \(error)") }
                try await Task.sleep(for: .milliseconds(500))
            }
        }
    }

    /// The round's sure faults of the shared folder: the participant removed and invited again a
    /// third of the way in, a move on an owner's device killed two thirds in.
    func sharedFolderFaults(roundEnd: ContinuousClock.Instant) -> [Task<Void, Never>] {
        let seconds = settings.roundSeconds
        return [(FaultKind.shareRemoval, 1.0 / 3), (.moveKill, 2.0 / 3)].map { kind, share in
            Task {
                try? await Task.sleep(for: .seconds(seconds * share)) // (a cancelled sleep only hurries the fault)
                await self.sharedFolderFault(kind, pause: share)?.value
            }
        }
    }

    /// Starts a fault of the shared folder; nil when its target is busy.
    func sharedFolderFault(_ kind: FaultKind, pause: Double) -> Task<Void, Never>? {
        switch kind {
        case .shareRemoval:
            guard sharingBusy.withLock({ busy in defer { busy = true }; return !busy }) else { return nil }
            let absence = 2 + pause * 4
            count(kind, Self.participant, String(format: "invited again after %.1f s", absence))
            return Task {
                do {
                    try await self.removeParticipant()
                    try? await Task.sleep(for: .seconds(absence)) // (a cancelled sleep only shortens the absence)
                    try await self.invite()
                    try await self.accept()
                    self.note("\(Self.participant) is back in \(Layout.shared)")
                } catch {
                    say("removing \(Self.participant) and inviting again failed: \(error)")
                }
                self.sharingBusy.withLock { $0 = false }
            }
        case .moveKill:
            guard let device = owners.first(where: { $0.agentIsRunning && $0.root != nil }),
                  busyAgents.withLock({ $0.insert(device.index).inserted }) else { return nil }
            let folder = device.root!.appendingPathComponent(Layout.shared)
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { $0.hasSuffix(".txt") }.sorted()
            guard !files.isEmpty else {
                busyAgents.withLock { _ = $0.remove(device.index) }
                return nil
            }
            let name = files[Int(pause * Double(files.count)) % files.count]
            let moved = "moved-\(UUID().uuidString.prefix(6)).txt"
            count(kind, device.name, "\(name) → \(moved), agent killed at once, started again after \(String(format: "%.1f", pause * 2)) s")
            return Task {
                // Renamed as a program that does not coordinate does it; the agent is killed
                // before it can have sent the move (or while it sends it).
                do { try FileManager.default.moveItem(at: folder.appendingPathComponent(name), to: folder.appendingPathComponent(moved)) } catch {
                    self.note("moveKill: \(name) could not be moved (\(error)); the kill goes ahead")
                }
                await device.killAgent()
                try? await Task.sleep(for: .seconds(pause * 2)) // (a cancelled sleep only shortens the pause)
                do { try await device.startAgent() } catch { say("\(device.name)'s agent did not restart: \(error)") }
                self.busyAgents.withLock { _ = $0.remove(device.index) }
            }
        default:
            return nil
        }
    }
}
