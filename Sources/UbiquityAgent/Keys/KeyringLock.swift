import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension AccountKeys {
    /// Runs `body` holding this device's keyring lock (`keyring.json.lock`, an exclusive
    /// `flock`), so that the agent and a command never both make or change the keyring at once
    /// (two processes making one each would give the device two identities). Waits at most
    /// `waiting` for another holder.
    /// - Throws: ``KeySetupError`` `.busy` when another process keeps the lock that long; what
    ///   `body` throws.
    func holdingKeyringLock<T>(waiting: Duration = .seconds(30), _ body: () async throws -> T) async throws -> T {
        let url = keyringURL.appendingPathExtension("lock")
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let descriptor = open(url.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw KeySetupError(reason: .busy, description: "cannot open the keyring's lock at \(url.path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) } // closing releases the lock
        let deadline = ContinuousClock.now + waiting
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline else {
                throw KeySetupError(reason: .busy, description: "another ubiquity process is changing this device's keys: try again when it is done")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return try await body()
    }
}
