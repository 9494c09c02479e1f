import Foundation

/// Where a container's items are, as devices and the server agree on it.
///
/// A container's folder holds a `Documents` folder (what users see as the app's documents) and
/// whatever else the app keeps there (data beside its documents, a database's change logs).
/// All of it syncs but names ending in `.nosync`. On the wire, an item at the top of
/// `Documents` has no parent (`parent` absent, as since the first version of the protocol), an
/// item at the container's top level has the parent ``topLevel``, and any other item has its
/// folder item's id. The `Documents` folder itself is not an item: it is always there.
public enum ContainerLayout {
    /// The name of the folder of the user's documents in a container.
    public static let documentsFolder = "Documents"

    /// The parent id that stands for the container's top level (outside `Documents`).
    public static let topLevel = "container"
}
