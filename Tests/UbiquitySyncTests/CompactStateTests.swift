import Foundation
import Testing
import UbiquityProtocol
import UbiquitySync
import UbiquityTestSupport

/// What keeps an agent's per-item state small: values out of line, strings held once, ids
/// short enough to be stored inline.
@Suite struct CompactStateTests {
    /// Where a string's bytes are (equal addresses: one storage shared).
    static func storage(of string: String) -> UnsafeRawPointer? {
        var copy = string
        return copy.withUTF8 { UnsafeRawPointer($0.baseAddress) }
    }

    static func snapshot(_ id: String, parent: String? = nil, sequence: Int64 = 1) -> ItemSnapshot {
        ItemSnapshot(id: id, revision: "r-\(id)", name: "\(id).txt", content: "c-\(id)", deleted: false, sequence: sequence, conflicts: [], parent: parent)
    }

    @Test func anOutOfLineDictionaryIsADictionary() throws {
        var table = OutOfLineDictionary<ItemSnapshot>()
        #expect(table.isEmpty)
        table["a"] = Self.snapshot("a")
        table["b"] = Self.snapshot("b")
        var copy = table
        copy["a"] = Self.snapshot("a", sequence: 2)
        #expect(table["a"]?.sequence == 1, "a copy changes alone")
        #expect(copy["a"]?.sequence == 2)
        #expect(table != copy)
        copy["a"] = Self.snapshot("a")
        #expect(table == copy)
        #expect(Set(table.keys) == ["a", "b"] && table.count == 2)
        #expect(Set(table.values.map(\.id)) == ["a", "b"])
        #expect(table.mapValues(\.name) == ["a": "a.txt", "b": "b.txt"])
        let removed = copy.removeValue(forKey: "b")
        #expect(removed?.id == "b" && copy["b"] == nil && copy.count == 1)

        // Encoded as the plain dictionary it replaces (what the store's old rows hold).
        let plain = ["a": Self.snapshot("a"), "b": Self.snapshot("b")]
        let encoded = try JSONEncoder().encode(table)
        #expect(try JSONDecoder().decode([String: ItemSnapshot].self, from: encoded) == plain)
        #expect(try JSONDecoder().decode(OutOfLineDictionary<ItemSnapshot>.self, from: JSONEncoder().encode(plain)) == table)
    }

    @Test func aStoredKeyIsSharedAndEqualStringsAreHeldOnce() {
        let folder = String(repeating: "f", count: 40)
        var table = OutOfLineDictionary<ItemSnapshot>()
        table[folder] = Self.snapshot(folder)
        let copy = String(decoding: Array(folder.utf8), as: UTF8.self) // equal, its own storage
        #expect(Self.storage(of: copy) != Self.storage(of: folder))
        #expect(table.storedKey(copy).map(Self.storage) == Self.storage(of: folder))
        #expect(table.storedKey("missing") == nil)

        var interner = StringInterner()
        let first = interner(folder), second = interner(copy)
        #expect(first == second && Self.storage(of: second) == Self.storage(of: folder))
        let short = interner("short"), none = interner(nil as String?)
        #expect(short == "short" && none == nil)
    }

    @Test func aLearnedItemSharesItsFoldersId() {
        var device = DeviceSyncState(device: "a")
        let folder = String(repeating: "d", count: 30)
        device.learn(Self.snapshot(folder))
        let parent = String(decoding: Array(folder.utf8), as: UTF8.self)
        device.learn(Self.snapshot("child", parent: parent))
        let learned = device.persisted.remote["child"]?.parent
        #expect(learned == folder)
        #expect(learned.map(Self.storage) == Self.storage(of: folder), "the folder's id, not a copy")
    }

    @Test func randomIdentifiersAreShortDistinctAndURLSafe() {
        var seen = Set<String>()
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for _ in 0..<100_000 {
            let id = RandomIdentifier.make()
            #expect(id.count == RandomIdentifier.length && id.allSatisfy(allowed.contains))
            seen.insert(id)
        }
        #expect(seen.count == 100_000)
        // Every position takes every character (no position is stuck).
        var perPosition = Array(repeating: Set<Character>(), count: RandomIdentifier.length)
        for id in seen.prefix(20_000) { for (index, character) in id.enumerated() { perPosition[index].insert(character) } }
        #expect(perPosition.allSatisfy { $0.count == 64 })
    }

    /// Random insertions, replacements and removals, checked against a `Dictionary` after
    /// each: removal moves the last entry into the removed one's place, and every key is still
    /// found where it went.
    @Test func aCompactDictionaryIsADictionary() {
        var generator = SeededGenerator(seed: 16)
        var table = CompactDictionary<String, Int>(), model: [String: Int] = [:]
        for step in 0..<20_000 {
            let key = "k\(Int.random(in: 0..<600, using: &generator))"
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<5:
                table[key] = step
                model[key] = step
            case 5..<8:
                #expect(table.removeValue(forKey: key) == model.removeValue(forKey: key))
            default:
                table[key] = nil
                model[key] = nil
            }
            if step % 97 == 0 {
                #expect(table.count == model.count)
                #expect(model.allSatisfy { table[$0.key] == $0.value })
            }
        }
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value) }) == model)
        #expect(Set(table.keys) == Set(model.keys) && table.values.sorted() == model.values.sorted())
        #expect(table.mapValues { $0 + 1 } == model.mapValues { $0 + 1 })
        let literal: CompactDictionary = ["a": 1, "b": 2]
        var reordered = CompactDictionary<String, Int>()
        reordered["b"] = 2
        reordered["a"] = 1
        #expect(literal == reordered, "equal entries in another order")
        reordered["a"] = 3
        #expect(literal != reordered)
    }
}
