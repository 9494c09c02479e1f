// swift-tools-version:6.0
import PackageDescription

let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")

let package = Package(
    name: "Ubiquity",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Ubiquity", targets: ["Ubiquity"]),
        .library(name: "UbiquityDatabase", targets: ["UbiquityDatabase"]),
        .executable(name: "ubiquity", targets: ["UbiquityCLI"]),
        .executable(name: "ubiquity-bench", targets: ["UbiquityBenchmarks"]),
        .executable(name: "ubiquity-sync-bench", targets: ["UbiquitySyncBenchmarks"]),
        .executable(name: "ubiquity-load", targets: ["UbiquityLoad"]),
        .executable(name: "ubiquity-chaos", targets: ["UbiquityChaos"]),
        .executable(name: "text-editor", targets: ["TextEditorExample"]),
        .executable(name: "notes", targets: ["NotesExample"]),
        .executable(name: "things", targets: ["ThingsExample"]),
        .executable(name: "recipes", targets: ["RecipesExample"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        // The sync server's stack (never a dependency of the document and file layers).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.0.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.21.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.21.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.65.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.0.0"),
        .package(url: "https://github.com/adam-fowler/compress-nio", from: "1.0.0"),
    ],
    targets: [
        // Linux system calls Swift's Glibc module does not expose (renameat2, FICLONE).
        .target(name: "CUbiquitySystem"),
        // File layer: FileWrapper, safe save, document types. No server dependencies.
        .target(name: "UbiquityFiles", dependencies: ["CUbiquitySystem", logging]),
        // File coordination: NSFileCoordinator, NSFilePresenter, cross-process locks.
        .target(name: "UbiquityCoordination", dependencies: ["CUbiquitySystem", "UbiquityFiles", logging]),
        // Document layer: Document (UIDocument), UndoManager; Handoff of its documents through the client layer below it.
        .target(name: "UbiquityDocument", dependencies: ["UbiquityFiles", "UbiquityCoordination", "UbiquityClient", logging]),
        // The sync protocol's messages (Codable, Foundation only): shared by the server and its clients.
        .target(name: "UbiquityProtocol"),
        // The sync engine: content-defined chunks, chunk-list deltas (no server, no network).
        .target(name: "UbiquitySync", dependencies: ["UbiquityProtocol", "UbiquityFiles", "UbiquityKeys", .product(name: "Crypto", package: "swift-crypto"),
                                                    .product(name: "OrderedCollections", package: "swift-collections")]),
        // What apps and the agent say to each other over the agent's local socket: typed requests, answers, error codes.
        .target(name: "UbiquityAgentProtocol", dependencies: ["UbiquityFiles"]),
        // Ubiquity client: the signed-in account and identity token, containers and item status, the key-value store.
        .target(name: "UbiquityClient", dependencies: ["CUbiquitySystem", "UbiquityFiles", "UbiquityCoordination", "UbiquityProtocol", "UbiquityAgentProtocol", logging]),
        // Metadata queries: NSMetadataQuery, NSMetadataItem, NSPredicate format strings, NSSortDescriptor by key.
        .target(name: "UbiquityQuery", dependencies: ["CUbiquitySystem", "UbiquityFiles", "UbiquityClient", logging]),
        // Databases in iCloud (issue 19): GRDB stores whose transactions sync as per-device change logs.
        .target(name: "UbiquityDatabase", dependencies: ["CUbiquitySystem", "UbiquityFiles", "UbiquityCoordination", "UbiquityClient", "UbiquityDocument", logging, .product(name: "Crypto", package: "swift-crypto"), .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift")]),
        // Keys and the encrypted format (issue 45): service keys, sealed chunks, records and key-value
        // values, device keys, the roster. The one place key handling lives: agent, server and CLI share it.
        .target(name: "CUbiquityCut"),
        .target(name: "UbiquityKeys", dependencies: ["CUbiquityCut", .product(name: "Crypto", package: "swift-crypto")]),
        // The one module apps import.
        .target(name: "Ubiquity", dependencies: ["UbiquityFiles", "UbiquityCoordination", "UbiquityDocument", "UbiquityClient", "UbiquityQuery"]),

        // The device agent and the server's client: signing in, keeping containers in step.
        .target(
            name: "UbiquityAgent",
            dependencies: [
                "CUbiquitySystem", "UbiquityFiles", "UbiquityCoordination", "UbiquityClient", "UbiquityProtocol", "UbiquitySync", "UbiquityKeys", logging,
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ]
        ),

        // An S3-compatible object store's client (issue 47): Signature V4, conditional PUT, ranged
        // GET, HEAD, DELETE, batch delete, ListObjectsV2. The server's; never the core libraries'.
        .target(
            name: "UbiquityObjectStore",
            dependencies: [
                logging,
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ]
        ),

        // The sync server: accounts, devices, containers, items, revisions, chunks (iCloud's role).
        .target(
            name: "UbiquityServer",
            dependencies: [
                "CUbiquitySystem",
                "UbiquityFiles",
                "UbiquityObjectStore",
                "UbiquityKeys",
                "UbiquityProtocol",
                "UbiquitySync",
                logging,
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            // The web interface's page, style and scripts, built into the binary.
            resources: [.embedInCode("Web/Assets")]
        ),

        // The reference documents' sample documents, shared by the example apps and `ubiquity demo`.
        .target(name: "UbiquityExamples", dependencies: ["Ubiquity", "UbiquityDatabase", .product(name: "GRDB", package: "GRDB.swift")], path: "Examples/Documents"),
        .executableTarget(name: "TextEditorExample", dependencies: ["UbiquityExamples"], path: "Examples/TextEditor"),
        .executableTarget(name: "NotesExample", dependencies: ["UbiquityExamples"], path: "Examples/Notes"),
        .executableTarget(name: "ThingsExample", dependencies: ["UbiquityExamples"], path: "Examples/Things"),
        .executableTarget(name: "RecipesExample", dependencies: ["UbiquityExamples"], path: "Examples/Recipes"),

        .executableTarget(
            name: "UbiquityCLI",
            dependencies: ["Ubiquity", "UbiquityFiles", "UbiquityExamples", "UbiquityDatabase", "UbiquityServer", "UbiquityProtocol", "UbiquityAgent", "UbiquityKeys", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]
        ),
        .executableTarget(name: "UbiquityBenchmarks", dependencies: ["CUbiquitySystem", "Ubiquity", "UbiquityFiles", "UbiquityKeys", "UbiquitySync", "UbiquityDatabase", "UbiquityTestSupport", .product(name: "Crypto", package: "swift-crypto"), .product(name: "GRDB", package: "GRDB.swift")]),
        // The sync figures against Syncthing, in one run.
        .executableTarget(
            name: "UbiquitySyncBenchmarks",
            dependencies: ["Ubiquity", "UbiquityDatabase", "UbiquityTestSupport", "UbiquityProtocol", "UbiquitySync", "UbiquityKeys",
                           .product(name: "GRDB", package: "GRDB.swift"), .product(name: "AsyncHTTPClient", package: "async-http-client")]
        ),
        // Real processes under faults: a server, agents and app-like writers through a fault-injecting relay.
        .executableTarget(
            name: "UbiquityChaos",
            dependencies: ["Ubiquity", "UbiquityFiles", "UbiquityDatabase", "UbiquityTestSupport", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Crypto", package: "swift-crypto"), .product(name: "GRDB", package: "GRDB.swift")]
        ),
        // Load generator for the server: N simulated devices over loopback.
        .executableTarget(
            name: "UbiquityLoad",
            dependencies: [
                "UbiquityServer",
                "UbiquityProtocol",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),

        // Test support: documents and a child process that saves in a loop (killed by the crash test).
        .target(name: "UbiquityTestSupport", dependencies: ["CUbiquitySystem", "UbiquityFiles", "Ubiquity", logging], path: "Tests/Support"),
        .executableTarget(name: "UbiquitySaveLoop", dependencies: ["UbiquityTestSupport"], path: "Tests/Helpers/SaveLoop"),
        // A second process for the coordination tests: takes coordinated access and holds it.
        .executableTarget(name: "UbiquityCoordinatorHelper", dependencies: ["UbiquityCoordination"], path: "Tests/Helpers/Coordinator"),
        // A second process that keeps a document open, for the cross-process document tests.
        .executableTarget(name: "UbiquityDocumentHost", dependencies: ["Ubiquity"], path: "Tests/Helpers/DocumentHost"),

        .testTarget(name: "UbiquityFilesTests", dependencies: ["UbiquityFiles", "UbiquityTestSupport"]),
        .testTarget(name: "UbiquityKeysTests", dependencies: ["UbiquityKeys", "UbiquityTestSupport", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "UbiquitySyncTests", dependencies: ["UbiquitySync", "UbiquityProtocol", "UbiquityKeys", "UbiquityTestSupport", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "UbiquityAgentProtocolTests", dependencies: ["UbiquityAgentProtocol"]),
        .testTarget(name: "UbiquityObjectStoreTests", dependencies: ["UbiquityObjectStore", "UbiquityTestSupport", logging, .product(name: "NIOCore", package: "swift-nio")]),
        .testTarget(name: "UbiquityClientTests", dependencies: ["UbiquityClient", "UbiquityTestSupport"]),
        .testTarget(name: "UbiquityQueryTests", dependencies: ["UbiquityQuery", "UbiquityClient", "UbiquityTestSupport"]),
        .testTarget(
            name: "UbiquityAgentTests",
            dependencies: ["UbiquityAgent", "UbiquityTestSupport", "UbiquityClient", "UbiquityQuery", "UbiquityCoordination", "UbiquitySync", "UbiquityServer", "UbiquityProtocol",
                           "UbiquityKeys", .product(name: "HummingbirdTesting", package: "hummingbird"), .product(name: "GRDB", package: "GRDB.swift"),
                           .product(name: "Crypto", package: "swift-crypto")]
        ),
        // An app's model code as Apple's samples write it, run as real programs under each way a
        // program drains its main queue: an async entry point, RunLoop.main.run(), dispatchMain().
        .target(name: "UbiquityAppleAppScenarios", dependencies: ["Ubiquity", "UbiquityDatabase", "UbiquityTestSupport", .product(name: "GRDB", package: "GRDB.swift")], path: "Tests/AppleApps/Scenarios"),
        .executableTarget(name: "UbiquityAppleAsyncApp", dependencies: ["UbiquityAppleAppScenarios"], path: "Tests/AppleApps/AsyncApp"),
        .executableTarget(name: "UbiquityAppleMainQueueApp", dependencies: ["UbiquityAppleAppScenarios"], path: "Tests/AppleApps/MainQueueApp"),
        // Code written as Apple's documentation writes it: a signature that drifts from Apple's breaks this build.
        .testTarget(name: "UbiquityAppleSourceTests", dependencies: ["Ubiquity", "UbiquityTestSupport", "UbiquityAppleAsyncApp", "UbiquityAppleMainQueueApp"]),
        .testTarget(name: "UbiquityDatabaseTests", dependencies: ["UbiquityDatabase", "UbiquityDocument", "UbiquityClient", "UbiquityTestSupport", logging]),
        .testTarget(name: "UbiquityCoordinationTests", dependencies: ["UbiquityCoordination", "UbiquityTestSupport", "UbiquityCoordinatorHelper"]),
        .testTarget(name: "UbiquityDocumentTests", dependencies: ["Ubiquity", "UbiquityTestSupport", "UbiquitySaveLoop", "UbiquityDocumentHost"]),
        .testTarget(
            name: "UbiquityServerTests",
            dependencies: [
                "UbiquityServer",
                "UbiquityObjectStore",
                "UbiquityKeys",
                "UbiquityProtocol",
                "UbiquitySync",
                "UbiquityTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSTesting", package: "hummingbird-websocket"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(name: "UbiquityExamplesTests", dependencies: ["UbiquityExamples", "UbiquityTestSupport", "UbiquityDatabase", "UbiquityKeys", "UbiquityProtocol", "UbiquityServer", logging,
                                                           .product(name: "Hummingbird", package: "hummingbird"), .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"), .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"), "TextEditorExample", "NotesExample", "ThingsExample", "RecipesExample", "UbiquityCLI", "UbiquityChaos"]),
    ]
)
