import Foundation
import Logging
import ServiceLifecycle

/// Collects garbage — revisions past the retention, chunks nothing names any more — when the
/// server starts and every ``interval`` after, until the server shuts down gracefully.
struct GarbageCollectionService: Service {
    let storage: ServerStorage
    let retention: TimeInterval
    let logger: Logger
    var interval: Duration = .seconds(3_600)
    /// Called after each collection with what went (for tests and metrics).
    var collected: (@Sendable (_ revisions: Int, _ chunks: Int) -> Void)?

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let collected = try await SyncServer.collectGarbage(storage: storage, retention: retention, now: Date())
                    self.collected?(collected.revisions, collected.chunks)
                    if collected.revisions + collected.chunks > 0 {
                        logger.info("collected garbage", metadata: ["revisions": "\(collected.revisions)", "chunks": "\(collected.chunks)", "bytes": "\(collected.bytes)"])
                    }
                } catch is CancellationError {
                    return
                } catch {
                    logger.error("garbage collection failed; tried again in an hour", metadata: ["error": "\(error)"])
                }
                do { try await Task.sleep(for: interval) } catch { return } // cancelled: the server stops
            }
        }
    }
}

/// Closes the push connections of devices no longer signed in — revoked by the operator
/// (`ubiquity device revoke`, another process), signed out through another instance, or whose
/// account was deleted — within ``interval``: one look-up of the connected devices each time.
struct PushRevocationService: Service {
    let database: any SyncDatabase
    let notifier: ChangeNotifier
    let logger: Logger
    var interval: Duration = .milliseconds(500)

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let connected = notifier.connectedDevices
                if !connected.isEmpty {
                    do {
                        let gone = connected.subtracting(try await database.activeDevices(among: connected))
                        if !gone.isEmpty {
                            notifier.disconnect(gone)
                            logger.info("closed the push connections of devices no longer signed in", metadata: ["devices": "\(gone.count)"])
                        }
                    } catch {
                        // Only the server's stopping ends the sweep: a cancellation error from
                        // below (a pooled connection's request given up) is one more failure.
                        if Task.isCancelled { return }
                        logger.warning("cannot check the connected devices; tried again shortly", metadata: ["error": "\(error)"])
                    }
                }
                do { try await Task.sleep(for: interval) } catch { return } // cancelled: the server stops
            }
        }
    }
}

/// Relays the changes other server instances commit (PostgreSQL's LISTEN/NOTIFY) to this
/// instance's devices until the server shuts down gracefully; with embedded storage there are
/// none, and it only waits for the shutdown.
struct ChangeRelayService: Service {
    let database: any SyncDatabase
    let notifier: ChangeNotifier

    func run() async {
        await cancelWhenGracefulShutdown {
            await database.relayChanges(to: notifier)
        }
        // A group ends when one of its services does: this one lasts as long as the server.
        try? await gracefulShutdown() // throws only when cancelled: the group stops anyway
    }
}

/// With an object store: packs waiting chunks, collects dead packs and compacts sparse ones
/// every ``interval``, and sweeps the bucket every ``sweepInterval`` (the first a while after
/// the start) — on every instance at once, each taking its share (``ObjectChunkStore``).
struct ObjectStoreHousekeepingService: Service {
    let store: ObjectChunkStore
    let logger: Logger
    var interval: Duration = .seconds(15)
    var sweepInterval: TimeInterval = 86_400

    func run() async {
        await cancelWhenGracefulShutdown {
            var nextSweep = Date().addingTimeInterval(600)
            while !Task.isCancelled {
                do {
                    try await store.housekeep(now: Date())
                    if Date() >= nextSweep {
                        nextSweep = Date().addingTimeInterval(sweepInterval)
                        try await store.sweep(now: Date())
                    }
                } catch is CancellationError {
                    return
                } catch {
                    if Task.isCancelled { return }
                    logger.error("object store housekeeping failed; tried again shortly", metadata: ["error": "\(error)"])
                }
                do { try await Task.sleep(for: interval) } catch { return } // cancelled: the server stops
            }
        }
    }
}
