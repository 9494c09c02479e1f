import ArgumentParser
import Foundation
import Synchronization
import Ubiquity
import UbiquityProtocol

/// `ubiquity find CONTAINER 'PREDICATE'`: a metadata query over a container's documents (or a
/// local folder), printed once — or followed live with `--watch`.
struct FindCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find",
        abstract: "Find a container's documents (downloaded or not) matching an NSPredicate format string.",
        discussion: """
            Keys are NSMetadataItem attributes: kMDItemFSName, kMDItemFSSize, kMDItemFSContentChangeDate, \
            kMDItemContentType, NSMetadataUbiquitousItemDownloadingStatusKey, … Example:
              ubiquity find ABCDE12345.com.example.notes "kMDItemFSName LIKE[c] '*.txt' AND kMDItemFSSize > 1000"
            A path (starting with / or .) instead of a container searches that local folder.
            """)

    @Argument(help: "A container identifier, or a local folder's path.") var scope: String
    @Argument(help: "The predicate, in Apple's format string syntax (default: everything).") var predicate = "TRUEPREDICATE"
    @Option(help: "Sort by this attribute; --sort=-ATTRIBUTE for descending.") var sort = NSMetadataItemFSNameKey
    @Flag(help: "Keep running and print each update.") var watch = false

    func run() async throws {
        let parsed: NSPredicate
        do {
            parsed = try NSPredicate(validatingFormat: predicate)
        } catch {
            throw ValidationError("\(error)")
        }
        let containers: UbiquityContainers
        let query: NSMetadataQuery
        if scope.hasPrefix("/") || scope.hasPrefix(".") {
            containers = UbiquityContainers.shared
            query = NSMetadataQuery(containers: containers)
            query.searchScopes = [URL(fileURLWithPath: absolutePath(scope))]
        } else {
            guard UbiquityEntitlements.isValidIdentifier(scope) else { throw ValidationError("“\(scope)” is not a container identifier") }
            containers = UbiquityContainers(paths: UbiquityIdentity.shared.paths, entitlements: UbiquityEntitlements(containers: [scope]))
            guard containers.identityToken != nil else { throw ValidationError("not signed in: run `ubiquity login` first") }
            query = NSMetadataQuery(containers: containers)
            query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        }
        query.predicate = parsed
        let descending = sort.hasPrefix("-")
        query.sortDescriptors = [NSSortDescriptor(key: descending ? String(sort.dropFirst()) : sort, ascending: !descending)]
        query.notificationBatchingInterval = 0.1
        let snapshots = query.snapshots
        guard query.start() else { throw ValidationError("the query could not start") }
        for await snapshot in snapshots {
            if snapshot.isInitial {
                for item in snapshot.results { print(Self.line(item)) }
                FileHandle.standardError.write(Data("\(snapshot.results.count) item\(snapshot.results.count == 1 ? "" : "s")\n".utf8))
                guard watch else { break }
            } else {
                for item in snapshot.added { print("+ " + Self.line(item)) }
                for item in snapshot.changed { print("~ " + Self.line(item)) }
                for item in snapshot.removed { print("- " + Self.line(item)) }
            }
        }
        query.stop()
    }

    /// One result: state, size, date, path.
    static func line(_ item: NSMetadataItem) -> String {
        let size = (item.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64).map { ByteCountFormatter.string(fromByteCount: $0, countStyle: .file) } ?? "?"
        let date = (item.value(forAttribute: NSMetadataItemFSContentChangeDateKey) as? Date).map { ISO8601DateFormatter().string(from: $0) } ?? "?"
        var state = "local"
        if let status = item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String {
            state = status == NSMetadataUbiquitousItemDownloadingStatusNotDownloaded ? "cloud" : (status == NSMetadataUbiquitousItemDownloadingStatusCurrent ? "current" : "downloaded")
            if item.value(forAttribute: NSMetadataUbiquitousItemHasUnresolvedConflictsKey) as? Bool == true { state += ",conflict" }
        }
        let path = item.value(forAttribute: NSMetadataItemPathKey) as? String ?? "?"
        return "\(state.padding(toLength: 18, withPad: " ", startingAt: 0)) \(size.padding(toLength: 10, withPad: " ", startingAt: 0)) \(date)  \(path)"
    }
}

