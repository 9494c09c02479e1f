import Foundation

/// A document type an app handles: one entry of `CFBundleDocumentTypes`.
public struct DeclaredDocumentType: Hashable, Sendable, Codable {
    /// How the app relates to documents of this type (`CFBundleTypeRole`).
    public enum Role: String, Hashable, Sendable, Codable {
        /// The app can read and write them.
        case editor = "Editor"
        /// The app can only read them.
        case viewer = "Viewer"
        /// The app neither reads nor writes them, but declares them.
        case none = "None"
    }

    /// The name shown to people (`CFBundleTypeName`).
    public var name: String
    /// The type identifiers this entry covers (`LSItemContentTypes`).
    public var contentTypes: [String]
    /// The role (`CFBundleTypeRole`).
    public var role: Role
    /// Whether the documents are packages (`LSTypeIsPackage`).
    public var isPackage: Bool
    /// The handler rank (`LSHandlerRank`), e.g. `Owner` or `Alternate`.
    public var handlerRank: String?
    /// The activity type of a document of this type in iCloud (`NSUbiquitousDocumentUserActivityType`):
    /// when set, such a document offers Handoff an activity of this type while open.
    public var ubiquitousDocumentUserActivityType: String?

    /// Creates a declaration.
    /// - Parameters:
    ///   - name: The name shown to people.
    ///   - contentTypes: The type identifiers covered.
    ///   - role: The app's role.
    ///   - isPackage: Whether the documents are packages.
    ///   - handlerRank: The handler rank.
    ///   - ubiquitousDocumentUserActivityType: The Handoff activity type of its documents in iCloud.
    public init(name: String, contentTypes: [String], role: Role = .editor, isPackage: Bool = false, handlerRank: String? = nil,
                ubiquitousDocumentUserActivityType: String? = nil) {
        self.name = name
        self.contentTypes = contentTypes
        self.role = role
        self.isPackage = isPackage
        self.handlerRank = handlerRank
        self.ubiquitousDocumentUserActivityType = ubiquitousDocumentUserActivityType
    }

    enum CodingKeys: String, CodingKey {
        case name, contentTypes, role, isPackage, handlerRank, ubiquitousDocumentUserActivityType
    }

    /// Decodes a declaration (one encoded before activity types existed has none).
    /// - Throws: `DecodingError` when a required field is missing or mistyped.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        contentTypes = try container.decode([String].self, forKey: .contentTypes)
        role = try container.decode(Role.self, forKey: .role)
        isPackage = try container.decode(Bool.self, forKey: .isPackage)
        handlerRank = try container.decodeIfPresent(String.self, forKey: .handlerRank)
        ubiquitousDocumentUserActivityType = try container.decodeIfPresent(String.self, forKey: .ubiquitousDocumentUserActivityType)
    }
}

/// What an app declares about types: the contents of the type-related keys of an Info.plist.
public struct DocumentTypeDeclarations: Sendable {
    /// Types the app owns (`UTExportedTypeDeclarations`).
    public var exportedTypes: [DocumentType] = []
    /// Types the app uses but does not own (`UTImportedTypeDeclarations`).
    public var importedTypes: [DocumentType] = []
    /// Types the app opens (`CFBundleDocumentTypes`).
    public var documentTypes: [DeclaredDocumentType] = []

    /// Creates empty declarations.
    public init() {}

