import Foundation
import UbiquityAgentProtocol
import UbiquityCoordination
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

// Versions of an item that the server keeps and this device does not have — Apple's nonlocal
// versions (`NSFileVersion.getNonlocalVersionsOfItem(at:completionHandler:)`): listed by asking
// the server, downloaded on request into the item's version store (only the chunks this device
// lacks come over the wire).
extension ContainerSync {
    /// The server's earlier revisions of the item at `name` that can be downloaded, newest first.
    /// - Throws: ``ContainerSyncError`` for an item the agent does not know (or the server does
    ///   not), or when the server cannot be asked.
    package func remoteVersions(of name: String) async throws -> [RemoteVersion] {
        let item = try knownItem(at: name)
        var revisions: [ItemRevision]
        do { revisions = try await client.revisions(container: container, item: item) } catch let error as SyncClientError {
            throw Self.versionError(error, name: name)
        }
        if revisions.contains(where: { $0.record != nil }) {
            try await refreshCodec()
            do {
                revisions = try revisions.compactMap { revision in
                    guard let records = records(of: item) else { throw ItemRecordError(item: item, reason: "it is sealed and this device holds no key of the account") }
                    do {
                        return try records.opened(revision, item: item)
                    } catch let error as ItemRecordError where error.unheldEpoch != nil && records.passesOverUnheldConflicts {
                        return nil // (a share's revision its owner sealed with the container's keys: the owner's alone)
                    }
                }
            } catch {
                logger.error("the server's list of versions was refused", metadata: ["container": "\(container)", "error": "\(error)"])
                throw ContainerSyncError("the server's versions of \(name) are refused: \(error)", code: .downloadFailed)
            }
        }
        return revisions.filter(\.uploaded).map {
            RemoteVersion(revision: $0.revision, name: $0.name, deviceName: $0.deviceName, size: $0.size, modificationDate: $0.modificationDate,
                          originator: otherPerson($0.editor))
        }
    }

    /// Publishes the item's current revision (`FileManager.url(forPublishingUbiquitousItemAt:expiration:)`).
    /// Under Advanced Data Protection the server cannot open the file, and says so
    /// (`sealedOnDevices`): this device then seals a ``LinkManifest`` of the revision — its
    /// chunks' own keys, never the container's — under a new random key, which it returns as
    /// the link's fragment (`k=…`: the part of the address browsers never send).
    /// - Throws: ``ContainerSyncError``: the item is unknown, not a flat file, not uploaded,
    ///   changed on the server since this device last looked, or the server cannot be reached.
    package func publish(_ name: String) async throws -> (link: PublishedLink, fragment: String?) {
        let item = try knownItem(at: name)
        do {
            do {
                return (try await client.publish(container: container, item: item), nil)
            } catch let error as SyncClientError where error.code == "sealedOnDevices" {
                let (request, key) = try await sealedLink(of: item, name: name)
                return (try await client.publish(container: container, item: item, request: request), LinkManifest.fragment(key: key))
            }
        } catch let error as SyncClientError {
            switch error.status {
            case 404: throw ContainerSyncError("the server has no such item: \(name)", code: .unknownItem)
            case 409: throw ContainerSyncError("cannot publish \(name): \(error)", code: .badRequest) // a package, not uploaded yet, changed since
            default: throw ContainerSyncError("cannot publish \(name): \(error)", code: .downloadFailed)
            }
        }
    }

    /// The request that publishes `item`'s revision as this device knows it with a manifest
    /// sealed for the link's page, and the manifest's key.
    private func sealedLink(of item: String, name: String) async throws -> (PublishRequest, [UInt8]) {
        guard let revision = state.persisted.remote[item]?.revision else {
            throw ContainerSyncError("\(name) has not reached the server yet: publish it once it is uploaded", code: .badRequest)
        }
        try await refreshCodec()
        guard let records = records(of: item), !codec.heldKeys.isEmpty else {
            throw ContainerSyncError("cannot publish \(name): this device holds no key of the account", code: .badRequest)
        }
        var contents = try await client.revision(container: container, item: item, revision: revision)
        do {
            contents = try records.opened(contents, item: item) // the record checked: name, size, date and chunk list its device sealed
        } catch {
            logger.error("the server's revision of a file to publish was refused", metadata: ["container": "\(container)", "error": "\(error)"])
            throw ContainerSyncError("cannot publish \(name): the server's revision of it is refused: \(error)", code: .downloadFailed)
        }
        guard contents.kind == .file, contents.uploaded else {
            throw ContainerSyncError("cannot publish \(name): only a flat file that has reached the server can be published", code: .badRequest)
        }
        let chunks = contents.manifest.chunks ?? []
        let bases = try await client.chunkBases(chunks.map(\.hash))
        let manifest = try LinkManifest(name: contents.name, size: contents.size, modificationDate: contents.modificationDate,
                                        chunks: chunks.map { ($0.hash, $0.size) }, bases: bases, epochKeys: codec.heldKeys)
        let (body, key) = try manifest.sealed()
        return (PublishRequest(revision: revision, manifest: body), key)
    }

