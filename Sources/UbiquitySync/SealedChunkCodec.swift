import Foundation
import UbiquityKeys
import UbiquityProtocol

extension ChunkCodec {
    /// The codec of a device that holds `rootKeys` but does not seal `container`'s chunks: it
    /// cuts, names and sends them in plaintext, and opens what the account's sealing devices
    /// sealed. Nil without keys.
    package static func reading(container: String, rootKeys: [AccountRootKey]) -> ChunkCodec? {
        guard let sealed = sealed(container: container, rootKeys: rootKeys) else { return nil }
        // (Its own chunks are named by SHA-256: that is looked at first.)
        var codec = ChunkCodec(readingSealed: { try sealed.open($0, as: $1) },
                               recognises: { ContentChunker.hash($0) == $1 || sealed.recognises($0, as: $1) },
                               patches: patches(current: nil, held: sealed.heldKeys))
        codec.heldKeys = sealed.heldKeys
        return codec
    }

    /// The sealed codec of `container` for a holder of `rootKeys` (a device, or the server's web
    /// page under Standard with the escrow's keys): the newest epoch's keyed chunker cuts and its
    /// keyed MAC names (``ChunkKeys/identifier(of:)``, as 64 hexadecimal digits); every held
    /// epoch opens. Nil without keys.
    package static func sealed(container: String, rootKeys: [AccountRootKey]) -> ChunkCodec? {
        guard let newest = rootKeys.max(by: { $0.epoch < $1.epoch }) else { return nil }
        // Newest first: what is read is mostly what was written lately.
        return sealed(current: newest.chunkKeys(container: container), held: rootKeys.sorted { $0.epoch > $1.epoch }.map { $0.chunkKeys(container: container) })
    }

    /// The sealed codec of a share (docs/Sharing.md, "Keys") for a holder of its `keys` (a
    /// member's device): the newest epoch's keyed chunker cuts and names, and its keys seal;
    /// every epoch held opens — and so do `alsoOpening` (the owner's container keys, for what
    /// was sealed before the item was shared). Nil without keys.
    package static func shared(_ keys: [ShareKey], alsoOpening: [ChunkKeys] = []) -> ChunkCodec? {
        guard let newest = keys.max(by: { $0.epoch < $1.epoch }) else { return nil }
        return sealed(current: newest.chunkKeys, held: keys.sorted { $0.epoch > $1.epoch }.map(\.chunkKeys) + alsoOpening)
    }

    /// The sealed codec that cuts, names and seals with `current` and opens with each of
    /// `held` (`current` first among them).
    private static func sealed(current: ChunkKeys, held: [ChunkKeys]) -> ChunkCodec {
        let name: @Sendable (UnsafeRawBufferPointer) -> String = { current.identifier(of: $0).bytes.lowercaseHex }
        func chunker(_ sizes: KeyedChunker.Sizes) -> ContentChunker {
            let keyed = KeyedChunker(keys: current, sizes: sizes)
            return ContentChunker(minimumSize: sizes.minimum, averageSize: sizes.average, maximumSize: sizes.maximum,
                                  cut: { keyed.cut($0, from: $1) }, name: name)
        }
        let standard = chunker(.standard), large = chunker(.large)
        var codec = ChunkCodec(
            sealedCutting: { $0 >= KeyedChunker.largeFileSize ? large : standard },
            seal: { bytes, asked, _ in
                // Always named again, even bytes known unchanged since they were cut: bytes that
                // are not the chunk asked for (the file changed since it was cut) are never
                // stored under its name, and neither is a chunk other keys named. (Trusted once
                // unchanged with one epoch held, a file of an owned sealed share cut by the
                // share's keys before a restart went sealed with the container's keys under the
                // share's name after it, before the share's keys were back: no device could open
                // it — found by `ubiquity-chaos --sealed-share`, seed 57, 19 edits lost.)
                guard let named = ChunkIdentifier(hex: asked) else { throw ChunkCodecError(name: asked, reason: "not a chunk name") }
                if current.identifier(of: bytes) == named { return try current.seal(bytes, as: named) }
                // Named by an earlier epoch's keys (cut before the epoch changed): sealed with
                // that epoch's, which name it — a chunk's name and seal are always one epoch's.
                if let earlier = held.first(where: { $0.epoch != current.epoch && $0.identifier(of: bytes) == named }) {
                    return try earlier.seal(bytes, as: named)
                }
                throw ChunkCodecError(name: asked, reason: "the bytes read are another chunk's (the file changed since it was cut)")
            },
            open: { body, asked in
                guard let id = ChunkIdentifier(hex: asked) else { throw ChunkCodecError(name: asked, reason: "not a chunk name") }
                var failure: (any Error)?
                for keys in held {
                    do {
                        return try keys.open(body, as: id)
                    } catch let error as EncryptionError where error.code == .authenticationFailed && failure != nil {
                        continue // (another epoch's: the first failure says more)
                    } catch {
                        if failure == nil { failure = error }
                    }
                }
                // A chunk named by SHA-256 before the account had keys comes as it was sent.
                if ContentChunker.hash(body) == asked { return Data(body) }
                // (The reason by its code: the message would name the chunk again.)
                throw ChunkCodecError(name: asked, reason: failure.map { ($0 as? EncryptionError).map { "\($0.code)" } ?? "\($0)" } ?? "no key of this account opens it")
            },
            recognises: { bytes, asked in
                if current.identifier(of: bytes).bytes.matches(lowercaseHex: asked) { return true }
                if held.dropFirst().contains(where: { $0.identifier(of: bytes).bytes.matches(lowercaseHex: asked) }) { return true }
                return ContentChunker.hash(bytes) == asked
            },
            patches: patches(current: current, held: held))
        codec.heldKeys = held
        return codec
    }

