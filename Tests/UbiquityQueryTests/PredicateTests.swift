import Foundation
import Testing
import UbiquityClient
@testable import UbiquityQuery
import UbiquityTestSupport

/// The predicate format string language: parsing, substitution, evaluation, and clear errors.
@Suite struct PredicateTests {
    let letter: [String: Any] = [
        "kMDItemFSName": "Letter.txt", "kMDItemFSSize": 1_234, "kMDItemDisplayName": "Café Crème",
        "kMDItemFSContentChangeDate": Date(timeIntervalSinceReferenceDate: 1_000), "tags": ["work", "draft"],
        "uploaded": true, "owner": ["name": "Ada", "age": 36] as [String: Any], "nothing": NSNull(),
    ]

    func holds(_ format: String, _ arguments: Any...) -> Bool {
        NSPredicate(format: format, argumentArray: arguments).evaluate(with: letter)
    }

    @Test func comparisons() {
        #expect(holds("kMDItemFSName == 'Letter.txt'") && holds("kMDItemFSName = \"Letter.txt\""))
        #expect(!holds("kMDItemFSName == 'letter.txt'") && holds("kMDItemFSName ==[c] 'letter.txt'"))
        #expect(holds("kMDItemFSName != 'Other.txt'") && holds("kMDItemFSName <> 'Other.txt'"))
        #expect(holds("kMDItemFSSize > 1000") && holds("kMDItemFSSize >= 1234") && holds("kMDItemFSSize => 1234"))
        #expect(holds("kMDItemFSSize < 1234.5") && holds("kMDItemFSSize <= 1234") && holds("kMDItemFSSize =< 1234") && !holds("kMDItemFSSize < 1234"))
        #expect(holds("kMDItemFSSize == 1.234e3") && holds("kMDItemFSSize == 0x4d2") && holds("kMDItemFSSize > -5"))
        #expect(holds("kMDItemFSName < 'M'") && holds("kMDItemFSName >[c] 'l'"))
        #expect(holds("uploaded == YES") && holds("uploaded == TRUE") && !holds("uploaded == NO") && holds("uploaded == 1"))
        #expect(holds("missing == nil") && holds("nothing == NULL") && !holds("kMDItemFSName == nil") && holds("kMDItemFSName != NIL"))
        #expect(holds("kMDItemFSContentChangeDate > %@", Date(timeIntervalSinceReferenceDate: 999)))
        #expect(holds("kMDItemFSContentChangeDate == CAST(1000, \"NSDate\")"))
        #expect(holds("kMDItemFSSize BETWEEN {1000, 2000}") && !holds("kMDItemFSSize BETWEEN {0, 1000}"))
        #expect(holds("owner.name == 'Ada'") && holds("owner.age >= 18") && holds("owner.missing.deeper == nil"))
        #expect(NSPredicate(format: "SELF > 3").evaluate(with: 4) && NSPredicate(format: "SELF == 'x'").evaluate(with: "x"))
    }

    @Test func stringOperatorsAndOptions() {
        #expect(holds("kMDItemFSName BEGINSWITH 'Let'") && !holds("kMDItemFSName BEGINSWITH 'let'") && holds("kMDItemFSName BEGINSWITH[c] 'let'"))
        #expect(holds("kMDItemFSName ENDSWITH '.txt'") && holds("kMDItemFSName ENDSWITH[c] '.TXT'"))
        #expect(holds("kMDItemFSName CONTAINS 'tter'") && holds("kMDItemFSName CONTAINS ''"))
        #expect(!holds("kMDItemDisplayName CONTAINS 'cafe'") && holds("kMDItemDisplayName CONTAINS[cd] 'cafe'"))
        #expect(!holds("kMDItemDisplayName BEGINSWITH[c] 'cafe'") && holds("kMDItemDisplayName BEGINSWITH[d] 'Cafe'"))
        #expect(holds("kMDItemDisplayName ==[cd] 'cafe creme'"))
        #expect(holds("kMDItemFSName MATCHES 'L[a-z]+\\\\.txt'") && !holds("kMDItemFSName MATCHES 'etter'") && holds("kMDItemFSName MATCHES[c] 'l.*'"))
    }

