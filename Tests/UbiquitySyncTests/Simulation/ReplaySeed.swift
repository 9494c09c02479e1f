import Foundation
import Testing
import UbiquitySync

/// `UBIQUITY_SIMULATION_DEBUG_SEED=N swift test --filter replaySeed` prints one run: what is
/// wrong, every step, the server's items and every revision (for a failing seed).
@Test(.enabled(if: ProcessInfo.processInfo.environment["UBIQUITY_SIMULATION_DEBUG_SEED"] != nil))
func replaySeed() throws {
    let seed = try #require(ProcessInfo.processInfo.environment["UBIQUITY_SIMULATION_DEBUG_SEED"].flatMap(UInt64.init))
    var world = Simulator(seed: seed)
    world.run(steps: 300)
    _ = world.settle()
    let problems = world.violations()
    print(problems.joined(separator: "\n"))
    for line in world.log { print(line) }
    for (id, item) in world.server.items.sorted(by: { $0.key < $1.key }) { print(id, item.name, item.content, item.deleted, item.conflicts.map(\.content)) }
    for r in world.server.revisions.values.sorted(by: { Int($0.id.dropFirst())! < Int($1.id.dropFirst())! }) { print(r.id, r.item, r.name, r.content, r.deleted, r.device, r.date, r.state) }
}
