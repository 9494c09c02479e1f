import Foundation
import Glibc
import Synchronization
import Testing
import UbiquityClient
@testable import UbiquityQuery
import UbiquityTestSupport

/// A query and an agent that is slow to answer (a long round, a loaded machine): the query
/// goes on from the disk and takes the agent's statuses when they come — it does not take a
/// slow agent for a stopped one.
@Suite struct SlowAgentTests {
    let identifier = "ABCDE12345.com.example.notes"

    @Test(.timeLimit(.minutes(3))) func aSlowAgentsStatusesFollowWhenItAnswers() async throws {
        let paths = temporaryPaths()
        defer { try? FileManager.default.removeItem(at: paths.configuration.deletingLastPathComponent().deletingLastPathComponent()) }
        try credentials().save(to: paths)
        let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [identifier]))
        let documents = try #require(containers.url(forContainer: identifier)).appendingPathComponent("Documents")
        let trip = documents.appendingPathComponent("Trip.txt")
        try Data("pack the tent".utf8).write(to: trip)

        // The agent lists the container's statuses only when the test lets it (after the
        // gathering, which waits two seconds for them), then tells of a conflict when let again;
        // it never answers a question about one item.
        @Sendable func status(conflicts: Int, current: Bool = true) -> UbiquityItemStatus {
            UbiquityItemStatus(container: identifier, path: trip.path, size: 13, downloaded: true, current: current, downloading: false, downloadRequested: false,
                               uploaded: true, uploading: false, percentDownloaded: 100, percentUploaded: 100, conflicts: conflicts,
                               downloadingError: nil, uploadingError: nil)
        }
        let released = Mutex(0)
        @Sendable func waitForRelease(_ count: Int) {
            while released.withLock({ $0 }) < count { Thread.sleep(forTimeInterval: 0.01) }
        }
        let agent = try FakeAgent(socket: paths.agentSocket) { request, reply in
            guard request.operation == .watch else { return } // no answer
            waitForRelease(1)
            reply(AgentResponse(items: [status(conflicts: 0, current: false)]))
            waitForRelease(2)
            reply(AgentResponse(items: [status(conflicts: 1)]))
        }
        defer { released.withLock { $0 = 2 } } // the agent's thread ends
        defer { agent.stop() }

        let query = NSMetadataQuery(containers: containers)
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
        query.notificationBatchingInterval = 0.01
        let recorder = QueryRecorder(query)
        defer { recorder.remove(); query.stop() }
        query.start()
        // (Up to a minute: early in a full run the machine is at its busiest — a run on two cores
        // once took more than the 10 s the recorder waits by default to gather one file.)
        #expect(await recorder.wait(60) { $0.contains { $0.name == "DidFinishGathering" } })
        let item = try #require(query.results.first as? NSMetadataItem)
        // Gathered from the disk meanwhile: downloaded and current (the newest this device knows of), and not an agent that does not run.
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent)
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemUploadingErrorKey) == nil)

        // The agent's list comes — a newer version is known, not here yet: "downloaded", not
        // current — and the result takes it, as an update.
        released.withLock { $0 = 1 }
        #expect(await recorder.wait { _ in item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusDownloaded })
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool == true)
        #expect(await recorder.wait { $0.contains { $0.name == "DidUpdate" && $0.changed == ["Trip.txt"] } })
        // And what changes after it.
        released.withLock { $0 = 2 }
        #expect(await recorder.wait { _ in item.value(forAttribute: NSMetadataUbiquitousItemHasUnresolvedConflictsKey) as? Bool == true })
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent)

        // A file event asks the agent about the item; no answer in time keeps what its stream said.
        try Data("pack the tent and the stove".utf8).write(to: trip)
        #expect(await recorder.wait { _ in item.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 27 })
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent)
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemHasUnresolvedConflictsKey) as? Bool == true)
    }
}

/// An agent's socket that answers each request with `answer` (on a thread of its own per
/// connection; `reply` writes one answer line).
final class FakeAgent: Sendable {
    private let listener: Int32

    init(socket: URL, answer: @escaping @Sendable (AgentRequest, _ reply: (AgentResponse) -> Void) -> Void) throws {
        try FileManager.default.createDirectory(at: socket.deletingLastPathComponent(), withIntermediateDirectories: true)
        let listener = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socket.path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
            raw[path.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 16) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        self.listener = listener
        Thread {
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return } // stopped
                Thread {
                    defer { close(connection) }
                    var line: [UInt8] = [], byte: UInt8 = 0
                    while read(connection, &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
                    guard let request = try? JSONDecoder().decode(AgentRequest.self, from: Data(line)) else { return }
                    answer(request) { response in
                        var data = (try? JSONEncoder().encode(response)) ?? Data()
                        data.append(UInt8(ascii: "\n"))
                        _ = data.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    }
                    // Held open until the client goes (a watch stream stays).
                    while read(connection, &byte, 1) > 0 {}
                }.start()
            }
        }.start()
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}
