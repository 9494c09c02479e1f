import Foundation
import Testing
import UbiquityFiles

@Suite struct DocumentTypeRegistryTests {
    @Test func systemTypesAndConformance() {
        let registry = DocumentTypeRegistry()
        #expect(registry.type(forFilenameExtension: "TXT")?.identifier == DocumentType.plainText)
        #expect(registry.type(forFilenameExtension: ".json")?.identifier == DocumentType.json)
        #expect(registry.conforms(DocumentType.utf8PlainText, to: DocumentType.data))
        #expect(registry.conforms("PUBLIC.PNG", to: DocumentType.content))
        #expect(!registry.conforms(DocumentType.png, to: DocumentType.text))
        #expect(registry.isPackage(DocumentType.package) && !registry.isPackage(DocumentType.folder))
        #expect(registry.supertypes(of: DocumentType.jpeg).contains(DocumentType.item))
        #expect(registry.type(of: URL(fileURLWithPath: "/x/photo.JPEG"))?.identifier == DocumentType.jpeg)
        #expect(registry.type(of: URL(fileURLWithPath: "/x/noext")) == nil)
    }

    @Test func appTypesWinAndCodeDeclarationsWork() {
        let registry = DocumentTypeRegistry()
        registry.register(DocumentType(identifier: "com.example.notes", filenameExtensions: ["txt"], isPackage: true))
        #expect(registry.type(forFilenameExtension: "txt")?.identifier == "com.example.notes")
        #expect(registry.types(forFilenameExtension: "txt").count == 2)
        #expect(registry.isPackage("com.example.notes"))
    }

    @Test func readsJSONDeclarations() throws {
        let json = """
        {"UTExportedTypeDeclarations": [{"UTTypeIdentifier": "com.example.sketch", "UTTypeConformsTo": ["com.apple.package", "public.content"],
           "UTTypeDescription": "Sketch", "UTTypeTagSpecification": {"public.filename-extension": ["sketchy"], "public.mime-type": "application/x-sketchy"}}],
         "CFBundleDocumentTypes": [{"CFBundleTypeName": "Sketch", "LSItemContentTypes": ["com.example.sketch"], "CFBundleTypeRole": "Editor", "LSTypeIsPackage": true},
                                   {"CFBundleTypeName": "Old", "CFBundleTypeExtensions": ["old"], "CFBundleTypeRole": "Viewer"}]}
        """
        let registry = DocumentTypeRegistry()
        let declarations = try DocumentTypeDeclarations(data: Data(json.utf8))
        registry.register(declarations)
        let sketch = try #require(registry.type(forFilenameExtension: "SKETCHY"))
        #expect(sketch.identifier == "com.example.sketch" && sketch.mimeTypes == ["application/x-sketchy"])
        #expect(registry.isPackage("com.example.sketch"))
        #expect(registry.documentTypes.map(\.role) == [.editor, .viewer])
        #expect(registry.type(forFilenameExtension: "old") != nil)
    }

    @Test func readsXMLPropertyListDeclarationsFromAFile() throws {
        let xml = """
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0"><dict>
          <key>UTExportedTypeDeclarations</key><array><dict>
            <key>UTTypeIdentifier</key><string>com.example.things</string>
            <key>UTTypeConformsTo</key><array><string>com.apple.package</string></array>
            <key>UTTypeTagSpecification</key><dict><key>public.filename-extension</key><array><string>mystuff</string></array></dict>
          </dict></array>
        </dict></plist>
        """
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("types-\(UUID()).plist")
        try Data(xml.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let registry = DocumentTypeRegistry()
        try registry.registerDeclarations(contentsOf: file)
        #expect(registry.type(forFilenameExtension: "mystuff")?.identifier == "com.example.things")
        #expect(registry.isPackage("com.example.things"))
    }

    @Test func malformedDeclarationsAreClearErrors() throws {
        #expect(throws: DocumentTypeError.self) { try DocumentTypeDeclarations(data: Data("{not json".utf8)) }
        let error = #expect(throws: DocumentTypeError.self) {
            try DocumentTypeDeclarations(data: Data(#"{"UTExportedTypeDeclarations": [{"UTTypeConformsTo": []}]}"#.utf8))
        }
        #expect(error?.description.contains("UTTypeIdentifier") == true)
        let registry = DocumentTypeRegistry()
        let missing = #expect(throws: DocumentTypeError.self) { try registry.registerDeclarations(contentsOf: URL(fileURLWithPath: "/nonexistent/types.json")) }
        #expect(missing?.code == .unreadable)
    }
}
