import Testing
@testable import UbiquityAgent

/// What the watcher sees that starts a round: a change of the person's files does; one in what
/// the agent writes for itself (a staged download, a version store) does not — a download that
/// kept failing made and removed its staging file each time, and each time that started the next
/// round (found by `ubiquity-chaos`: ten rounds a second).
@Suite struct WatcherRoundTests {
    @Test func theAgentsOwnFilesStartNoRound() {
        for path in ["Documents/Plan.txt", "Documents/Trips/2027.txt", "Documents/.hidden", "Documents/Paper.pages/Index.xml",
                     "Documents/.Plan.txt.icloud", "Documents/Cache.nosync"] {
            #expect(AccountSession.startsARound(path), "\(path)")
        }
        for path in ["Documents/.ubiquity-download-1a2b3c4d", "Documents/Trips/.ubiquity-download-1a2b3c4d", "Documents/.ubiquity-versions/Plan.txt/A/record.json"] {
            #expect(!AccountSession.startsARound(path), "\(path)")
        }
    }
}