    /// Downloads one of the item's earlier revisions into its version store, where its
    /// nonlocal `NSFileVersion`'s `url` points; returns at once if it is there already.
    /// - Throws: ``ContainerSyncError``: the item or revision is unknown, the revision is not
    ///   uploaded, or the download failed (nothing is left half-written).
    package func downloadRemoteVersion(of name: String, revision: String) async throws {
        let item = try knownItem(at: name)
        let url = root.appendingPathComponent(name)
        let destination: URL
        do { destination = try NSFileVersion.nonlocalContentsURL(ofItemAt: url, revision: revision) } catch {
            throw ContainerSyncError("\(name) keeps no versions: \(error)", code: .badRequest)
        }
        guard !FileManager.default.fileExists(atPath: destination.path) else { return }
        try await refreshCodec() // (its chunks may be sealed)
        var contents: RevisionContentsResponse
        do { contents = try await client.revision(container: container, item: item, revision: revision) } catch let error as SyncClientError {
            throw Self.versionError(error, name: name)
        }
        if contents.record != nil {
            do {
                guard let records = records(of: item) else { throw ItemRecordError(item: item, reason: "it is sealed and this device holds no key of the account") }
                contents = try records.opened(contents, item: item)
            } catch {
                logger.error("a version from the server was refused", metadata: ["container": "\(container)", "error": "\(error)"])
                throw ContainerSyncError("that version of \(name) is refused: \(error)", code: .downloadFailed)
            }
        }
        guard contents.uploaded else {
            throw ContainerSyncError("that version of \(name) is not uploaded yet by its device", code: .downloadFailed)
        }
        let staged = try await materialiser.stage(LocalContents.members(contents.manifest, kind: contents.kind), kind: contents.kind, of: item, name: name,
                                                  reusing: files[name], in: self)
        defer { materialiser.removeStaged(staged, in: self) }
        let record = NonlocalVersionRecord(revision: revision, name: contents.name, savingComputer: contents.deviceName,
                                           modificationDate: Date(timeIntervalSince1970: contents.modificationDate), size: contents.size,
                                           originator: otherPerson(contents.editor))
        do {
            try await coordinated { try NSFileVersion.storeNonlocalVersion(ofItemAt: url, contentsAt: staged, record: record) }
        } catch {
            throw ContainerSyncError("cannot keep the downloaded version of \(name): \(error)", code: .downloadFailed)
        }
        logger.info("downloaded a version from the server", metadata: ["item": "\(name)", "revision": "\(revision)"])
    }

    /// The id of the item at `name`, downloaded or not.
    private func knownItem(at name: String) throws -> String {
        guard let item = item(at: name) else { throw ContainerSyncError("\(name) is not an item of \(container)", code: .unknownItem) }
        return item
    }

    /// What the agent answers for the server's refusal.
    private static func versionError(_ error: SyncClientError, name: String) -> ContainerSyncError {
        if error.status == 404 { return ContainerSyncError("the server has no such item or version: \(name)", code: .unknownItem) }
        return ContainerSyncError("cannot ask the server for versions of \(name): \(error)", code: .downloadFailed)
    }

    /// The records `item`'s revisions open with: an owned sealed share's (which open what the
    /// container's keys sealed too), else the container's (or the share's, on a share's engine).
    func records(of item: String) -> ItemRecords? {
        ownedShareRoot(of: item, parent: state.visible(item)?.parent).flatMap { ownedShareCodecs[$0]?.records } ?? codec.records
    }
}
