// The GBNF grammar engine against hand-written accept / reject sets: literals, classes, negation,
// any-character, groups, every repetition form, rule references and recursion, UTF-8 split over
// pieces; and the errors a hostile or malformed grammar gets (with line and column).
#include "model/grammar/grammar.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace vkllm::grammar;

namespace {

// Whether the whole text is a sentence of the grammar, fed in one piece.
bool full_match(const Grammar& g, const std::string& text) {
    Matcher m(g);
    return m.accept(text) && m.can_end();
}

void check_sets(const std::string& gbnf, const std::vector<std::string>& good, const std::vector<std::string>& bad) {
    CAPTURE(gbnf);
    const Grammar g = Grammar::parse(gbnf);
    for (const std::string& s : good) {
        CAPTURE(s);
        CHECK(full_match(g, s));
        // One byte at a time gives the same answer.
        Matcher m(g);
        bool ok = true;
        for (char c : s) ok = ok && m.accept(std::string(1, c));
        CHECK((ok && m.can_end()));
    }
    for (const std::string& s : bad) {
        CAPTURE(s);
        CHECK(!full_match(g, s));
    }
}

uint32_t error_line(const std::string& gbnf) {
    try {
        (void)Grammar::parse(gbnf);
    } catch (const GrammarError& e) {
        return e.line();
    }
    FAIL("accepted: " << gbnf);
    return 0;
}

}  // namespace

TEST_CASE("grammar: literals, classes, any character and alternatives") {
    check_sets(R"(root ::= "yes" | "no")", {"yes", "no"}, {"", "ye", "yess", "No", "maybe"});
    check_sets(R"(root ::= [a-c] [0-9x])", {"a0", "c9", "bx"}, {"d0", "a", "ay", "a00"});
    check_sets(R"(root ::= [^"\\] .)", {"ab", "x\"", "\xc3\xa9\xe2\x82\xac"}, {"\"a", "\\a", "a"});
    check_sets("root ::= \"\\x41\\u00e9\\n\\t\\\"\"", {"A\xc3\xa9\n\t\""}, {"A\xc3\xa9\n\t"});
    check_sets(R"(root ::= [\]\-] "]")", {"]]", "-]"}, {"a]"});
}

TEST_CASE("grammar: groups and every repetition form") {
    check_sets(R"(root ::= ("ab" | "c")* "!")", {"!", "ab!", "cabc!"}, {"a!", "abab", ""});
    check_sets(R"(root ::= "a"+ "b"?)", {"a", "aaa", "aab"}, {"", "b", "abb"});
    check_sets(R"(root ::= "ab"+)", {"ab", "abab"}, {"abb", "a"});  // a literal repeats whole
    check_sets(R"(root ::= [0-9]{3})", {"123"}, {"12", "1234"});
    check_sets(R"(root ::= [0-9]{2,})", {"12", "12345"}, {"1"});
    check_sets(R"(root ::= [0-9]{1,3} "x")", {"1x", "123x"}, {"x", "1234x"});
    check_sets(R"(root ::= "a"{0,2})", {"", "a", "aa"}, {"aaa"});
}

TEST_CASE("grammar: rules, recursion, comments and line continuation") {
    const std::string json_like = R"(
# a tiny JSON subset
root   ::= value
value  ::= object | array | string | number
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws (
             value ws ("," ws value ws)*
           )? "]"
string ::= "\"" [a-z]* "\""
number ::= "-"? [0-9]+
ws     ::= [ \t\n]*  # optional whitespace
)";
    check_sets(json_like, {"1", "-12", "\"ab\"", "[]", "[1, 2 ,3]", "{\"a\": [1, {\"b\": \"c\"}]}", "{ }"},
               {"", "[1,]", "{\"a\" 1}", "[1 2]", "\"A\"", "--1"});
    // A rule may continue after `|` and after `::=` on the next lines.
    check_sets("root ::=\n  \"a\" |\n  \"b\"", {"a", "b"}, {"ab"});
}

TEST_CASE("grammar: UTF-8 split over pieces; a refused piece changes nothing") {
    const Grammar g = Grammar::parse(R"(root ::= "caf" [\u00e0-\u00ff] "!")");
    Matcher m(g);
    CHECK(m.accept("caf\xc3"));  // é's first byte: U+00C0..U+00FF are still possible
    CHECK(!m.can_end());
    CHECK(!m.accept("\x80" "x"));  // U+00C0 then 'x': 'x' is refused, and so the whole piece
    CHECK(m.accept("\xa9"));
    CHECK(!m.accept("?"));
    CHECK(m.accept("!"));
    CHECK(m.can_end());
    Matcher n(g);
    CHECK(!n.accept("caf\xe2"));   // a 3-byte character is U+0800 or above: never allowed here
    CHECK(!n.accept("caf\xff"));   // not UTF-8
    CHECK(n.allows('c'));
    CHECK(!n.allows('x'));
}

