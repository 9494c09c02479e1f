import Foundation
import Synchronization
import CUbiquitySystem
#if canImport(Glibc)
import Glibc
#endif

/// Another program run by a test or a benchmark, started with `posix_spawn` — configured like Foundation's
/// `Process` (same property names) so that tests read the same.
///
/// Foundation's `Process.run()` on Linux (swift-corelibs-foundation up to Swift 6.3) lists
/// `/proc/self/fd` with a 256-byte copy of each directory entry and now and then reads past
/// glibc's buffer and crashes the test process (swift-corelibs-foundation PR #5472). The test
/// suite spawns hundreds of helpers while other suites hold many descriptors open, so it met
/// that crash; this type does not list anything: the child closes every descriptor from 3 up
/// (`posix_spawn_file_actions_addclosefrom_np`) after its standard streams are in place.
public final class ChildProcess: @unchecked Sendable {
    /// The program to run.
    public var executableURL: URL?
    /// Its arguments (without the program itself).
    public var arguments: [String] = []
    /// Its environment; `nil` passes this process's own.
    public var environment: [String: String]?
    /// The folder it starts in; `nil` keeps this process's.
    public var currentDirectoryURL: URL?
    /// Its standard input: a `Pipe` (the child reads its read end), a `FileHandle`, or `nil`
    /// for this process's own.
    public var standardInput: Any?
    /// Its standard output: a `Pipe` (the child writes its write end), a `FileHandle`, or `nil`.
    public var standardOutput: Any?
    /// Its standard error, as ``standardOutput``.
    public var standardError: Any?

    private struct State {
        var pid: pid_t = 0
        var exit: (reason: Process.TerminationReason, status: Int32)?
    }
    private let state = Mutex(State())

    /// A process to configure, then ``run()``.
    public init() {}

    /// The child's process identifier (0 before ``run()``).
    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    /// Starts the program.
    /// - Throws: `POSIXError` when it cannot be spawned (missing, not executable…).
    public func run() throws {
        guard let executableURL else { throw POSIXError(.ENOENT) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [ObjectIdentifier: FileHandle] = [:]
        for (stream, target) in [(standardInput, Int32(0)), (standardOutput, 1), (standardError, 2)] {
            switch stream {
            case let pipe as Pipe:
                let childEnd = target == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                posix_spawn_file_actions_adddup2(&actions, childEnd.fileDescriptor, target)
                parentEnds[ObjectIdentifier(childEnd)] = childEnd
            case let handle as FileHandle where handle === FileHandle.nullDevice || handle.fileDescriptor < 0:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case let handle as FileHandle:
                posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target)
            default:
                break
            }
        }
        ubq_spawn_actions_close_from(&actions, 3)
        if let currentDirectoryURL {
            ubq_spawn_actions_chdir(&actions, currentDirectoryURL.path)
        }
        let path = executableURL.path
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let result: Int32
        if let environment {
            let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer { envp.forEach { free($0) } }
            result = posix_spawn(&pid, path, &actions, nil, argv, envp)
        } else {
            result = posix_spawn(&pid, path, &actions, nil, argv, environ)
        }
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL) }
        state.withLock { $0.pid = pid }
        // The child holds its own copies now; the parent's copies of the child's ends go, so that
        // a reader sees end of file when the child exits.
        for end in parentEnds.values { try? end.close() }
    }

    /// Whether the child has been started and has not exited.
    public var isRunning: Bool {
        let pid = processIdentifier
        guard pid > 0, state.withLock({ $0.exit == nil }) else { return false }
        var info = siginfo_t()
        // Looks without reaping: `waitUntilExit()` reaps.
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return false }
        return info.si_signo == 0 // (zeroed above; the kernel fills it in only for an exited child)
    }

    /// Blocks until the child exits (returns at once if it has).
    public func waitUntilExit() {
        let pid = processIdentifier
        guard pid > 0 else { return }
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
        state.withLock { state in
            guard state.exit == nil else { return }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            let signal = status & 0x7f
            state.exit = signal == 0 ? (.exit, (status >> 8) & 0xff) : (.uncaughtSignal, signal)
        }
    }

    /// Its exit status, or the signal that ended it (after ``waitUntilExit()``).
    public var terminationStatus: Int32 { state.withLock { $0.exit?.status ?? 0 } }

    /// Whether it exited or was ended by a signal (after ``waitUntilExit()``).
    public var terminationReason: Process.TerminationReason { state.withLock { $0.exit?.reason ?? .exit } }

    /// Sends SIGTERM.
    public func terminate() { signal(SIGTERM) }

    /// Sends SIGINT.
    public func interrupt() { signal(SIGINT) }

    /// Sends `signal` to the child if it has not been reaped.
    public func signal(_ signal: Int32) {
        state.withLock { state in
            if state.pid > 0 && state.exit == nil { kill(state.pid, signal) }
        }
    }
}

extension ChildProcess {
    /// Reads `output` (the child's standard output) until a server says where it listens
    /// ("… listening on http://HOST:PORT …"): that address, and everything read; nil for the
    /// address if the child closed its output first.
    public static func listeningAddress(in output: Pipe) -> (url: URL?, said: String) {
        var text = ""
        while !text.contains("listening on") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        let address = text.split(separator: " ").first { $0.hasPrefix("http") }
        return (address.flatMap { URL(string: String($0)) }, text)
    }
}
