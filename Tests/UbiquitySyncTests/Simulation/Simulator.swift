import Foundation
import UbiquitySync
import UbiquityTestSupport

/// A deterministic world: three devices, a ``ModelServer`` and a network that delays,
/// reorders, loses and partitions, driven by one seed. Devices save, rename, delete, resolve
/// conflicts, crash and restart; afterwards the network heals and the world settles.
struct Simulator {
    struct Message {
        var device: Int
        var request: SyncRequest
        /// nil: on its way to the server; else the server's answer on its way back.
        var answer: Answer?
    }

    enum Answer {
        case committed(CommitAnswer)
        case fetched([ItemSnapshot], Int64)
        case resolved(ItemSnapshot?)
    }

    var generator: SeededGenerator
    var server = ModelServer()
    var devices: [DeviceSyncState]
    var partitioned: [Bool]
    var wire: [Message] = []
    var clock = 1_800_000_000.0
    /// Every content ever saved, with the content it replaced on that device (its parent).
    var parents: [ContentToken: ContentToken?] = [:]
    /// What each content is called in the log and in problems ("c12@d1": the 12th, made on device 1).
    var contentNames: [ContentToken: String] = [:]
    var contentsMade = 0
    /// Contents a user deleted (their decision, like resolving a conflict away).
    var deletedByUser: Set<ContentToken> = []
    var itemsMade = 0
    var log: [String] = []

    init(seed: UInt64, devices count: Int = 3) {
        generator = SeededGenerator(seed: seed)
        devices = (0..<count).map { DeviceSyncState(device: "device-\($0)") }
        partitioned = Array(repeating: false, count: count)
    }

    mutating func random(_ range: Range<Int>) -> Int { Int.random(in: range, using: &generator) }
    mutating func chance(_ percent: Int) -> Bool { random(0..<100) < percent }

    /// Runs `steps` random steps.
    mutating func run(steps: Int) {
        for _ in 0..<steps { step() }
    }

    mutating func step() {
        clock += Double(random(0..<3)) // equal dates happen: the device id decides
        let device = random(0..<devices.count)
        switch random(0..<100) {
        case 0..<22: save(device)
        case 22..<27: rename(device)
        case 27..<31: delete(device)
        case 31..<48: send(device)
        case 48..<80: deliver()
        case 80..<85: drop()
        case 85..<89: resolve(device)
        case 89..<92: crash(device)
        case 92..<96: partitioned[device].toggle(); log.append("d\(device) partitioned=\(partitioned[device])")
        default: serverRestart()
        }
    }

    // MARK: Local actions

    mutating func newContent(on device: Int, replacing item: String?) -> ContentToken {
        contentsMade += 1
        let content = ContentToken("c\(contentsMade)@d\(device)")
        contentNames[content] = "c\(contentsMade)@d\(device)"
        parents[content] = item.flatMap { devices[device].visible($0)?.content }
        return content
    }

    /// What `content` is called ("c12@d1"), or its token if the simulation did not make it.
    func name(of content: ContentToken) -> String { contentNames[content] ?? content.description }

    mutating func pickItem(_ device: Int) -> String? {
        let items = devices[device].visibleItems.filter { !$0.value.deleted }.keys.sorted()
        return items.isEmpty ? nil : items[random(0..<items.count)]
    }

    mutating func pickName() -> String { ["a.txt", "A.txt", "b.txt", "Café.txt", "CAFE\u{301}.txt", "c.txt"][random(0..<6)] }

    mutating func save(_ device: Int) {
        if chance(30) || pickItem(device) == nil {
            itemsMade += 1
            let item = "i\(itemsMade)"
            let content = newContent(on: device, replacing: nil)
            let name = pickName()
            devices[device].save(item: item, name: name, content: content, date: clock)
            log.append("d\(device) create \(item) \(name) \(self.name(of: content))")
        } else if let item = pickItem(device) {
            let content = newContent(on: device, replacing: item)
            devices[device].save(item: item, content: content, date: clock)
            log.append("d\(device) save \(item) \(name(of: content))")
        }
    }

    mutating func rename(_ device: Int) {
        guard let item = pickItem(device) else { return }
        let name = pickName()
        devices[device].rename(item: item, to: name, date: clock)
        log.append("d\(device) rename \(item) \(name)")
    }

    mutating func delete(_ device: Int) {
        guard let item = pickItem(device) else { return }
        if let content = devices[device].visible(item)?.content { deletedByUser.insert(content) }
        devices[device].delete(item: item, date: clock)
        log.append("d\(device) delete \(item)")
    }

    mutating func resolve(_ device: Int) {
        let items = devices[device].visibleItems.keys.sorted().filter { devices[device].resolveKeepingCurrent($0) != nil }
        guard !items.isEmpty, let request = devices[device].resolveKeepingCurrent(items[random(0..<items.count)]) else { return }
        wire.append(Message(device: device, request: request, answer: nil))
        log.append("d\(device) resolve \(request)")
    }

