import CUbiquitySystem
import Dispatch
import Foundation

/// How Ubiquity hands work to the main queue so that an observer an app added with
/// `queue: .main` hears every notification, whichever way the program drains its main queue.
///
/// swift-corelibs-foundation's `NotificationCenter.post` runs an observer's block at once when
/// the observer's queue is `OperationQueue.current`, and otherwise adds it to that queue and
/// waits. It takes main-queue work for `OperationQueue.main` only on the process's first thread
/// or inside an operation of `OperationQueue.main`; a program whose main queue another thread
/// drains (`dispatchMain()`, or an async entry point when the run-loop hook is off) posting from
/// plain main-queue work would wait for itself forever. So Ubiquity's main-queue work runs as
/// operations of `OperationQueue.main` (``async(_:)``, ``sync(_:)``), and what it posts from main-
/// queue work it cannot tell apart goes out at the main queue's next turn (``post(_:to:)``).
package enum MainQueue {
    /// Marks the main dispatch queue, whichever thread drains it.
    private static let key: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    /// Whether the caller runs on the main queue (on any thread that drains it).
    package static var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }

    /// Whether Foundation takes the caller for the main queue: on the process's first thread or
    /// inside an operation of `OperationQueue.main`. Only there (or off the main queue) does a
    /// notification reach a `queue: .main` observer without waiting on the caller.
    package static var foundationSeesMainQueue: Bool {
        Thread.isMainThread || OperationQueue.current === OperationQueue.main
    }

    /// Whether an async entry point drains the main queue on the main thread, through the run
    /// loop, as on Apple's systems (the default; `UBIQUITY_ASYNC_MAIN=dispatch` turns it off).
    package static var asyncEntryPointUsesMainRunLoop: Bool { ubq_async_main_drains_main_run_loop() != 0 }

    /// Runs `body` on the main queue at its next turn, as an operation of `OperationQueue.main`
    /// (where Foundation knows it is on the main queue).
    /// - Parameter body: The work.
    package static func async(_ body: @escaping () -> Void) {
        let work = UncheckedBox(body)
        OperationQueue.main.addOperation { work.value() }
    }

    /// Runs `body` on the main queue and waits for it: at once when the caller is on the main
    /// queue, else as an operation of `OperationQueue.main`.
    /// - Parameter body: The work.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw.
    package static func sync<T>(_ body: () throws -> T) throws -> T {
        if isCurrent { return try body() }
        return try withoutActuallyEscaping(body) { body in
            // The operation outlives the wait (its queue lets go of it a moment later), so it
            // holds the body only until the body has run.
            let work = UncheckedBox<(() throws -> T)?>(body)
            let result = UncheckedBox<Result<T, any Error>?>(nil)
            let operation = BlockOperation {
                result.value = Result { try work.value!() }
                work.value = nil
            }
            OperationQueue.main.addOperations([operation], waitUntilFinished: true)
            guard let outcome = result.value else { preconditionFailure("the main queue's operation did not run") }
            return try outcome.get()
        }
    }

    /// Posts `notification` to `center` at once where that reaches every observer, whatever its
    /// queue, without waiting on the caller: off the main queue, and on it where Foundation
    /// knows it is there. From other main-queue work it is posted at the main queue's next
    /// turn, as an operation of `OperationQueue.main` (in order with everything else posted so).
    /// - Parameters:
    ///   - notification: What to post.
    ///   - center: Where to post it.
    package static func post(_ notification: Notification, to center: NotificationCenter = .default) {
        if !isCurrent || foundationSeesMainQueue { return center.post(notification) }
        let carried = UncheckedBox(notification)
        OperationQueue.main.addOperation { center.post(carried.value) }
    }
}

extension NotificationCenter {
    /// Posts a notification so that no observer waits on the code that posts it — an
    /// addition to Apple's API, for apps whose main queue another thread drains on Linux.
    ///
    /// On Linux, Foundation's ``post(_:)`` from main-queue work that does not run on the
    /// process's first thread (a program that calls `dispatchMain()`, or an async entry point
    /// with `UBIQUITY_ASYNC_MAIN=dispatch`) waits forever for an observer added with
    /// `queue: .main`: it queues the block behind the work that is waiting for it. This posts at
    /// once wherever Foundation's `post` is safe — off the main queue, on the main thread, inside
    /// an operation of `OperationQueue.main` — and otherwise at the main queue's next turn. On
    /// the main thread (`RunLoop.main.run()`, and async entry points by default) it is `post`.
    /// - Parameter notification: What to post.
    public func postSafely(_ notification: Notification) {
        MainQueue.post(notification, to: self)
    }

    /// Posts a notification made of `name`, `object` and `userInfo`; see ``postSafely(_:)``.
    /// - Parameters:
    ///   - name: The notification's name.
    ///   - object: The object posting it.
    ///   - userInfo: What it carries.
    public func postSafely(name: Notification.Name, object: Any?, userInfo: [AnyHashable: Any]? = nil) {
        postSafely(Notification(name: name, object: object, userInfo: userInfo))
    }
}

/// A value handed to the one queue that uses it from then on (a block, a notification, a
/// result): the queue hand-off is the synchronisation.
package final class UncheckedBox<Value>: @unchecked Sendable {
    /// The value.
    package var value: Value
    /// Boxes `value`.
    /// - Parameter value: The value.
    package init(_ value: Value) { self.value = value }
}
