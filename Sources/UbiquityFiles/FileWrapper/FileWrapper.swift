import Foundation
import Logging

/// A runtime representation of a file-system node — a regular file, a directory or a symbolic
/// link — with Apple's `FileWrapper` API.
///
/// A directory wrapper is how a document becomes a *file package*: a directory the user sees
/// as one document. Wrappers read from disk are lazy: ``init(url:options:)`` reads a package's
/// structure (names and kinds) but no member's bytes until ``regularFileContents`` is asked.
/// Writing with an `originalContentsURL` reuses every member that was read from there and has
/// not changed (by hard link, reflink or, across file systems, copy) instead of rewriting it.
///
/// Each wrapper guards its own state with a lock, so a document may hand its wrapper tree to a
/// background save while the main actor keeps reading it.
///
/// As Apple's, it is an `NSObject` that adopts `NSSecureCoding`: a wrapper tree archives with
/// `NSKeyedArchiver` (as its ``serializedRepresentation``) and comes back with
/// `NSKeyedUnarchiver.unarchivedObject(ofClass: FileWrapper.self, from:)`.
open class FileWrapper: NSObject, NSSecureCoding, @unchecked Sendable {
    /// Options for reading a wrapper from disk.
    public struct ReadingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options from raw bits.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Read every member's bytes now instead of when first asked.
        public static let immediate = ReadingOptions(rawValue: 1 << 0)
        /// Never memory-map file contents; read them into memory.
        public static let withoutMapping = ReadingOptions(rawValue: 1 << 1)
    }

    /// Options for writing a wrapper to disk.
    public struct WritingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options from raw bits.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Write to a temporary sibling and move it into place atomically (crash-safe).
        public static let atomic = WritingOptions(rawValue: 1 << 0)
        /// After writing, set ``filename`` of this wrapper and its descendants to the names written.
        public static let withNameUpdating = WritingOptions(rawValue: 1 << 1)
    }

    enum Kind { case regular, directory, symbolicLink }

    /// Where a regular file's bytes live on disk, and what that file looked like when read.
    struct Source {
        var path: String
        var status: NodeStatus
    }

    let lock = NSRecursiveLock()
    var kind: Kind
    var storedPreferredFilename: String?
    var storedFilename: String?
    var storedAttributes: [String: Any] = [:]
    // Regular files.
    var contents: Data?
    var source: Source?
    var sourceMatchesContents = false
    var mapping = true
    // Directories.
    var children: [String: FileWrapper] = [:]
    weak var parent: FileWrapper?
    // Symbolic links.
    var destination: URL?

    init(kind: Kind) { self.kind = kind }

    // MARK: Creating

    /// Creates a regular-file wrapper holding `contents`.
    /// - Parameter contents: The file's bytes.
    public init(regularFileWithContents contents: Data) {
        kind = .regular
        self.contents = contents
    }

    /// Creates a directory wrapper with the given children.
    ///
    /// Each child's ``preferredFilename`` is set to its key when it has none.
    /// - Parameter childrenByPreferredName: The children, keyed by the names they should have.
    public init(directoryWithFileWrappers childrenByPreferredName: [String: FileWrapper]) {
        kind = .directory
        super.init()
        for (name, child) in childrenByPreferredName {
            child.lock.withLock { if child.storedPreferredFilename == nil { child.storedPreferredFilename = name } }
            child.parent = self
            children[name] = child
        }
    }

    /// Creates a symbolic-link wrapper pointing at `url`.
    /// - Parameter url: The link's destination.
    public init(symbolicLinkWithDestinationURL url: URL) {
        kind = .symbolicLink
        destination = url
    }

    /// Creates a wrapper for the node at `url`: a regular file, a directory (recursively) or a
    /// symbolic link. File bytes are read lazily unless `options` contains `.immediate`.
    /// - Parameters:
    ///   - url: The node to read.
    ///   - options: Reading options.
    /// - Throws: ``FileAccessError`` when the node is missing, unreadable or of an unsupported kind.
    /// Recreates an archived wrapper tree (`NSSecureCoding`); nil for anything else, or for a
    /// tree naming an unusable file name (see ``init(serializedRepresentation:)``).
    /// - Parameter coder: The unarchiver.
    public required convenience init?(coder: NSCoder) {
        guard let data = coder.decodeObject(of: NSData.self, forKey: Self.archiveKey) else { return nil }
        self.init(serializedRepresentation: Data(referencing: data))
    }

    /// Encodes the wrapper tree (its ``serializedRepresentation``); `open`, as Apple's.
    /// - Parameter coder: The archiver.
    open func encode(with coder: NSCoder) {
        coder.encode(serializedRepresentation.map { NSData(data: $0) }, forKey: Self.archiveKey)
    }

    public convenience init(url: URL, options: ReadingOptions = []) throws {
        self.init(kind: .regular)
        try read(from: url, options: options)
    }

    // MARK: Kind

    /// Whether this wrapper is a regular file.
    open var isRegularFile: Bool { lock.withLock { kind == .regular } }
    /// Whether this wrapper is a directory.
    open var isDirectory: Bool { lock.withLock { kind == .directory } }
    /// Whether this wrapper is a symbolic link.
    open var isSymbolicLink: Bool { lock.withLock { kind == .symbolicLink } }

    // MARK: Names and attributes

    /// The name this wrapper would like to have in its parent directory.
    ///
    /// Changing it re-keys the wrapper in its parent (uniquely, as ``addFileWrapper(_:)`` does).
    open var preferredFilename: String? {
        get { lock.withLock { storedPreferredFilename } }
        set {
            lock.withLock { storedPreferredFilename = newValue }
            if let newValue, let parent { parent.rekey(self, preferring: newValue) }
        }
    }

    /// The name of the file on disk that this wrapper was last read from or written to
    /// (with `.withNameUpdating`), or nil.
    open var filename: String? {
        get { lock.withLock { storedFilename } }
        set { lock.withLock { storedFilename = newValue } }
    }

    /// The wrapper's file attributes, keyed by `FileAttributeKey` raw values. Reading fills in
    /// the permissions, modification date and size; writing applies the POSIX permissions
    /// (`FileAttributeKey.posixPermissions`) and ignores the rest.
    open var fileAttributes: [String: Any] {
        get { lock.withLock { storedAttributes } }
        set { lock.withLock { storedAttributes = newValue } }
    }

    // MARK: Regular files

    /// The bytes of a regular-file wrapper (read from disk on first access), or nil for other
    /// kinds or when a lazily read file can no longer be read.
    open var regularFileContents: Data? {
        lock.withLock { () -> Data? in
            guard kind == .regular else { return nil }
            if let contents { return contents }
            guard let source else { return nil }
            let data: Data
            do { data = try Self.readContents(source.path, mapping: mapping) } catch {
                // Read lazily: the member's file changed or went away since the package was read.
                Logger(label: "ubiquity.file-wrapper").error("cannot read a file wrapper's contents", metadata: ["path": "\(source.path)", "error": "\(error)"])
                return nil
            }
            contents = data
            return data
        }
    }

    /// Reads a member's bytes, mapping the file when allowed.
    static func readContents(_ path: String, mapping: Bool) throws -> Data {
        if mapping {
            do { return try Data(contentsOf: URL(fileURLWithPath: path), options: .mappedIfSafe) } catch {
                return try POSIX.readFile(path)
            }
        }
        return try POSIX.readFile(path)
    }

    // MARK: Symbolic links

    /// The destination of a symbolic-link wrapper, or nil for other kinds.
    open var symbolicLinkDestinationURL: URL? { lock.withLock { kind == .symbolicLink ? destination : nil } }

    // MARK: Directories

    /// The children of a directory wrapper, keyed by their unique names; nil for other kinds.
    open var fileWrappers: [String: FileWrapper]? { lock.withLock { kind == .directory ? children : nil } }

    /// Adds a child to a directory wrapper under its ``preferredFilename``, or under a unique
    /// variant (`2 name`, `3 name`, …) when that name is taken.
    /// - Parameter child: The wrapper to add. It must have a preferred file name.
    /// - Returns: The key under which the child was added.
    @discardableResult
    open func addFileWrapper(_ child: FileWrapper) -> String {
        precondition(isDirectory, "addFileWrapper(_:) is only for directory file wrappers")
        guard let name = child.preferredFilename, !name.isEmpty else {
            preconditionFailure("addFileWrapper(_:): the child must have a preferredFilename")
        }
        return lock.withLock {
            let key = uniqueKey(for: name, excluding: nil)
            children[key] = child
            child.parent = self
            return key
        }
    }

    /// Creates a regular-file wrapper with `data` and adds it as ``addFileWrapper(_:)`` does.
    /// - Parameters:
    ///   - data: The file's bytes.
    ///   - fileName: The preferred name.
    /// - Returns: The key under which the new wrapper was added.
    @discardableResult
    open func addRegularFile(withContents data: Data, preferredFilename fileName: String) -> String {
        let child = FileWrapper(regularFileWithContents: data)
        child.preferredFilename = fileName
        return addFileWrapper(child)
    }

    /// Removes a child from a directory wrapper. Removing a wrapper that is not a child does nothing.
    /// - Parameter child: The child to remove.
    open func removeFileWrapper(_ child: FileWrapper) {
        lock.withLock {
            guard let key = children.first(where: { $0.value === child })?.key else { return }
            children[key] = nil
            if child.parent === self { child.parent = nil }
        }
    }

    /// The key under which `child` is stored in this directory wrapper, or nil.
    /// - Parameter child: A wrapper.
    open func keyForChildFileWrapper(_ child: FileWrapper) -> String? {
        lock.withLock { children.first(where: { $0.value === child })?.key }
    }

    func rekey(_ child: FileWrapper, preferring name: String) {
        lock.withLock {
            guard let oldKey = children.first(where: { $0.value === child })?.key, oldKey != name else { return }
            children[oldKey] = nil
            children[uniqueKey(for: name, excluding: child)] = child
        }
    }

    /// A key for `name` not used by any child other than `excluding`. Called with the lock held.
    func uniqueKey(for name: String, excluding: FileWrapper?) -> String {
        func free(_ key: String) -> Bool { children[key] == nil || children[key] === excluding }
        if free(name) { return name }
        var n = 2
        while !free("\(n) \(name)") { n += 1 }
        return "\(n) \(name)"
    }

    // MARK: Reading, comparing, writing, serializing

    /// Rereads this wrapper, recursively, from the node at `url`, replacing what it held.
    ///
    /// Directory structure (names, kinds, attributes) is read now; file bytes only on first
    /// access unless `options` contains `.immediate`.
    /// - Parameters:
    ///   - url: The node to read.
    ///   - options: Reading options.
    /// - Throws: ``FileAccessError`` when the node is missing, unreadable, of an unsupported kind
    ///   (socket, device, FIFO), or when `.immediate` reading fails. The wrapper is unchanged then.
    open func read(from url: URL, options: ReadingOptions = []) throws {
        try readImplementation(from: url, options: options)
    }

    /// Whether this wrapper holds the same contents as the node at `url`.
    ///
    /// A member read from `url` and unchanged on either side is recognised without reading its
    /// bytes; otherwise bytes are compared.
    /// - Parameter url: The node to compare with.
    open func matchesContents(of url: URL) -> Bool {
        matchesContentsImplementation(of: url)
    }

    /// Writes this wrapper (recursively, for a directory) to `url`.
    ///
    /// Regular files that were read from inside `originalContentsURL` and are unchanged — in
    /// memory and on disk — are not rewritten: the new package gets a hard link to the same file
    /// (a reflink, or a copy across file systems, when linking is not possible). Every file this
    /// method writes is `fsync`ed before it returns.
    ///
    /// - Parameters:
    ///   - url: Where to write. Without `.atomic`, an existing item there is replaced
    ///     non-atomically; with `.atomic` the new item is written beside it and swapped in.
    ///   - options: `.atomic` and `.withNameUpdating`.
    ///   - originalContentsURL: The location this wrapper's contents were read from, whose
    ///     unchanged files may be reused.
    /// - Throws: ``FileAccessError`` (for example `.noSpace`, `.permissionDenied`, `.invalidName`
    ///   for a child key that is not a valid file name). With `.atomic`, the item at `url` is
    ///   then untouched.
    open func write(to url: URL, options: WritingOptions = [], originalContentsURL: URL?) throws {
        try writeImplementation(to: url, options: options, originalContentsURL: originalContentsURL)
    }

    /// The whole wrapper tree — names, kinds, permissions, file bytes, link destinations — as
    /// one binary property list, for the pasteboard or the network. Lazily read members are
    /// read. Nil when a member's bytes can no longer be read.
    open var serializedRepresentation: Data? { serializedRepresentationImplementation }
}
