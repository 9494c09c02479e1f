import NIOCore
import Testing
@testable import UbiquityAgent

/// The buffers of large transfers' batch bodies, used again from batch to batch (reading
/// chunks into a body: `StagedCopyTests.uploadsTrustOnlyAnUnchangedFile`).
@Suite struct TransferBuffersTests {
    @Test func aBufferGivenBackIsUsedAgainWithItsMemory() throws {
        let buffers = TransferBuffers()
        var first = buffers.take(capacity: 1 << 20)
        #expect(first.capacity >= 1 << 20)
        first.writeBytes([UInt8](repeating: 7, count: 1 << 20))
        let address = first.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        buffers.give(consume first)

        let again = buffers.take()
        #expect(again.readableBytes == 0 && again.capacity >= 1 << 20)
        #expect(again.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) } == address, "the same memory, not a copy")
        #expect(buffers.take().capacity < 1 << 20, "one buffer given back, one taken: the next is new")

        // Handed to a task: the task takes the buffer out once.
        let handoff = TransferBuffers.Handoff(again)
        #expect(handoff.take().capacity >= 1 << 20 && handoff.take().capacity == 0)
    }
}