    /// Sealed patches with the newest epoch's keys (`current`; nil: this device opens them
    /// only), opened with any held epoch's, newest first.
    private static func patches(current: ChunkKeys?, held: [ChunkKeys]) -> ChunkCodec.Patches {
        @Sendable func ids(_ name: String, _ base: String) throws -> (ChunkIdentifier, ChunkIdentifier) {
            guard let id = ChunkIdentifier(hex: name), let from = ChunkIdentifier(hex: base) else { throw ChunkCodecError(name: name, reason: "not a chunk name") }
            return (id, from)
        }
        return ChunkCodec.Patches(
            seal: { bytes, name, base in
                guard let current else { throw ChunkCodecError(name: name, reason: "this device does not seal") }
                let (id, from) = try ids(name, base)
                return try current.sealPatch(bytes, making: id, from: from)
            },
            open: { body, name, base in
                let (id, from) = try ids(name, base)
                var failure: (any Error)?
                for keys in held {
                    do {
                        return try keys.openPatch(body, making: id, from: from)
                    } catch let error as EncryptionError where error.code == .authenticationFailed && failure != nil {
                        continue
                    } catch {
                        if failure == nil { failure = error }
                    }
                }
                throw ChunkCodecError(name: name, reason: "its patch does not open: " + (failure.map { ($0 as? EncryptionError).map { "\($0.code)" } ?? "\($0)" } ?? "no key of this account opens it"))
            })
    }
}

extension ChunkCodec {
    /// This codec, also opening and sealing what `shares` do (docs/Sharing.md, "Keys"): the
    /// codec of a container on its owner's devices, whose items inside the shares it owns go
    /// sealed with those shares' keys. It cuts as this codec does (a file in a share is cut by
    /// the share's codec: the caller chooses by path); it seals each chunk with the keys that
    /// named it; it opens and recognises with its own keys, then each share's. Patches of
    /// changed chunks are opened, never sealed (a patch does not say which keys named its
    /// chunk): changed chunks go whole.
    package func alsoSealing(_ shares: [ChunkCodec]) -> ChunkCodec {
        guard !shares.isEmpty else { return self }
        let own = self
        var codec = ChunkCodec(
            sealed: sealed, choosing: choosing,
            sealing: { bytes, name, unchanged in
                // The container's own (its keys', or SHA-256 on a device that sends them in
                // plaintext) as it would; a share's — always keyed — with the share's keys, named
                // again there to seal it with the epoch's that named it.
                if own.recognises(bytes, as: name) { return try own.seal(bytes, as: name, unchanged: unchanged) }
                for share in shares where share.recognises(bytes, as: name) { return try share.seal(bytes, as: name, unchanged: false) }
                return try own.seal(bytes, as: name, unchanged: false) // (refused: bytes no key named so)
            },
            opening: { body, name in
                do {
                    return try own.open(body, as: name)
                } catch {
                    for share in shares {
                        if let opened = try? share.open(body, as: name) { return opened }
                    }
                    throw error
                }
            },
            recognising: { bytes, name in own.recognises(bytes, as: name) || shares.contains { $0.recognises(bytes, as: name) } },
            patches: Patches(
                seal: { _, name, _ in throw ChunkCodecError(name: name, reason: "patches are not sealed beside a share's keys") },
                open: { body, name, base in
                    do {
                        return try own.openPatch(body, making: name, from: base)
                    } catch {
                        for share in shares {
                            if let opened = try? share.openPatch(body, making: name, from: base) { return opened }
                        }
                        throw error
                    }
                }))
        codec.patchesSealed = false
        codec.records = records
        codec.signer = signer
        codec.heldKeys = heldKeys
        return codec
    }
}
