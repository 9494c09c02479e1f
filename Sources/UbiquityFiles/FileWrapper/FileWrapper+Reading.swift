import Foundation

extension FileWrapper {
    func readImplementation(from url: URL, options: ReadingOptions) throws {
        let path = url.standardizedFileURL.path
        let fresh = try Self.load(path: path, options: options)
        lock.withLock {
            kind = fresh.kind
            contents = fresh.contents
            source = fresh.source
            sourceMatchesContents = fresh.sourceMatchesContents
            mapping = fresh.mapping
            destination = fresh.destination
            storedAttributes = fresh.storedAttributes
            storedFilename = url.lastPathComponent
            if storedPreferredFilename == nil { storedPreferredFilename = url.lastPathComponent }
            for child in children.values where child.parent === self { child.parent = nil }
            children = fresh.children
            for child in children.values { child.parent = self }
        }
    }

    /// Reads the node at `path` into a new, parentless wrapper.
    static func load(path: String, options: ReadingOptions) throws -> FileWrapper {
        guard let status = try POSIX.status(path) else {
            throw FileAccessError(.notFound, "no file to read", path: path, errno: ENOENT)
        }
        let name = (path as NSString).lastPathComponent
        let wrapper: FileWrapper
        switch status.kind {
        case .regular:
            wrapper = FileWrapper(kind: .regular)
            wrapper.source = Source(path: path, status: status)
            wrapper.sourceMatchesContents = true
            wrapper.mapping = !options.contains(.withoutMapping)
            if options.contains(.immediate) {
                wrapper.contents = try readContents(path, mapping: wrapper.mapping)
            }
        case .directory:
            wrapper = FileWrapper(kind: .directory)
            for entry in try POSIX.directoryEntries(path) {
                let child = try load(path: path + "/" + entry, options: options)
                child.parent = wrapper
                wrapper.children[entry] = child
            }
        case .symbolicLink:
            wrapper = FileWrapper(kind: .symbolicLink)
            let target = try POSIX.linkDestination(path)
            wrapper.destination = target.hasPrefix("/") ? URL(fileURLWithPath: target) : URL(fileURLWithPath: target, relativeTo: nil)
        case .other:
            throw FileAccessError(.unsupportedItem, "not a regular file, directory or symbolic link", path: path)
        }
        wrapper.storedFilename = name
        wrapper.storedPreferredFilename = name
        wrapper.storedAttributes = [
            FileAttributeKey.posixPermissions.rawValue: NSNumber(value: status.permissions),
            FileAttributeKey.modificationDate.rawValue: status.modificationDate,
            FileAttributeKey.size.rawValue: NSNumber(value: status.size),
        ]
        return wrapper
    }

    func matchesContentsImplementation(of url: URL) -> Bool {
        let path = url.standardizedFileURL.path
        // Apple's `matchesContents(of:)`: whatever cannot be read does not match.
        guard let status = try? POSIX.status(path) else { return false }
        switch lock.withLock({ kind }) {
        case .regular:
            guard status.kind == .regular else { return false }
            let (source, clean) = lock.withLock { (self.source, sourceMatchesContents) }
            if let source, clean, source.path == path, source.status.sameContents(as: status) { return true }
            // A file that cannot be read does not match (the caller reads it anew).
            guard let mine = regularFileContents, let theirs = try? POSIX.readFile(path) else { return false }
            return mine == theirs
        case .directory:
            guard status.kind == .directory, let entries = try? POSIX.directoryEntries(path) else { return false }
            let children = lock.withLock { self.children }
            guard Set(entries) == Set(children.keys) else { return false }
            return children.allSatisfy { key, child in child.matchesContents(of: URL(fileURLWithPath: path + "/" + key)) }
        case .symbolicLink:
            guard status.kind == .symbolicLink, let target = try? POSIX.linkDestination(path) else { return false }
            return target == lock.withLock({ destination })?.relativePath
        }
    }
}
