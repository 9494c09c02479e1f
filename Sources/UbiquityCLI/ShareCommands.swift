import ArgumentParser
import Foundation
import UbiquityClient

/// `ubiquity share PATH --with NAME [--read-only]`: shares a folder or document with another
/// account of the same server (docs/Sharing.md).
struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share a folder or document of a container with another account (asks the agent).",
        discussion: """
            The other account finds the invitation with `ubiquity shares list` and accepts it with \
            `ubiquity shares accept ID`; the item then appears at the top of the same container's \
            Documents on their devices. Whether an account has that name is not told: an invitation \
            to a name nobody has waits, as any unanswered one, until it expires (7 days).
            """
    )

    @Argument(help: "The folder or document (in a container's Documents folder).") var path: String
    @Option(name: .customLong("with"), help: "The account to share it with.") var name: String
    @Flag(name: .customLong("read-only"), help: "They may read it, not change it.") var readOnly = false

    func run() async throws {
        let answer = try AgentConnection().send(AgentRequest(.share, path: absolutePath(path), participant: name, readOnly: readOnly), timeout: .seconds(60))
        print("shared \(absolutePath(path)) with \(name)\(readOnly ? " (read-only)" : "")")
        if let share = answer.shares?.first { print("share \(share.id)") }
    }
}

/// `ubiquity shares list|accept|decline|leave|remove|stop`.
struct SharesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shares",
        abstract: "List the shares you own, joined or are invited to; answer invitations; leave, remove people, stop sharing; compare codes.",
        subcommands: [List.self, Accept.self, Decline.self, Leave.self, Remove.self, Stop.self, Verify.self],
        defaultSubcommand: List.self
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List your shares, those you joined and your invitations.")
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let shares = try AgentConnection().send(AgentRequest(.shares), timeout: .seconds(30)).shares ?? []
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                print(String(decoding: try encoder.encode(shares), as: UTF8.self))
                return
            }
            if shares.isEmpty { print("no shares and no invitations") }
            for share in shares {
                let name = share.name ?? "(sealed)"
                switch share.standing {
                case .owned:
                    let people = (share.participants ?? []).filter { $0.state == "accepted" || $0.state == "invited" }
                        .map { "\($0.name) (\($0.readOnly ? "read-only" : "read-write")\($0.state == "invited" ? ", invited" : ""))" }
                    print("\(share.id)  yours    \(name)  with \(people.isEmpty ? "nobody" : people.joined(separator: ", "))")
                case .joined:
                    print("\(share.id)  joined   \(name)  from \(share.owner)\(share.readOnly == true ? " (read-only)" : "")  \(share.path ?? "")")
                case .invited:
                    let until = share.expires.map { " until " + ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: $0)) } ?? ""
                    print("\(share.id)  invited  \(name)  from \(share.owner)\(share.readOnly == true ? " (read-only)" : "")\(until): ubiquity shares accept \(share.id)")
                }
                if let key = share.key {
                    let waiting = (key.waiting ?? []).isEmpty ? "" : "; waiting for it: \((key.waiting ?? []).joined(separator: ", "))"
                    print("    key: epoch \(key.epoch), \(key.held.contains(key.epoch) ? "held here" : "not held here")\(waiting)")
                    if let problem = key.problem { print("    \(problem)") }
                }
            }
        }
    }

    struct Accept: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "accept", abstract: "Accept an invitation: the item appears on your devices.")
        @Argument(help: "The share's id (as `ubiquity shares list` shows it).") var id: String

        func run() async throws {
            let shares = try AgentConnection().send(AgentRequest(.answerInvitation, share: id, accept: true), timeout: .seconds(60)).shares ?? []
            print("accepted \(id)\(shares.first?.path.map { ": \($0)" } ?? "")")
        }
    }

    struct Decline: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "decline", abstract: "Decline an invitation.")
        @Argument(help: "The share's id (as `ubiquity shares list` shows it).") var id: String

        func run() async throws {
            _ = try AgentConnection().send(AgentRequest(.answerInvitation, share: id, accept: false), timeout: .seconds(60))
            print("declined \(id)")
        }
    }

    struct Leave: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "leave", abstract: "Leave a share another account shared with you: it leaves your devices.")
        @Argument(help: "The shared folder or document (at the top of a container's Documents).") var path: String

        func run() async throws {
            _ = try AgentConnection().send(AgentRequest(.leaveShare, path: absolutePath(path)), timeout: .seconds(60))
            print("left \(absolutePath(path))")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove someone from an item you share: it leaves their devices.")
        @Argument(help: "The item you share.") var path: String
        @Argument(help: "The account to remove.") var name: String

        func run() async throws {
            _ = try AgentConnection().send(AgentRequest(.removeParticipant, path: absolutePath(path), participant: name), timeout: .seconds(60))
            print("removed \(name) from \(absolutePath(path))")
        }
    }

    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "stop", abstract: "Stop sharing an item: it leaves everyone else's devices (nothing of yours is touched).")
        @Argument(help: "The item you share.") var path: String

        func run() async throws {
            _ = try AgentConnection().send(AgentRequest(.stopSharing, path: absolutePath(path)), timeout: .seconds(60))
            print("stopped sharing \(absolutePath(path))")
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Show the code to compare with someone you share with; --confirm once it matched.",
            discussion: """
                Both of you run `ubiquity shares verify` with the other's name and compare the twelve digits (in person, \
                or over a call). If they match, nobody put a key in between: run it again with --confirm. If their \
                sharing key changes later, nothing is sealed to it or opened from it until you compare and confirm again.
                """)
        @Argument(help: "The account you share with (or that shares with you).") var name: String
        @Flag(help: "You compared the codes and they matched.") var confirm = false

        func run() async throws {
            guard let code = try AgentConnection().send(AgentRequest(.verifySharing, participant: name, accept: confirm), timeout: .seconds(60)).sharingCode else {
                throw ValidationError("the agent gave no code")
            }
            print("code with \(code.account): \(code.code)")
            switch (code.standing, confirm) {
            case (.changed, false): print("\(code.account)'s sharing key changed since it was pinned: nothing is sealed to it or opened from it until you compare this code with theirs and confirm")
            case (_, true): print("confirmed: \(code.account)'s sharing key is pinned")
            case (.confirmed, false): print("compared and confirmed before")
            case (.new, false), (.pinned, false): print("not compared yet: compare it with \(code.account)'s, then run this again with --confirm")
            }
        }
    }
}