    @Test func likeWildcards() {
        #expect(holds("kMDItemFSName LIKE '*.txt'") && holds("kMDItemFSName LIKE 'Letter.???'") && holds("kMDItemFSName LIKE '*'"))
        #expect(!holds("kMDItemFSName LIKE '*.TXT'") && holds("kMDItemFSName LIKE[c] '*.TXT'"))
        #expect(!holds("kMDItemFSName LIKE 'Letter.??'") && !holds("kMDItemFSName LIKE 'Letter'"))
        #expect(holds("kMDItemFSName LIKE 'L*t*r*.*t'") && !holds("kMDItemFSName LIKE 'L*z*'"))
        // `*suffix`, the common shape, is a test of the text's end (byte for byte, so scalar for scalar).
        for (text, pattern, expected) in [("a.txt", "*.txt", true), ("txt", "*.txt", false), (".txt", "*.txt", true), ("Café", "*é", true),
                                          ("Cafe\u{301}", "*é", false), ("a.txt.bak", "*.txt", false), ("", "*", true), ("x", "*", true)] {
            #expect(NSPredicate(format: "SELF LIKE %@", pattern).evaluate(with: text) == expected, "\(text) LIKE \(pattern)")
        }
        #expect(NSPredicate(format: "SELF LIKE 'a\\\\*b'").evaluate(with: "a*b") && !NSPredicate(format: "SELF LIKE 'a\\\\*b'").evaluate(with: "axb"))
        #expect(NSPredicate(format: "SELF LIKE[c] 'a*a'").evaluate(with: "aBa") && !NSPredicate(format: "SELF LIKE[c] 'a*a'").evaluate(with: "a"))
    }

    @Test func collectionsAndIn() {
        #expect(holds("kMDItemFSName IN {'Letter.txt', 'Other.txt'}") && !holds("kMDItemFSName IN {'Other.txt'}"))
        #expect(holds("kMDItemFSName IN %@", ["a", "Letter.txt"]) && holds("'tter' IN kMDItemFSName"))
        #expect(holds("kMDItemFSName IN[c] {'letter.TXT'}"))
        #expect(holds("tags CONTAINS 'draft'") && !holds("tags CONTAINS 'final'"))
        #expect(holds("ANY tags == 'work'") && holds("SOME tags BEGINSWITH 'dr'") && !holds("ALL tags == 'work'") && holds("NONE tags == 'final'"))
        #expect(holds("ALL tags LIKE '*r*'"))
    }

    @Test func compoundsAndPrecedence() {
        #expect(holds("kMDItemFSSize > 1000 AND kMDItemFSName LIKE '*.txt'") && holds("kMDItemFSSize > 1000 && uploaded == YES"))
        #expect(holds("kMDItemFSSize > 5000 OR kMDItemFSName LIKE '*.txt'") && holds("kMDItemFSSize > 5000 || uploaded == YES"))
        #expect(holds("NOT kMDItemFSSize > 5000") && holds("!(kMDItemFSSize > 5000)") && !holds("NOT NOT kMDItemFSSize > 5000"))
        // AND binds tighter than OR.
        #expect(holds("kMDItemFSSize > 5000 AND uploaded == NO OR kMDItemFSName == 'Letter.txt'"))
        #expect(!holds("kMDItemFSSize > 5000 AND (uploaded == NO OR kMDItemFSName == 'Letter.txt')"))
        #expect(holds("TRUEPREDICATE") && !holds("FALSEPREDICATE") && holds("((((TRUEPREDICATE))))"))
        #expect(holds("kMDItemFSName like '*.txt' and not (uploaded == no)"), "keywords in any case (keys as they are)")
        #expect(!holds("kmditemfsname LIKE '*.txt'"), "keys are case-sensitive")
    }

    @Test func substitutions() {
        #expect(holds("%K LIKE '*.txt'", "kMDItemFSName") && holds("%K LIKE %@", "kMDItemFSName", "*.txt"))
        #expect(holds("%K == %d", "kMDItemFSSize", 1234) && holds("%K > %f", "kMDItemFSSize", 1233.5) && holds("%K == %ld", "kMDItemFSSize", Int64(1234)))
        #expect(holds("%K.%K == %@", "owner", "name", "Ada") && holds("%K == %@", "owner.name", "Ada"))
        // A quoted %@ is the two characters, not a substitution.
        #expect(NSPredicate(format: "SELF == '%@'").evaluate(with: "%@"))
        let variable = NSPredicate(format: "kMDItemFSSize > $LIMIT")
        #expect(variable.evaluate(with: letter, substitutionVariables: ["LIMIT": 1000]) && !variable.evaluate(with: letter, substitutionVariables: ["LIMIT": 2000]))
        #expect(variable.withSubstitutionVariables(["LIMIT": 10]).formatString == "kMDItemFSSize > 10", "Apple's name")
        #expect(!variable.evaluate(with: letter), "an unset variable is NULL")
        // The reserved word as a key, with '#'.
        #expect(NSPredicate(format: "#IN == 1").evaluate(with: ["IN": 1]))
    }

