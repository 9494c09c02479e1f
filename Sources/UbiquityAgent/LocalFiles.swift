import Foundation
import UbiquityClient
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// The synced files, folders and packages of a container as the agent last saw them, by path,
/// by item, by folder and by inode (so finding an item's path, a folder's contents or a record
/// by its inode is a lookup, not a search).
struct LocalFiles {
    /// The records by path (out of line: there is one per file).
    private(set) var byPath: OutOfLineDictionary<AgentStore.File>
    // An entry per file: dense tables (see ``CompactDictionary``).
    private var pathByItem = CompactDictionary<String, String>()
    private var childrenByFolder: [String: Set<String>] = [:]
    private var pathByInode = CompactDictionary<UInt64, String>()

    init(_ files: [String: AgentStore.File]) {
        byPath = OutOfLineDictionary(minimumCapacity: files.count)
        for (path, file) in files { self[path] = file }
    }

    subscript(path: String) -> AgentStore.File? {
        get { byPath[path] }
        set {
            if let old = byPath[path] {
                if pathByItem[old.item] == path { pathByItem[old.item] = nil }
                if pathByInode[old.fingerprint.inode] == path { pathByInode[old.fingerprint.inode] = nil }
            }
            byPath[path] = newValue
            let folder = LocalContents.folder(of: path)
            if let newValue {
                pathByItem[newValue.item] = path
                pathByInode[newValue.fingerprint.inode] = path
                childrenByFolder[folder, default: []].insert(path)
            } else {
                childrenByFolder[folder]?.remove(path)
                if childrenByFolder[folder]?.isEmpty == true { childrenByFolder[folder] = nil }
            }
        }
    }

    @discardableResult
    mutating func removeValue(forKey path: String) -> AgentStore.File? {
        defer { self[path] = nil }
        return byPath[path]
    }

    /// Where the item is, if it is here.
    func path(of item: String) -> String? { pathByItem[item] }

    /// The item's record, if it is here.
    func file(of item: String) -> AgentStore.File? { pathByItem[item].flatMap { byPath[$0] } }

    /// Whether the item is here.
    func contains(item: String) -> Bool { pathByItem[item] != nil }

    var fingerprints: LocalTree { byPath.mapValues(\.fingerprint) }

    /// The records directly in `folder` ("" for the top level).
    func children(of folder: String) -> [AgentStore.File] {
        (childrenByFolder[folder] ?? []).compactMap { byPath[$0] }
    }

    /// The folder recorded with `inode`, if any.
    func folder(withInode inode: UInt64) -> String? { path(withInode: inode).flatMap { byPath[$0]?.fingerprint.kind == .directory ? $0 : nil } }

    /// Where the file, package or folder recorded with `inode` is, if any.
    func path(withInode inode: UInt64) -> String? { pathByInode[inode] }

    /// The records at `path` and under it.
    func subtree(_ path: String) -> [AgentStore.File] {
        var found: [AgentStore.File] = []
        var pending = [path]
        if let record = byPath[path] { found.append(record) }
        while let folder = pending.popLast() {
            for child in children(of: folder) {
                found.append(child)
                if child.fingerprint.kind == .directory { pending.append(child.path) }
            }
        }
        return found
    }
}

/// One file of an item's contents: the file itself (`path` empty) or a package's member.
struct LocalMember: Sendable, Equatable {
    /// The member's path inside the package; empty for a flat file.
    var path: String
    /// Its chunks.
    var chunks: [ContentChunk]

    var references: [ChunkReference] { chunks.map { ChunkReference(hash: $0.hash, size: Int64($0.length)) } }
}

/// Contents as the agent handles them: cut from disk, named by a token, described to the server.
enum LocalContents {
    /// What names a folder's contents.
    static let folderToken = ContentToken.folder

    /// The contents of the file or package at `url` (nothing for a folder).
    /// `codec`: how the container's chunks are cut and named now; `previous`: a flat file's
    /// chunks before it changed, as `codec` cut them, if known (the cut is then guided by them:
    /// the same list, the cutter run only around what changed).
    static func cut(_ url: URL, kind: ItemKind, scanner: LocalScanner, relative: String, codec: ChunkCodec = .plain, previous: [ContentChunk]? = nil) throws -> [LocalMember] {
        switch kind {
        case .directory:
            return []
        case .file:
            if let previous { return [LocalMember(path: "", chunks: try codec.chunks(ofFileAt: url, guidedBy: previous))] }
            return [LocalMember(path: "", chunks: try codec.chunks(ofFileAt: url))]
        case .package:
            return try scanner.members(of: relative).map { member in
                member.path.hasSuffix("/") ? LocalMember(path: member.path, chunks: []) // an empty folder
                    : LocalMember(path: member.path, chunks: try codec.chunks(ofFileAt: url.appendingPathComponent(member.path)))
            }
        }
    }

