import Foundation
import Ubiquity

/// The guide's package document (Listings 3-2, 3-4 and 3-6): a text and an image kept as two
/// members of a file package, each read only when first needed.
package final class NoteDocument: Document {
    /// The package member holding the text.
    package static let textFileName = "Text.txt"
    /// The package member holding the image.
    package static let imageFileName = "Image.png"
    /// The note's type identifier.
    package static let typeIdentifier = "com.example.notes.note"

    /// Declares the note type (a package with extension `note`) in `registry`.
    /// - Parameter registry: The registry to declare it in.
    package static func registerType(in registry: DocumentTypeRegistry = .shared) {
        registry.register(DocumentType(identifier: typeIdentifier, conformsTo: [DocumentType.content], filenameExtensions: ["note"], description: "Note", isPackage: true))
    }

    /// The package's top-level wrapper (the guide's `fileWrapper` property).
    package private(set) var fileWrapper: FileWrapper?
    private var cachedText: String?
    private var cachedImage: Data?

    /// The note's text, read lazily from the package. On the main actor, where the note is
    /// edited: setting it registers the undo with the undo manager (a main-actor object).
    @MainActor
    package var text: String {
        get { currentText }
        set {
            let old = currentText
            guard old != newValue else { return }
            cachedText = newValue
            replaceMember(Self.textFileName)
            undoManager.registerUndo(withTarget: self) { $0.text = old }
            undoManager.setActionName("Typing")
        }
    }

    /// The note's image bytes (PNG), read lazily from the package. On the main actor, as ``text``.
    @MainActor
    package var image: Data? {
        get { currentImage }
        set {
            let old = currentImage
            cachedImage = newValue
            replaceMember(Self.imageFileName)
            undoManager.registerUndo(withTarget: self) { $0.image = old }
            undoManager.setActionName("Change Image")
        }
    }

    /// The text, read from the package member when first needed.
    private var currentText: String {
        if let cachedText { return cachedText }
        let data = fileWrapper?.fileWrappers?[Self.textFileName]?.regularFileContents
        cachedText = data.flatMap { String(data: $0, encoding: .utf8) } ?? ""
        return cachedText!
    }

    /// The image, read from the package member when first needed.
    private var currentImage: Data? {
        if let cachedImage { return cachedImage }
        cachedImage = fileWrapper?.fileWrappers?[Self.imageFileName]?.regularFileContents
        return cachedImage
    }

    private func replaceMember(_ name: String) {
        if let old = fileWrapper?.fileWrappers?[name] { fileWrapper?.removeFileWrapper(old) }
    }

    /// Returns the package, creating members that are missing (Listing 3-6).
    /// - Parameter typeName: The type to save as.
    override package func contents(forType typeName: String) throws -> Any {
        let wrapper = fileWrapper ?? FileWrapper(directoryWithFileWrappers: [:])
        fileWrapper = wrapper
        let members = wrapper.fileWrappers ?? [:]
        if members[Self.textFileName] == nil {
            wrapper.addRegularFile(withContents: Data(currentText.utf8), preferredFilename: Self.textFileName)
        }
        if members[Self.imageFileName] == nil, let image = currentImage {
            wrapper.addRegularFile(withContents: image, preferredFilename: Self.imageFileName)
        }
        return wrapper
    }

    /// Keeps the package wrapper; members are read when first asked for (Listing 3-4).
    /// - Parameters:
    ///   - contents: A directory `FileWrapper`.
    ///   - typeName: The file's type.
    /// - Throws: ``ExampleDocumentError`` when the file is not a package.
    override package func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let wrapper = contents as? FileWrapper, wrapper.isDirectory else {
            throw ExampleDocumentError("a note must be a package")
        }
        fileWrapper = wrapper
        cachedText = nil
        cachedImage = nil
    }
}
