import Foundation
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on loopback in front of one port, counting the bytes it carries both ways (TCP
/// payload: what the two ends wrote). Each device of a peer talks through its own relay, so
/// the bytes of each leg — device A with the server, the server with device B, or A with B —
/// are known apart. Plain blocking sockets, two threads per connection (a handful of
/// connections per device), `TCP_NODELAY` on both sides.
final class CountingProxy: Sendable {
    /// The port to connect to instead of the target's.
    let port: Int
    private let listener: Int32
    private let counter = Atomic<Int64>(0)
    private let stopped = Atomic<Bool>(false)

    private init(port: Int, listener: Int32) {
        self.port = port
        self.listener = listener
    }

    /// Starts relaying 127.0.0.1:`target`.
    static func start(to target: Int) throws -> CountingProxy {
        let (listener, port) = try loopbackSocket(listening: 64)
        let proxy = CountingProxy(port: port, listener: listener)
        Thread { proxy.accepting(target: target) }.start()
        return proxy
    }

    /// Bytes carried so far, both ways.
    var bytes: Int64 { counter.load(ordering: .relaxed) }

    /// Stops accepting (connections open now end with their ends).
    func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func accepting(target: Int) {
        defer { close(listener) }
        while !stopped.load(ordering: .relaxed) {
            let client = SystemCall.accept(listener)
            if client < 0 { return }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = loopback(port: target)
            let connected = server >= 0 && withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            guard connected else {
                close(client)
                if server >= 0 { close(server) }
                continue
            }
            for fd in [client, server] {
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            }
            let pair = Pair(client: client, server: server)
            Thread { self.pump(from: client, to: server, pair: pair) }.start()
            Thread { self.pump(from: server, to: client, pair: pair) }.start()
        }
    }

    /// The two sockets of one relayed connection, closed when both directions ended.
    private final class Pair: Sendable {
        let client: Int32, server: Int32
        private let open = Atomic<Int>(2)
        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }
        func ended() {
            if open.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                close(client)
                close(server)
            }
        }
    }

    private func pump(from source: Int32, to destination: Int32, pair: Pair) {
        defer { pair.ended() }
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let count = SystemCall.retrying { recv(source, &buffer, buffer.count, 0) }
            guard count > 0 else { break }
            counter.add(Int64(count), ordering: .relaxed)
            guard buffer.withUnsafeBytes({ SystemCall.sendAll(destination, UnsafeRawBufferPointer(rebasing: $0[..<count])) }) == count else {
                shutdown(source, Int32(SHUT_RD))
                return
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }
}

/// 127.0.0.1:`port`.
func loopback(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    return address
}
