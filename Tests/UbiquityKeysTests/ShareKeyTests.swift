import Foundation
import Testing
@testable import UbiquityKeys

/// A share's own keys (issue 46, docs/Sharing.md "Keys"): derived apart from every account
/// key, sealed by the owner's sharing identity to exactly one participant's for one share and
/// epoch; a safety code both people see alike; pins that refuse a changed key until confirmed.
@Suite struct ShareKeyTests {
    let adaIdentity = DeviceKeys(), bobIdentity = DeviceKeys(), serversKey = DeviceKeys()
    var ada: SharingIdentity { SharingIdentity(account: "ada", keys: adaIdentity.publicKeys) }
    var bob: SharingIdentity { SharingIdentity(account: "bob", keys: bobIdentity.publicKeys) }

    @Test func aSharesKeysAreNoAccountsAndNoOtherSharesOrEpochs() throws {
        let share = ShareKey(share: "s1", epoch: 0)
        let plaintext = Data("dig, sow, water".utf8)
        let (id, body) = try share.chunkKeys.seal(plaintext)
        #expect(try share.chunkKeys.open(body, as: id) == plaintext)
        // The same 32 bytes as an account's root key, or as another share's or epoch's key, derive other keys.
        let bytes = share.key.bytes
        let asAccount = try AccountRootKey(epoch: 0, bytes: bytes)
        let other = try ShareKey(share: "s2", epoch: 0, bytes: bytes), later = try ShareKey(share: "s1", epoch: 1, bytes: bytes)
        for keys in [asAccount.chunkKeys(container: "s1"), other.chunkKeys, later.chunkKeys] {
            #expect(keys.identifier(of: plaintext) != id)
            expectRefused(.authenticationFailed) { _ = try keys.open(body, as: id) }
        }
        let binding = RecordBinding(container: "C", item: "i", parent: "p", revision: "r")
        let record = try share.recordKey.seal(Data("Plan.txt".utf8), for: binding)
        #expect(try share.recordKey.open(record, for: binding) == Data("Plan.txt".utf8))
        expectRefused(.authenticationFailed) { _ = try asAccount.recordKey(container: "s1").open(record, for: binding) }
    }

    @Test func anEnvelopeOpensOnlyForItsParticipantFromItsOwnerForItsShareAndEpoch() throws {
        let key = ShareKey(share: "s1", epoch: 3)
        let envelope = try ShareKeyEnvelope.seal(key, to: bob, from: ("ada", adaIdentity))
        let opened = try ShareKeyEnvelope.open(envelope, share: "s1", owner: ada, participant: ("bob", bobIdentity))
        #expect(opened.key.bytes == key.key.bytes && opened.epoch == 3 && opened.share == "s1")
        #expect(envelope.range(of: Data(key.key.bytes)) == nil)
        // Another share, another claimed owner (a key the server made), another participant name,
        // another participant's keys, a changed epoch, a flipped bit, a cut.
        expectRefused(.authenticationFailed) { _ = try ShareKeyEnvelope.open(envelope, share: "s2", owner: ada, participant: ("bob", bobIdentity)) }
        let impostor = SharingIdentity(account: "ada", keys: serversKey.publicKeys)
        expectRefused(.authenticationFailed) { _ = try ShareKeyEnvelope.open(envelope, share: "s1", owner: impostor, participant: ("bob", bobIdentity)) }
        expectRefused(.authenticationFailed) { _ = try ShareKeyEnvelope.open(envelope, share: "s1", owner: ada, participant: ("cy", bobIdentity)) }
        expectRefused(.authenticationFailed) { _ = try ShareKeyEnvelope.open(envelope, share: "s1", owner: ada, participant: ("bob", serversKey)) }
        var older = envelope
        older[4] = 2
        expectRefused(.authenticationFailed) { _ = try ShareKeyEnvelope.open(older, share: "s1", owner: ada, participant: ("bob", bobIdentity)) }
        var flipped = envelope
        flipped[flipped.count - 1] ^= 1
        expectRefused(.authenticationFailed) { _ = try ShareKeyEnvelope.open(flipped, share: "s1", owner: ada, participant: ("bob", bobIdentity)) }
        expectRefused(.malformed) { _ = try ShareKeyEnvelope.open(envelope.prefix(20), share: "s1", owner: ada, participant: ("bob", bobIdentity)) }
        var future = envelope
        future[0] = 2
        expectRefused(.unsupportedFormat) { _ = try ShareKeyEnvelope.open(future, share: "s1", owner: ada, participant: ("bob", bobIdentity)) }
    }

