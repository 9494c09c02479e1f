import Foundation

extension FileWrapper {
    func writeImplementation(to url: URL, options: WritingOptions, originalContentsURL: URL?) throws {
        let path = url.standardizedFileURL.path
        let original = originalContentsURL?.standardizedFileURL.path
        if options.contains(.atomic) || original == path {
            let temporary = try SafeSave.replaceItem(at: url, preservingPermissions: false) { temporary in
                try writeNode(to: temporary.path, original: original)
            }
            rebaseSources(from: temporary.path, to: path)
        } else {
            // Files are fsynced as they are written; directories are synced by whoever makes the
            // write durable (SafeSave, for atomic writes and document saves).
            try POSIX.removeTree(path)
            try writeNode(to: path, original: original)
        }
        if options.contains(.withNameUpdating) { updateFilenames(url.lastPathComponent) }
    }

    /// Writes this node at `path`, which must not exist.
    func writeNode(to path: String, original: String?) throws {
        let (kind, attributes) = lock.withLock { (self.kind, storedAttributes) }
        let permissions = (attributes[FileAttributeKey.posixPermissions.rawValue] as? NSNumber)?.uint32Value
        switch kind {
        case .regular:
            try writeRegularFile(to: path, original: original, permissions: permissions)
        case .directory:
            try POSIX.makeDirectory(path)
            let children = lock.withLock { self.children }
            for key in children.keys.sorted() {
                try Self.validateName(key, in: path)
                try children[key]!.writeNode(to: path + "/" + key, original: original)
            }
            if let permissions { try POSIX.setPermissions(path, permissions) }
        case .symbolicLink:
            guard let target = lock.withLock({ destination }) else {
                throw FileAccessError(.corrupt, "symbolic link wrapper without a destination", path: path)
            }
            try POSIX.makeSymbolicLink(path, destination: target.relativePath)
        }
    }

    private func writeRegularFile(to path: String, original: String?, permissions: UInt32?) throws {
        let (source, clean, loaded) = lock.withLock { (self.source, sourceMatchesContents, contents) }
        if let source, clean, let original, source.path == original || source.path.hasPrefix(original + "/"),
           let now = try POSIX.status(source.path), now.kind == .regular, now.sameContents(as: source.status) {
            _ = try POSIX.reuse(source.path, at: path, permissions: permissions ?? now.permissions)
        } else {
            guard let data = loaded ?? regularFileContents else {
                throw FileAccessError(.notFound, "the contents of this member can no longer be read", path: source?.path ?? path)
            }
            try POSIX.createFile(path, contents: data, permissions: permissions ?? 0o666)
        }
        guard let written = try POSIX.status(path) else {
            throw FileAccessError(.ioFailure, "the file vanished after writing", path: path)
        }
        lock.withLock {
            self.source = Source(path: path, status: written)
            sourceMatchesContents = true
        }
    }

    /// After the tree written at `from` was moved to `to`, points lazily read members there.
    package func rebaseSources(from: String, to: String) {
        let children: [FileWrapper] = lock.withLock {
            if let path = source?.path, path == from || path.hasPrefix(from + "/") {
                source!.path = to + path.dropFirst(from.count)
            }
            return Array(self.children.values)
        }
        for child in children { child.rebaseSources(from: from, to: to) }
    }

    func updateFilenames(_ name: String) {
        let children = lock.withLock {
            storedFilename = name
            return self.children
        }
        for (key, child) in children { child.updateFilenames(key) }
    }

    /// Throws unless `name` is usable as one path component.
    static func validateName(_ name: String, in directory: String) throws {
        if name.isEmpty || name == "." || name == ".." || name.contains("/") || name.contains("\0") || name.utf8.count > 255 {
            throw FileAccessError(.invalidName, "“\(name)” is not a valid file name", path: directory)
        }
    }
}
