import Foundation
import Synchronization
import UbiquityProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Who uses a data directory (`DIR/ubiquity.lock`, an advisory `flock`): every server and
/// command on the embedded storage holds it shared, so several may use the directory at once;
/// moving the installation to PostgreSQL (``InstallationMove``, its final pass) holds it alone,
/// so that nothing writes what is being copied.
final class DataDirectoryLock: Sendable {
    private let descriptor: Mutex<Int32?>

    /// Takes the lock of `directory` (made if missing), without waiting.
    /// - Throws: ``SyncError`` `dataDirectoryInUse` when another process holds it in a way that
    ///   excludes this one; `storageFailure` when the lock file cannot be opened.
    init(directory: String, exclusive: Bool) throws {
        let path = directory + "/ubiquity.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw SyncError(.internalServerError, "storageFailure", "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 else {
            close(fd)
            throw exclusive
                ? SyncError(.conflict, "dataDirectoryInUse", "\(directory) is in use (a server or a command has it open): stop it first")
                : SyncError(.conflict, "dataDirectoryInUse", "\(directory) is being moved to PostgreSQL (ubiquity storage migrate --from-data): use the new storage")
        }
        descriptor = Mutex(fd)
    }

    /// Lets the directory go (once; later calls do nothing).
    func release() {
        descriptor.withLock { fd in
            if let open = fd { close(open) }
            fd = nil
        }
    }

    deinit { release() }
}
