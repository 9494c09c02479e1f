import Foundation
import UbiquityCoordination
import UbiquityFiles

extension Document {
    func saveDocument(to url: URL, for saveOperation: SaveOperation, completionHandler: (@Sendable (Bool) -> Void)?) {
        guard MainQueue.isCurrent else { return onMain { [self] in save(to: url, for: saveOperation, completionHandler: completionHandler) } }
        let url = url.standardizedFileURL
        endUndoEventGroup()
        if saveOperation == .forOverwriting && documentState.contains(.closed) && !isClosing {
            let error = DocumentError(.invalidState, "a closed document cannot be saved for overwriting; open it first", url: url)
            return saveFailed(error, completionHandler)
        }
        let typeName = savingFileType ?? fileType ?? DocumentType.data
        let token = changeCountToken(for: saveOperation)
        let snapshot: (Any, [AnyHashable: Any])
        do {
            snapshot = (try contents(forType: typeName), try fileAttributesToWrite(to: url, for: saveOperation))
        } catch {
            return saveFailed(error, completionHandler)
        }
        let handoff = Handoff(value: snapshot)
        let tokenHandoff = Handoff(value: token)
        let progress = Progress(totalUnitCount: 1)
        self.progress = progress
        onFileAccessQueue { [self] in
            let result = Result {
                // A save replaces the whole file: other presenters relinquish but are not asked to
                // save (which could ask this document to save in turn).
                try ownCoordinator.coordinate(writingItemAt: url, options: .forReplacing) { url -> NodeStatus? in
                    if saveOperation == .forOverwriting { preserveVersion(of: url) }
                    try writeContents(handoff.value.0, andAttributes: handoff.value.1, safelyTo: url, for: saveOperation)
                    return try? POSIX.status(url.path) // unreadable: every notice of a change is news
                }
            }
            let date = try? POSIX.status(url.path)?.modificationDate // informative: nil if it cannot be read
            onMain { [self] in
                progress.completedUnitCount = 1
                switch result {
                case .success(let status):
                    fileURL = url
                    fileModificationDate = date
                    fileStatus = status
                    startPresenting()
                    updateChangeCount(withToken: tokenHandoff.value, for: saveOperation)
                    let opened = documentState.contains(.closed)
                    updateState(removing: [.savingError, .closed])
                    if opened { offerUserActivity() }
                    completionHandler?(true)
                case .failure(let error):
                    saveFailed(error, completionHandler)
                }
            }
        }
    }

    /// Keeps the file's present contents as a local-history version, if this type wants that.
    /// A failure is logged, not fatal: the save itself goes ahead.
    nonisolated func preserveVersion(of url: URL) {
        let type = type(of: self)
        guard type.preservesVersions else { return }
        do {
            try NSFileVersion.preserveCurrentVersion(ofItemAt: url, policy: type.versionHistoryPolicy)
        } catch {
            logger.warning("could not keep the previous version in the local history", metadata: ["document": "\(url.path)", "error": "\(error)"])
        }
    }

    func saveFailed(_ error: any Error, _ completionHandler: (@Sendable (Bool) -> Void)?) {
        updateState(inserting: .savingError)
        let documentError = (error as? DocumentError)
            ?? DocumentError(.saveFailed, "could not save “\(fileURL.lastPathComponent)”", url: fileURL, underlying: error)
        handleError(documentError, userInteractionPermitted: true)
        completionHandler?(false)
    }

    func contentsDefault(forType typeName: String) throws -> Any {
        throw DocumentError(.unsupportedContents, "\(type(of: self)) does not override contents(forType:)", url: fileURL)
    }

    func fileAttributesDefault(to url: URL, for saveOperation: SaveOperation) throws -> [AnyHashable: Any] {
        [:]
    }

    nonisolated func writeContentsSafely(
        _ contents: Any,
        andAttributes additionalFileAttributes: [AnyHashable: Any]?,
        safelyTo url: URL,
        for saveOperation: SaveOperation
    ) throws {
        let existing = try POSIX.status(url.path)
        if saveOperation == .forCreating, existing != nil {
            throw DocumentError(.fileExists, "a file already exists; saving for creating does not overwrite it", url: url)
        }
        let permissions = (additionalFileAttributes?[FileAttributeKey.posixPermissions] ?? additionalFileAttributes?[FileAttributeKey.posixPermissions.rawValue]) as? NSNumber
        let temporary = try SafeSave.replaceItem(at: url, preservingPermissions: permissions == nil, logger: logger) { temporary in
            try writeContents(contents, to: temporary, for: saveOperation, originalContentsURL: existing == nil ? nil : url)
            if let permissions { try POSIX.setPermissions(temporary.path, permissions.uint32Value & 0o7777) }
        }
        if let wrapper = contents as? FileWrapper {
            wrapper.rebaseSources(from: temporary.path, to: url.standardizedFileURL.path)
        }
    }

    nonisolated func writeContentsDefault(_ contents: Any, to url: URL, for saveOperation: SaveOperation, originalContentsURL: URL?) throws {
        switch contents {
        case let data as Data:
            try POSIX.createFile(url.path, contents: data)
        case let wrapper as FileWrapper:
            try wrapper.write(to: url, options: [], originalContentsURL: originalContentsURL)
        default:
            throw DocumentError(.unsupportedContents, "contents(forType:) returned \(type(of: contents)); return Data or FileWrapper, or override writeContents(_:to:for:originalContentsURL:)", url: url)
        }
    }

    func autosaveDocument(completionHandler: (@Sendable (Bool) -> Void)?) {
        guard MainQueue.isCurrent else { return onMain { [self] in autosave(completionHandler: completionHandler) } }
        endUndoEventGroup()
        guard hasUnsavedChanges, !documentState.contains(.closed) || isClosing else {
            completionHandler?(true)
            return
        }
        save(to: fileURL, for: .forOverwriting, completionHandler: completionHandler)
    }

    func closeDocument(completionHandler: (@Sendable (Bool) -> Void)?) {
        guard MainQueue.isCurrent else { return onMain { [self] in close(completionHandler: completionHandler) } }
        guard !documentState.contains(.closed) else {
            completionHandler?(true)
            return
        }
        isClosing = true
        autosave(completionHandler: mainQueueHandler { document, success in
            document.closeAfterSaving(success, completionHandler: completionHandler)
        })
    }

    /// Ends closing once the closing save is over.
    private func closeAfterSaving(_ success: Bool, completionHandler: (@Sendable (Bool) -> Void)?) {
        guard success else {
            isClosing = false
            completionHandler?(false)
            return
        }
        if hasUnsavedChanges {
            // Edited while the closing save ran: save again before closing.
            isClosing = false
            return close(completionHandler: completionHandler)
        }
        isClosing = false
        autosaveTask?.cancel()
        autosaveTask = nil
        stopPresenting()
        withdrawUserActivity()
        setState(.closed)
        completionHandler?(true)
    }
}