    /// Parses declarations from JSON or a property list (XML or binary) whose top level is a
    /// dictionary with any of the keys `UTExportedTypeDeclarations`,
    /// `UTImportedTypeDeclarations` and `CFBundleDocumentTypes`.
    /// - Parameter data: The file's bytes.
    /// - Throws: ``DocumentTypeError`` with code `.invalidDeclarations` saying what is wrong.
    public init(data: Data) throws {
        let object: Any
        let firstByte = data.first { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }
        do {
            if firstByte == UInt8(ascii: "{") {
                object = try JSONSerialization.jsonObject(with: data)
            } else {
                object = try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
            }
        } catch {
            throw DocumentTypeError(.invalidDeclarations, "not JSON or a property list", underlying: error)
        }
        guard let root = object as? [String: Any] else {
            throw DocumentTypeError(.invalidDeclarations, "the top level must be a dictionary")
        }
        exportedTypes = try Self.typeDeclarations(root["UTExportedTypeDeclarations"], key: "UTExportedTypeDeclarations")
        importedTypes = try Self.typeDeclarations(root["UTImportedTypeDeclarations"], key: "UTImportedTypeDeclarations")
        guard let entries = try Self.list(root["CFBundleDocumentTypes"], key: "CFBundleDocumentTypes") else { return }
        for (index, entry) in entries.enumerated() {
            let context = "CFBundleDocumentTypes[\(index)]"
            let name = entry["CFBundleTypeName"] as? String ?? ""
            let isPackage = (entry["LSTypeIsPackage"] as? NSNumber)?.boolValue ?? (entry["LSTypeIsPackage"] as? Bool) ?? false
            var contentTypes = Self.strings(entry["LSItemContentTypes"])
            let extensions = Self.strings(entry["CFBundleTypeExtensions"])
            if contentTypes.isEmpty && !extensions.isEmpty {
                // A legacy declaration by extension only: give it a dynamic type of its own.
                let identifier = "dyn.ubiquity." + extensions[0].lowercased()
                importedTypes.append(DocumentType(
                    identifier: identifier,
                    conformsTo: isPackage ? [] : [DocumentType.data],
                    filenameExtensions: extensions,
                    description: name.isEmpty ? nil : name,
                    isPackage: isPackage))
                contentTypes = [identifier]
            }
            guard !contentTypes.isEmpty else {
                throw DocumentTypeError(.invalidDeclarations, "\(context) has neither LSItemContentTypes nor CFBundleTypeExtensions")
            }
            let roleName = entry["CFBundleTypeRole"] as? String ?? "Editor"
            guard let role = DeclaredDocumentType.Role(rawValue: roleName) else {
                throw DocumentTypeError(.invalidDeclarations, "\(context) has an unknown CFBundleTypeRole “\(roleName)”")
            }
            documentTypes.append(DeclaredDocumentType(
                name: name, contentTypes: contentTypes, role: role, isPackage: isPackage,
                handlerRank: entry["LSHandlerRank"] as? String,
                ubiquitousDocumentUserActivityType: entry["NSUbiquitousDocumentUserActivityType"] as? String))
        }
    }

    static func typeDeclarations(_ value: Any?, key: String) throws -> [DocumentType] {
        guard let entries = try list(value, key: key) else { return [] }
        return try entries.enumerated().map { index, entry in
            guard let identifier = entry["UTTypeIdentifier"] as? String, !identifier.isEmpty else {
                throw DocumentTypeError(.invalidDeclarations, "\(key)[\(index)] has no UTTypeIdentifier")
            }
            let tags = entry["UTTypeTagSpecification"] as? [String: Any] ?? [:]
            return DocumentType(
                identifier: identifier,
                conformsTo: strings(entry["UTTypeConformsTo"]),
                filenameExtensions: strings(tags["public.filename-extension"]),
                mimeTypes: strings(tags["public.mime-type"]),
                description: entry["UTTypeDescription"] as? String)
        }
    }

    static func list(_ value: Any?, key: String) throws -> [[String: Any]]? {
        guard let value else { return nil }
        guard let array = value as? [Any], let entries = array as? [[String: Any]] else {
            throw DocumentTypeError(.invalidDeclarations, "\(key) must be an array of dictionaries")
        }
        return entries
    }

    /// A string or an array of strings, as Info.plist keys allow.
    static func strings(_ value: Any?) -> [String] {
        if let single = value as? String { return [single] }
        return (value as? [Any])?.compactMap { $0 as? String } ?? []
    }
}

/// An error reading type declarations.
public struct DocumentTypeError: Error, Sendable, CustomStringConvertible {
    /// A kind of failure. Extensible.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The declarations file could not be read.
        public static let unreadable = Code(name: "unreadable")
        /// The declarations are malformed.
        public static let invalidDeclarations = Code(name: "invalidDeclarations")
        /// A textual name of the code.
        public var description: String { name }
    }
    /// What kind of failure this is.
    public var code: Code
    /// What is wrong.
    public var message: String
    /// The declarations file, when known.
    public var path: String?
    /// The cause, if any.
    public var underlying: (any Error)?

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - message: What is wrong.
    ///   - path: The declarations file.
    ///   - underlying: The cause.
    public init(_ code: Code, _ message: String, path: String? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.underlying = underlying
    }

    /// A one-line description.
    public var description: String {
        var text = "type declarations: " + message
        if let path { text += " (\(path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }
}
