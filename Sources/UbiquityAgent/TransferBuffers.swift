import NIOCore
import Synchronization

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
