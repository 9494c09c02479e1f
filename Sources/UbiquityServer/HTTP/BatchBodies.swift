import Hummingbird
import Synchronization
import UbiquityProtocol

/// The arrays chunk batches are gathered into, used again: a 16 MiB body gathered into a new
/// array costs four thousand page faults as it fills (and a fresh block from the allocator
/// every time); a few kept arrays cost their capacity once.
final class BatchBodies: Sendable {
    /// Arrays kept between requests (more at once are made and given back to the allocator).
    static let kept = 2
    /// The largest array kept (an agent's upload is at most 16 MiB of chunks and their framing;
    /// a larger body's array goes back to the allocator): at most 36 MiB held between uploads.
    static let keptCapacity = 18 << 20
    private let arrays = Mutex<[[UInt8]]>([])
    /// How many arrays are kept now.
    var keptArrays: Int { arrays.withLock { $0.count } }

    /// Gathers `request`'s body (as ``SyncServices/batchBody(of:framing:into:)`` does) into a
    /// kept array and hands it to `use`; the array is kept again afterwards, whatever `use` did.
    /// A body cut short (its connection gone) is handed to `cut` as far as it came, before the
    /// error is thrown.
    func gather<Result>(_ request: Request, framing: Int, landed: ((String, UnsafeRawBufferPointer) -> Void)? = nil, cut: (([UInt8]) async -> Void)? = nil,
                        _ use: ([UInt8]) async throws -> Result) async throws -> Result {
        var bytes = arrays.withLock { $0.popLast() } ?? []
        defer {
            // (Not unique when `use` kept some of it: then this makes a new array, no harm done.)
            bytes.removeAll(keepingCapacity: true)
            if bytes.capacity > 0 && bytes.capacity <= Self.keptCapacity { arrays.withLock { if $0.count < Self.kept { $0.append(bytes) } } }
        }
        do {
            try await SyncServices.batchBody(of: request, framing: framing, into: &bytes, landed: landed)
        } catch let error as SyncError where error.code == SyncServices.bodyCut {
            await cut?(bytes)
            throw error
        }
        return try await use(bytes)
    }
}

extension SyncServices {
    /// The error code of a batch body whose connection ended before it did.
    static let bodyCut = "bodyCut"

    /// The body of a chunk or patch batch (`framing` bytes per entry): at most 16 MiB of chunks
    /// (or one chunk of up to ``Validate/maximumChunkSize``) and the framing of as many entries
    /// as a batch holds. Gathered straight into one array (room for the declared length, when
    /// it is within the limit, asked for once), which the decoded chunks share.
    /// - Throws: ``SyncError`` 413 `batchTooLarge` for a longer body.
    /// `landed`: told of each chunk (its hash and bytes) as soon as it has come whole (a chunk
    /// batch's framing; a body that turns out malformed is refused whole all the same).
    static func batchBody(of request: Request, framing: Int, into bytes: inout [UInt8], landed: ((String, UnsafeRawBufferPointer) -> Void)? = nil) async throws {
        let limit = ChunkBatch.maximumBytes + Int(Validate.maximumChunkSize) + ChunkBatch.maximumCount * framing
        let tooLarge = SyncError(.contentTooLarge, "batchTooLarge", "a batch carries at most \(ChunkBatch.maximumBytes) bytes of chunks (or one chunk of up to \(Validate.maximumChunkSize))")
        bytes.removeAll(keepingCapacity: true)
        let declared = request.headers[.contentLength].flatMap { Int($0) }
        if let declared {
            guard declared <= limit else { throw tooLarge }
            // Rounded up to whole MiB: a kept array then fits the next batches, whose sizes vary
            // by a few kilobytes, without being made anew.
            bytes.reserveCapacity(min(limit, (declared + (1 << 20) - 1) & ~((1 << 20) - 1)))
        }
        do {
            var parsed = 0
            for try await fragment in request.body {
                guard fragment.readableBytes <= limit - bytes.count else { throw tooLarge }
                bytes.append(contentsOf: fragment.readableBytesView)
                if let landed { parsed = Self.land(bytes, from: parsed, to: landed) }
            }
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError.badRequest(bodyCut, "the body did not arrive whole: \(error)")
        }
        if let declared, bytes.count < declared {
            throw SyncError.badRequest(bodyCut, "the body ended after \(bytes.count) of the \(declared) bytes it declared")
        }
    }

    /// Tells `landed` of the chunks of `bytes` that came whole since `start` (where a chunk's
    /// framing begins); returns where the next one begins. Stops at anything malformed (the
    /// whole body's reading says what).
    static func land(_ bytes: [UInt8], from start: Int, to landed: (String, UnsafeRawBufferPointer) -> Void) -> Int {
        bytes.withUnsafeBytes { all in
            let rest = UnsafeRawBufferPointer(rebasing: all[start...])
            guard let frames = try? ChunkBatch.frames(in: rest, maximumChunkSize: Int(Validate.maximumChunkSize), cut: true), let last = frames.last else { return start }
            for frame in frames { landed(frame.hash, UnsafeRawBufferPointer(rebasing: rest[frame.bytes])) }
            return start + last.bytes.upperBound
        }
    }
}
