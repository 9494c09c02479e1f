import CUbiquitySystem

#if canImport(Glibc)
import Glibc
#endif

/// The one place system calls are retried when a signal interrupts them (`EINTR`) and short
/// reads and writes are continued, as swift-nio's `System.swift` does: callers never loop on
/// `EINTR` themselves. Each call returns what the system call returns (-1 with `errno` set on
/// any failure but an interruption), so callers map `errno` to their own errors.
package enum SystemCall {
    /// Calls `call` again for as long as it fails with `EINTR`; returns its last result.
    @inline(__always)
    package static func retrying<Result: BinaryInteger>(_ call: () -> Result) -> Result {
        while true {
            let result = call()
            if result == -1 && errno == EINTR { continue }
            return result
        }
    }

    /// `read(2)` into `buffer`: the bytes read (0 at the end of the file), or -1.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        return retrying { Glibc.read(fd, base, buffer.count) }
    }

    /// `pread(2)` until `buffer` is full or the file ends: the bytes read, or -1.
    package static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var total = 0
        while total < buffer.count {
            let count = retrying { pread(fd, base + total, buffer.count - total, off_t(offset) + off_t(total)) }
            if count < 0 { return -1 }
            if count == 0 { break }
            total += count
        }
        return total
    }

    /// `write(2)` — or, at an `offset`, `pwrite(2)` — of all of `bytes` (continuing short
    /// writes, at most 1 GiB a call): their count, or -1 (some may have been written).
    package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64? = nil) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var done = 0
        while done < bytes.count {
            let size = min(bytes.count - done, 1 << 30)
            let count = retrying { offset.map { pwrite(fd, base + done, size, off_t($0) + off_t(done)) } ?? Glibc.write(fd, base + done, size) }
            if count < 0 { return -1 }
            done += count
        }
        return done
    }

    /// Copies `count` bytes of `source` at `sourceOffset` to `destination` at
    /// `destinationOffset` — inside the kernel (`copy_file_range(2)`) where the file systems
    /// allow, else through a buffer — continuing short copies: the bytes copied (fewer if the
    /// source ends first), or -1.
    package static func copyRange(from source: Int32, at sourceOffset: Int64, to destination: Int32, at destinationOffset: Int64, count: Int) -> Int {
        var done = 0
        var inKernel = true
        while done < count {
            if inKernel {
                let copied = retrying { ubq_copy_file_range(source, sourceOffset + Int64(done), destination, destinationOffset + Int64(done), UInt(count - done)) }
                if copied > 0 {
                    done += Int(copied)
                    continue
                }
                if copied == 0 { return done }
                // Not between these files (other file systems, old kernels): through a buffer.
                guard [EXDEV, ENOSYS, EINVAL, EOPNOTSUPP].contains(errno) else { return -1 }
                inKernel = false
            }
            let size = min(count - done, 1 << 20)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
            defer { buffer.deallocate() }
            let read = readFully(source, into: buffer, at: sourceOffset + Int64(done))
            if read < 0 { return -1 }
            if read == 0 { return done }
            guard writeAll(destination, UnsafeRawBufferPointer(rebasing: buffer[..<read]), at: destinationOffset + Int64(done)) == read else { return -1 }
            done += read
        }
        return done
    }

    /// `send(2)` of all of `bytes` without `SIGPIPE` (a closed peer is an error, -1): their
    /// count, or -1.
    package static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var offset = 0
        while offset < bytes.count {
            let count = retrying { Glibc.send(fd, base + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return -1 }
            offset += count
        }
        return offset
    }

    /// `poll(2)`, retried when interrupted (with the whole timeout again).
    package static func poll(_ descriptors: inout [pollfd], timeout milliseconds: Int32) -> Int32 {
        retrying { Glibc.poll(&descriptors, nfds_t(descriptors.count), milliseconds) }
    }

    /// `accept4(2)` with close-on-exec, retried when interrupted or when the connection was
    /// aborted before it was taken: the new descriptor, or -1.
    package static func accept(_ fd: Int32) -> Int32 {
        while true {
            let client = ubq_accept_cloexec(fd)
            if client < 0 && (errno == EINTR || errno == ECONNABORTED) { continue }
            return client
        }
    }

    /// `flock(2)`, retried when interrupted: 0, or -1.
    package static func lock(_ fd: Int32, _ operation: Int32) -> Int32 {
        retrying { flock(fd, operation) }
    }
}
