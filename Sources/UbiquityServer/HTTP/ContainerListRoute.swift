import Hummingbird
import UbiquityProtocol

extension ContainerListResponse: ResponseEncodable {}

extension SyncServices {
    /// `GET /v1/containers`: the account's containers this device may use, by identifier — what
    /// `ubiquity devices approve` gives a web browser the keys of unless told which.
    func addContainerListRoute(to v1: RouterGroup<SyncContext>) {
        v1.get("containers") { _, context in
            let device = try context.requireDevice()
            return ContainerListResponse(containers: try await database.containers(ofAccount: device.accountId).map(\.identifier).filter { device.allows($0) }.sorted())
        }
    }
}
