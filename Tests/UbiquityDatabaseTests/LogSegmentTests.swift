import Foundation
import Testing
@testable import UbiquityDatabase

@Suite struct LogSegmentTests {
    static func record(_ milliseconds: Int64, _ title: String) -> ChangeLogRecord {
        ChangeLogRecord(timestamp: HLCTimestamp(milliseconds: milliseconds), device: "laptop", schema: "v1", changes: [
            RowChange(table: "recipe", primaryKey: [.integer(milliseconds)], kind: .insert,
                      columns: ["title": .text(title), "rating": .real(4.5), "photo": .blob(Data([0, 255])), "note": .null]),
            RowChange(table: "recipe", primaryKey: [.integer(1)], kind: .delete),
        ])
    }

    /// Segments 1…count of the laptop, chained.
    static func chain(_ count: Int) throws -> [(segment: LogSegment, data: Data, hash: String)] {
        var previous: String?
        return try (1...count).map { number in
            let segment = LogSegment(device: "laptop", number: Int64(number), previous: previous, frontier: ["phone": Int64(number) - 1],
                                     records: [record(Int64(number) * 10, "Soup \(number)")])
            let (data, hash) = try segment.encoded()
            previous = hash
            return (segment, data, hash)
        }
    }

    @Test func aSegmentReadsBackAsItWasWrittenWithEveryKindOfValue() throws {
        let written = try Self.chain(1)[0]
        let (read, hash) = try LogSegment.decode(written.data)
        #expect(read == written.segment && hash == written.hash)
        #expect(LogSegment.fileName(number: 42) == "000000000042.ubqlog")
        #expect(try written.segment.encoded().data == written.data, "the same segment encodes to the same bytes")
    }

    @Test func damageTruncationAndNewerFormatsAreNamed() throws {
        var data = try Self.chain(1)[0].data
        data[20] ^= 0x01
        #expect { try LogSegment.decode(data) } throws: { ($0 as? LogSegmentError)?.code == .damaged }
        let whole = try Self.chain(1)[0].data
        #expect { try LogSegment.decode(whole.prefix(whole.count / 2)) } throws: { ($0 as? LogSegmentError)?.code == .malformed }
        #expect { try LogSegment.decode(Data("not a segment".utf8)) } throws: { ($0 as? LogSegmentError)?.code == .malformed }

        var future = try Self.chain(1)[0].segment
        future.format = LogSegment.currentFormat + 1
        #expect { try LogSegment.decode(try future.encoded().data) } throws: { ($0 as? LogSegmentError)?.code == .newerFormat }
        #expect { try LogSegment.decode(Data(count: LogSegment.maximumBytes + 1)) } throws: { ($0 as? LogSegmentError)?.code == .tooLarge }
    }

    @Test func aChainRefusesGapsRepeatsBrokenLinksAndOtherDevicesSegments() throws {
        let segments = try Self.chain(4)
        var chain = SegmentChain(device: "laptop")
        try chain.append(segments[0].segment, hash: segments[0].hash)
        // Segment 3 before 2: a gap naming what is missing; nothing accepted.
        #expect { try chain.append(segments[2].segment, hash: segments[2].hash) } throws: {
            ($0 as? LogSegmentError)?.code == .gap && "\($0)".contains("2…2 missing")
        }
        try chain.append(segments[1].segment, hash: segments[1].hash)
        #expect { try chain.append(segments[1].segment, hash: segments[1].hash) } throws: { ($0 as? LogSegmentError)?.code == .gap }
        // A segment 3 that names another predecessor (a device's log rewritten, or mixed up).
        var forged = segments[2].segment
        forged.previous = segments[0].hash
        #expect { try chain.append(forged, hash: segments[2].hash) } throws: { ($0 as? LogSegmentError)?.code == .brokenChain }
        var stranger = segments[2].segment
        stranger.device = "phone"
        #expect { try chain.append(stranger, hash: segments[2].hash) } throws: { ($0 as? LogSegmentError)?.code == .wrongDevice }
        try chain.append(segments[2].segment, hash: segments[2].hash)
        #expect(chain.last?.number == 3)

        // A chain picks up after what was applied before.
        var resumed = SegmentChain(device: "laptop", after: (3, segments[2].hash))
        try resumed.append(segments[3].segment, hash: segments[3].hash)
        #expect(resumed.last?.number == 4)
    }
}
