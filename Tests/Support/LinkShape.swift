import Foundation
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// One direction of a network link: its bandwidth, one-way delay, jitter, and loss — as a
/// TCP stream feels a lost segment: it and everything after it on that connection wait a
/// retransmission timeout (``stallSeconds``). Shaped in user space by ``RelayProxy`` (these
/// machines have no `tc netem`).
public struct LinkDirection: Sendable, Equatable, Encodable {
    /// Bits a second the link carries.
    public var bitsPerSecond: Double
    /// Seconds each byte takes to cross it, beyond its time on the wire.
    public var delaySeconds: Double
    /// Up to this many seconds more, at random, for each segment (never reordering one
    /// connection's bytes).
    public var jitterSeconds: Double
    /// The chance a segment is lost.
    public var lossRate: Double
    /// What a lost segment costs its connection (a retransmission timeout).
    public var stallSeconds: Double

    /// A direction of `megabits` Mbit/s and `delayMilliseconds` each way.
    public init(megabits: Double, delayMilliseconds: Double, jitterMilliseconds: Double = 0, lossRate: Double = 0, stallSeconds: Double = 0.2) {
        bitsPerSecond = megabits * 1_000_000
        delaySeconds = delayMilliseconds / 1_000
        jitterSeconds = jitterMilliseconds / 1_000
        self.lossRate = lossRate
        self.stallSeconds = stallSeconds
    }

    /// Bytes a second.
    public var bytesPerSecond: Double { bitsPerSecond / 8 }

    /// This direction, then `next` (a path through two links): the slower's bandwidth, the
    /// delays and jitters added, a segment lost on either.
    public func then(_ next: LinkDirection) -> LinkDirection {
        var path = self
        path.bitsPerSecond = min(bitsPerSecond, next.bitsPerSecond)
        path.delaySeconds += next.delaySeconds
        path.jitterSeconds += next.jitterSeconds
        path.lossRate = 1 - (1 - lossRate) * (1 - next.lossRate)
        path.stallSeconds = max(stallSeconds, next.stallSeconds)
        return path
    }
}

/// A device's access link, each way: `up` carries what the device sends, `down` what it is sent.
public struct LinkShape: Sendable, Equatable, Encodable {
    /// From the device.
    public var up: LinkDirection
    /// To the device.
    public var down: LinkDirection

    /// A link of `up` and `down`.
    public init(up: LinkDirection, down: LinkDirection) {
        self.up = up
        self.down = down
    }

    /// A home's link: 20 Mbit/s up, 100 Mbit/s down, 20 ms each way.
    public static let home = LinkShape(up: LinkDirection(megabits: 20, delayMilliseconds: 20), down: LinkDirection(megabits: 100, delayMilliseconds: 20))
    /// An office's link: 100 Mbit/s both ways, 5 ms each way.
    public static let office = LinkShape(up: LinkDirection(megabits: 100, delayMilliseconds: 5), down: LinkDirection(megabits: 100, delayMilliseconds: 5))

    /// The path from this device to `other`, through this device's link and then the other's
    /// (two devices talking directly): what this one sends goes up its link and down the other's.
    public func path(to other: LinkShape) -> LinkShape {
        LinkShape(up: up.then(other.down), down: other.up.then(down))
    }

    /// The time one round trip takes on this link (no bytes on the wire).
    public var roundTripSeconds: Double { up.delaySeconds + down.delaySeconds }
}

/// The wire of one direction of a shaped relay, shared by every connection through it (a
/// device's connections share its link): when each segment read leaves, and when it arrives.
final class LinkPacer: Sendable {
    let direction: LinkDirection
    /// When the wire is free again.
    private let free = Mutex(ContinuousClock.now)

    init(_ direction: LinkDirection) {
        self.direction = direction
    }

