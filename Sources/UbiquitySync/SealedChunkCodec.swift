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
        let current = newest.chunkKeys(container: container)
        // Newest first: what is read is mostly what was written lately.
        let held = rootKeys.sorted { $0.epoch > $1.epoch }.map { $0.chunkKeys(container: container) }
        let name: @Sendable (UnsafeRawBufferPointer) -> String = { current.identifier(of: $0).bytes.lowercaseHex }
        func chunker(_ sizes: KeyedChunker.Sizes) -> ContentChunker {
            let keyed = KeyedChunker(keys: current, sizes: sizes)
            return ContentChunker(minimumSize: sizes.minimum, averageSize: sizes.average, maximumSize: sizes.maximum,
                                  cut: { keyed.cut($0, from: $1) }, name: name)
        }
        let standard = chunker(.standard), large = chunker(.large)
        var codec = ChunkCodec(
            sealedCutting: { $0 >= KeyedChunker.largeFileSize ? large : standard },
            seal: { bytes, asked, unchanged in
                // Unless the bytes are known unchanged since they were named, they are named
                // again: bytes that are not the chunk asked for (the file changed since it was
                // cut) are never stored under its name.
                guard let named = ChunkIdentifier(hex: asked) else { throw ChunkCodecError(name: asked, reason: "not a chunk name") }
                if !unchanged, current.identifier(of: bytes) != named {
                    throw ChunkCodecError(name: asked, reason: "the bytes read are another chunk's (the file changed since it was cut)")
                }
                return try current.seal(bytes, as: named)
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