    @Test func theFormatIsNormalisedAndReadsBack() throws {
        let cases: [(String, [Any], String)] = [
            ("%K LIKE '*.txt'", ["kMDItemFSName"], #"kMDItemFSName LIKE "*.txt""#),
            ("a == 1 and (b contains[cd] 'x' or not c = nil)", [], #"a == 1 AND (b CONTAINS[cd] "x" OR NOT c == nil)"#),
            ("any tags in {'a', \"b\"}", [], #"ANY tags IN {"a", "b"}"#),
            ("d > %@", [Date(timeIntervalSinceReferenceDate: 86_400)], #"d > CAST(86400, "NSDate")"#),
            ("SELF MATCHES 'a\\\\d'", [], #"SELF MATCHES "a\\d""#),
        ]
        for (format, arguments, expected) in cases {
            let predicate = try NSPredicate(validatingFormat: format, argumentArray: arguments)
            #expect(predicate.formatString == expected)
            #expect(try NSPredicate(validatingFormat: try #require(predicate.formatString)).formatString == expected, "reads back: \(expected)")
        }
    }

    @Test func malformedAndUnsupportedPredicatesAreClearErrors() {
        let cases: [(format: String, arguments: [Any], says: String)] = [
            ("", [], "expected a value or a key"),
            ("kMDItemFSName", [], "expected a comparison operator"),
            ("kMDItemFSName LIKE", [], "expected a value or a key, found the end"),
            ("kMDItemFSName LIKE '*.txt", [], "not closed"),
            ("(a == 1", [], "expected ')'"),
            ("a == 1)", [], "expected the end"),
            ("a == 1 AND", [], "expected a value or a key"),
            ("a === 1", [], "expected a value or a key"),
            ("a ~ 1", [], "unexpected '~'"),
            ("a == ?", [], "'?' is not valid"),
            ("a ==[x] 1", [], "unknown comparison option 'x'"),
            ("%K == 1", [], "%K has no argument"),
            ("%K == 1", [42], "%K needs a key"),
            ("a == %d", ["seven"], "%d needs a whole number"),
            ("a == 1", ["extra"], "more arguments given (1) than the format uses (0)"),
            ("a == %x", [1], "%x is not a supported substitution"),
            ("a MATCHES '('", [], "is not a regular expression"),
            ("a BETWEEN {1}", [], "BETWEEN needs two bounds"),
            ("a + 1 > 2", [], "arithmetic ('+') is not supported"),
            ("SUBQUERY(x, $y, $y > 1).@count > 0", [], "SUBQUERY is not supported"),
            ("FUNCTION(a, 'x') == 1", [], "FUNCTION is not supported"),
            ("tags.@first > 1", [], "not a supported collection operator"),
            ("tags.@count.x > 1", [], "must end its key path"),
            ("AND == 1", [], "found the keyword AND"),
            ("size == 1", [], "SIZE is not supported"),
        ]
        for (format, arguments, says) in cases {
            do {
                _ = try NSPredicate(validatingFormat: format, argumentArray: arguments)
                Issue.record("\(format.debugDescription) was accepted")
            } catch let error as PredicateFormatError {
                #expect(error.description.contains(says), "\(format.debugDescription): \(error)")
                #expect(error.offset >= 0 && error.offset <= format.count)
            } catch {
                Issue.record("\(format.debugDescription): \(error)")
            }
        }
        let error = #expect(throws: PredicateFormatError.self) { try NSPredicate(validatingFormat: "name LIKE '*.txt' AND bytes >") }
        #expect(error?.offset == 29, "points at the end, where a value is missing")
    }

    @Test func collectionOperatorsAndTypeConformance() {
        #expect(holds("tags.@count == 2") && holds("%K.@count > 1", "tags") && !holds("tags.@count > 2"))
        #expect(holds("owner.@count == 1") && holds("missing.@count == 0"), "one value counts one, none zero")
        let scores: [String: Any] = ["scores": [3, 5, 10]]
        #expect(NSPredicate(format: "scores.@sum == 18 AND scores.@max == 10 AND scores.@min == 3 AND scores.@avg == 6").evaluate(with: scores))
        let document: [String: Any] = ["kMDItemContentType": "public.plain-text", "kMDItemContentTypeTree": ["public.plain-text", "public.text", "public.data"]]
        #expect(NSPredicate(format: "kMDItemContentType UTI-CONFORMS-TO 'public.text'").evaluate(with: document))
        #expect(NSPredicate(format: "kMDItemContentTypeTree UTI-CONFORMS-TO %@", "public.data").evaluate(with: document))
        #expect(!NSPredicate(format: "kMDItemContentType UTI-CONFORMS-TO 'public.image'").evaluate(with: document))
        #expect(NSPredicate(format: "kMDItemContentType UTI-EQUALS 'public.plain-text'").evaluate(with: document))
        #expect(!NSPredicate(format: "kMDItemContentType UTI-EQUALS 'public.text'").evaluate(with: document))
        #expect(NSPredicate(format: "kMDItemContentType UTI-CONFORMS-TO 'public.text'").formatString == #"kMDItemContentType UTI-CONFORMS-TO "public.text""#)
    }

    /// A format Apple accepts and these predicates do not support does not stop the program:
    /// the predicate matches nothing and says why, and a query given it does not start.
    @Test func whatIsNotSupportedIsAnErrorNotACrash() {
        let predicate = NSPredicate(format: "SUBQUERY(tags, $t, $t == 'work').@count > 0")
        #expect(!predicate.evaluate(with: letter))
        #expect(predicate.unsupportedReason?.reason == "SUBQUERY is not supported")
        #expect(NSPredicate(format: "kMDItemFSSize * 2 > 10").unsupportedReason?.isUnsupported == true)
        #expect(NSPredicate(format: "kMDItemFSSize > 10").unsupportedReason == nil)
        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.searchScopes = [URL(fileURLWithPath: NSTemporaryDirectory())]
        query.predicate = predicate
        #expect(!query.start(), "refused, with the reason in the log")
    }

    @Test func theyAreFoundationsPredicates() {
        // Apple's code compiles as it is: NSPredicate is Foundation's type, in type positions too.
        let predicate: NSPredicate = NSPredicate(format: "kMDItemFSName LIKE %@", "*.txt")
        let predicates: [NSPredicate] = [predicate, NSPredicate(value: true), NSPredicate(block: { _, _ in false })]
        #expect(predicates.map { $0.evaluate(with: ["kMDItemFSName": "a.txt"]) } == [true, true, false])
        #expect(predicates.map(\.formatString) == [#"kMDItemFSName LIKE "*.txt""#, "TRUEPREDICATE", nil])
        #expect(predicates[2].withSubstitutionVariables([:]) === predicates[2], "a block predicate comes back as it is")
        let sort: NSSortDescriptor = NSSortDescriptor(key: "size", ascending: false)
        #expect(sort.attribute == "size" && !sort.ascending && NSSortDescriptor(key: nil, ascending: true).attribute == "")
        let items: [[String: Any]] = [["size": 1], ["size": 3], [:], ["size": 2]]
        let sorted = items.sorted { [sort].orders($0, before: $1, tie: false) }.map { $0["size"] as? Int ?? 0 }
        #expect(sorted == [3, 2, 1, 0], "descending: missing values last")
    }

    @Test func valuesOfEveryKindCompare() {
        let item: [String: Any] = ["i8": Int8(3), "u64": UInt64(3), "f": Float(3), "n": NSNumber(value: 3), "url": URL(fileURLWithPath: "/a b"),
                                   "optional": Optional<String>.some("x") as Any, "absent": Optional<String>.none as Any, "data": Data([1, 2])]
        for key in ["i8", "u64", "f", "n"] { #expect(NSPredicate(format: "%K == 3", key).evaluate(with: item), "\(key)") }
        #expect(NSPredicate(format: "url == %@", URL(fileURLWithPath: "/a b")).evaluate(with: item))
        #expect(NSPredicate(format: "url ENDSWITH 'a%20b'").evaluate(with: item))
        #expect(NSPredicate(format: "optional == 'x'").evaluate(with: item) && NSPredicate(format: "absent == nil").evaluate(with: item))
        #expect(NSPredicate(format: "data == %@", Data([1, 2])).evaluate(with: item))
        #expect(!NSPredicate(format: "i8 == 'three'").evaluate(with: item) && !NSPredicate(format: "i8 < 'three'").evaluate(with: item), "different kinds never match")
    }
}
