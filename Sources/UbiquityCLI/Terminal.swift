import Foundation

/// What the command prints of names others chose (accounts, devices, items): control
/// characters (C0, DEL, C1 — terminal escapes among them) and the invisible format characters
/// that reorder or hide text (bidi overrides and isolates, zero-width characters) are shown as
/// `\u{…}` instead of being obeyed by the terminal.
enum Terminal {
    /// `text`, safe to print.
    static func escaped(_ text: String) -> String {
        var shown = ""
        for scalar in text.unicodeScalars {
            if isUnsafe(scalar) {
                shown += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                shown.unicodeScalars.append(scalar)
            }
        }
        return shown
    }

    /// Whether printing `scalar` as it is could change what the terminal shows.
    static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: return true // C0, DEL, C1
        default: return scalar.properties.generalCategory == .format // bidi controls, zero-width joiners, …
        }
    }
}
