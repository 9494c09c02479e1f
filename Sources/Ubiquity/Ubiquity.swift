// The one module an app imports: the whole public API of Ubiquity's layers.
@_exported import UbiquityClient
@_exported import UbiquityCoordination
@_exported import UbiquityDocument
@_exported import UbiquityFiles
@_exported import UbiquityQuery
