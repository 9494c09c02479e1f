import Foundation
import Ubiquity

/// The guide's plain-text document (Listings 3-1, 3-3 and 3-5): one string, saved as UTF-8 `Data`.
package final class TextDocument: Document {
    /// The document's text.
    package private(set) var documentText = ""
    /// Called whenever the text is replaced by loading (open, revert, or a change from elsewhere).
    package var contentsUpdated: ((TextDocument) -> Void)?

    /// Replaces the text as a user edit: registers the inverse with the undo manager, which
    /// marks the document changed. On the main actor, as the undo manager is (the document's
    /// editing happens where its user interface is).
    /// - Parameters:
    ///   - text: The new text.
    ///   - actionName: The undo action's name.
    @MainActor
    package func setText(_ text: String, actionName: String = "Typing") {
        let old = documentText
        guard old != text else { return }
        documentText = text
        undoManager.registerUndo(withTarget: self) { $0.setText(old, actionName: actionName) }
        undoManager.setActionName(actionName)
    }

    /// The UTF-8 bytes of the text.
    /// - Parameter typeName: The type to save as.
    override package func contents(forType typeName: String) throws -> Any {
        Data(documentText.utf8)
    }

    /// Reads the text from UTF-8 `Data`.
    /// - Parameters:
    ///   - contents: `Data`.
    ///   - typeName: The file's type.
    /// - Throws: ``ExampleDocumentError`` when the contents are not UTF-8 text.
    override package func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let data = contents as? Data else { throw ExampleDocumentError("expected a flat file, got \(type(of: contents))") }
        guard let text = String(data: data, encoding: .utf8) else { throw ExampleDocumentError("the file is not UTF-8 text") }
        documentText = text
        contentsUpdated?(self)
    }
}

/// An example document's complaint about its contents.
package struct ExampleDocumentError: Error, CustomStringConvertible {
    /// What is wrong.
    package var description: String
    /// Creates an error.
    /// - Parameter description: What is wrong.
    package init(_ description: String) { self.description = description }
}
