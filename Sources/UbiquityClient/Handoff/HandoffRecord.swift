import Foundation
import UbiquityProtocol

/// One activity as the account's Handoff store keeps it (format 1): a dictionary value under
/// the activity's identifier.
struct HandoffRecord: Equatable, Sendable {
    static let format: Int64 = 1

    var type: String
    var title: String?
    var userInfo: PropertyListValue
    var webpageURL: String?
    var keywords: [String]
    var device: String
    var deviceName: String
    var updated: Date
    var expires: Date

    /// The store's value.
    var value: PropertyListValue {
        var fields: [String: PropertyListValue] = [
            "format": .integer(Self.format), "type": .string(type), "userInfo": userInfo, "keywords": .array(keywords.map(PropertyListValue.string)),
            "device": .string(device), "deviceName": .string(deviceName),
            "updated": .date(updated.timeIntervalSince1970), "expires": .date(expires.timeIntervalSince1970),
        ]
        if let title { fields["title"] = .string(title) }
        if let webpageURL { fields["webpageURL"] = .string(webpageURL) }
        return .dictionary(fields)
    }

    /// A record read back; nil for anything else (another format, a damaged or hostile value).
    init?(_ value: PropertyListValue) {
        guard case .dictionary(let fields) = value, case .integer(Self.format)? = fields["format"],
              case .string(let type)? = fields["type"], case .string(let device)? = fields["device"],
              case .string(let deviceName)? = fields["deviceName"], case .date(let updated)? = fields["updated"],
              case .date(let expires)? = fields["expires"], let userInfo = fields["userInfo"], case .dictionary = userInfo else { return nil }
        self.type = type
        self.device = device
        self.deviceName = deviceName
        self.updated = Date(timeIntervalSince1970: updated)
        self.expires = Date(timeIntervalSince1970: expires)
        self.userInfo = userInfo
        if case .string(let title)? = fields["title"] { self.title = title }
        if case .string(let url)? = fields["webpageURL"] { webpageURL = url }
        if case .array(let words)? = fields["keywords"] {
            keywords = words.compactMap { if case .string(let word) = $0 { return word } else { return nil } }
        } else {
            keywords = []
        }
    }

    init(type: String, title: String?, userInfo: PropertyListValue, webpageURL: String?, keywords: [String], device: String, deviceName: String, updated: Date, expires: Date) {
        self.type = type
        self.title = title
        self.userInfo = userInfo
        self.webpageURL = webpageURL
        self.keywords = keywords
        self.device = device
        self.deviceName = deviceName
        self.updated = updated
        self.expires = expires
    }

    /// The record's size as stored (what the bounds count).
    var encodedSize: Int { (try? JSONEncoder().encode(value).count) ?? Int.max }
}

/// `userInfo` to and from the store: property-list values as they are; `URL`s and `UUID`s
/// (which Apple's `userInfo` also takes) tagged; a file URL inside a ubiquity container carried
/// as its container and path, so that the other device gets its own URL of the same item.
enum HandoffUserInfo {
    static let urlTag = "$url", uuidTag = "$uuid", itemTag = "$ubiquitousItem"

    static func encode(_ info: [AnyHashable: Any], containers: UbiquityContainers) -> PropertyListValue? {
        var fields: [String: PropertyListValue] = [:]
        for (key, value) in info {
            guard let key = key as? String, let encoded = encode(value: value, containers: containers) else { return nil }
            fields[key] = encoded
        }
        return .dictionary(fields)
    }

    static func encode(value: Any, containers: UbiquityContainers) -> PropertyListValue? {
        if let url = value as? URL {
            if url.isFileURL, let location = containers.location(of: url) {
                return .dictionary([itemTag: .array([.string(location.container), .string(location.relativePath)])])
            }
            return .dictionary([urlTag: .string(url.absoluteString)])
        }
        if let uuid = value as? UUID { return .dictionary([uuidTag: .string(uuid.uuidString)]) }
        if let array = value as? [Any] {
            var values: [PropertyListValue] = []
            for element in array {
                guard let encoded = encode(value: element, containers: containers) else { return nil }
                values.append(encoded)
            }
            return .array(values)
        }
        if let dictionary = value as? [AnyHashable: Any] { return encode(dictionary, containers: containers) }
        return PropertyListValue(propertyList: value)
    }

    static func decode(_ value: PropertyListValue, containers: UbiquityContainers) -> Any? {
        switch value {
        case .dictionary(let fields):
            if fields.count == 1, case .string(let url)? = fields[urlTag] { return URL(string: url) }
            if fields.count == 1, case .string(let uuid)? = fields[uuidTag] { return UUID(uuidString: uuid) }
            if fields.count == 1, case .array(let parts)? = fields[itemTag], parts.count == 2,
               case .string(let container) = parts[0], case .string(let path) = parts[1] {
                // The same item in this device's copy of the container (nil where the app
                // is not entitled to it or nobody is signed in).
                guard let root = containers.url(forContainer: container), !path.split(separator: "/").contains("..") else { return nil }
                return path.isEmpty ? root : root.appendingPathComponent(path)
            }
            var decoded: [String: Any] = [:]
            for (key, field) in fields { decoded[key] = decode(field, containers: containers) }
            return decoded
        case .array(let values): return values.compactMap { decode($0, containers: containers) }
        default: return value.foundationObject
        }
    }
}
