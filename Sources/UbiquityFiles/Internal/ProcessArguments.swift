import Foundation

/// This program's command-line arguments, for the executables' entry points.
///
/// On Linux, Swift's `CommandLine.arguments` comes out empty when a shim is preloaded into the
/// process (`LD_PRELOAD` of libfaketime, which the chaos harness uses to skew a device's
/// clock): the kernel's copy, `/proc/self/cmdline`, still has them.
package enum ProcessArguments {
    /// The arguments after the program's name.
    package static var afterProgram: [String] {
        if !CommandLine.arguments.isEmpty { return Array(CommandLine.arguments.dropFirst()) }
        guard let data = FileManager.default.contents(atPath: "/proc/self/cmdline") else { return [] }
        var words = data.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        if words.last == "" { words.removeLast() } // the list ends with a NUL
        return Array(words.dropFirst())
    }
}
