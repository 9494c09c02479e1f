import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// A browser approved under Advanced gets the keys of the containers its device allows, sealed
/// to it and signed by that device: it opens with the browser's key only, from that device
/// only, for that account only, unchanged — and its keys are the very ones the root key
/// derives for those containers (never the root key itself).
@Suite struct WebGrantTests {
    let device = DeviceKeys(), browser = DeviceKeys()
    let root = AccountRootKey(epoch: 2)

    func grant() -> WebGrant.Contents {
        WebGrant.Contents(format: 1, account: "acct-token", expires: 1_900_000_000,
                          keys: [WebGrant.ContainerKeys(root, container: "A.com.example.notes")])
    }

    @Test func aGrantOpensForItsBrowserFromItsDeviceWithTheContainersKeys() throws {
        let sealed = try WebGrant.seal(grant(), to: browser.publicKeys, signedBy: device)
        let opened = try WebGrant.open(sealed, as: browser, from: device.publicKeys, account: "acct-token")
        #expect(opened == grant() && opened.containers == ["A.com.example.notes"])
        // The keys are the container's: a chunk named and a record sealed by a device open with them.
        let keys = try #require(opened.keys.first)
        let chunks = root.chunkKeys(container: "A.com.example.notes")
        let plaintext = Data("a note".utf8)
        #expect(Array(HMAC<SHA256>.authenticationCode(for: plaintext, using: SymmetricKey(data: keys.chunkIdentifier))) == chunks.identifier(of: plaintext).bytes)
        let record = try root.recordKey(container: "A.com.example.notes").seal(Data("{}".utf8), for: RecordBinding(container: "A.com.example.notes", item: "i", parent: "", revision: ""))
        let reopened = RecordKey(key: SecretKey(SymmetricKey(data: keys.itemRecord)), nameTag: SecretKey(SymmetricKey(data: keys.nameTag)), epoch: keys.epoch)
        #expect(try reopened.open(record, for: RecordBinding(container: "A.com.example.notes", item: "i", parent: "", revision: "")) == Data("{}".utf8))
        #expect(!sealed.body.contains(keys.itemRecord) && keys.itemRecord.count == 32)
    }

    @Test func anotherBrowserDeviceOrAccountOrAChangedGrantIsRefused() throws {
        let sealed = try WebGrant.seal(grant(), to: browser.publicKeys, signedBy: device)
        expectRefused(.authenticationFailed) { _ = try WebGrant.open(sealed, as: DeviceKeys(), from: device.publicKeys, account: "acct-token") }
        expectRefused(.badSignature) { _ = try WebGrant.open(sealed, as: browser, from: DeviceKeys().publicKeys, account: "acct-token") }
        expectRefused(.authenticationFailed) { _ = try WebGrant.open(sealed, as: browser, from: device.publicKeys, account: "another") }
        // The server seals keys of its own to the browser: not signed by the device.
        let forged = try WebGrant.seal(grant(), to: browser.publicKeys, signedBy: DeviceKeys())
        expectRefused(.badSignature) { _ = try WebGrant.open(forged, as: browser, from: device.publicKeys, account: "acct-token") }
        // Changed, then signed again by the device (so only the seal can tell).
        var body = sealed.body
        body[body.count - 20] ^= 1
        expectRefused(.authenticationFailed) {
            _ = try WebGrant.open(WebGrant.Sealed(body: body, signature: Data(try device.sign(WebGrant.signedBytes(body)))), as: browser, from: device.publicKeys, account: "acct-token")
        }
        var older = sealed.body
        older[0] = 0
        expectRefused(.unsupportedFormat) {
            _ = try WebGrant.open(WebGrant.Sealed(body: older, signature: Data(try device.sign(WebGrant.signedBytes(older)))), as: browser, from: device.publicKeys, account: "acct-token")
        }
        let short = Data([1, 2, 3])
        let shortGrant = WebGrant.Sealed(body: short, signature: Data(try device.sign(WebGrant.signedBytes(short))))
        expectRefused(.malformed) { _ = try WebGrant.open(shortGrant, as: browser, from: device.publicKeys, account: "acct-token") }
    }
}
