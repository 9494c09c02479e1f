/// Carries a value from one isolation domain to another that becomes its only user.
///
/// A document's contents snapshot (`Data`, a `FileWrapper` tree or an app's own object) is
/// made on the main queue by `contents(forType:)` and handed to the file-access queue, which
/// alone uses it from then on — the ownership transfer UIDocument's contract describes.
/// `FileWrapper` is internally locked, so even a tree the app keeps editing is safe to share.
package struct Handoff<Value>: @unchecked Sendable {
    package let value: Value
    package init(value: Value) { self.value = value }
}