    @Test func bothPeopleSeeTheSameSafetyCodeAndASwappedKeyShowsAnother() {
        let code = SafetyCode.code(ada, bob)
        #expect(code == SafetyCode.code(bob, ada), "the same on both devices")
        #expect(code.count == 14 && code.split(separator: " ").map(\.count) == [4, 4, 4] && code.allSatisfy { $0.isNumber || $0 == " " }, "\(code)")
        // A server that swaps Bob's key for one of its own: Ada's device shows another code than Bob's.
        let swapped = SharingIdentity(account: "bob", keys: serversKey.publicKeys)
        #expect(SafetyCode.code(ada, swapped) != code)
        #expect(SafetyCode.code(SharingIdentity(account: "cy", keys: bobIdentity.publicKeys), ada) != code, "the names count too")
    }

    @Test func aPinnedKeyThatChangesIsRefusedUntilConfirmed() throws {
        var pins = IdentityPins()
        #expect(pins.check(bob) == .new)
        #expect(pins.check(bob) == .pinned(confirmed: false))
        pins.confirm(bob)
        #expect(pins.check(bob) == .pinned(confirmed: true))
        let swapped = SharingIdentity(account: "bob", keys: serversKey.publicKeys)
        #expect(pins.check(swapped) == .changed, "the server's key in Bob's name")
        #expect(pins.check(bob) == .pinned(confirmed: true), "Bob's own key still stands")
        pins.confirm(swapped) // the people compared the new code (Bob's account got a new identity)
        #expect(pins.check(swapped) == .pinned(confirmed: true) && pins.check(bob) == .changed)
        // Stored with a format; damaged or other formats are refused.
        #expect(try IdentityPins(encoded: try pins.encoded()) == pins)
        expectRefused(.malformed) { _ = try IdentityPins(encoded: Data("{".utf8)) }
        expectRefused(.unsupportedFormat) { _ = try IdentityPins(encoded: Data(#"{"format":2,"pins":{}}"#.utf8)) }
        let short = try pins.encoded()
        var text = String(decoding: short, as: UTF8.self)
        text = text.replacingOccurrences(of: #""signing":["#, with: #""signing":[1,"#)
        expectRefused(.malformed) { _ = try IdentityPins(encoded: Data(text.utf8)) }
    }

    @Test func anAccountsSealedIdentityOpensOnlyForItsAccountWithItsPublishedKeys() throws {
        let roots = [AccountRootKey(epoch: 0), AccountRootKey(epoch: 1)]
        let sealed = try SealedSharingIdentity.seal(adaIdentity, account: "ada", under: roots[1])
        #expect(sealed.count == SealedSharingIdentity.size && sealed.first == SealedSharingIdentity.format)
        #expect(try SealedSharingIdentity.epoch(of: sealed) == 1)
        let opened = try SealedSharingIdentity.open(sealed, account: "ada", published: adaIdentity.publicKeys, rootKeys: roots)
        #expect(opened.publicKeys == adaIdentity.publicKeys)
        // The server publishes its own key beside Ada's sealed identity: her devices notice.
        expectRefused(.authenticationFailed) { _ = try SealedSharingIdentity.open(sealed, account: "ada", published: serversKey.publicKeys, rootKeys: roots) }
        // Another account's name, a flipped bit, another account's root key, an epoch not held, a cut, another format.
        expectRefused(.authenticationFailed) { _ = try SealedSharingIdentity.open(sealed, account: "bob", published: adaIdentity.publicKeys, rootKeys: roots) }
        var flipped = sealed
        flipped[flipped.count - 20] ^= 1
        expectRefused(.authenticationFailed) { _ = try SealedSharingIdentity.open(flipped, account: "ada", published: adaIdentity.publicKeys, rootKeys: roots) }
        expectRefused(.authenticationFailed) {
            _ = try SealedSharingIdentity.open(sealed, account: "ada", published: adaIdentity.publicKeys, rootKeys: [AccountRootKey(epoch: 1)])
        }
        expectRefused(.keyUnavailable) { _ = try SealedSharingIdentity.open(sealed, account: "ada", published: adaIdentity.publicKeys, rootKeys: [roots[0]]) }
        expectRefused(.malformed) { _ = try SealedSharingIdentity.open(sealed.dropLast(), account: "ada", published: adaIdentity.publicKeys, rootKeys: roots) }
        var newer = sealed
        newer[0] = 2
        expectRefused(.unsupportedFormat) { _ = try SealedSharingIdentity.open(newer, account: "ada", published: adaIdentity.publicKeys, rootKeys: roots) }
    }
}