    mutating func send(_ device: Int) {
        for request in devices[device].requests(fetch: chance(70)) {
            if partitioned[device] {
                devices[device].failed(request) // the connection fails at once
            } else {
                wire.append(Message(device: device, request: request, answer: nil))
            }
        }
    }

    mutating func crash(_ device: Int) {
        devices[device] = DeviceSyncState(restoring: devices[device].persisted)
        // Answers on their way to it are lost; its requests already sent may still arrive.
        wire.removeAll { $0.device == device && $0.answer != nil }
        log.append("d\(device) crash")
    }

    mutating func serverRestart() {
        for message in wire where message.answer == nil { devices[message.device].failed(message.request) }
        for message in wire where message.answer != nil { devices[message.device].failed(message.request) }
        wire.removeAll()
        log.append("server restart")
    }

    // MARK: The network

    mutating func deliver() {
        guard !wire.isEmpty else { return }
        let message = wire.remove(at: random(0..<wire.count)) // any order
        if partitioned[message.device] {
            devices[message.device].failed(message.request)
            return
        }
        if let answer = message.answer {
            receive(answer, on: message.device, for: message.request)
        } else {
            wire.append(Message(device: message.device, request: message.request, answer: handle(message.request, from: message.device)))
        }
    }

    mutating func drop() {
        guard !wire.isEmpty else { return }
        let message = wire.remove(at: random(0..<wire.count))
        devices[message.device].failed(message.request)
    }

    mutating func handle(_ request: SyncRequest, from device: Int) -> Answer {
        switch request {
        case .commit(let change):
            return .committed(server.commit(change, device: devices[device].persisted.device))
        case .fetch(let since):
            let changes = server.changes(since: since)
            return .fetched(changes.items, changes.sequence)
        case .resolve(let item, let keep, let remove):
            return .resolved(try? server.resolve(item: item, keep: keep, remove: remove))
        }
    }

    mutating func receive(_ answer: Answer, on device: Int, for request: SyncRequest) {
        switch answer {
        case .committed(let commit):
            devices[device].committed(commit)
            // As the agent does: a commit that is the next change needs no fetch to be known.
            _ = devices[device].skipOwnChanges([commit.item.sequence])
        case .fetched(let items, let sequence): devices[device].fetched(items, upTo: sequence)
        case .resolved(let item): if let item { devices[device].learn(item) }
        }
    }

    // MARK: Settling

    /// Heals the network and lets every device send, fetch and hear answers until nothing moves.
    /// Returns false if the world did not settle.
    mutating func settle() -> Bool {
        partitioned = partitioned.map { _ in false }
        while !wire.isEmpty { deliverInOrder() }
        for _ in 0..<50 {
            for device in devices.indices {
                for request in devices[device].requests(fetch: true) {
                    wire.append(Message(device: device, request: request, answer: nil))
                }
            }
            while !wire.isEmpty { deliverInOrder() }
            let quiet = devices.allSatisfy { $0.isIdle && $0.persisted.cursor == server.sequence && $0.persisted.local.isEmpty }
            if quiet { return true }
        }
        return false
    }

    private mutating func deliverInOrder() {
        let message = wire.removeFirst()
        if let answer = message.answer {
            receive(answer, on: message.device, for: message.request)
        } else {
            wire.append(Message(device: message.device, request: message.request, answer: handle(message.request, from: message.device)))
        }
    }

    // MARK: Invariants

    /// What is wrong after settling, if anything: devices that disagree with the server, and
    /// saved contents that are neither kept (current or conflict version) nor replaced by a
    /// later save made on top of them, nor removed by a user's resolution.
    func violations() -> [String] {
        var problems: [String] = []
        let truth = server.items
        for (index, device) in devices.enumerated() {
            let shown = device.visibleItems
            for (id, item) in truth {
                let mine = shown[id]
                if mine != DeviceSyncState.LocalItem(name: item.name, content: item.content, deleted: item.deleted) {
                    problems.append("device \(index) shows \(id) as \(String(describing: mine)), the server has \(item.name) \(name(of: item.content)) deleted=\(item.deleted)")
                }
                if device.conflicts(id) != item.conflicts {
                    problems.append("device \(index) has conflicts \(device.conflicts(id)) for \(id), the server \(item.conflicts)")
                }
            }
            for id in shown.keys where truth[id] == nil { problems.append("device \(index) shows \(id), unknown to the server") }
        }
        // Kept: every current and conflict content, and what users resolved away or deleted.
        var kept = server.resolvedAway.union(deletedByUser)
        for item in truth.values {
            if !item.deleted { kept.insert(item.content) }
            for conflict in item.conflicts { kept.insert(conflict.content) }
        }
        // Covered: kept contents and everything they were made on top of.
        var covered = Set<ContentToken>()
        for content in kept {
            var next: ContentToken? = content
            while let content = next, covered.insert(content).inserted { next = parents[content] ?? nil }
        }
        for content in parents.keys where !covered.contains(content) {
            problems.append("the save \(name(of: content)) was lost: not current, not a conflict version, not replaced by a save made on top of it")
        }
        return problems.sorted()
    }
}