    /// What the server is told the contents are made of.
    static func manifest(_ members: [LocalMember], kind: ItemKind) -> Manifest {
        switch kind {
        case .directory: return Manifest()
        case .file: return Manifest(chunks: members.first?.references ?? [])
        case .package: return Manifest(members: members.map { ManifestMember(path: $0.path, chunks: $0.references) })
        }
    }

    /// The token naming contents for the sync decisions (``ContentToken``).
    static func token(_ manifest: Manifest, kind: ItemKind) -> ContentToken { ContentToken.of(manifest, kind: kind) }

    /// The token of a flat file's chunk list.
    static func token(_ chunks: [ChunkReference]) -> ContentToken { ContentToken.of(chunks) }

    /// Chunk positions for a chunk list.
    static func pieces(_ chunks: [ChunkReference]) -> [ContentChunk] {
        var offset = 0
        return chunks.map { chunk in
            defer { offset += Int(chunk.size) }
            return ContentChunk(offset: offset, length: Int(chunk.size), hash: chunk.hash)
        }
    }

    /// The members of a manifest with their chunk positions.
    static func members(_ manifest: Manifest, kind: ItemKind) -> [LocalMember] {
        switch kind {
        case .directory: return []
        case .file: return [LocalMember(path: "", chunks: pieces(manifest.chunks ?? []))]
        case .package: return (manifest.members ?? []).map { LocalMember(path: $0.path, chunks: pieces($0.chunks)) }
        }
    }

    /// Whether the file or package at `url` holds exactly the contents `manifest` lists, though
    /// cut at other points than this device's chunker would (by another device's chunker, a
    /// plaintext device's, an earlier epoch's, or sealed in place by the server): its bytes are
    /// read at the list's cut points and each piece checked against its chunk's name by `codec`
    /// (a sealed name by its keyed MAC). What the list claims is believed only as far as the
    /// bytes prove it: a chunk longer than any chunker makes is refused unread.
    static func holds(_ url: URL, kind: ItemKind, manifest: Manifest, scanner: LocalScanner, relative: String, codec: ChunkCodec) -> Bool {
        switch kind {
        case .directory:
            return true
        case .file:
            return file(at: url, holds: manifest.chunks ?? [], codec: codec)
        case .package:
            guard let local = try? scanner.members(of: relative) else { return false }
            let listed = manifest.members ?? []
            guard local.count == listed.count, Set(local.map(\.path)) == Set(listed.map(\.path)) else { return false }
            return listed.allSatisfy { member in
                member.path.hasSuffix("/") ? member.chunks.isEmpty : file(at: url.appendingPathComponent(member.path), holds: member.chunks, codec: codec)
            }
        }
    }

    /// The longest chunk ``holds(_:kind:manifest:scanner:relative:codec:)`` reads.
    static let longestCheckedChunk: Int64 = 64 << 20

    private static func file(at url: URL, holds chunks: [ChunkReference], codec: ChunkCodec) -> Bool {
        guard chunks.allSatisfy({ $0.size > 0 && $0.size <= longestCheckedChunk }),
              let size = (try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? NSNumber,
              size.int64Value == chunks.reduce(0, { $0 + $1.size }),
              let handle = try? FileHandle(forReadingFrom: url) else { return false }
        defer { try? handle.close() }
        for chunk in chunks {
            guard let bytes = try? handle.read(upToCount: Int(chunk.size)), bytes.count == Int(chunk.size),
                  bytes.withUnsafeBytes({ codec.recognises($0, as: chunk.hash) }) else { return false }
        }
        return (try? handle.read(upToCount: 1))?.isEmpty ?? true // (not grown since its size was read)
    }

    /// The depth of a relative path (its number of components).
    static func depth(_ path: String) -> Int { path.split(separator: "/").count }

    /// The folder a relative path is in ("" for the top level).
    static func folder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return String(path[..<slash])
    }

    /// Where the placeholder of an item at `path` is (`.NAME.icloud` beside it).
    static func placeholderPath(for path: String) -> String {
        let folder = folder(of: path)
        return (folder.isEmpty ? "" : folder + "/") + UbiquityPlaceholder.fileName(for: name(of: path))
    }

    /// The last component of a relative path.
    static func name(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}
