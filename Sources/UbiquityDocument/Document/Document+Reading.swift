import Foundation
import UbiquityFiles

extension Document {
    func openDocument(completionHandler: (@Sendable (Bool) -> Void)?) {
        guard MainQueue.isCurrent else { return onMain { [self] in open(completionHandler: completionHandler) } }
        guard documentState.contains(.closed), !isOpening else {
            logger.warning("open() on a document that is already open or opening", metadata: ["document": "\(fileURL.path)"])
            completionHandler?(false)
            return
        }
        isOpening = true
        let url = fileURL
        let progress = Progress(totalUnitCount: 1)
        self.progress = progress
        updateState(inserting: .progressAvailable)
        onFileAccessQueue { [self] in
            let result = Result { try ownCoordinator.coordinate(readingItemAt: url) { try readNoting(from: $0) } }
            let date = try? POSIX.status(url.path)?.modificationDate // informative: nil if it cannot be read
            let conflicted = Self.hasUnresolvedConflicts(url)
            onMain { [self] in
                isOpening = false
                progress.completedUnitCount = 1
                switch result {
                case .success(let status):
                    resetChangeTracking()
                    fileModificationDate = date
                    fileStatus = status
                    startPresenting()
                    var state = documentState.subtracting([.closed, .progressAvailable])
                    if conflicted { state.insert(.inConflict) } else { state.remove(.inConflict) }
                    setState(state)
                    offerUserActivity()
                    completionHandler?(true)
                case .failure(let error):
                    updateState(removing: .progressAvailable)
                    handleError(readError(error, url: url), userInteractionPermitted: true)
                    completionHandler?(false)
                }
            }
        }
    }

    /// Reads the file (through ``read(from:)``, which a subclass may override), noting it as it
    /// was before the read: a change made during the read is news afterwards.
    nonisolated func readNoting(from url: URL) throws -> NodeStatus? {
        let status = try? POSIX.status(url.standardizedFileURL.path) // unreadable: every notice of a change is news
        try read(from: url)
        return status
    }

    nonisolated func readDocument(from url: URL) throws {
        let path = url.standardizedFileURL.path
        guard let status = try POSIX.status(path) else {
            throw FileAccessError(.notFound, "the document's file does not exist", path: path)
        }
        let contents: Any = status.kind == .directory ? try FileWrapper(url: url) : try POSIX.readFile(path)
        let typeName = typeRegistry.type(of: url)?.identifier
        try onMainAndWait { try load(fromContents: contents, ofType: typeName) }
    }

    func loadDefault(fromContents contents: Any, ofType typeName: String?) throws {
        throw DocumentError(.readFailed, "\(type(of: self)) does not override load(fromContents:ofType:)", url: fileURL)
    }

    func revertDocument(toContentsOf url: URL, completionHandler: (@Sendable (Bool) -> Void)?) {
        guard MainQueue.isCurrent else { return onMain { [self] in revert(toContentsOf: url, completionHandler: completionHandler) } }
        setEditingDisabled(true)
        onFileAccessQueue { [self] in
            let result = Result { try ownCoordinator.coordinate(readingItemAt: url) { try readNoting(from: $0) } }
            let date = try? POSIX.status(url.path)?.modificationDate // informative: nil if it cannot be read
            let conflicted = Self.hasUnresolvedConflicts(url)
            onMain { [self] in
                setEditingDisabled(false)
                switch result {
                case .success(let status):
                    resetChangeTracking()
                    fileModificationDate = date
                    fileStatus = status
                    updateState(inserting: conflicted ? .inConflict : [], removing: conflicted ? .closed : [.closed, .inConflict])
                    completionHandler?(true)
                case .failure(let error):
                    handleError(readError(error, url: url), userInteractionPermitted: true)
                    completionHandler?(false)
                }
            }
        }
    }

    func readError(_ error: any Error, url: URL) -> DocumentError {
        if let error = error as? DocumentError { return error }
        return DocumentError(.readFailed, "could not read “\(url.lastPathComponent)”", url: url, underlying: error)
    }
}
