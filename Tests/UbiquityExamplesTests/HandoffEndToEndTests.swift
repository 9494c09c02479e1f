import Foundation
import Synchronization
import Testing
import Ubiquity
import UbiquityTestSupport

/// A note document whose type declares a Handoff activity type, as an app's Info.plist does.
final class HandoffNote: UIDocument {
    var text = ""
    let restored = Mutex<[String]>([])

    override func contents(forType typeName: String) throws -> Any { Data(text.utf8) }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        text = String(decoding: contents as? Data ?? Data(), as: UTF8.self)
    }

    override func updateUserActivityState(_ userActivity: NSUserActivity) {
        super.updateUserActivityState(userActivity)
        userActivity.addUserInfoEntries(from: ["cursor": 42])
    }

    override func restoreUserActivityState(_ userActivity: NSUserActivity) {
        restored.withLock { $0.append("cursor \(userActivity.userInfo?["cursor"] as? Int ?? -1)") }
    }

    static let registry: DocumentTypeRegistry = {
        let registry = DocumentTypeRegistry()
        registry.register(DocumentType(identifier: "com.example.handoff-note", conformsTo: [DocumentType.data], filenameExtensions: ["hnote"]))
        registry.register(DeclaredDocumentType(name: "Note", contentTypes: ["com.example.handoff-note"],
                                               ubiquitousDocumentUserActivityType: "com.example.notes.editing"))
        return registry
    }()
}

/// Heard by an activity's delegate on the device it came from.
final class ActivityEar: NSUserActivityDelegate, @unchecked Sendable {
    let continued = Mutex(0)
    func userActivityWasContinued(_ userActivity: NSUserActivity) { continued.withLock { $0 += 1 } }
}

/// Handoff through a real server and two real agents: an activity made current on the laptop
/// is listed on the phone (and by `ubiquity activities`), continued there — the laptop's
/// delegate hears it — and withdrawn; a document's automatic activity carries its URL, which
/// the phone reads as its own copy's URL.
@Suite(.serialized) struct HandoffEndToEndTests {
    @Test func activitiesReachTheAccountsOtherDevicesAndAreContinued() async throws {
        let dir = try TemporaryDirectory("handoff"); defer { dir.remove() }
        let (server, laptop, phone) = try await serverAndTwoDevices(in: dir, container: "ABCDE12345.com.example.notes")
        defer { server.stop() }
        let laptopHandoff = UbiquityHandoff(containers: laptop.containers)
        let phoneHandoff = UbiquityHandoff(containers: phone.containers)
        #expect(phoneHandoff.activities().isEmpty)

        // An activity of the app's own, with a web page and a document URL in its userInfo.
        let ear = ActivityEar()
        let activity = NSUserActivity(activityType: "com.example.notes.browsing", handoff: laptopHandoff)
        activity.title = "Browsing notes"
        activity.webpageURL = URL(string: "https://notes.example.com/all")
        activity.userInfo = ["folder": "Trips", "session": UUID(), "count": 3]
        activity.delegate = ear
        activity.becomeCurrent()
        try await eventually("the phone lists the laptop's activity", timeout: .seconds(30)) {
            phoneHandoff.activities(ofTypes: ["com.example.notes.browsing"]).count == 1
        }
        let seen = try #require(phoneHandoff.activities().first)
        #expect(seen.identifier == activity.identifier && seen.title == "Browsing notes" && seen.originatingDeviceName == "laptop")
        #expect(seen.webpageURL?.absoluteString == "https://notes.example.com/all")
        #expect(seen.userInfo?["folder"] as? String == "Trips" && seen.userInfo?["count"] as? Int == 3 && seen.userInfo?["session"] is UUID)
        #expect(laptopHandoff.activities().isEmpty, "a device is not offered its own activities")
        #expect(phoneHandoff.activities(ofTypes: ["com.example.other"]).isEmpty)

        // The command line lists it too.
        let listed = try runUbiquity(["activities", "--json"], environment: phone.environment)
        #expect(listed.status == 0 && listed.output.contains(activity.identifier.uuidString) && listed.output.contains("\"device\":\"laptop\""), "\(listed.output)")

        // Continued on the phone: the laptop's delegate hears it.
        phoneHandoff.continueActivity(seen)
        try await eventually("the laptop hears its activity was continued", timeout: .seconds(30)) { ear.continued.withLock { $0 } == 1 }

        // Resigned: withdrawn from the phone's list.
        activity.resignCurrent()
        try await eventually("the activity is withdrawn", timeout: .seconds(30)) { phoneHandoff.activities().isEmpty }

        // A document in the container whose type declares an activity type offers one while
        // open, carrying its URL — which the phone reads as its own copy's URL.
        let url = laptop.documents.appendingPathComponent("Trip.hnote")
        let note = HandoffNote(fileURL: url, typeRegistry: HandoffNote.registry)
        note.handoff = laptopHandoff
        note.text = "pack the tent"
        #expect(await note.save(to: url, for: .forCreating))
        #expect(note.userActivity?.activityType == "com.example.notes.editing" && note.userActivity?.isCurrent == true)
        try await eventually("the phone lists the document's activity", timeout: .seconds(30)) {
            phoneHandoff.activities(ofTypes: ["com.example.notes.editing"]).count == 1
        }
        let offered = try #require(phoneHandoff.activities(ofTypes: ["com.example.notes.editing"]).first)
        let there = try #require(offered.userInfo?[UIDocument.userActivityURLKey] as? URL)
        #expect(there.standardizedFileURL.path == phone.documents.appendingPathComponent("Trip.hnote").standardizedFileURL.path)
        #expect(offered.title == "Trip" && offered.userInfo?["cursor"] as? Int == 42)
        let continuing = HandoffNote(fileURL: there, typeRegistry: HandoffNote.registry)
        continuing.restoreUserActivityState(offered)
        #expect(continuing.restored.withLock { $0 } == ["cursor 42"])
        #expect(await note.close())
        #expect(note.userActivity?.isCurrent == false)
        try await eventually("the closed document's activity is withdrawn", timeout: .seconds(30)) { phoneHandoff.activities().isEmpty }
    }
}
