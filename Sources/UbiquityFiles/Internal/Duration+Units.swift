extension Duration {
    /// The duration in seconds, as a floating-point number.
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// The duration in milliseconds, to a tenth (how timings are logged and reported).
    package var inMilliseconds: Double {
        ((Double(components.seconds) * 1_000 + Double(components.attoseconds) / 1e15) * 10).rounded() / 10
    }
}
