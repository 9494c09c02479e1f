import NIOCore
import Synchronization
import UbiquityProtocol

/// The buffers of one large transfer's batches, used again from batch to batch.
///
/// A batch body is megabytes; a new buffer of that size is new pages, each a page fault and a
/// page of zeros when first touched, and handed back to the system when freed (the agent's
/// allocator gives back large blocks: see ``FreedMemory``). Taken from here and given back
/// once sent or read, the few buffers of the batches in flight serve the whole transfer; they
/// go when the transfer ends.
///
/// A buffer taken is its only reference (it is moved out, never copied), so clearing it keeps
/// its memory; one given back must not be used again by the giver.
final class TransferBuffers: Sendable {
    private let free = Mutex<[ByteBuffer]>([])

    /// A buffer with room for `capacity` bytes (one given back, or a new one).
    func take(capacity: Int = 0) -> ByteBuffer {
        var buffer = free.withLock { $0.popLast() } ?? ByteBuffer()
        buffer.clear()
        if buffer.capacity < capacity { buffer.reserveCapacity(capacity) }
        return buffer
    }

    /// Gives `buffer` back for a later batch.
    func give(_ buffer: consuming ByteBuffer) {
        let returned = buffer
        free.withLock { $0.append(returned) }
    }

    /// A buffer on its way to a task: the task takes it out (its only reference then), where
    /// capturing the buffer itself would keep a second reference alive in the task's closure.
    final class Handoff: Sendable {
        private let buffer: Mutex<ByteBuffer?>

        /// Holds `buffer` for the task.
        init(_ buffer: consuming ByteBuffer) {
            self.buffer = Mutex(Optional(buffer))
        }

        /// The buffer (taken once; an empty one after).
        func take() -> ByteBuffer {
            buffer.withLock { $0.take() } ?? ByteBuffer()
        }
    }
}

extension ContainerSync {
    /// How many batches of chunks are fetched at once.
    static let transferConcurrency = 4

    /// About how many bytes of chunks one fetch carries, and one upload of patches
    /// (``ChunkBatch``).
    static let transferBatchBytes = 4 << 20

    /// About how many bytes of chunks one upload carries: the most a batch may (a server
    /// keeping chunks in an object store writes each upload of 1 MiB or more as one object —
    /// 16 MiB batches are 64 requests a GiB where 4 MiB ones were 256).
    static let uploadBatchBytes = ChunkBatch.maximumBytes

    /// How many uploads of chunks travel at once (as many bytes in flight as four fetches).
    static let uploadConcurrency = 2
}
