import Foundation

extension FileWrapper {
    static let serializationFormat = "ubiquity.file-wrapper"
    static let serializationVersion = 1

    var serializedRepresentationImplementation: Data? {
        guard let node = serializedNode() else { return nil }
        let root: [String: Any] = ["format": Self.serializationFormat, "version": Self.serializationVersion, "root": node]
        return try? PropertyListSerialization.data(fromPropertyList: root, format: .binary, options: 0) // Apple's API is optional
    }

    /// Recreates a wrapper tree from ``serializedRepresentation``.
    ///
    /// Returns nil for data that is not such a representation, or that names a child with an
    /// unusable file name (empty, `.`, `..`, containing `/` or NUL) — so untrusted input can never
    /// make a later ``write(to:options:originalContentsURL:)`` escape its destination.
    /// - Parameter serializeRepresentation: Data from ``serializedRepresentation``.
    public convenience init?(serializedRepresentation serializeRepresentation: Data) {
        // Apple's failable initializer: anything not a serialized wrapper is nil.
        guard let plist = try? PropertyListSerialization.propertyList(from: serializeRepresentation, options: [], format: nil),
              let root = plist as? [String: Any],
              root["format"] as? String == Self.serializationFormat,
              (root["version"] as? NSNumber)?.intValue == Self.serializationVersion,
              let node = root["root"] as? [String: Any]
        else { return nil }
        self.init(kind: .regular)
        guard populate(from: node, depth: 0) else { return nil }
    }

    func serializedNode() -> [String: Any]? {
        let (kind, name, attributes, children, destination) = lock.withLock {
            (self.kind, storedPreferredFilename, storedAttributes, self.children, self.destination)
        }
        var node: [String: Any] = [:]
        if let name { node["name"] = name }
        if let permissions = attributes[FileAttributeKey.posixPermissions.rawValue] as? NSNumber {
            node["permissions"] = permissions
        }
        switch kind {
        case .regular:
            guard let data = regularFileContents else { return nil }
            node["kind"] = "file"
            node["contents"] = data
        case .directory:
            node["kind"] = "directory"
            var encoded: [String: Any] = [:]
            for (key, child) in children {
                guard let childNode = child.serializedNode() else { return nil }
                encoded[key] = childNode
            }
            node["children"] = encoded
        case .symbolicLink:
            node["kind"] = "link"
            node["destination"] = destination?.relativePath ?? ""
        }
        return node
    }

    func populate(from node: [String: Any], depth: Int) -> Bool {
        guard depth < 256 else { return false }
        storedPreferredFilename = node["name"] as? String
        if let permissions = node["permissions"] as? NSNumber {
            storedAttributes[FileAttributeKey.posixPermissions.rawValue] = NSNumber(value: permissions.uint32Value & 0o7777)
        }
        switch node["kind"] as? String {
        case "file":
            guard let data = node["contents"] as? Data else { return false }
            kind = .regular
            contents = data
        case "directory":
            guard let encoded = node["children"] as? [String: Any] else { return false }
            kind = .directory
            for (key, value) in encoded {
                // A child with a name no file may have makes the archive malformed.
                guard (try? Self.validateName(key, in: "")) != nil, let childNode = value as? [String: Any] else { return false }
                let child = FileWrapper(kind: .regular)
                guard child.populate(from: childNode, depth: depth + 1) else { return false }
                if child.storedPreferredFilename == nil { child.storedPreferredFilename = key }
                child.parent = self
                children[key] = child
            }
        case "link":
            guard let target = node["destination"] as? String, !target.isEmpty else { return false }
            kind = .symbolicLink
            destination = target.hasPrefix("/") ? URL(fileURLWithPath: target) : URL(fileURLWithPath: target, relativeTo: nil)
        default:
            return false
        }
        return true
    }
}

extension FileWrapper {
    static let archiveKey = "serializedRepresentation"

    /// Whether it decodes only as what it says it is: yes (`NSSecureCoding`).
    public class var supportsSecureCoding: Bool { true }
}
