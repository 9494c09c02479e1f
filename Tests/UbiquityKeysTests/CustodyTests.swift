import Foundation
import Testing
@testable import UbiquityKeys

/// Who can open the account's root key: the device it was sealed to, from the device that
/// sealed it, for that account and epoch; the recovery key; and how a new device joins.
@Suite struct CustodyTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), server = DeviceKeys()
    let root = AccountRootKey(epoch: 2)

    func same(_ a: AccountRootKey, _ b: AccountRootKey) -> Bool {
        a.epoch == b.epoch && a.withUnsafeBytes { Array($0) } == b.withUnsafeBytes { Array($0) }
    }

    @Test func anEnvelopeOpensOnlyForItsRecipientFromItsSenderForItsAccountAndEpoch() throws {
        let envelope = try KeyEnvelope.seal(root, account: "ada", to: phone.publicKeys, from: laptop)
        #expect(same(try KeyEnvelope.open(envelope, account: "ada", recipient: phone, sender: laptop.publicKeys), root))
        #expect(envelope.range(of: Data(root.withUnsafeBytes { Array($0) })) == nil)
        // Another holder (the server's escrow key), another claimed sender (the server's), another account.
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(envelope, account: "ada", recipient: server, sender: laptop.publicKeys) }
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(envelope, account: "ada", recipient: phone, sender: server.publicKeys) }
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(envelope, account: "bob", recipient: phone, sender: laptop.publicKeys) }
        // The epoch in the clear, changed (an old epoch's key passed off as current, or the reverse).
        var older = envelope
        older[4] = 1
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(older, account: "ada", recipient: phone, sender: laptop.publicKeys) }
        var flipped = envelope
        flipped[flipped.count - 1] ^= 1
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(flipped, account: "ada", recipient: phone, sender: laptop.publicKeys) }
        expectRefused(.malformed) { try KeyEnvelope.open(envelope.prefix(20), account: "ada", recipient: phone, sender: laptop.publicKeys) }
        // The server holding a Standard account's escrow copy opens it with its own key.
        let escrow = try KeyEnvelope.seal(root, account: "ada", to: server.publicKeys, from: laptop)
        #expect(same(try KeyEnvelope.open(escrow, account: "ada", recipient: server, sender: laptop.publicKeys), root))
    }

    @Test func theRecoveryKeyIsWrittenDownCheckedAndOpensOnlyItsAccount() throws {
        let recovery = RecoveryKey()
        let text = recovery.text
        #expect(text.split(separator: "-").count == 14 && text.split(separator: "-").allSatisfy { $0.count == 4 })
        #expect(try RecoveryKey(text: text) == recovery)
        #expect(try RecoveryKey(text: " " + text.lowercased().replacingOccurrences(of: "-", with: " ") + "\n") == recovery, "case and spacing ignored")
        // One character mistyped: caught by the check group.
        var characters = Array(text)
        characters[5] = characters[5] == "7" ? "8" : "7"
        expectRefused(.malformed) { try RecoveryKey(text: String(characters)) }
        expectRefused(.malformed) { try RecoveryKey(text: String(text.dropLast(5))) }
        expectRefused(.malformed) { try RecoveryKey(text: text.replacingOccurrences(of: text.prefix(1), with: "U", options: [], range: text.startIndex..<text.index(after: text.startIndex))) }
        // It stands in the roster as a key pair derived from it for the account: a device seals
        // each epoch's key to it, and only that recovery key, for that account, opens it.
        let holder = recovery.deviceKeys(account: "ada")
        #expect(holder.publicKeys == recovery.deviceKeys(account: "ada").publicKeys, "the same key pair each time")
        #expect(holder.publicKeys != recovery.deviceKeys(account: "bob").publicKeys)
        let sealed = try KeyEnvelope.seal(root, account: "ada", to: holder.publicKeys, from: laptop)
        #expect(same(try KeyEnvelope.open(sealed, account: "ada", recipient: try RecoveryKey(text: text).deviceKeys(account: "ada"), sender: laptop.publicKeys), root))
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(sealed, account: "ada", recipient: RecoveryKey().deviceKeys(account: "ada"), sender: laptop.publicKeys) }
        expectRefused(.authenticationFailed) { try KeyEnvelope.open(sealed, account: "bob", recipient: recovery.deviceKeys(account: "bob"), sender: laptop.publicKeys) }
    }

    @Test func bothDevicesShowTheSameJoinCodeAndAKeyPutInBetweenChangesIt() throws {
        let joiningNonce = JoinCode.nonce(), existingNonce = JoinCode.nonce()
        let commitment = JoinCode.commitment(to: joiningNonce, joining: phone.publicKeys)
        let onPhone = try JoinCode.code(existing: laptop.publicKeys, joining: phone.publicKeys, existingNonce: existingNonce, joiningNonce: joiningNonce, commitment: commitment)
        let onLaptop = try JoinCode.code(existing: laptop.publicKeys, joining: phone.publicKeys, existingNonce: existingNonce, joiningNonce: joiningNonce, commitment: commitment)
        #expect(onPhone == onLaptop && onPhone.count == 9 && onPhone.filter(\.isNumber).count == 8)
        // The server relays its own key to the laptop in the phone's place: the laptop's code differs.
        let intruder = DeviceKeys()
        let intruded = JoinCode.commitment(to: joiningNonce, joining: intruder.publicKeys)
        let seenByLaptop = try JoinCode.code(existing: laptop.publicKeys, joining: intruder.publicKeys, existingNonce: existingNonce, joiningNonce: joiningNonce, commitment: intruded)
        #expect(seenByLaptop != onPhone)
        // A nonce or key other than the one committed to is refused.
        expectRefused(.authenticationFailed) { try JoinCode.code(existing: laptop.publicKeys, joining: intruder.publicKeys, existingNonce: existingNonce, joiningNonce: joiningNonce, commitment: commitment) }
        expectRefused(.authenticationFailed) { try JoinCode.code(existing: laptop.publicKeys, joining: phone.publicKeys, existingNonce: existingNonce, joiningNonce: JoinCode.nonce(), commitment: commitment) }
    }
}
