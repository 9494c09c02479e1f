import Foundation
import Testing
@testable import UbiquityObjectStore

/// Signature V4 against AWS's published examples: the SigV4 test suite (service `service`,
/// 2015-08-30) and the S3 API reference's header-signing examples (2013-05-24). Each expected
/// signature is AWS's; a signer off by one byte anywhere in the canonical request fails them.
@Suite struct SignatureV4Tests {
    /// The test suite's credentials and time.
    let suite = SignatureV4(credentials: ObjectStoreCredentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                            region: "us-east-1", service: "service")
    let suiteDate = Date(timeIntervalSince1970: 1_440_938_160) // 2015-08-30T12:36:00Z
    /// The S3 reference's credentials and time.
    let s3 = SignatureV4(credentials: ObjectStoreCredentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                         region: "us-east-1")
    let s3Date = Date(timeIntervalSince1970: 1_369_353_600) // 2013-05-24T00:00:00Z
    let s3Host = ("host", "examplebucket.s3.amazonaws.com")

    @Test func theTestSuitesVectors() {
        let host = ("host", "example.amazonaws.com")
        // get-vanilla
        let vanilla = suite.sign(method: "GET", path: "/", headers: [host], payloadHash: SignatureV4.emptyPayloadHash, date: suiteDate)
        #expect(vanilla.signature == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        #expect(vanilla.headers.first?.value == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        #expect(vanilla.headers.contains { $0.name == "x-amz-date" && $0.value == "20150830T123600Z" })
        // get-vanilla-query-order-key-case: parameters sorted before signing.
        let ordered = suite.sign(method: "GET", path: "/", query: [("Param2", "value2"), ("Param1", "value1")], headers: [host],
                                 payloadHash: SignatureV4.emptyPayloadHash, date: suiteDate)
        #expect(ordered.signature == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        // get-utf8: the path's UTF-8 bytes encoded.
        let utf8 = suite.sign(method: "GET", path: SignatureV4.encodePath("/ሴ"), headers: [host], payloadHash: SignatureV4.emptyPayloadHash, date: suiteDate)
        #expect(utf8.canonicalRequest.hasPrefix("GET\n/%E1%88%B4\n"))
        #expect(utf8.signature == "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85")
        // post-vanilla
        let post = suite.sign(method: "POST", path: "/", headers: [host], payloadHash: SignatureV4.emptyPayloadHash, date: suiteDate)
        #expect(post.signature == "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b")
    }

    @Test func theS3ReferencesGetObjectWithARange() {
        let signed = s3.sign(method: "GET", path: "/test.txt", headers: [s3Host, ("Range", "bytes=0-9")], payloadHash: SignatureV4.emptyPayloadHash, date: s3Date)
        #expect(signed.canonicalRequest == """
            GET
            /test.txt

            host:examplebucket.s3.amazonaws.com
            range:bytes=0-9
            x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            x-amz-date:20130524T000000Z

            host;range;x-amz-content-sha256;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(signed.stringToSign.hasSuffix("\n7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"))
        #expect(signed.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func theS3ReferencesPutObject() {
        // The key `test$file.text` is sent and signed as `test%24file.text`.
        let payload = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072" // SHA-256 of "Welcome to Amazon S3."
        let signed = s3.sign(method: "PUT", path: SignatureV4.encodePath("/test$file.text"),
                             headers: [s3Host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")],
                             payloadHash: payload, date: s3Date)
        #expect(signed.canonicalRequest.hasPrefix("PUT\n/test%24file.text\n"))
        #expect(signed.stringToSign.hasSuffix("\n9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"))
        #expect(signed.signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    @Test func theS3ReferencesListObjects() {
        let signed = s3.sign(method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [s3Host],
                             payloadHash: SignatureV4.emptyPayloadHash, date: s3Date)
        #expect(signed.canonicalRequest.hasPrefix("GET\n/\nmax-keys=2&prefix=J\n"))
        #expect(signed.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test func encodingAndHeaderValues() {
        #expect(SignatureV4.encode("a b+c/d=é", keepingSlashes: false) == "a%20b%2Bc%2Fd%3D%C3%A9")
        #expect(SignatureV4.encodePath("/chunks/a b/~x") == "/chunks/a%20b/~x")
        #expect(SignatureV4.canonicalQuery([("b", "2"), ("a", "y"), ("a", "x"), ("delete", "")]) == "a=x&a=y&b=2&delete=")
        // Values trimmed, inner runs of spaces as one; names lowercased.
        let signed = s3.sign(method: "GET", path: "/", headers: [s3Host, ("X-Amz-Meta-Note", "  two   words ")], payloadHash: SignatureV4.emptyPayloadHash, date: s3Date)
        #expect(signed.canonicalRequest.contains("\nx-amz-meta-note:two words\n"))
    }

    @Test func aSessionTokenIsSignedAndTheSecretIsNeverShown() {
        let credentials = ObjectStoreCredentials(accessKeyID: "AKID", secretAccessKey: "very-secret", sessionToken: "token-value")
        let signed = SignatureV4(credentials: credentials, region: "eu-west-1").sign(method: "GET", path: "/", headers: [("host", "h")], payloadHash: SignatureV4.emptyPayloadHash, date: s3Date)
        #expect(signed.headers.contains { $0.name == "x-amz-security-token" && $0.value == "token-value" })
        #expect(signed.canonicalRequest.contains("\nx-amz-security-token:token-value\n"))
        #expect(!"\(credentials)".contains("very-secret") && !"\(credentials)".contains("token-value"))
        #expect(!signed.headers.contains { $0.value.contains("very-secret") })
    }
}
