/// Text others chose (account, device and item names), made safe to print on a terminal or
/// write into a log line: control characters (C0 — newlines among them —, DEL, C1 — terminal
/// escapes among them) and the invisible format characters that reorder or hide text (bidi
/// overrides and isolates, zero-width spaces; not the joiners emoji and some scripts need) are
/// shown as `\u{…}` instead of being obeyed, and overlong text is cut, saying so. The server's
/// name policy refuses the same characters in names.
package enum SafeText {
    /// `text`, safe to print, at most about `limit` characters.
    package static func escaped(_ text: String, limit: Int = 300) -> String {
        var shown = ""
        for scalar in text.unicodeScalars {
            if shown.unicodeScalars.count >= limit {
                shown += "…"
                break
            }
            if isUnsafe(scalar) {
                shown += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                shown.unicodeScalars.append(scalar)
            }
        }
        return shown
    }

    /// Whether printing `scalar` as it is could change what a terminal or a log shows.
    package static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: return true // C0, DEL, C1
        case 0x200C, 0x200D: return false // the joiners emoji and some scripts are written with
        default: return scalar.properties.generalCategory == .format // bidi controls, zero-width spaces, …
        }
    }
}
