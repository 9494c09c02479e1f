import Foundation
import UbiquityClient

/// The key of a document activity's `userInfo` that holds the document's URL.
public let NSUserActivityDocumentURLKey = "NSUserActivityDocumentURLKey"

extension Document {
    /// The key of the document's URL in its activity's `userInfo` (`NSUserActivityDocumentURLKey`).
    public static let userActivityURLKey = NSUserActivityDocumentURLKey

    /// Offers the document's activity while it is open (on the main queue): the app's own, or,
    /// for a document in a ubiquity container whose type declares an activity type, one made
    /// for it.
    func offerUserActivity() {
        let activity: NSUserActivity
        if userActivityWasSet {
            guard let own = storedUserActivity else { return }
            activity = own
        } else if let existing = storedUserActivity {
            activity = existing
        } else {
            guard let type = fileType.flatMap(typeRegistry.ubiquitousDocumentUserActivityType(for:)),
                  handoff.containers.isUbiquitousItem(at: fileURL) else { return }
            activity = NSUserActivity(activityType: type, handoff: handoff)
            activity.title = localizedName
            storedUserActivity = activity
        }
        if activity.delegate == nil || activity.delegate === userActivityBridge {
            let bridge = userActivityBridge ?? UserActivityBridge(self)
            userActivityBridge = bridge
            activity.delegate = bridge
        }
        activity.needsSave = true
        activity.becomeCurrent()
    }

    /// Stops offering the document's activity (closed).
    func withdrawUserActivity() {
        storedUserActivity?.resignCurrent()
    }

    /// The document moved: its activity is sent again with the new URL.
    func userActivityURLChanged() {
        guard let activity = storedUserActivity, activity.isCurrent else { return }
        activity.needsSave = true
    }
}

/// An activity's delegate that asks the document to bring it up to date (UIKit does the same
/// for the documents' activities it manages).
final class UserActivityBridge: NSUserActivityDelegate, @unchecked Sendable {
    private weak var document: Document?

    init(_ document: Document) { self.document = document }

    func userActivityWillSave(_ userActivity: NSUserActivity) {
        guard let document else { return }
        document.onMainAndWaitIgnoringErrors { document.updateUserActivityState(userActivity) }
    }
}

extension Document {
    /// Runs `body` on the main queue and waits (it cannot throw).
    nonisolated func onMainAndWaitIgnoringErrors(_ body: () -> Void) {
        _ = try? onMainAndWait(body) // cannot throw: the body does not
    }
}