    /// Puts `count` bytes read now on the wire: when they are all on it (the sender is held
    /// back while the wire is busy further ahead than a router's queue holds), and when the
    /// last of them arrives at the far end.
    func send(_ count: Int) -> (sent: ContinuousClock.Instant, arrives: ContinuousClock.Instant) {
        let wire = Duration.seconds(Double(count) / direction.bytesPerSecond)
        let sent = free.withLock { free in
            free = max(free, .now) + wire
            return free
        }
        var arrives = sent + .seconds(direction.delaySeconds)
        if direction.jitterSeconds > 0 { arrives += .seconds(Double.random(in: 0...direction.jitterSeconds)) }
        if direction.lossRate > 0 && Double.random(in: 0..<1) < direction.lossRate { arrives += .seconds(direction.stallSeconds) }
        return (sent, arrives)
    }
}

/// One connection's direction through a shaped relay: segments waiting for their arrival
/// time, in order.
final class DelayLine: Sendable {
    private let queue = Mutex<[(arrives: ContinuousClock.Instant, bytes: [UInt8])]>([])
    private let ready = DispatchSemaphore(value: 0)
    private let ended = Atomic(false)

    /// Queues `bytes` to be written at `arrives` (never before what was queued earlier).
    func push(_ bytes: [UInt8], arrives: ContinuousClock.Instant) {
        queue.withLock { queue in queue.append((max(arrives, queue.last?.arrives ?? arrives), bytes)) }
        ready.signal()
    }

    /// No more bytes come (what is queued is still written).
    func finish() {
        ended.store(true, ordering: .relaxed)
        ready.signal()
    }

    /// The next segment, once it is due; nil once finished and empty.
    func pop() -> [UInt8]? {
        while true {
            ready.wait()
            guard let next = queue.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else {
                if ended.load(ordering: .relaxed) { return nil }
                continue
            }
            let wait = next.arrives - .now
            if wait > .zero { Thread.sleep(forTimeInterval: Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18) }
            return next.bytes
        }
    }
}

extension RelayProxy {
    /// Carries `pair`'s bytes over the shaped link: each direction read as it comes, put on its
    /// wire, and written at its arrival time.
    func shape(_ pair: Pair, pacers: (up: LinkPacer, down: LinkPacer)) {
        let (toServer, toClient) = (DelayLine(), DelayLine())
        Thread { self.shapedRead(from: pair.client, into: toServer, pacer: pacers.up, pair: pair) }.start()
        Thread { self.shapedWrite(toServer, to: pair.server, from: pair.client, pair: pair) }.start()
        Thread { self.shapedRead(from: pair.server, into: toClient, pacer: pacers.down, pair: pair) }.start()
        Thread { self.shapedWrite(toClient, to: pair.client, from: pair.server, pair: pair) }.start()
    }

    /// How far ahead of now the wire may be booked before the sender is held back (a router's
    /// queue): what it sends meanwhile waits in its socket, as TCP's flow control has it.
    static let queueSeconds = 0.05

    private func shapedRead(from source: Int32, into line: DelayLine, pacer: LinkPacer, pair: Pair) {
        defer { line.finish() }
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while !pair.isAborted {
            let count = SystemCall.retrying { recv(source, &buffer, buffer.count, 0) }
            guard count > 0 else { return }
            counter.add(Int64(count), ordering: .relaxed)
            let (sent, arrives) = pacer.send(count)
            line.push(Array(buffer[0..<count]), arrives: arrives)
            let ahead = sent - .now - .seconds(Self.queueSeconds)
            if ahead > .zero { Thread.sleep(forTimeInterval: Double(ahead.components.seconds) + Double(ahead.components.attoseconds) / 1e18) }
        }
    }

    private func shapedWrite(_ line: DelayLine, to destination: Int32, from source: Int32, pair: Pair) {
        defer {
            if pair.ended() { _ = connections.withLock { $0.removeValue(forKey: ObjectIdentifier(pair)) } }
        }
        while let bytes = line.pop() {
            let wrote = bytes.withUnsafeBytes { SystemCall.sendAll(destination, $0) }
            guard !pair.isAborted, wrote == bytes.count else {
                shutdown(source, Int32(SHUT_RD)) // the far end is gone: the near end hears it
                return
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }
}
