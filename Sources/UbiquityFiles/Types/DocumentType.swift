/// A declared type of file, in the manner of a Uniform Type Identifier declaration.
///
/// `public.plain-text` conforms to `public.text`, which conforms to `public.data` and
/// `public.content`; a package type conforms to `com.apple.package`.
public struct DocumentType: Hashable, Sendable, Codable {
    /// The reverse-DNS identifier, e.g. `com.example.note`.
    public var identifier: String
    /// Identifiers of the types this type directly conforms to.
    public var conformsTo: [String]
    /// File-name extensions without the dot, preferred first.
    public var filenameExtensions: [String]
    /// MIME types, preferred first.
    public var mimeTypes: [String]
    /// A description for people, e.g. "Plain Text".
    public var description: String?

    /// Creates a type declaration.
    /// - Parameters:
    ///   - identifier: The reverse-DNS identifier.
    ///   - conformsTo: Identifiers of the types it directly conforms to.
    ///   - filenameExtensions: Extensions (without the dot), preferred first.
    ///   - mimeTypes: MIME types, preferred first.
    ///   - description: A description for people.
    ///   - isPackage: Whether documents of this type are directories shown as one file; adds a
    ///     conformance to `com.apple.package`.
    public init(
        identifier: String,
        conformsTo: [String] = [],
        filenameExtensions: [String] = [],
        mimeTypes: [String] = [],
        description: String? = nil,
        isPackage: Bool = false
    ) {
        self.identifier = identifier
        self.conformsTo = conformsTo
        self.filenameExtensions = filenameExtensions.map { $0.hasPrefix(".") ? String($0.dropFirst()) : $0 }
        self.mimeTypes = mimeTypes
        self.description = description
        if isPackage && !conformsTo.contains(DocumentType.package) {
            self.conformsTo.append(DocumentType.package)
        }
    }

    /// The preferred file-name extension, if the type has one.
    public var preferredFilenameExtension: String? { filenameExtensions.first }
}

extension DocumentType {
    /// `public.item`: the root of the physical hierarchy.
    public static let item = "public.item"
    /// `public.content`: the root of the content hierarchy.
    public static let content = "public.content"
    /// `public.data`: any byte stream.
    public static let data = "public.data"
    /// `public.directory`: any directory.
    public static let directory = "public.directory"
    /// `public.folder`: a directory the user opens as a folder.
    public static let folder = "public.folder"
    /// `com.apple.package`: a directory presented as one file.
    public static let package = "com.apple.package"
    /// `public.text`.
    public static let text = "public.text"
    /// `public.plain-text`.
    public static let plainText = "public.plain-text"
    /// `public.utf8-plain-text`.
    public static let utf8PlainText = "public.utf8-plain-text"
    /// `public.json`.
    public static let json = "public.json"
    /// `public.image`.
    public static let image = "public.image"
    /// `public.png`.
    public static let png = "public.png"
    /// `public.jpeg`.
    public static let jpeg = "public.jpeg"
}
