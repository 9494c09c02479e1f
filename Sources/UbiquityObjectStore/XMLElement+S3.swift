import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// An element of an S3 answer (`ListBucketResult`, `DeleteResult`, `Error`): its name, text
/// and children — read with Foundation's XML parser, namespaces dropped.
struct S3XML: Sendable {
    var name: String
    var text = ""
    var children: [S3XML] = []

    /// The first child named `name`.
    subscript(_ name: String) -> S3XML? { children.first { $0.name == name } }
    /// Every child named `name`.
    func all(_ name: String) -> [S3XML] { children.filter { $0.name == name } }

    /// The document's root element, or a clear error.
    static func parse(_ data: Data) throws -> S3XML {
        let parser = XMLParser(data: data)
        let builder = Builder()
        parser.delegate = builder
        parser.shouldProcessNamespaces = true
        parser.shouldResolveExternalEntities = false
        guard parser.parse(), let root = builder.root else {
            throw ObjectStoreError.badResponse("an XML answer that does not parse (\(data.count) bytes)")
        }
        return root
    }

    /// The XML text of `value` (`&`, `<`, `>`, quotes escaped).
    static func escaped(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(character)
            }
        }
        return out
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [S3XML] = []
        var root: S3XML?

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            stack.append(S3XML(name: elementName))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            guard let element = stack.popLast() else { return }
            if stack.isEmpty { root = element } else { stack[stack.count - 1].children.append(element) }
        }
    }
}
