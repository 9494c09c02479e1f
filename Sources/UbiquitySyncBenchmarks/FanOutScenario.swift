import Foundation
import UbiquityTestSupport

/// The server's figure with a thousand devices of one account connected (issues 17 and 49): a
/// short run of `ubiquity-load --devices 1000` (its own server, embedded SQLite, 10 s of four
/// writers), kept in every whole-bench run so that the figure cannot move unseen again.
struct FanOutFigures: Encodable {
    var devices: Int
    var commitsPerSecond: Double
    /// From sending a commit to each other device reading its push, seconds.
    var commitToPushP50Seconds: Double
    var commitToPushP99Seconds: Double
    /// A commit's own request, seconds.
    var commitP50Seconds: Double?
    var devicesCaughtUp: Int
    /// The goal beside the figure, as `ubiquity-load` judged it.
    var goal: Goal
    var notes: String

    struct Goal: Encodable {
        var commitsPerSecond: Double
        var p99Seconds: Double
        var met: Bool
    }
}

/// `ubiquity-load` beside this bench's executable (`swift build -c release --product ubiquity-load`).
let loadExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("ubiquity-load")

/// Runs `ubiquity-load --devices 1000 --seconds 10` and reads its figure (the whole run takes
/// about 20 s: signing a thousand devices in and connecting them comes first).
func fanOutFigures() throws -> FanOutFigures {
    guard FileManager.default.isExecutableFile(atPath: loadExecutable.path) else {
        throw BenchError("\(loadExecutable.path) is missing: swift build -c release --product ubiquity-load")
    }
    log("ubiquity-load: 1,000 devices")
    let process = ChildProcess()
    process.executableURL = loadExecutable
    process.arguments = ["--devices", "1000", "--seconds", "10"]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice // (its server's shutdown notes)
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw BenchError("ubiquity-load ended with status \(process.terminationStatus)") }
    struct Report: Decodable {
        struct Run: Decodable {
            struct Percentiles: Decodable { var p50: Double, p99: Double }
            struct Goal: Decodable { var commitsPerSecond: Double, p99Seconds: Double, met: Bool }
            var devices: Int
            var commitsPerSecond: Double
            var commitToPushSeconds: Percentiles
            var commitSeconds: Percentiles?
            var devicesCaughtUp: Int
            var goal: Goal?
        }
        var runs: [Run]
    }
    guard let run = try JSONDecoder().decode(Report.self, from: data).runs.first, let goal = run.goal else {
        throw BenchError("ubiquity-load printed no figure for 1,000 devices")
    }
    return FanOutFigures(devices: run.devices, commitsPerSecond: run.commitsPerSecond, commitToPushP50Seconds: run.commitToPushSeconds.p50,
                         commitToPushP99Seconds: run.commitToPushSeconds.p99, commitP50Seconds: run.commitSeconds?.p50,
                         devicesCaughtUp: run.devicesCaughtUp,
                         goal: FanOutFigures.Goal(commitsPerSecond: goal.commitsPerSecond, p99Seconds: goal.p99Seconds, met: goal.met),
                         notes: "ubiquity-load --devices 1000 --seconds 10: its own server (embedded SQLite) and the simulated devices on this machine; four writers")
}
