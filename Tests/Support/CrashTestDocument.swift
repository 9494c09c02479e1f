import Foundation
import Ubiquity

/// A document whose whole content is a function of one number, its *generation*, so that
/// after a crash a reader can tell exactly which save it sees and whether it is whole.
///
/// Flat form (`.crashflat`): a header line then 256 KiB derived from the generation.
/// Package form (`.crashpkg`): an `index` member naming the generation, and eight members
/// where member *i* changes only in generations divisible by *i + 1* (so most saves reuse
/// some members and rewrite others).
public final class CrashTestDocument: Document {
    /// The number of data members of the package form.
    public static let memberCount = 8
    /// Bytes of payload per flat document or package member.
    public static let payloadSize = 256 * 1024
    /// The flat form's type.
    public static let flatType = DocumentType(identifier: "org.ubiquity.test.crash-flat", conformsTo: [DocumentType.data], filenameExtensions: ["crashflat"])
    /// The package form's type.
    public static let packageType = DocumentType(identifier: "org.ubiquity.test.crash-package", filenameExtensions: ["crashpkg"], isPackage: true)

    /// Declares both forms' types.
    public static func registerTypes(in registry: DocumentTypeRegistry = .shared) {
        registry.register(flatType)
        registry.register(packageType)
    }

    /// The generation the document holds.
    public private(set) var generation = 0
    private var wrapper: FileWrapper?

    var isPackage: Bool { fileURL.pathExtension == "crashpkg" }

    /// Moves to a new generation (marks the document changed).
    /// - Parameter newGeneration: The generation.
    public func setGeneration(_ newGeneration: Int) {
        let old = generation
        generation = newGeneration
        if let wrapper {
            for i in 0..<Self.memberCount where Self.lastChange(member: i, generation: newGeneration) != Self.lastChange(member: i, generation: old) {
                if let member = wrapper.fileWrappers?["m\(i)"] { wrapper.removeFileWrapper(member) }
            }
            if let index = wrapper.fileWrappers?["index"] { wrapper.removeFileWrapper(index) }
        }
        updateChangeCount(.done)
    }

    /// The generation in which member `member` last changed, as of `generation`.
    public static func lastChange(member: Int, generation: Int) -> Int { generation - generation % (member + 1) }

    /// The bytes of payload number `salt` for generation `generation`.
    public static func payload(generation: Int, salt: Int) -> Data {
        var data = Data(count: payloadSize)
        data.withUnsafeMutableBytes { buffer in
            let words = buffer.bindMemory(to: UInt64.self)
            for i in words.indices { words[i] = UInt64(truncatingIfNeeded: generation &* 0x9E37_79B9 ^ salt &* 0x85EB_CA6B ^ i) }
        }
        return data
    }

    /// The complete flat-file bytes of `generation`.
    public static func flatContents(generation: Int) -> Data {
        Data("generation=\(generation)\n".utf8) + payload(generation: generation, salt: -1)
    }

    /// Builds the snapshot.
    override public func contents(forType typeName: String) throws -> Any {
        guard isPackage else { return Self.flatContents(generation: generation) }
        let root = wrapper ?? FileWrapper(directoryWithFileWrappers: [:])
        wrapper = root
        let members = root.fileWrappers ?? [:]
        if members["index"] == nil { root.addRegularFile(withContents: Data("generation=\(generation)".utf8), preferredFilename: "index") }
        for i in 0..<Self.memberCount where members["m\(i)"] == nil {
            root.addRegularFile(withContents: Self.payload(generation: Self.lastChange(member: i, generation: generation), salt: i), preferredFilename: "m\(i)")
        }
        return root
    }

    /// Loads and *verifies* the contents: throws ``CrashTestError`` unless they are exactly
    /// some generation's.
    override public func load(fromContents contents: Any, ofType typeName: String?) throws {
        if let data = contents as? Data {
            guard let newline = data.firstIndex(of: 0x0A),
                  let header = String(data: data[..<newline], encoding: .utf8), header.hasPrefix("generation="),
                  let g = Int(header.dropFirst("generation=".count)) else { throw CrashTestError("bad header") }
            guard data == Self.flatContents(generation: g) else { throw CrashTestError("flat body is not generation \(g)'s") }
            generation = g
            wrapper = nil
            return
        }
        guard let root = contents as? FileWrapper, let members = root.fileWrappers,
              let indexData = members["index"]?.regularFileContents,
              let text = String(data: indexData, encoding: .utf8), text.hasPrefix("generation="),
              let g = Int(text.dropFirst("generation=".count)) else { throw CrashTestError("bad package index") }
        guard members.count == Self.memberCount + 1 else { throw CrashTestError("package has \(members.count) members") }
        for i in 0..<Self.memberCount {
            guard members["m\(i)"]?.regularFileContents == Self.payload(generation: Self.lastChange(member: i, generation: g), salt: i) else {
                throw CrashTestError("member m\(i) is not generation \(g)'s")
            }
        }
        generation = g
        wrapper = root
    }
}

/// A crash-test document found something other than one whole generation.
public struct CrashTestError: Error, CustomStringConvertible {
    /// What was wrong.
    public var description: String
    init(_ description: String) { self.description = description }
}
