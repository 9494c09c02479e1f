import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquityAgent
@testable import UbiquityServer

/// Checkpoints between real devices (docs/Encryption.md "Checkpoints"): once the container
/// keeps more signed commits than the server asks for, a device that read them all signs a
/// checkpoint by itself and the commits before it go; a device that joins later reads the
/// history from the checkpoint and takes everything, and the devices go on in step.
extension ContainerSyncTests {
    @Test func aDeviceSignsACheckpointAndANewDeviceReadsFromIt() async throws {
        var limits = AccountLimits()
        limits.checkpointAfterBytes = 4_000
        try await withServer(accountLimits: limits) { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            for round in 1...12 {
                try laptop.write("Note.txt", Data("version \(round)".utf8))
                try await laptop.sync.syncOnce()
                try await phone.sync.syncOnce()
            }
            #expect(phone.read("Note.txt") == "version 12")
            let signed = await laptop.sync.checkpointsSigned + phone.sync.checkpointsSigned
            #expect(signed >= 1, "a device signed a checkpoint once the server asked for one")
            let page = try await laptop.client.signedCommits(container: notes, after: 0)
            let start = try #require(page.checkpoint, "the commits before the checkpoint went")
            #expect(page.commits.first?.position == start)

            // The tablet joins: it reads the history from the checkpoint and takes every file.
            let tablet = try await sealingDevice("tablet", base: base, dir: dir)
            try await tablet.sync.syncOnce()
            #expect(tablet.read("Note.txt") == "version 12")
            #expect(await tablet.sync.checkpointsRead >= 1)
            // And the three go on in step.
            try tablet.write("Note.txt", Data("from the tablet".utf8))
            try await tablet.sync.syncOnce()
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(laptop.read("Note.txt") == "from the tablet" && phone.read("Note.txt") == "from the tablet")
            let errors = await [laptop.sync.errors, phone.sync.errors, tablet.sync.errors]
            #expect(errors.allSatisfy { $0.isEmpty }, "\(errors)")
        }
    }
}
