import CUbiquitySystem
import Foundation
import Logging
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync
#if canImport(Glibc)
import Glibc
#endif

// The placeholders that list items not downloaded (`.NAME.icloud`): written and removed as a
// round brings the folder in step, and found on disk when a container is opened.
extension Materialiser {
    /// Lists `wanted` as placeholders and removes the placeholders of `unwanted` items
    /// (nil: every placeholder not wanted). Returns the items whose placeholder could not be
    /// written yet (their folder is not there).
    func writePlaceholders(_ wanted: [String: UbiquityPlaceholder], unwanted: Set<String>?, in sync: isolated ContainerSync) throws -> Set<String> {
        let stale = unwanted.map { unwanted in
            unwanted.union(wanted.values.map(\.item)).flatMap { placeholders.paths(ofItem: $0) }.filter { wanted[$0] == nil }
        } ?? placeholders.byPath.keys.filter { wanted[$0] == nil }
        for path in stale {
            guard let placeholder = placeholders[path] else { continue }
            do {
                try FileManager.default.removeItem(at: sync.root.appendingPathComponent(path))
            } catch CocoaError.fileNoSuchFile {
                // removed already
            } catch {
                sync.logger.warning("cannot remove a placeholder", metadata: ["path": "\(path)", "error": "\(error)", "item": "\(placeholder.item)"])
                continue
            }
            placeholders[path] = nil
        }
        var waiting = Set<String>()
        for (path, placeholder) in wanted where placeholders[path] != placeholder {
            let folder = sync.root.appendingPathComponent(LocalContents.folder(of: path))
            // A local file of that name (made meanwhile) wins the name; the item is listed once the server settles it.
            if FileManager.default.fileExists(atPath: folder.appendingPathComponent(placeholder.name).path) { continue }
            guard FileManager.default.fileExists(atPath: folder.path) else {
                waiting.insert(placeholder.item) // its folder comes first
                continue
            }
            try placeholder.write(in: folder)
            placeholders[path] = placeholder
        }
        return waiting
    }

    /// The placeholders in `folder` and its subfolders (not in packages), by path relative to it.
    static func placeholdersOnDisk(in folder: URL, packageExtensions: Set<String>, border: SyncBorder = SyncBorder()) -> [String: UbiquityPlaceholder] {
        let scanner = LocalScanner(root: folder, packageExtensions: packageExtensions)
        var found: [String: UbiquityPlaceholder] = [:]
        func walk(_ relative: String) {
            let url = relative.isEmpty ? folder : folder.appendingPathComponent(relative)
            for name in (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? [] { // unreadable: the scan reports it
                let path = relative.isEmpty ? name : relative + "/" + name
                guard border.includes(UbiquityPlaceholder.itemName(ofPlaceholder: name).map { relative.isEmpty ? $0 : relative + "/" + $0 } ?? path) else { continue }
                if let itemName = UbiquityPlaceholder.itemName(ofPlaceholder: name) {
                    found[path] = UbiquityPlaceholder.read(for: url.appendingPathComponent(itemName)) ?? UbiquityPlaceholder(name: itemName, item: "", size: nil)
                } else if !LocalScanner.isExcluded(name), !scanner.isPackage(name), scanner.fingerprint(of: path)?.kind == .directory {
                    walk(path)
                }
            }
        }
        walk("")
        return found
    }
}
