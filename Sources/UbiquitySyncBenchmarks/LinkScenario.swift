// The figures of issue 48 on shaped links (`--link home|office`, or explicit `--up-mbit`,
// `--down-mbit`, `--delay-ms`, `--jitter-ms`, `--loss`): every leg of both systems through a
// user-space shaping relay (`RelayProxy` with a `LinkShape`; these machines have no `tc
// netem`) — each Ubiquity device's link to its server, and Syncthing's device-to-device path
// through both devices' links — in one run, and the relay's own check: plain bytes through it
// take within 5% of size ÷ bandwidth (plus the link's delay).
import Foundation
import UbiquityFiles
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// How long plain bytes took through the shaped relay, each way, against what the link's
/// shape says they should.
struct LinkCheck: Encodable {
    var bytes: Int
    var upSeconds: Double
    /// The link's delay plus bytes ÷ bandwidth, up.
    var upExpectedSeconds: Double
    var downSeconds: Double
    var downExpectedSeconds: Double
    /// Each time over what was expected.
    var upRatio: Double
    var downRatio: Double
    /// Both within 5%.
    var within5Percent: Bool
}

/// The link figures: the shape, the relay's check, both systems on the link, and the goals.
struct LinkFigures: Encodable {
    var link: LinkShape
    var check: LinkCheck
    /// A new file of the large size through one leg: its size ÷ the slower leg's bandwidth.
    var oneLegSeconds: Double
    /// A round trip of a device's link (its delays up and down).
    var roundTripMs: Double
    var ubiquity: Figures?
    /// Ubiquity with `streamUploads` off (store and forward: the file fetched once committed),
    /// one new large file: the plot's other series.
    var ubiquityStoreAndForward: LargeFigures?
    var syncthing: Figures?
    /// Ten more devices fetching a new large file at once: the server's store reads.
    var tenDevices: TenDeviceFetch?
    var ratios: [String: Double]
    var goals: [String: Bool]
}

