import Foundation
import Testing
@testable import UbiquityDatabase

@Suite struct LogFolderTests {
    static func folder() throws -> LogFolder {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ubiquity-logs-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return LogFolder(url: url)
    }

    @Test func segmentsArePublishedWholeAndReadInOrderAfterWhereAReaderIs() throws {
        let logs = try Self.folder(); defer { try? FileManager.default.removeItem(at: logs.url) }
        let segments = try LogSegmentTests.chain(5)
        for index in [0, 1, 2] { #expect(try logs.publish(segments[index].segment) == segments[index].hash) }
        #expect(try logs.devices() == ["laptop"])
        let files = try FileManager.default.contentsOfDirectory(atPath: logs.url.appendingPathComponent("laptop").path).sorted()
        #expect(files == ["000000000001.ubqlog", "000000000002.ubqlog", "000000000003.ubqlog"], "nothing staged is left")

        var read: [Int64] = []
        let all = try logs.read("laptop") { segment, _ in read.append(segment.number) }
        #expect(read == [1, 2, 3] && all == LogFolder.ReadResult(last: LogPosition(number: 3, hash: segments[2].hash)))
        read = []
        _ = try logs.read("laptop", after: LogPosition(number: 2, hash: segments[1].hash)) { segment, _ in read.append(segment.number) }
        #expect(read == [3], "only what follows the reader's position")

        // Segment 5 arrives before 4: reading stops after 3 and names 4 as missing.
        try logs.publish(segments[4].segment)
        read = []
        let waiting = try logs.read("laptop") { segment, _ in read.append(segment.number) }
        #expect(read == [1, 2, 3] && waiting.missing == 4...4 && waiting.last?.number == 3)
        try logs.publish(segments[3].segment)
        read = []
        _ = try logs.read("laptop", after: waiting.last) { segment, _ in read.append(segment.number) }
        #expect(read == [4, 5])

        // A published segment is never replaced; a device id must be a folder name.
        #expect(throws: (any Error).self) { try logs.publish(segments[0].segment) }
        var hostile = segments[0].segment
        hostile.device = "../escape"
        #expect { try logs.publish(hostile) } throws: { ($0 as? LogSegmentError)?.code == .malformed }
        #expect(try logs.read("nobody") { _, _ in } == LogFolder.ReadResult(last: nil))
    }

    @Test func aDamagedSegmentStopsTheReadingWithItsName() throws {
        let logs = try Self.folder(); defer { try? FileManager.default.removeItem(at: logs.url) }
        let segments = try LogSegmentTests.chain(3)
        for entry in segments { try logs.publish(entry.segment) }
        let second = logs.url.appendingPathComponent("laptop").appendingPathComponent(LogSegment.fileName(number: 2))
        var bytes = try Data(contentsOf: second)
        bytes[30] ^= 0x20
        try bytes.write(to: second)
        var read: [Int64] = []
        #expect { try logs.read("laptop") { segment, _ in read.append(segment.number) } } throws: { ($0 as? LogSegmentError)?.code == .damaged }
        #expect(read == [1], "nothing after the damaged segment is applied")
    }

    @Test func segmentsNotDownloadedAreNamedForTheAgentToFetch() throws {
        let logs = try Self.folder(); defer { try? FileManager.default.removeItem(at: logs.url) }
        let segments = try LogSegmentTests.chain(3)
        try logs.publish(segments[0].segment)
        let folder = logs.url.appendingPathComponent("laptop")
        // Segments 2 and 3 are known in the container, not on this device: their placeholders are here.
        for number in [2, 3] as [Int64] {
            try Data("{}".utf8).write(to: folder.appendingPathComponent("." + LogSegment.fileName(number: number) + ".icloud"))
        }
        var read: [Int64] = []
        let result = try logs.read("laptop") { segment, _ in read.append(segment.number) }
        #expect(read == [1])
        #expect(result.missing == nil, "not missing: on its way")
        #expect(result.notDownloaded == [2, 3].map { folder.appendingPathComponent(LogSegment.fileName(number: $0)) })
        // Segment 2 arrives (its placeholder goes): reading goes on from where it stopped.
        try FileManager.default.removeItem(at: folder.appendingPathComponent("." + LogSegment.fileName(number: 2) + ".icloud"))
        try segments[1].data.write(to: folder.appendingPathComponent(LogSegment.fileName(number: 2)))
        let next = try logs.read("laptop", after: result.last) { segment, _ in read.append(segment.number) }
        #expect(read == [1, 2] && next.notDownloaded == [folder.appendingPathComponent(LogSegment.fileName(number: 3))])
    }
}
