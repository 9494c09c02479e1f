import Foundation
import Ubiquity

/// The file name of the one MyStuff document.
package let thingsDocumentName = "Things I Own.mystuff"

/// One thing the user owns (the book's `MyWhatsit`). Its image lives in the document's
/// package under `imageKey`, not in the archive.
package struct Whatsit: Codable, Equatable, Sendable {
    /// What the thing is.
    package var name: String
    /// Where it is kept.
    package var location: String
    /// The key of its image member in the package, if it has an image.
    package var imageKey: String?

    /// Creates a thing.
    /// - Parameters:
    ///   - name: What it is.
    ///   - location: Where it is kept.
    package init(name: String, location: String = "") {
        self.name = name
        self.location = location
    }
}

/// Stores and retrieves images by key (the book's `ImageStorage` service).
package protocol ImageStorage: AnyObject {
    /// Stores, replaces or removes an image.
    /// - Parameters:
    ///   - newImage: The image bytes to store, or nil to remove.
    ///   - existingKey: The key of the image being replaced or removed.
    /// - Returns: The new image's key, or nil if none is stored.
    func keyForImage(_ newImage: Data?, existingKey: String?) -> String?
    /// The image stored under `key`, read lazily.
    /// - Parameter key: A key from ``keyForImage(_:existingKey:)``.
    func imageForKey(_ key: String?) -> Data?
}

/// The book's MyStuff document (chapter 19): a package with the archived list of things and
/// one member per image. Images are read only when asked for, and changing or deleting one
/// image rewrites nothing but that member and the small archive.
package final class ThingsDocument: Document, ImageStorage {
    /// The archive member's name.
    package static let thingsPreferredName = "things.plist"
    /// The preferred name of image members (made unique by the package).
    package static let imagePreferredName = "image.png"
    /// The document's type identifier.
    package static let typeIdentifier = "com.example.mystuff.things"

    /// Declares the MyStuff type (a package with extension `mystuff`) in `registry`.
    /// - Parameter registry: The registry to declare it in.
    package static func registerType(in registry: DocumentTypeRegistry = .shared) {
        registry.register(DocumentType(identifier: typeIdentifier, conformsTo: [DocumentType.content], filenameExtensions: ["mystuff"], description: "MyStuff Things", isPackage: true))
    }

    /// The package's top-level wrapper.
    package private(set) var docWrapper = FileWrapper(directoryWithFileWrappers: [:])
    /// The things, in order.
    package private(set) var things: [Whatsit] = []
    /// Called after the things were loaded (the book's `gotThings` delegate call).
    package var gotThings: ((ThingsDocument) -> Void)?

    /// How many things there are.
    package var whatsitCount: Int { things.count }

    /// The thing at `index`.
    /// - Parameter index: A valid index.
    package func whatsit(at index: Int) -> Whatsit { things[index] }

    /// Adds a new thing named "My Item N" and returns it with its index.
    @discardableResult
    package func anotherWhatsit() -> (object: Whatsit, index: Int) {
        let thing = Whatsit(name: "My Item \(whatsitCount + 1)")
        things.append(thing)
        updateChangeCount(.done)
        return (thing, things.count - 1)
    }

    /// Updates a thing's name and location.
    /// - Parameters:
    ///   - index: A valid index.
    ///   - name: The new name.
    ///   - location: The new location.
    package func update(at index: Int, name: String, location: String) {
        things[index].name = name
        things[index].location = location
        updateChangeCount(.done)
    }

    /// Sets (or, with nil, deletes) a thing's image.
    /// - Parameters:
    ///   - image: PNG bytes, or nil.
    ///   - index: A valid index.
    package func setImage(_ image: Data?, forWhatsitAt index: Int) {
        things[index].imageKey = keyForImage(image, existingKey: things[index].imageKey)
        updateChangeCount(.done)
    }

    /// A thing's image, read from the package on first use.
    /// - Parameter index: A valid index.
    package func image(forWhatsitAt index: Int) -> Data? { imageForKey(things[index].imageKey) }

    /// Removes a thing and its image.
    /// - Parameter index: A valid index.
    package func removeWhatsit(at index: Int) {
        _ = keyForImage(nil, existingKey: things[index].imageKey)
        things.remove(at: index)
        updateChangeCount(.done)
    }

    /// Stores, replaces or removes an image member.
    /// - Parameters:
    ///   - newImage: The image bytes, or nil to remove.
    ///   - existingKey: The key of the image being replaced.
    /// - Returns: The stored image's key.
    package func keyForImage(_ newImage: Data?, existingKey: String?) -> String? {
        if let existingKey, let wrapper = docWrapper.fileWrappers?[existingKey] {
            docWrapper.removeFileWrapper(wrapper)
        }
        guard let newImage else { return nil }
        return docWrapper.addRegularFile(withContents: newImage, preferredFilename: Self.imagePreferredName)
    }

    /// The image member stored under `key`.
    /// - Parameter key: An image key.
    package func imageForKey(_ key: String?) -> Data? {
        guard let key else { return nil }
        return docWrapper.fileWrappers?[key]?.regularFileContents
    }

    /// Archives the things into their member and returns the package.
    /// - Parameter typeName: The type to save as.
    /// - Throws: An encoding error.
    override package func contents(forType typeName: String) throws -> Any {
        if let wrapper = docWrapper.fileWrappers?[Self.thingsPreferredName] {
            docWrapper.removeFileWrapper(wrapper)
        }
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        docWrapper.addRegularFile(withContents: try encoder.encode(things), preferredFilename: Self.thingsPreferredName)
        return docWrapper
    }

    /// Unarchives the things; images stay on disk until asked for.
    /// - Parameters:
    ///   - contents: A directory `FileWrapper`.
    ///   - typeName: The file's type.
    /// - Throws: ``ExampleDocumentError`` or a decoding error for a damaged document.
    override package func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let wrapper = contents as? FileWrapper, wrapper.isDirectory else {
            throw ExampleDocumentError("a MyStuff document must be a package")
        }
        guard let data = wrapper.fileWrappers?[Self.thingsPreferredName]?.regularFileContents else {
            throw ExampleDocumentError("the package has no \(Self.thingsPreferredName)")
        }
        things = try PropertyListDecoder().decode([Whatsit].self, from: data)
        docWrapper = wrapper
        gotThings?(self)
    }
}