/// `ubiquity kv list|get|set|remove STORE …`: a key-value store as this device has it (the
/// agent keeps it in step).
struct KeyValueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kv",
        abstract: "Read and write a key-value store (NSUbiquitousKeyValueStore) of the signed-in account.",
        subcommands: [List.self, Get.self, Set.self, Remove.self])

    /// The store, for the signed-in account on this device.
    static func store(_ identifier: String) throws -> NSUbiquitousKeyValueStore {
        guard UbiquityEntitlements.isValidIdentifier(identifier) else { throw ValidationError("“\(identifier)” is not a store identifier") }
        let containers = UbiquityContainers(paths: UbiquityIdentity.shared.paths, entitlements: UbiquityEntitlements(containers: [], keyValueStore: identifier))
        if containers.identityToken == nil {
            FileHandle.standardError.write(Data("not signed in: the values stay on this device\n".utf8))
        }
        return NSUbiquitousKeyValueStore(identifier: identifier, containers: containers)
    }

    /// A value as JSON text (property lists' types tagged where JSON has none).
    static func describe(_ value: Any?) -> String {
        guard let value, let plist = PropertyListValue(propertyList: value) else { return "null" }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(plist)).map { String(decoding: $0, as: UTF8.self) } ?? "?"
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every key and value.")
        @Argument(help: "The store's identifier.") var store: String

        func run() async throws {
            let values = try KeyValueCommand.store(store).dictionaryRepresentation
            if values.isEmpty { print("(no keys)") }
            for key in values.keys.sorted() { print("\(key) = \(KeyValueCommand.describe(values[key]))") }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One key's value (exit status 1 if there is none).")
        @Argument(help: "The store's identifier.") var store: String
        @Argument(help: "The key.") var key: String

        func run() async throws {
            guard let value = try KeyValueCommand.store(store).object(forKey: key) else { throw ExitCode(1) }
            print(KeyValueCommand.describe(value))
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a key: a string, or with --json any property-list value (a tagged value such as {\"integer\":7} or plain JSON).")
        @Argument(help: "The store's identifier.") var store: String
        @Argument(help: "The key.") var key: String
        @Argument(help: "The value.") var value: String
        @Flag(help: "The value is JSON.") var json = false

        func run() async throws {
            let kv = try KeyValueCommand.store(store)
            let violations = Mutex(0)
            let observer = NotificationCenter.default.addObserver(forName: NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: kv, queue: nil) { note in
                if note.userInfo?[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int == NSUbiquitousKeyValueStoreQuotaViolationChange { violations.withLock { $0 += 1 } }
            }
            defer { NotificationCenter.default.removeObserver(observer) }
            if json {
                let data = Data(value.utf8)
                if let tagged = try? JSONDecoder().decode(PropertyListValue.self, from: data) {
                    kv.set(tagged.propertyList, forKey: key)
                } else if let plain = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) {
                    guard PropertyListValue(propertyList: plain) != nil else { throw ValidationError("not a property-list value: \(value)") }
                    kv.set(plain, forKey: key)
                } else {
                    throw ValidationError("not JSON: \(value)")
                }
            } else {
                kv.set(value, forKey: key)
            }
            guard kv.synchronize() else { throw ValidationError("the store could not be written") }
            kv.deliverNotifications() // a refusal is announced on the store's queue
            if violations.withLock({ $0 }) > 0 {
                throw ValidationError("refused: past the key-value store's limits (1,024 keys of at most 64 bytes, 1 MB per value and in all)")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a key.")
        @Argument(help: "The store's identifier.") var store: String
        @Argument(help: "The key.") var key: String

        func run() async throws {
            let kv = try KeyValueCommand.store(store)
            kv.removeObject(forKey: key)
            guard kv.synchronize() else { throw ValidationError("the store could not be written") }
        }
    }
}
