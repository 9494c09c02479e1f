import ArgumentParser
import Foundation
import Ubiquity

/// `ubiquity activities`: the Handoff activities current on the account's other devices.
struct ActivitiesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activities",
        abstract: "List the Handoff activities (NSUserActivity) current on the signed-in account's other devices, or continue one.")

    @Option(name: .customLong("type"), help: "Only activities of this type (repeatable).") var types: [String] = []
    @Option(name: .customLong("continue"), help: "Continue the activity with this identifier: its device is told.") var continued: String?
    @Flag(help: "Print JSON, one object per activity.") var json = false

    func run() async throws {
        let containers = UbiquityContainers(paths: UbiquityIdentity.shared.paths, entitlements: UbiquityEntitlements(containers: []))
        guard containers.identityToken != nil else {
            FileHandle.standardError.write(Data("not signed in: no activities\n".utf8))
            throw ExitCode(1)
        }
        let handoff = UbiquityHandoff(containers: containers)
        let activities = handoff.activities(ofTypes: types.isEmpty ? nil : Set(types))
        if let continued {
            guard let activity = activities.first(where: { $0.identifier.uuidString.caseInsensitiveCompare(continued) == .orderedSame }) else {
                throw ValidationError("no current activity \(continued) on another device")
            }
            handoff.continueActivity(activity)
            print("continued \(activity.identifier.uuidString) (\(activity.activityType)) from \(activity.originatingDeviceName ?? "another device")")
            return
        }
        if json {
            for activity in activities { print(Self.json(activity)) }
            return
        }
        if activities.isEmpty { print("(no activities on other devices)") }
        let dates = ISO8601DateFormatter()
        for activity in activities {
            let title = activity.title.map { " “\($0)”" } ?? ""
            print("\(activity.identifier.uuidString)  \(activity.activityType)\(title)  from \(activity.originatingDeviceName ?? "?")  updated \(activity.lastUpdated.map(dates.string(from:)) ?? "?")")
            if let url = activity.userInfo?[UIDocument.userActivityURLKey] as? URL { print("    document: \(url.path)") }
            if let web = activity.webpageURL { print("    web page: \(web.absoluteString)") }
        }
    }

    /// One activity as a JSON object (its userInfo's keys, not its values).
    static func json(_ activity: NSUserActivity) -> String {
        var object: [String: Any] = ["identifier": activity.identifier.uuidString, "type": activity.activityType,
                                     "device": activity.originatingDeviceName ?? "",
                                     "userInfoKeys": (activity.userInfo ?? [:]).keys.compactMap { $0 as? String }.sorted()]
        if let title = activity.title { object["title"] = title }
        if let url = activity.userInfo?[UIDocument.userActivityURLKey] as? URL { object["document"] = url.path }
        if let web = activity.webpageURL { object["webpageURL"] = web.absoluteString }
        if let updated = activity.lastUpdated { object["updated"] = updated.timeIntervalSince1970 }
        if let expires = activity.expirationDate { object["expires"] = expires.timeIntervalSince1970 }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
