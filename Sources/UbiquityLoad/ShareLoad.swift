import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import UbiquityProtocol
import UbiquityServer

// `--share`: what one account's flood of requests costs another account (see main.swift): the
// flood is `flooders` clients each committing new items one after the other, as fast as they
// are answered.

func shareRun(options: Options) async throws -> [String: Any] {
    var report: [String: Any] = ["flooders": options.flooders, "floodSeconds": options.seconds]
    var p99s: [String: Double] = [:]
    for (label, working) in [("share", AccountShareLimits().working), ("noShare", 1_000_000)] {
        let run = try await withLoadServer(options: options, accounts: ["neighbour"], configure: { $0.accountShare.working = working }) { base in
            try await flooded(base, options: options)
        }
        report[label] = run
        p99s[label + "Alone"] = (run["aloneSeconds"] as? [String: Double])?["p99"]
        p99s[label + "Flooded"] = (run["floodedSeconds"] as? [String: Double])?["p99"]
    }
    func ratio(_ flooded: String, _ alone: String) -> Double {
        ((p99s[flooded] ?? 0) / max(p99s[alone] ?? 0, 1e-9) * 100).rounded() / 100
    }
    report["floodedP99OverAlone"] = ["share": ratio("shareFlooded", "shareAlone"), "noShare": ratio("noShareFlooded", "noShareAlone")]
    return report
}

/// The neighbour's commit latencies alone, then during the flood; the flood's answers.
private func flooded(_ base: URL, options: Options) async throws -> [String: Any] {
    let prober = loadClient(connections: 1), flooder = loadClient(connections: options.flooders)
    defer { _ = prober.shutdown(); _ = flooder.shutdown() }
    func token(_ account: String, _ client: HTTPClient) async throws -> String {
        let (status, body) = try await sendJSON(client, base.appendingPathComponent("v1/sign-in").absoluteString, method: .POST, token: nil,
                                                json: SignInRequest(account: account, password: "the victim's password", deviceName: "load"))
        guard status == 200 else { throw LoadError("sign-in: \(status) \(String(buffer: body))") }
        return try JSONDecoder().decode(SignInResponse.self, from: body).token
    }
    let neighbour = try await token("neighbour", prober), victim = try await token("victim", flooder)
    let items = base.absoluteString + "/v1/containers/\(container)/items"
    func file(_ name: String) -> ItemUpdate {
        ItemUpdate(baseRevision: nil, name: name, kind: .file, modificationDate: 1_800_000_000, type: "public.plain-text", manifest: Manifest(chunks: []))
    }
    /// The neighbour's single-item commits, one after the other, for `seconds`: latencies, sorted.
    func probe(_ label: String, seconds: Double) async throws -> [Double] {
        var latencies: [Double] = []
        let end = now() + UInt64(seconds * 1e9)
        while now() < end {
            let start = now()
            let (status, body) = try await sendJSON(prober, "\(items)/\(label)-\(latencies.count)", method: .PUT, token: neighbour, json: file("\(label) \(latencies.count).txt"))
            guard status == 200 else { throw LoadError("the neighbour's commit: \(status) \(String(buffer: body))") }
            latencies.append(Double(now() - start) / 1e9)
        }
        return latencies.sorted()
    }
    _ = try await probe("warm", seconds: 1)
    let alone = try await probe("alone", seconds: options.seconds)

    let stop = Shared(false)
    let answers = Shared<[Int: Int]>([:])
    let flood = Task {
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<options.flooders {
                group.addTask {
                    var made = 0
                    while !stop.withLock({ $0 }) {
                        made += 1
                        let status = (try? await sendJSON(flooder, "\(items)/flood-\(task)-\(made)", method: .PUT, token: victim, json: file("Flood \(task) \(made).txt")).0) ?? 0
                        answers.withLock { $0[status, default: 0] += 1 }
                    }
                }
            }
        }
    }
    try await Task.sleep(for: .milliseconds(500)) // the flood under way
    let during = try await probe("flooded", seconds: options.seconds)
    stop.withLock { $0 = true }
    await flood.value
    let summary = { (latencies: [Double]) -> [String: Double] in
        ["p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99), "max": latencies.last ?? 0]
    }
    return [
        "aloneSeconds": summary(alone), "floodedSeconds": summary(during), "neighbourCommits": ["alone": alone.count, "flooded": during.count],
        "floodAnswers": answers.withLock { $0 }.reduce(into: [String: Int]()) { $0["\($1.key)"] = $1.value },
    ]
}
