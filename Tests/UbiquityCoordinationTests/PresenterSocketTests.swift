import Foundation
import Logging
import UbiquityTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import UbiquityCoordination

/// A process's presenter socket is removed by others only once that process is gone. A
/// coordinator that found a live process's socket bound but not yet listening removed it, and
/// every coordinator after passed that process's presenters over: an eviction went ahead that
/// they refused (CI's red `presentersHearOfTheUbiquityAttributesTheyObserveHereAndInOtherProcesses`).
/// A process now names its socket only once it listens, and nobody removes a live one.
@Suite struct PresenterSocketTests {
    /// A socket bound at `path` that takes no connection (nobody listens).
    private func boundSocket(at path: String) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = PresenterChannel.address(path)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        #expect(fd >= 0 && bound == 0)
        return fd
    }

    private func evictionOf(_ item: URL) -> AccessDescription {
        AccessDescription(reading: [], writing: [.init(path: item.path, url: item.path, options: NSFileCoordinator.WritingOptions.forEvicting.rawValue)])
    }

    @Test func aLiveProcesssSocketThatTakesNoConnectionIsKeptAndADeadOnesIsRemoved() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let directory = scratch.file("presenters").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let channel = PresenterChannel(directory: directory)
        // A live process (a child that sleeps), and one that has exited.
        let live = ChildProcess()
        live.executableURL = URL(fileURLWithPath: "/bin/sleep")
        live.arguments = ["60"]
        try live.run()
        defer { kill(live.processIdentifier, SIGKILL); live.waitUntilExit() }
        let dead = ChildProcess()
        dead.executableURL = URL(fileURLWithPath: "/bin/true")
        try dead.run()
        dead.waitUntilExit()
        let livePath = directory + "/\(live.processIdentifier).sock", deadPath = directory + "/\(dead.processIdentifier).sock"
        let liveSocket = boundSocket(at: livePath), deadSocket = boundSocket(at: deadPath)
        defer { close(liveSocket); close(deadSocket) }

        let item = scratch.file("photo.jpg")
        _ = channel.prepareRemote(evictionOf(item), timeout: .milliseconds(500), logger: Logger(label: "test"))
        #expect(FileManager.default.fileExists(atPath: livePath), "a live process's socket was removed")
        #expect(!FileManager.default.fileExists(atPath: deadPath), "a dead process's socket stays")
    }

    @Test func aProcesssSocketIsNamedOnlyOnceItListens() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let directory = scratch.file("presenters").path
        let channel = PresenterChannel(directory: directory)
        channel.startServerIfNeeded()
        // Named, and taking connections; nothing else is left in the folder.
        let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(entries == ["\(getpid()).sock"], "\(entries)")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = PresenterChannel.address(channel.socketPath)
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        #expect(connected == 0, "\(String(cString: strerror(errno)))")
    }
}
