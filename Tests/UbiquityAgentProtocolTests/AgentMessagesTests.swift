import Foundation
import Testing
import UbiquityAgentProtocol

/// The app↔agent messages on the wire: typed operations, coded errors, and an older agent's answers.
@Suite struct AgentMessagesTests {
    @Test func errorsTravelWithTheirCode() throws {
        let answer = AgentResponse(error: AgentError(.refused, "Plan.txt has changes not uploaded yet; it is not evicted"))
        let json = try JSONEncoder().encode(answer)
        let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
        #expect((object["error"] as? [String: String]) == ["code": "refused", "message": "Plan.txt has changes not uploaded yet; it is not evicted"])
        #expect(try JSONDecoder().decode(AgentResponse.self, from: json) == answer)

        // A code this client does not know is still the failure it is, with its sentence.
        let newer = try JSONDecoder().decode(AgentResponse.self, from: Data(#"{"error":{"code":"tooTired","message":"later"}}"#.utf8))
        #expect(newer.error == AgentError(AgentError.Code(rawValue: "tooTired"), "later") && "\(newer.error!)" == "later")
    }

    /// Every field of an answer travels (a published link once did not: the coding keys were
    /// written out and the new field was missing from them).
    @Test func everyFieldOfAnAnswerTravels() throws {
        let answers = [
            AgentResponse(link: PublishedItemLink(url: "https://icloud.example/l/abc", expires: 1_800_000_000)),
            AgentResponse(versions: [RemoteVersion(revision: "r", name: "A.txt", deviceName: "phone", size: 3, modificationDate: 1)]),
            AgentResponse(items: []),
        ]
        for answer in answers { #expect(try JSONDecoder().decode(AgentResponse.self, from: JSONEncoder().encode(answer)) == answer) }
    }

    @Test func anOlderAgentsPlainErrorIsAFailure() throws {
        let old = try JSONDecoder().decode(AgentResponse.self, from: Data(#"{"error":"not signed in (ubiquity login)"}"#.utf8))
        #expect(old.error == AgentError(.failed, "not signed in (ubiquity login)"))
        let fine = try JSONDecoder().decode(AgentResponse.self, from: Data(#"{"items":[]}"#.utf8))
        #expect(fine.error == nil && fine.items == [] && fine.status == nil)
    }

    @Test func requestsAreATypedOperation() throws {
        let request = AgentRequest(.download, path: "/home/ada/doc.txt", wait: true)
        let decoded = try JSONDecoder().decode(AgentRequest.self, from: try JSONEncoder().encode(request))
        #expect(decoded == request)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(AgentRequest.self, from: Data(#"{"operation":"format-disk"}"#.utf8)) }
    }

    @Test func noAgentIsACodedError() {
        let connection = AgentConnection(socket: URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("no-agent-\(UUID().uuidString.prefix(8)).sock"))
        #expect { try connection.send(AgentRequest(.status)) } throws: { ($0 as? AgentError)?.code == .notRunning }
    }
}
