import ArgumentParser
import Foundation
import UbiquityAgent
import UbiquityFiles

/// The `ubiquity` command: one tool for the document framework and, later, the sync service.
@main
struct UbiquityCommand: AsyncParsableCommand {
    /// Parses the arguments (read from the kernel when a preloaded shim hid them from Swift).
    static func main() async {
        let arguments = ProcessArguments.afterProgram
        // An idle agent sleeps (see TaskThreads); UBIQUITY_AGENT_EXECUTOR=dispatch keeps Swift's
        // own executor (to compare, or should the take-over ever misbehave).
        if arguments.first == "agent", ProcessInfo.processInfo.environment["UBIQUITY_AGENT_EXECUTOR"] != "dispatch" { TaskThreads.takeOver() }
        await main(arguments)
    }

    static let configuration = CommandConfiguration(
        commandName: "ubiquity",
        abstract: "Apple's document architecture and iCloud-style document sync for Swift on Linux.",
        version: UbiquityVersion.current,
        subcommands: [DemoCommand.self, VersionsCommand.self, ResolveCommand.self, ServeCommand.self, AccountCommand.self, DeviceCommand.self, RecoverCommand.self, GarbageCommand.self, CheckCommand.self, StorageCommand.self, SealInPlaceCommand.self, LoginCommand.self, LogoutCommand.self, StatusCommand.self, AgentCommand.self, ListCommand.self, DownloadCommand.self, EvictCommand.self, PublishCommand.self, ShareCommand.self, SharesCommand.self, FindCommand.self, KeyValueCommand.self, ActivitiesCommand.self, ProtectionCommand.self, DevicesCommand.self, RecoveryKeyCommand.self]
    )
}

/// The release of this build.
enum UbiquityVersion {
    static let current = "0.1.0"
}
