import Foundation
import Synchronization

/// The types a process knows: the system's, and those an app declares.
///
/// Look a type up by identifier or by file-name extension (case-insensitively), and ask whether
/// one type conforms to another. ``shared`` is what documents use unless given another registry.
public final class DocumentTypeRegistry: Sendable {
    struct State {
        var types: [String: DocumentType] = [:]
        /// Lower-cased extension → identifiers, most recently declared first.
        var byExtension: [String: [String]] = [:]
        var documentTypes: [DeclaredDocumentType] = []
    }

    let state = Mutex(State())

    /// The process-wide registry: system types plus whatever the app registers into it.
    public static let shared = DocumentTypeRegistry()

    /// Creates a registry.
    /// - Parameter includingSystemTypes: Start with ``DocumentType/systemTypes`` registered.
    public init(includingSystemTypes: Bool = true) {
        if includingSystemTypes {
            for type in DocumentType.systemTypes { register(type) }
        }
    }

    /// Adds or replaces a type declaration. Its extensions take precedence over types declared
    /// before it (so an app's types win over the system's).
    /// - Parameter type: The declaration.
    public func register(_ type: DocumentType) {
        state.withLock { state in
            let key = type.identifier.lowercased()
            if let old = state.types[key] {
                for ext in old.filenameExtensions { state.byExtension[ext.lowercased()]?.removeAll { $0 == key } }
            }
            state.types[key] = type
            for ext in type.filenameExtensions.reversed() {
                state.byExtension[ext.lowercased(), default: []].removeAll { $0 == key }
                state.byExtension[ext.lowercased(), default: []].insert(key, at: 0)
            }
        }
    }

    /// Registers the document types an app can open (its `CFBundleDocumentTypes`).
    /// - Parameter documentType: The declaration.
    public func register(_ documentType: DeclaredDocumentType) {
        state.withLock { $0.documentTypes.append(documentType) }
    }

    /// Registers everything in a set of declarations.
    /// - Parameter declarations: Parsed declarations.
    public func register(_ declarations: DocumentTypeDeclarations) {
        for type in declarations.importedTypes { register(type) }
        for type in declarations.exportedTypes { register(type) }
        for documentType in declarations.documentTypes { register(documentType) }
    }

    /// Reads and registers a declarations file (JSON, or an XML or binary property list) with
    /// the keys of an Info.plist: `UTExportedTypeDeclarations`, `UTImportedTypeDeclarations`,
    /// `CFBundleDocumentTypes`.
    /// - Parameter url: The file.
    /// - Throws: ``DocumentTypeError`` when it cannot be read or is malformed; nothing is registered then.
    public func registerDeclarations(contentsOf url: URL) throws {
        let data: Data
        do { data = try Data(contentsOf: url) } catch {
            throw DocumentTypeError(.unreadable, "could not read the type declarations", path: url.path, underlying: error)
        }
        do { register(try DocumentTypeDeclarations(data: data)) } catch var error as DocumentTypeError {
            error.path = url.path
            throw error
        }
    }

    /// The type with `identifier` (compared case-insensitively), or nil.
    /// - Parameter identifier: A type identifier.
    public func type(withIdentifier identifier: String) -> DocumentType? {
        state.withLock { $0.types[identifier.lowercased()] }
    }

    /// The preferred type for a file-name extension (case-insensitive, with or without the dot), or nil.
    /// - Parameter filenameExtension: An extension such as `txt`.
    public func type(forFilenameExtension filenameExtension: String) -> DocumentType? {
        types(forFilenameExtension: filenameExtension).first
    }

    /// All types that claim a file-name extension, the preferred one first.
    /// - Parameter filenameExtension: An extension such as `txt`.
    public func types(forFilenameExtension filenameExtension: String) -> [DocumentType] {
        var ext = filenameExtension.lowercased()
        if ext.hasPrefix(".") { ext.removeFirst() }
        return state.withLock { state in (state.byExtension[ext] ?? []).compactMap { state.types[$0] } }
    }

    /// The type of a file at `url`, from its extension.
    /// - Parameter url: A file URL.
    public func type(of url: URL) -> DocumentType? {
        let ext = url.pathExtension
        return ext.isEmpty ? nil : type(forFilenameExtension: ext)
    }

    /// Whether `identifier` is `other` or conforms to it, directly or through its ancestors.
    /// - Parameters:
    ///   - identifier: The type to test.
    ///   - other: The type it may conform to.
    public func conforms(_ identifier: String, to other: String) -> Bool {
        supertypes(of: identifier).contains(other.lowercased())
    }

    /// `identifier` and every type it conforms to, lower-cased, nearest first (a type tree).
    /// - Parameter identifier: A type identifier.
    public func supertypes(of identifier: String) -> [String] {
        state.withLock { state in
            var seen: [String] = []
            var queue = [identifier.lowercased()]
            while !queue.isEmpty {
                let next = queue.removeFirst()
                guard !seen.contains(next) else { continue }
                seen.append(next)
                queue.append(contentsOf: (state.types[next]?.conformsTo ?? []).map { $0.lowercased() })
            }
            return seen
        }
    }

    /// Whether documents of type `identifier` are packages (directories shown as one file).
    /// - Parameter identifier: A type identifier.
    public func isPackage(_ identifier: String) -> Bool {
        if conforms(identifier, to: DocumentType.package) { return true }
        let key = identifier.lowercased()
        return state.withLock { $0.documentTypes.contains { $0.isPackage && $0.contentTypes.map { $0.lowercased() }.contains(key) } }
    }

    /// The document types the app declared it can open or edit.
    public var documentTypes: [DeclaredDocumentType] { state.withLock { $0.documentTypes } }

    /// The Handoff activity type declared for documents of `identifier` in iCloud
    /// (`NSUbiquitousDocumentUserActivityType` of the first document type that covers it or a
    /// type it conforms to), or nil.
    /// - Parameter identifier: A type identifier.
    public func ubiquitousDocumentUserActivityType(for identifier: String) -> String? {
        let candidates = [identifier.lowercased()] + supertypes(of: identifier).map { $0.lowercased() }
        return state.withLock { state in
            for candidate in candidates {
                if let declared = state.documentTypes.first(where: { $0.ubiquitousDocumentUserActivityType != nil && $0.contentTypes.map { $0.lowercased() }.contains(candidate) }) {
                    return declared.ubiquitousDocumentUserActivityType
                }
            }
            return nil
        }
    }
}
