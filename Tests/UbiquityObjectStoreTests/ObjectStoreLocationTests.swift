import Foundation
import Testing
@testable import UbiquityObjectStore

/// `--object-store URL` and where its credentials come from: what is read, what is refused and why.
@Suite struct ObjectStoreLocationTests {
    @Test func locationsAreRead() throws {
        let plain = try ObjectStoreLocation(parsing: "http://127.0.0.1:8333/ubiquity")
        #expect(plain == ObjectStoreLocation(scheme: "http", host: "127.0.0.1", port: 8333, bucket: "ubiquity"))
        #expect(plain.hostHeader == "127.0.0.1:8333" && plain.path(for: "chunks/a b") == "/ubiquity/chunks/a%20b")

        let aws = try ObjectStoreLocation(parsing: "https://s3.eu-west-1.amazonaws.com/my-bucket/prod/eu?region=eu-west-1&style=virtual")
        #expect(aws.bucket == "my-bucket" && aws.prefix == "prod/eu/" && aws.region == "eu-west-1" && aws.style == .virtual)
        #expect(aws.hostHeader == "my-bucket.s3.eu-west-1.amazonaws.com" && aws.path(for: "k") == "/k" && aws.path(for: nil) == "/")
        #expect(aws.description == "https://s3.eu-west-1.amazonaws.com/my-bucket/prod/eu?region=eu-west-1&style=virtual")
    }

    @Test func badLocationsAreRefusedWithAReason() {
        for (text, reason) in [("ftp://host/bucket", "http[s]"), ("http://host", "bucket"), ("http://host/Bad_Bucket", "bucket"),
                               ("http://key:secret@host/bucket", "credentials do not go in the URL"), ("http://host/bucket?colour=red", "unknown parameter"),
                               ("http://host/bucket?style=sideways", "path or virtual"), ("http://host/bucket?region=a/b", "region")] {
            guard case .badLocation(let why)? = catching({ try ObjectStoreLocation(parsing: text) }) else {
                Issue.record("\(text) was taken")
                continue
            }
            #expect(why.contains(reason), "\(text): \(why)")
        }
    }

    func catching(_ body: () throws -> ObjectStoreLocation) -> ObjectStoreError? {
        do { _ = try body(); return nil } catch { return error as? ObjectStoreError }
    }

    @Test func credentialsComeFromTheEnvironmentOrAPrivateFile() throws {
        let fromEnvironment = try ObjectStoreCredentials.load(environment: ["AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_SESSION_TOKEN": ""])
        #expect(fromEnvironment == ObjectStoreCredentials(accessKeyID: "AKID", secretAccessKey: "s3cr3t"))
        #expect(throws: ObjectStoreError.self) { try ObjectStoreCredentials.load(environment: ["AWS_ACCESS_KEY_ID": "AKID"]) }

        let file = NSTemporaryDirectory() + "credentials-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: file) }
        try Data("# made by hand\n[other]\naws_access_key_id = X\naws_secret_access_key = Y\n\n[default]\naws_access_key_id = AKFILE\naws_secret_access_key = from-file\n".utf8)
            .write(to: URL(fileURLWithPath: file))
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
        do {
            _ = try ObjectStoreCredentials.load(file: file)
            Issue.record("a credentials file others may read was taken")
        } catch ObjectStoreError.noCredentials(let why) {
            #expect(why.contains("chmod 600") && !why.contains("from-file"))
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        #expect(try ObjectStoreCredentials.load(file: file) == ObjectStoreCredentials(accessKeyID: "AKFILE", secretAccessKey: "from-file"))
        #expect(try ObjectStoreCredentials.load(file: file, profile: "other").accessKeyID == "X")
    }
}