TEST_CASE("grammar: malformed and hostile grammars are refused with the place") {
    CHECK(error_line("root ::= \"a\"\nfoo ::= bar") == 2);  // undefined rule, named where used
    CHECK(error_line("root ::= [a-") == 1);
    CHECK(error_line("root ::= \"abc") == 1);
    CHECK(error_line("root ::= (\"a\"") == 1);
    CHECK(error_line("root ::= \"a\"\n\nx ::= \"\\q\"") == 3);
    CHECK(error_line("root ::= [z-a]") == 1);
    CHECK(error_line("root ::= \"a\"{3,1}") == 1);
    CHECK(error_line("root ::= \"a\"{5000}") == 1);
    CHECK(error_line("root ::= \"a\"\nroot ::= \"b\"") == 2);
    CHECK(error_line("root = \"a\"") == 1);
    CHECK(error_line("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"") > 0);  // left recursion
    CHECK(error_line("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"") > 0);     // through a nullable rule
    CHECK_THROWS_WITH_AS((void)Grammar::parse("item ::= \"a\""), doctest::Contains("no 'root' rule"), GrammarError);
    // Nested repetitions refer to their groups (a bounded size), copies are counted: a grammar
    // that expands to too many elements is refused.
    CHECK_NOTHROW((void)Grammar::parse("root ::= (((\"ab\"{1000}){1000}){1000}){1000}"));
    std::string bomb = "root ::=";
    for (int i = 0; i < 250; ++i) bomb.append(" [a]{1000}");
    CHECK_THROWS_WITH_AS((void)Grammar::parse(bomb), doctest::Contains("elements"), GrammarError);
    // Deeply nested groups stop at the nesting limit (no stack overflow).
    CHECK(error_line("root ::= " + std::string(100000, '(') + "\"a\"") == 1);
    // Generated rule names cannot clash with the grammar's own ('_' is not a GBNF name character).
    CHECK(error_line("root ::= (\"a\") root-1") == 1);  // root-1 is undefined, not the group
    CHECK_NOTHROW((void)Grammar::parse("root ::= (\"a\") root-1\nroot-1 ::= \"b\""));
    // Right recursion is fine, however deep.
    const Grammar g = Grammar::parse("root ::= \"a\" root | \"b\"");
    CHECK(full_match(g, std::string(5000, 'a') + "b"));
}

TEST_CASE("grammar: strict UTF-8 in the grammar and in the text") {
    CHECK(error_line("root ::= \"\xc0\xa2\"") == 1);  // an overlong '"' in a literal
    CHECK(error_line("root ::= \"\xed\xa0\x80\"") == 1);  // a surrogate
    const Grammar g = Grammar::parse(R"(root ::= .)");
    for (const char* bad : {"\xc0\xa2", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf7\xbf\xbf\xbf"}) {
        CAPTURE(bad);
        Matcher m(g);
        CHECK(!m.accept(bad));
    }
    for (const char* good : {"\xc2\xa2", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf", "\xf0\x9f\x98\x80"}) {
        CAPTURE(good);
        CHECK(full_match(g, good));
    }
}

TEST_CASE("grammar: a chain of thousands of rules is refused by the matcher, not a stack overflow") {
    std::string gbnf = "root ::= r0\n";
    for (int i = 0; i < 5000; ++i) gbnf.append("r").append(std::to_string(i)).append(" ::= r").append(std::to_string(i + 1)).append(" \"x\"\n");
    gbnf.append("r5000 ::= \"x\"\n");
    const Grammar g = Grammar::parse(gbnf);
    CHECK_THROWS_WITH_AS(Matcher{g}, doctest::Contains("nests more than"), GrammarError);
}

TEST_CASE("grammar: a grammar too ambiguous to follow stops with an error, not a blow-up") {
    // After n x's every sequence of n pending closers (y or z) is a stack of its own: 2^n.
    const std::string gbnf = "root ::= p\np ::= \"x\" p \"y\" | \"x\" p \"z\" | \"e\"";
    const Grammar g = Grammar::parse(gbnf);
    Matcher m(g);
    bool threw = false;
    try {
        for (int i = 0; i < 64 && m.accept("x"); ++i) {
        }
    } catch (const GrammarError& e) {
        threw = std::string(e.what()).find("too ambiguous") != std::string::npos;
    }
    CHECK(threw);
}

TEST_CASE("grammar: a lazy grammar starts at the first trigger, after a skipped block") {
    constexpr size_t npos = std::string::npos;
    LazyStart anywhere{{{"<tool_call>", false}}};
    CHECK(find_trigger("", anywhere) == npos);
    CHECK(find_trigger("Let me check. <tool_ca", anywhere) == npos);
    CHECK(find_trigger("Let me check. <tool_call>\n{", anywhere) == 14);
    CHECK(find_trigger("<tool_call><tool_call>", anywhere) == 0);  // the first one

    LazyStart start{{{"{", true}, {"<|python_tag|>", false}}};
    CHECK(find_trigger("  \n{\"name\"", start) == 3);
    CHECK(find_trigger("The answer is {1}", start) == npos);  // not at the start
    CHECK(find_trigger("ok <|python_tag|>{", start) == 3);    // anywhere: the other trigger
    CHECK(find_trigger(" \n", start) == npos);

    // A reasoning block is skipped: a trigger inside it is the model thinking about a call.
    LazyStart think = anywhere;
    think.skip_open = "<think>";
    think.skip_close = "</think>";
    CHECK(find_trigger("<thi", think) == npos);  // may open the block: undecided
    CHECK(find_trigger("<think>I could use <tool_call> here", think) == npos);
    const std::string text = "<think>I could use <tool_call> here</think>\n<tool_call>{";
    CHECK(find_trigger(text, think) == text.rfind("<tool_call>"));
    CHECK(find_trigger("Sure. <tool_call>", think) == 6);  // no block: from the first byte
    think.skip_inside = true;  // the prompt opened the block
    CHECK(find_trigger("thinking <tool_call>", think) == npos);
    CHECK(find_trigger("thinking</think><tool_call>", think) == 16);
    LazyStart think_start = start;
    think_start.skip_open = "<think>";
    think_start.skip_close = "</think>";
    CHECK(find_trigger("<think>{}</think>\n\n{\"tool_calls\"", think_start) == 19);  // at the start of the answer
    CHECK(!LazyStart{}.lazy());
}
