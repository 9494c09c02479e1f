import Foundation
import UbiquityFiles

/// What stands in a container for an item that is not downloaded: a hidden file named
/// `.NAME.icloud` next to where the item would be (the name iOS uses, so code that looks for
/// iCloud placeholders finds them), holding the item's metadata as JSON. The agent writes and
/// removes placeholders; apps read them through ``Foundation/FileManager`` and
/// ``Foundation/URL/ubiquityResourceValues(forKeys:)``, and start a download with
/// ``Foundation/FileManager/startDownloadingUbiquitousItem(at:)`` (or a coordinated read).
public struct UbiquityPlaceholder: Codable, Sendable, Equatable {
    /// The item's name (the placeholder stands next to where it would be).
    public var name: String
    /// The item's id on the server.
    public var item: String
    /// The size of its contents, in bytes, when known.
    public var size: Int64?
    /// When it was last modified (seconds since 1970), when known.
    public var modificationDate: Double?

    /// Creates a placeholder's contents.
    public init(name: String, item: String, size: Int64?, modificationDate: Double? = nil) {
        self.name = name
        self.item = item
        self.size = size
        self.modificationDate = modificationDate
    }

    /// The placeholder's file name for an item named `name`.
    public static func fileName(for name: String) -> String { "." + name + ".icloud" }

    /// The item's name if `fileName` is a placeholder's, else nil.
    public static func itemName(ofPlaceholder fileName: String) -> String? {
        // Byte by byte: a folder walk asks this of every hidden name it meets.
        let bytes = fileName.utf8
        guard bytes.count >= ".x.icloud".utf8.count, bytes.first == UInt8(ascii: "."), bytes.suffix(7).elementsEqual(".icloud".utf8) else { return nil }
        return String(Substring(bytes.dropFirst().dropLast(7)))
    }

    /// The placeholder's URL for the item at `url`.
    public static func url(for url: URL) -> URL {
        url.deletingLastPathComponent().appendingPathComponent(fileName(for: url.lastPathComponent))
    }

    /// Reads the placeholder for the item at `url`, or nil if there is none (or it is unreadable).
    public static func read(for url: URL) -> UbiquityPlaceholder? {
        // No placeholder, or not one of ours: nil, as documented (the caller sees no item there).
        guard let data = try? Data(contentsOf: Self.url(for: url)) else { return nil }
        return try? JSONDecoder().decode(UbiquityPlaceholder.self, from: data)
    }

    /// Writes this placeholder next to where the item would be in `folder` (by safe save).
    public func write(in folder: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try SafeSave.write(try encoder.encode(self), to: folder.appendingPathComponent(Self.fileName(for: name)))
    }
}