/// Sends `bytes` through a relay shaped as `shape`, up (client to server) then down, and times
/// each until the far end had the last byte.
func checkLink(_ shape: LinkShape, bytes: Int) throws -> LinkCheck {
    func through(up: Bool) throws -> Double {
        let (listener, port) = try loopbackSocket(listening: 4)
        defer { close(listener) }
        let relay = try RelayProxy.start(to: port, shape: shape)
        defer { relay.stop() }
        let payload = [UInt8](repeating: 0x5a, count: 64 << 10)
        let start = ContinuousClock.now
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(client) }
        var address = loopback(port: relay.port)
        let connected = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { throw BenchError("cannot connect to the shaped relay") }
        let server = SystemCall.retrying { accept(listener, nil, nil) }
        guard server >= 0 else { throw BenchError("the shaped relay did not connect") }
        defer { close(server) }
        let (sender, receiver) = up ? (client, server) : (server, client)
        let sending = Thread {
            var left = bytes
            while left > 0 {
                let count = min(left, payload.count)
                let sent = payload.withUnsafeBytes { SystemCall.sendAll(sender, UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                guard sent == count else { return }
                left -= count
            }
        }
        sending.start()
        var received = 0, buffer = [UInt8](repeating: 0, count: 256 << 10)
        while received < bytes {
            let count = SystemCall.retrying { recv(receiver, &buffer, buffer.count, 0) }
            guard count > 0 else { throw BenchError("the shaped relay ended the stream after \(received) of \(bytes) bytes") }
            received += count
        }
        let took = ContinuousClock.now - start
        return Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
    }
    let up = try through(up: true), down = try through(up: false)
    let upExpected = shape.up.delaySeconds + Double(bytes) / shape.up.bytesPerSecond
    let downExpected = shape.down.delaySeconds + Double(bytes) / shape.down.bytesPerSecond
    let (upRatio, downRatio) = ((up / upExpected).rounded(toPlaces: 3), (down / downExpected).rounded(toPlaces: 3))
    return LinkCheck(bytes: bytes, upSeconds: up.rounded(toPlaces: 3), upExpectedSeconds: upExpected.rounded(toPlaces: 3),
                     downSeconds: down.rounded(toPlaces: 3), downExpectedSeconds: downExpected.rounded(toPlaces: 3),
                     upRatio: upRatio, downRatio: downRatio, within5Percent: abs(upRatio - 1) <= 0.05 && abs(downRatio - 1) <= 0.05)
}

/// The sync scenarios issue 48 names, on `peer` (already on its shaped links): new 4 KiB files,
/// a folder of `folder` 1 KiB files, and new large files with 1-byte edits in them.
func measureOnLink(_ peer: some Peer, options: Options, small: Int, notes: String) async -> Figures {
    var figures = Figures(notes: notes)
    do {
        log("\(peer.name): warming up")
        let warm = Data("warm".utf8)
        try warm.write(to: peer.sideA.appendingPathComponent("warm-up.txt"), options: .atomic)
        _ = try await until("\(peer.name) syncs the warm-up file") { (try? Data(contentsOf: peer.sideB.appendingPathComponent("warm-up.txt"))) == warm }
        figures.newSmallFile = try await newSmallFiles(peer, count: small)
        figures.newFolder = try await newFolder(peer, named: "folder", count: options.folder, size: 1024, seed: 2_000_000)
        figures.large = try await largeFiles(peer, mib: options.largeMiB, runs: options.largeRuns)
    } catch {
        log("\(peer.name): \(error)")
        figures.failure = "\(error)"
    }
    return figures
}

/// Both systems on `shape`, in one run, with the ratios and goals of issue 48.
func linkFigures(_ shape: LinkShape, options: Options) async throws -> LinkFigures {
    log("checking the shaping relay itself")
    let check = try checkLink(shape, bytes: 8 << 20)
    let size = Double(options.largeMiB << 20)
    let oneLeg = size / min(shape.up.bytesPerSecond, shape.down.bytesPerSecond)
    var figures = LinkFigures(link: shape, check: check, oneLegSeconds: oneLeg.rounded(toPlaces: 3), roundTripMs: (shape.roundTripSeconds * 1_000).rounded(toPlaces: 1),
                              ratios: [:], goals: [:])
    do {
        let ubiquity = try await UbiquityPeer.start(in: options.directory.appendingPathComponent("ubiquity"), link: shape)
        figures.ubiquity = await measureOnLink(ubiquity, options: options, small: options.small,
                                               notes: "ubiquity serve (embedded SQLite) and two ubiquity agent --greedy processes, each device on its own shaped link to the server")
        do {
            figures.tenDevices = try await tenDeviceFetch(ubiquity, shape: shape, mib: options.largeMiB)
        } catch {
            log("ubiquity: ten devices could not be measured: \(error)")
        }
        await ubiquity.stop()
    } catch {
        log("Ubiquity could not be started: \(error)")
        figures.ubiquity = Figures(failure: "\(error)", notes: "")
    }
    do {
        log("ubiquity, store and forward: one new \(options.largeMiB) MiB file")
        let storeAndForward = try await UbiquityPeer.start(in: options.directory.appendingPathComponent("ubiquity-store-and-forward"), link: shape, streamUploads: false)
        let warm = Data("warm".utf8)
        try warm.write(to: storeAndForward.sideA.appendingPathComponent("warm-up.txt"), options: .atomic)
        _ = try await until("store and forward syncs the warm-up file") { (try? Data(contentsOf: storeAndForward.sideB.appendingPathComponent("warm-up.txt"))) == warm }
        figures.ubiquityStoreAndForward = try await largeFiles(storeAndForward, mib: options.largeMiB, runs: 1)
        await storeAndForward.stop()
    } catch {
        log("Ubiquity (store and forward) could not be measured: \(error)")
    }
    if !options.skipSyncthing {
        do {
            let syncthing = try await SyncthingPeer.start(in: options.directory.appendingPathComponent("syncthing"), link: shape)
            figures.syncthing = await measureOnLink(syncthing, options: options, small: options.syncthingSmall,
                                                    notes: "\(syncthing.version); A dials B directly, through A's link and then B's (one shaped relay: the slower bandwidth, the delays added)")
            await syncthing.stop()
        } catch {
            log("Syncthing could not be measured: \(error)")
            figures.syncthing = Figures(failure: "\(error)", notes: "")
        }
    }
    let ours = figures.ubiquity, theirs = figures.syncthing, roundTripMs = shape.roundTripSeconds * 1_000
    figures.ratios["newLargeFileOverOneLeg"] = ratio(ours?.large?.newFile.ms, oneLeg * 1_000)
    figures.ratios["syncthingNewLargeFileOverOneLeg"] = ratio(theirs?.large?.newFile.ms, oneLeg * 1_000)
    figures.ratios["storeAndForwardNewLargeFileOverOneLeg"] = ratio(figures.ubiquityStoreAndForward?.newFile.ms, oneLeg * 1_000)
    figures.ratios["newLargeFile"] = ratio(ours?.large?.newFile.ms, theirs?.large?.newFile.ms)
    figures.ratios["newFolder"] = ratio(ours?.newFolder?.transfer.ms, theirs?.newFolder?.transfer.ms)
    figures.ratios["newSmallFileP50"] = ratio(ours?.newSmallFile?.p50Ms, theirs?.newSmallFile?.p50Ms)
    figures.ratios["oneByteEditInPlace"] = ratio(ours?.large?.oneByteEditInPlace.transfer.ms, theirs?.large?.oneByteEditInPlace.transfer.ms)
    figures.ratios["oneByteEditSafeSave"] = ratio(ours?.large?.oneByteEditSafeSave.transfer.ms, theirs?.large?.oneByteEditSafeSave.transfer.ms)
    if let ms = ours?.large?.newFile.ms {
        figures.goals["newLargeFileWithin1.15xOneLeg"] = ms <= 1.15 * oneLeg * 1_000
        if let theirs = theirs?.large?.newFile.ms { figures.goals["newLargeFileAtMostSyncthing"] = ms <= theirs }
    }
    if let ms = ours?.newFolder?.transfer.ms, let theirs = theirs?.newFolder?.transfer.ms { figures.goals["newFolderAtMostSyncthing"] = ms <= theirs }
    if let p50 = ours?.newSmallFile?.p50Ms { figures.goals["newSmallFileP50Within3RoundTripsPlus10ms"] = p50 <= 3 * roundTripMs + 10 }
    if let edit = ours?.large?.oneByteEditInPlace.transfer.ms { figures.goals["oneByteEditInPlaceWithin4RoundTripsPlus50ms"] = edit <= 4 * roundTripMs + 50 }
    if let edit = ours?.large?.oneByteEditSafeSave.transfer.ms { figures.goals["oneByteEditSafeSaveWithin4RoundTripsPlus50ms"] = edit <= 4 * roundTripMs + 50 }
    figures.goals["relayWithin5Percent"] = check.within5Percent
    if let ten = figures.tenDevices { figures.goals["tenDevicesStoreReadAtMost1.2xFile"] = ten.storeReadOverFile <= ten.goalAtMost }
    return figures
}
