import Foundation
import Testing
import UbiquityProtocol

/// Small files' bytes in the JSON of updates and item states: UTF-8 as a string (`text`),
/// anything else as base64 (`contents`); either read back to the same bytes.
@Suite struct InlineContentsWireTests {
    static func object(_ data: Data) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func textTravelsAsAStringAndOtherBytesAsBase64() throws {
        let samples: [Data] = [
            Data(#"{"device":"a","records":[{"t":"x"}]}"#.utf8) + Data("\nsha256:00ff\n".utf8),
            Data("émoji 🎉, NUL \u{0}, a line\r\n".utf8),
            Data([0xEF, 0xBB, 0xBF]) + Data("after a byte-order mark".utf8),
            Data([0xFF, 0xFE, 0x00, 0x80]), // not UTF-8
            Data("half of é".utf8).dropLast(), // a sequence cut in the middle of a character
            Data(),
        ]
        for bytes in samples {
            var update = ItemUpdate(baseRevision: nil, name: "a.txt", kind: .file, modificationDate: 1, manifest: Manifest())
            update.contents = bytes
            let encoded = try JSONEncoder().encode(update)
            let json = try Self.object(encoded)
            let isText = String(validating: bytes, as: UTF8.self) != nil
            #expect((json["text"] != nil) == isText && (json["contents"] != nil) == !isText, "\(Array(bytes))")
            #expect(try JSONDecoder().decode(ItemUpdate.self, from: encoded).contents == bytes)

            var state = ItemState(id: "i", revision: "r", name: "a.txt", kind: .file, size: Int64(bytes.count), modificationDate: 1, deleted: false,
                                  uploaded: true, deviceName: "d", sequence: 1, manifest: Manifest(), conflicts: [])
            state.contents = bytes
            state.digest = "token"
            let stateJSON = try JSONEncoder().encode(state)
            #expect(try JSONDecoder().decode(ItemState.self, from: stateJSON) == state)
        }
        // A change log's text is smaller on the wire than its base64, quotes escaped and all.
        let segment = Data(String(repeating: #"{"columns":{"qty":{"i":10}},"kind":"update","table":"item","primaryKey":[{"t":"x"}]}"#, count: 10).utf8)
        var update = ItemUpdate(baseRevision: nil, name: "a", kind: .file, modificationDate: 1, manifest: Manifest())
        update.contents = segment
        let text = try JSONEncoder().encode(update)
        var base64 = try Self.object(text)
        base64["text"] = nil
        base64["contents"] = segment.base64EncodedString()
        #expect(text.count < (try JSONSerialization.data(withJSONObject: base64)).count)
    }

    @Test func bothFormsAtOnceAreRefusedAndTheBase64FormIsStillRead() throws {
        let both = #"{"name":"a","kind":"file","modificationDate":1,"manifest":{},"text":"hi","contents":"aGk="}"#
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ItemUpdate.self, from: Data(both.utf8)) }
        let old = #"{"name":"a","kind":"file","modificationDate":1,"manifest":{},"contents":"aGk="}"#
        #expect(try JSONDecoder().decode(ItemUpdate.self, from: Data(old.utf8)).contents == Data("hi".utf8))
        let none = #"{"name":"a","kind":"file","modificationDate":1,"manifest":{}}"#
        #expect(try JSONDecoder().decode(ItemUpdate.self, from: Data(none.utf8)).contents == nil)
    }
}
