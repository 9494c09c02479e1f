import Crypto
import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquitySync

/// Content tokens: 32 bytes in place, written as the hexadecimal they always were.
@Suite struct ContentTokenTests {
    let hex = "63c518c5cb745ec2255f67fd79006dbcc597e536875f49aa17884f7a7f0cffa0"

    @Test func aDigestRoundTripsThroughItsHexadecimal() throws {
        let token = ContentToken(hex)
        #expect(token.description == hex)
        #expect(ContentToken(hex.uppercased()) == token, "either case is the same digest")
        #expect(ContentToken(digest: Array(repeating: UInt8(0xab), count: 32)).description == String(repeating: "ab", count: 32))
        // JSON: a string, as stores and the wire have always had it.
        let encoded = try JSONEncoder().encode([token])
        #expect(String(decoding: encoded, as: UTF8.self) == "[\"\(hex)\"]")
        #expect(try JSONDecoder().decode([ContentToken].self, from: encoded) == [token])
        #expect(MemoryLayout<ContentToken>.size == 32, "in place: no allocation per token")
    }

    @Test func theTokenOfAChunkListIsItsHash() {
        let chunks = [ChunkReference(hash: String(repeating: "1", count: 64), size: 10), ChunkReference(hash: String(repeating: "2", count: 64), size: 5)]
        let text = chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",")
        #expect(ContentToken.of(chunks).description == SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined())
        #expect(ContentToken.of(Manifest(chunks: chunks), kind: .file) == ContentToken.of(chunks))
        #expect(ContentToken.of(Manifest(chunks: chunks), kind: .directory) == .folder)
    }

    @Test func otherNamesAreTheirTextsHashAndFolderStaysFolder() throws {
        #expect(ContentToken.folder.description == "folder")
        #expect(ContentToken("folder") == .folder)
        #expect(try JSONDecoder().decode(ContentToken.self, from: Data("\"folder\"".utf8)) == .folder, "a store written before")
        let one: ContentToken = "one"
        #expect(one == ContentToken("one") && one != ContentToken("two"))
        #expect(one.description == SHA256.hash(data: Data("one".utf8)).map { String(format: "%02x", $0) }.joined())
        #expect(ContentToken(String(hex.dropLast())) != ContentToken(hex), "63 digits are a name, not a digest")
        #expect(ContentToken(String(hex.dropLast()) + "g").description != String(hex.dropLast()) + "g")
    }

    /// A snapshot stored before tokens were held as bytes reads back the same, and is written
    /// back as it was.
    @Test func aStoredSnapshotReadsAndWritesAsBefore() throws {
        let stored = #"{"id":"Fk1-nyBSW1hAlQU","sequence":1,"conflicts":[{"revision":"r1","content":"folder"}],"name":"warm-up.txt","content":"\#(hex)","deleted":false,"revision":"Pd08sPSV49k4A-A"}"#
        let snapshot = try JSONDecoder().decode(ItemSnapshot.self, from: Data(stored.utf8))
        #expect(snapshot.content.description == hex && snapshot.conflicts.first?.content == .folder)
        let written = try JSONSerialization.jsonObject(with: JSONEncoder().encode(snapshot)) as? [String: Any]
        #expect(written?["content"] as? String == hex)
        #expect((written?["conflicts"] as? [[String: Any]])?.first?["content"] as? String == "folder")
    }
}
