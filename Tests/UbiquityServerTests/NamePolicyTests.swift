import Foundation
import Hummingbird
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// One name policy for everything a client names (items, package members, devices, accounts):
/// names that hide or reorder what a person reads, or that differ only invisibly, are refused
/// with 400 `invalidName`; names people write in any script, emoji included, are taken.
@Suite struct NamePolicyTests {
    static let refused: [(String, String)] = [
        ("report.txt ", "a trailing space"),
        (" report.txt", "a leading space"),
        ("\u{202E}fdp.exe", "a right-to-left override (shows as exe.pdf)"),
        ("invoice\u{2066}.txt", "a bidi isolate"),
        ("pay\u{200B}roll.txt", "a zero-width space"),
        ("\u{FEFF}notes.txt", "a byte-order mark"),
        ("bell\u{07}.txt", "a C0 control"),
        ("esc\u{1B}[31mred.txt", "a terminal escape"),
        ("csi\u{9B}.txt", "a C1 control"),
        ("cafe\u{301}.txt", "a decomposed é (NFD)"),
        (".", "dot"), ("..", "dot dot"), ("a/b", "a slash"), ("", "empty"),
        (String(repeating: "é", count: 128), "256 bytes"),
    ]

    static let taken = [
        "café.txt", "Résumé (final) 2.pages", "日本語のメモ.txt", "👨‍👩‍👧 family.jpg",
        "می‌خواهم.txt", // a zero-width non-joiner, as Persian writes it
        "a b", String(repeating: "a", count: 255),
    ]

    @Test func theRulesOneByOne() {
        for (name, why) in Self.refused {
            #expect(throws: SyncError.self, "\(why)") { try Validate.name(name) }
        }
        for name in Self.taken {
            #expect(throws: Never.self, "\(name)") { try Validate.name(name) }
        }
    }

    @Test(arguments: Backend.all) func theServerAnswersInvalidName(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let token = try await client.signIn("ada").token
            for (index, (name, why)) in Self.refused.enumerated() {
                let answer = try await client.send(.put, "/v1/containers/\(notes)/items/item-\(index)", token: token, json: fileUpdate(name, []))
                #expect(answer.status == .badRequest && answer.errorCode == "invalidName", "\(why): \(answer.status)")
            }
            for (index, name) in Self.taken.enumerated() {
                _ = try await client.commit(notes, "ok-\(index)", fileUpdate(name, []), token: token)
            }
            // A device name is a name too: no escapes into the operator's terminal.
            let device = try await client.send(.post, "/v1/sign-in", json: SignInRequest(account: "ada", password: "correct horse", deviceName: "phone\u{1B}]0;pwned\u{07}"))
            #expect(device.status == .badRequest && device.errorCode == "invalidName")
        }
    }
}

/// What strangers name goes into the log and onto the operator's terminal as text: no line
/// breaks that forge a log line, no escapes that drive the terminal, no bidi tricks.
@Suite struct SafeTextTests {
    @Test func controlAndFormatCharactersAreShownNotObeyed() {
        #expect(SafeText.escaped("ada\n2026-11-25 error forged line") == "ada\\u{a}2026-11-25 error forged line")
        #expect(SafeText.escaped("phone\u{1B}]0;pwned\u{07}") == "phone\\u{1b}]0;pwned\\u{7}")
        #expect(SafeText.escaped("\u{202E}fdp.exe") == "\\u{202e}fdp.exe")
        #expect(SafeText.escaped("Café 日本 👨‍👩‍👧 می‌خواهم") == "Café 日本 👨‍👩‍👧 می‌خواهم")
        #expect(SafeText.escaped(String(repeating: "a", count: 1_000), limit: 10) == String(repeating: "a", count: 10) + "…")
    }
}
