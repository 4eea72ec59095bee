// The JSON-Schema compiler against the official JSON Schema Test Suite (Debian's
// json-schema-test-suite, draft 7, its newest draft): every group whose schema compiles must have
// its valid instances accepted and its invalid ones rejected, written compactly and pretty-printed
// (with properties in whatever order the grammar takes them: it fixes an order, JSON does not);
// groups using unsupported keywords must be refused, naming the keyword; random sentences of every
// compiled grammar must be valid for python3-jsonschema. Also hand-written cases: refusals,
// recursion, bombs.
#include "support/test_context.h"

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "model/tokenizer/utf8.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include <unistd.h>

using namespace vkllm::grammar;
using Json = nlohmann::ordered_json;

namespace {

const char* kSuiteDir = "/usr/share/json-schema-test-suite/tests/draft7";

// Feeds the JSON text of `v` to `m` (compact, or indented as json.dump(2) writes it), trying the
// orders of an object's keys until the grammar takes one.
std::optional<Matcher> feed(Matcher m, const Json& v, bool pretty, int level) {
    std::string nl, close_nl;
    if (pretty) {
        nl.assign(size_t(2 * (level + 1)) + 1, ' ');
        nl[0] = '\n';
        close_nl.assign(size_t(2 * level) + 1, ' ');
        close_nl[0] = '\n';
    }
    if (v.is_object() && !v.empty()) {
        if (!m.accept("{")) return std::nullopt;
        std::vector<std::string> keys;
        for (const auto& [k, x] : v.items()) keys.push_back(k);
        std::vector<bool> used(keys.size(), false);
        // Depth-first over orders; objects in the suite have few keys.
        std::function<std::optional<Matcher>(Matcher, size_t)> go = [&](Matcher cur, size_t done) -> std::optional<Matcher> {
            if (done == keys.size()) {
                if (!cur.accept(close_nl + "}")) return std::nullopt;
                return cur;
            }
            for (size_t i = 0; i < keys.size(); ++i) {
                if (used[i]) continue;
                Matcher next = cur;
                if (!next.accept((done ? "," : "") + nl + Json(keys[i]).dump() + (pretty ? ": " : ":"))) continue;
                auto after = feed(next, v.at(keys[i]), pretty, level + 1);
                if (!after) continue;
                used[i] = true;
                auto r = go(*after, done + 1);
                used[i] = false;
                if (r) return r;
                if (keys.size() > 6) break;  // the given order only
            }
            return std::nullopt;
        };
        return go(m, 0);
    }
    if (v.is_array() && !v.empty()) {
        if (!m.accept("[")) return std::nullopt;
        for (size_t i = 0; i < v.size(); ++i) {
            if (!m.accept((i ? "," : "") + nl)) return std::nullopt;
            auto after = feed(m, v[i], pretty, level + 1);
            if (!after) return std::nullopt;
            m = *after;
        }
        if (!m.accept(close_nl + "]")) return std::nullopt;
        return m;
    }
    if (!m.accept(v.dump())) return std::nullopt;
    return m;
}

bool accepts(const Grammar& g, const Json& v, bool pretty) {
    auto m = feed(Matcher(g), v, pretty, 0);
    return m && m->can_end();
}

}  // namespace

TEST_CASE("json schema: the official test suite (draft 7)") {
    REQUIRE_MESSAGE(std::filesystem::is_directory(kSuiteDir), "install Debian's json-schema-test-suite");
    size_t groups = 0, compiled = 0, refused = 0, tests = 0, agreed = 0;
    std::map<std::string, size_t> refused_by;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(kSuiteDir))
        if (e.path().extension() == ".json") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
        std::ifstream f(file);
        const Json suite = Json::parse(f);
        for (const Json& group : suite) {
            ++groups;
            const std::string name = std::filesystem::path(file).stem().string() + ": " + group["description"].get<std::string>();
            CAPTURE(name);
            std::string gbnf;
            try {
                gbnf = json_schema_to_gbnf(group["schema"].dump());
            } catch (const SchemaError& e) {
                ++refused;
                ++refused_by[e.keyword().empty() ? "(other)" : e.keyword()];
                continue;
            }
            ++compiled;
            const Grammar g = Grammar::parse(gbnf);
            for (const Json& t : group["tests"]) {
                const bool valid = t["valid"].get<bool>();
                for (bool pretty : {false, true}) {
                    ++tests;
                    const bool ok = accepts(g, t["data"], pretty);
                    CAPTURE(t["description"].get<std::string>());
                    CAPTURE(t["data"].dump());
                    CAPTURE(pretty);
                    CAPTURE(gbnf);
                    CHECK(ok == valid);
                    agreed += ok == valid;
                }
            }
        }
    }
    std::string by;
    for (const auto& [k, n] : refused_by) by += " " + k + "=" + std::to_string(n);
    MESSAGE("draft 7: " << groups << " groups, " << compiled << " compiled, " << refused << " refused (" << by
                        << " ); " << agreed << " of " << tests << " instance checks agree");
}

namespace {

// A random sentence of `g`: each step picks uniformly among the characters of a small alphabet the
// grammar allows next, and stops where it may end with probability 1/3 (always past 500 steps);
// nullopt when it cannot end within 800.
std::optional<std::string> sample(const Grammar& g, std::mt19937& rng) {
    static const std::vector<uint32_t> alphabet = [] {
        std::vector<uint32_t> a;
        for (uint32_t c = 0x20; c < 0x7f; ++c) a.push_back(c);
        for (uint32_t c : {0x0aU, 0xe9U, 0x4e2dU, 0x1f600U}) a.push_back(c);  // \n é 中 😀
        return a;
    }();
    Matcher m(g);
    std::string text;
    for (int step = 0; step < 800; ++step) {
        if (m.can_end() && (step > 500 || rng() % 3 == 0)) return text;
        std::vector<uint32_t> next;
        for (uint32_t c : alphabet)
            if (m.allows(c)) next.push_back(c);
        if (next.empty()) return m.can_end() ? std::optional<std::string>(text) : std::nullopt;
        std::string u8;
        vkllm::utf8::append(u8, next[rng() % next.size()]);
        REQUIRE(m.accept(u8));
        text += u8;
    }
    return std::nullopt;
}

}  // namespace

// The other direction from the suite's instances: what the grammar generates must be valid, judged
// by an independent validator (python3-jsonschema, test-only).
TEST_CASE("json schema: samples of every compiled suite grammar validate with python3-jsonschema") {
    REQUIRE_MESSAGE(std::filesystem::is_directory(kSuiteDir), "install Debian's json-schema-test-suite");
    // Python runs without the sanitizer runtime a sanitized test build preloads.
    const std::string python = "env -u LD_PRELOAD python3";
    REQUIRE_MESSAGE(std::system((python + " -c 'import jsonschema' 2>/dev/null").c_str()) == 0,
                    "install Debian's python3-jsonschema");
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(kSuiteDir))
        if (e.path().extension() == ".json") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    std::mt19937 rng(2026);
    Json out = Json::array();
    size_t samples = 0, unfinished = 0;
    for (const std::string& file : files) {
        std::ifstream f(file);
        for (const Json& group : Json::parse(f)) {
            std::optional<Grammar> g;
            try {
                g = json_schema_grammar(group["schema"].dump());
            } catch (const SchemaError&) {
                continue;
            }
            Json entry = {{"name", std::filesystem::path(file).stem().string() + ": " + group["description"].get<std::string>()},
                          {"schema", group["schema"]},
                          {"samples", Json::array()}};
            for (int i = 0; i < 8; ++i) {
                if (auto text = sample(*g, rng)) {
                    entry["samples"].push_back(*text);
                    ++samples;
                } else {
                    ++unfinished;
                }
            }
            out.push_back(std::move(entry));
        }
    }
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / fmt::format("vkllm_schema_samples_{}.json", ::getpid());
    std::ofstream(path) << out.dump();
    const std::string script = std::string(VKLLM_SOURCE_DIR) + "/tests/model/grammar/validate_schema_samples.py";
    FILE* p = ::popen(fmt::format("{} '{}' '{}' 2>&1", python, script, path.string()).c_str(), "r");
    REQUIRE(p != nullptr);
    std::string report;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) report.append(buf, n);
    const int status = ::pclose(p);
    std::filesystem::remove(path);
    MESSAGE(samples << " samples (" << unfinished << " walks that did not end in 800 steps dropped): " << report);
    CHECK(status == 0);
    CHECK(samples > out.size() * 4);  // most walks end
}

namespace {

Grammar compile(const std::string& schema) { return Grammar::parse(json_schema_to_gbnf(schema)); }

bool accepts_text(const Grammar& g, const std::string& text) {
    Matcher m(g);
    return m.accept(text) && m.can_end();
}

}  // namespace

TEST_CASE("json schema: integer bounds, every value in a window against the definition") {
    const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> cases = {
        {R"({"type":"integer","minimum":0,"maximum":100})", {0, 100}},
        {R"({"type":"integer","minimum":-37,"maximum":1234})", {-37, 1234}},
        {R"({"type":"integer","exclusiveMinimum":-5.5,"exclusiveMaximum":7})", {-5, 6}},
        {R"({"type":"integer","minimum":-1000,"maximum":-10})", {-1000, -10}},
        {R"({"type":"integer","minimum":99,"maximum":1001})", {99, 1001}},
        {R"({"type":"integer","minimum":7,"maximum":7})", {7, 7}},
        {R"({"type":"integer","minimum":15})", {15, INT64_MAX}},
        {R"({"type":"integer","maximum":-3})", {INT64_MIN, -3}},
    };
    for (const auto& [schema, range] : cases) {
        CAPTURE(schema);
        const Grammar g = compile(schema);
        for (int64_t v = -1500; v <= 1500; ++v) {
            CAPTURE(v);
            CHECK(accepts_text(g, std::to_string(v)) == (v >= range.first && v <= range.second));
        }
        CHECK(!accepts_text(g, "007"));
        CHECK(!accepts_text(g, "-0"));
    }
}

TEST_CASE("json schema: number bounds, every decimal in a grid against the definition") {
    struct Case {
        const char* schema;
        double lo, hi;
        bool lo_strict, hi_strict;
    };
    constexpr double kInf = std::numeric_limits<double>::infinity();
    const std::vector<Case> cases = {
        {R"({"type":"number","minimum":0,"maximum":1})", 0, 1, false, false},
        {R"({"type":"number","minimum":0,"maximum":2})", 0, 2, false, false},
        {R"({"type":"number","exclusiveMinimum":0})", 0, kInf, true, false},
        {R"({"type":"number","minimum":-90,"maximum":90})", -90, 90, false, false},
        {R"({"type":"number","minimum":-1.25,"exclusiveMaximum":3.5})", -1.25, 3.5, false, true},
        {R"({"type":"number","exclusiveMinimum":0.05,"maximum":0.75})", 0.05, 0.75, true, false},
        {R"({"type":"number","maximum":-0.5})", -kInf, -0.5, false, false},
        {R"({"type":"number","exclusiveMaximum":0})", -kInf, 0, false, true},
        {R"({"type":"number","minimum":2.5,"maximum":2.5})", 2.5, 2.5, false, false},
        {R"({"type":"number","minimum":10.1,"maximum":12})", 10.1, 12, false, false},
        {R"({"type":"number","minimum":-3,"exclusiveMinimum":-2.5,"maximum":0.3,"exclusiveMaximum":1})", -2.5, 0.3, true, false},
    };
    // Every decimal with up to 3 fraction digits in [-100, 100] stepping 0.05, plus fraction forms.
    std::vector<std::string> texts;
    for (int i = -2000; i <= 2000; ++i) {
        const int v = i * 5;  // thousandths
        const int a = std::abs(v);
        std::string f = a % 1000 ? fmt::format(".{:03d}", a % 1000) : std::string();
        while (!f.empty() && f.back() == '0') f.pop_back();
        texts.push_back(fmt::format("{}{}{}", v < 0 ? "-" : "", a / 1000, f));
    }
    for (const char* t : {"0.0", "1.0", "1.000", "0.050", "0.0501", "0.0499", "0.7500", "0.75001", "2.50", "10.10",
                          "10.09999", "12.0", "12.0001", "3.4999", "3.5", "-1.25", "-1.2500", "-1.2501", "0.3", "0.30001",
                          "-0.5", "-0.50", "-0.4999", "-2.5", "-2.4999", "-0.0001", "0.0001", "90.0", "90.01", "-90.01"})
        texts.push_back(t);
    for (const Case& c : cases) {
        CAPTURE(c.schema);
        const Grammar g = compile(c.schema);
        for (const std::string& t : texts) {
            CAPTURE(t);
            const double x = std::stod(t);
            const bool in = (c.lo_strict ? x > c.lo : x >= c.lo) && (c.hi_strict ? x < c.hi : x <= c.hi);
            // -0 is 0 but written with a sign: the grammar writes 0 unsigned.
            if (t == "-0") continue;
            CHECK(accepts_text(g, t) == in);
        }
        CHECK(!accepts_text(g, "007"));
        CHECK(!accepts_text(g, "1e0"));  // bounded numbers are written without an exponent
    }
    // At most 15 digits in all: a client that parses into a double sees the bound held too.
    const Grammar above_one = compile(R"({"type":"number","exclusiveMinimum":1})");
    CHECK(accepts_text(above_one, "1.00000000000001"));
    CHECK(!accepts_text(above_one, "1.0000000000000001"));  // 1.0 as a double
    const Grammar positive = compile(R"({"type":"number","exclusiveMinimum":0})");
    CHECK(accepts_text(positive, "0.000000000000001"));
    CHECK(!accepts_text(positive, "0." + std::string(30, '0') + "1"));
    const Grammar below_ten = compile(R"({"type":"number","exclusiveMaximum":10})");
    CHECK(accepts_text(below_ten, "9.9999999999999"));
    CHECK(!accepts_text(below_ten, "9.9999999999999999"));  // 10.0 as a double
    // Digit runs, and numbers with the same bounds, are shared rules: many bounded numbers in one
    // schema stay within the rule limit.
    std::string many = R"({"type":"object","properties":{)";
    for (int i = 0; i < 300; ++i) many += fmt::format("{}\"p{}\":{{\"type\":\"number\",\"minimum\":-90,\"maximum\":90.5}}", i ? "," : "", i);
    many += "}}";
    CHECK_NOTHROW(compile(many));
    // Bounds the grammar cannot hold exactly, or that leave nothing, are refused by keyword.
    CHECK_THROWS_AS(compile(R"({"type":"number","minimum":1.0000000000000002})"), SchemaError);  // 17 digits
    CHECK_THROWS_AS(compile(R"({"type":"number","minimum":1e-20})"), SchemaError);
    CHECK_THROWS_AS(compile(R"({"type":"number","minimum":3,"maximum":2})"), SchemaError);
    CHECK_THROWS_AS(compile(R"({"type":"number","exclusiveMinimum":2,"maximum":2})"), SchemaError);
}

TEST_CASE("json schema: strings, patterns and formats") {
    const Grammar len = compile(R"({"type":"string","minLength":2,"maxLength":3})");
    CHECK(!accepts_text(len, R"("a")"));
    CHECK(accepts_text(len, R"("ab")"));
    CHECK(accepts_text(len, R"("a\"c")"));  // an escape is one character
    CHECK(!accepts_text(len, R"("abcd")"));
    const Grammar phone = compile(R"({"type":"string","pattern":"^\\(\\d{3}\\) \\d{3}-\\d{4}$"})");
    CHECK(accepts_text(phone, R"("(555) 123-4567")"));
    CHECK(!accepts_text(phone, R"("555 123-4567")"));
    const Grammar unanchored = compile(R"({"type":"string","pattern":"a[bc]+"})");
    CHECK(accepts_text(unanchored, R"("xxabcbz")"));
    CHECK(!accepts_text(unanchored, R"("xxaz")"));
    const Grammar quote = compile(R"({"type":"string","pattern":"^say \"(hi|yo)\"\\.?$"})");
    CHECK(accepts_text(quote, R"("say \"hi\"")"));
    CHECK(accepts_text(quote, R"("say \"yo\".")"));
    CHECK(!accepts_text(quote, R"("say "hi"")"));
    const Grammar neg = compile(R"({"type":"string","pattern":"^[^a-c]{2}$"})");
    CHECK(accepts_text(neg, R"("xy")"));
    CHECK(accepts_text(neg, R"("\"\\")"));  // quote and backslash, escaped, are outside a-c
    CHECK(!accepts_text(neg, R"("xb")"));
    const Grammar date = compile(R"({"type":"string","format":"date"})");
    CHECK(accepts_text(date, R"("2026-11-27")"));
    CHECK(!accepts_text(date, R"("2026-13-01")"));
    const Grammar dt = compile(R"({"type":"string","format":"date-time"})");
    CHECK(accepts_text(dt, R"("2026-11-27T06:13:52Z")"));
    CHECK(accepts_text(dt, R"("2026-11-27T06:13:52.123+01:00")"));
    CHECK(!accepts_text(dt, R"("2026-11-27 06:13")"));
    const Grammar uuid = compile(R"({"type":"string","format":"uuid"})");
    CHECK(accepts_text(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
    CHECK(!accepts_text(uuid, R"("123e4567e89b12d3a456426614174000")"));
    const Grammar email = compile(R"({"type":"string","format":"email"})");
    CHECK(accepts_text(email, R"("joe.bloggs@example.com")"));
    CHECK(!accepts_text(email, R"("joe@")"));
}

TEST_CASE("json schema: objects, arrays, references and recursion") {
    const Grammar person = compile(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},"required":["name"],"additionalProperties":false})");
    CHECK(accepts_text(person, R"({"name":"a"})"));
    CHECK(accepts_text(person, R"({"name":"a","age":3,"tags":["x","y"]})"));
    CHECK(accepts_text(person, R"({"name":"a","tags":[]})"));
    CHECK(!accepts_text(person, R"({"age":3})"));
    CHECK(!accepts_text(person, R"({"name":"a","tags":["x","y","z"]})"));
    CHECK(!accepts_text(person, R"({"name":"a","other":1})"));
    CHECK(!accepts_text(person, R"({"name":"a",})"));
    // Additional keys may not spell a named one again, however written.
    const Grammar open = compile(R"({"type":"object","properties":{"id":{"type":"integer"}}})");
    CHECK(accepts_text(open, R"({"id":1,"idx":"s"})"));
    CHECK(accepts_text(open, R"({"i":true})"));
    CHECK(!accepts_text(open, R"({"id":1,"id":"s"})"));
    CHECK(!accepts_text(open, R"({"id":1,"\u0069d":"s"})"));
    // A tree through a recursive reference.
    const Grammar tree = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},
        "$ref":"#/$defs/node"})");
    CHECK(accepts_text(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
    CHECK(!accepts_text(tree, R"({"v":1,"kids":[{"w":2}]})"));
    // Tuples: draft 7's items list and 2020's prefixItems.
    const Grammar pair = compile(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":2})");
    CHECK(accepts_text(pair, R"(["a",1])"));
    CHECK(!accepts_text(pair, R"(["a"])"));
    CHECK(!accepts_text(pair, R"(["a",1,2])"));
    // Pretty-printed text is accepted; compact too.
    CHECK(accepts_text(person, "{\n  \"name\": \"a\",\n  \"tags\": [\n    \"x\"\n  ]\n}"));
    // json_object: any object, nothing else.
    const Grammar any = Grammar::parse(json_object_gbnf());
    CHECK(accepts_text(any, R"({"a":[1,{"b":null}],"c":"d"})"));
    CHECK(!accepts_text(any, R"([1])"));
    CHECK(!accepts_text(any, R"("s")"));
}

TEST_CASE("json schema: unsupported keywords, bad schemas and bombs are refused by name") {
    auto refused = [](const std::string& schema, const std::string& keyword, const std::string& text) {
        CAPTURE(schema);
        try {
            json_schema_to_gbnf(schema);
            FAIL("compiled");
        } catch (const SchemaError& e) {
            CHECK(e.keyword() == keyword);
            CHECK(std::string(e.what()).find(text) != std::string::npos);
        }
    };
    refused(R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})", "not", "at /properties/a");
    refused(R"({"type":"object","patternProperties":{"^x":{}}})", "patternProperties", "not supported");
    refused(R"({"type":"number","minimum":1.5e-30})", "minimum", "plain decimal");
    refused(R"({"type":"array","uniqueItems":true})", "uniqueItems", "not supported");
    refused(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", "oneOf", "may both match");
    refused(R"({"$ref":"http://example.com/s.json"})", "$ref", "only local references");
    refused(R"({"$ref":"#/$defs/missing"})", "$ref", "points to nothing");
    refused(R"({"type":"string","format":"hostname"})", "format", "hostname");
    refused(R"J({"type":"string","pattern":"(?=x)"})J", "pattern", "lookaround");
    refused(R"J({"type":"string","pattern":"(a)\\1"})J", "pattern", "back-references");
    refused(R"({"type":"array","maxItems":100000})", "maxItems", "above");
    refused(R"({"type":"wat"})", "type", "unknown type");
    refused(R"({"type":"object",)", "", "not valid JSON");
    // Left recursion through a reference, and nesting past the depth limit.
    refused(R"({"$ref":"#"})", "", "left-recursive");
    std::string deep = R"({"type":"string"})";
    for (int i = 0; i < 100; ++i) deep = R"({"type":"array","items":)" + deep + "}";
    refused(deep, "", "deeper than");
    // oneOf with branches shown disjoint compiles.
    CHECK_NOTHROW(json_schema_to_gbnf(R"({"oneOf":[{"type":"string"},{"type":"integer"},{"const":null}]})"));
}

TEST_CASE("json schema: the review's holes stay closed") {
    // A required key outside `properties` is an additional property.
    CHECK_THROWS_AS(json_schema_to_gbnf(R"({"type":"object","required":["x"],"additionalProperties":false})"), SchemaError);
    const Grammar req = compile(R"({"type":"object","required":["x"],"additionalProperties":{"type":"string"}})");
    CHECK(!accepts_text(req, R"({"x":1})"));
    CHECK(accepts_text(req, R"({"x":"s"})"));
    // oneOf constants equal up to member order overlap.
    CHECK_THROWS_AS(json_schema_to_gbnf(R"({"oneOf":[{"const":{"a":1,"b":2}},{"const":{"b":2,"a":1}}]})"), SchemaError);
    // Lengths count code points: a surrogate pair written as escapes is refused where lengths count.
    const Grammar two = compile(R"({"type":"string","minLength":2})");
    CHECK(!accepts_text(two, R"("\ud83d\ude00")"));
    CHECK(accepts_text(two, R"("\u00e9x")"));
    // Integer bounds beyond 2^53 are exact.
    const Grammar big = compile(R"({"type":"integer","minimum":9007199254740993,"maximum":9007199254740995})");
    CHECK(!accepts_text(big, "9007199254740992"));
    CHECK(accepts_text(big, "9007199254740993"));
    CHECK(!accepts_text(big, "9007199254740996"));
    // ECMA-262's '.', '\s', '[]' and '[^]'.
    const Grammar dot = compile(R"({"type":"string","pattern":"^a.b$"})");
    CHECK(!accepts_text(dot, R"("a\rb")"));
    CHECK(!accepts_text(dot, "\"a\u2028b\""));
    CHECK(accepts_text(dot, R"("axb")"));
    const Grammar nonspace = compile(R"({"type":"string","pattern":"^\\S$"})");
    CHECK(!accepts_text(nonspace, "\"\u00a0\""));
    CHECK(!accepts_text(nonspace, "\"\u3000\""));
    CHECK(accepts_text(nonspace, R"("x")"));
    CHECK_THROWS_AS(json_schema_to_gbnf(R"({"type":"string","pattern":"[]a]"})"), SchemaError);
    const Grammar anyc = compile(R"({"type":"string","pattern":"^[^]x]$"})");
    CHECK(accepts_text(anyc, R"("ax]")"));
    CHECK(!accepts_text(anyc, R"("a")"));
    // Dates that do not exist.
    const Grammar date = compile(R"({"type":"string","format":"date"})");
    for (const char* bad : {"2023-02-30", "2023-04-31", "2023-02-29", "1900-02-29", "2023-00-10", "2023-12-32"})
        CHECK_MESSAGE(!accepts_text(date, std::string("\"") + bad + "\""), bad);
    for (const char* good : {"2024-02-29", "2000-02-29", "2023-01-31", "2023-11-30", "2023-02-28"})
        CHECK_MESSAGE(accepts_text(date, std::string("\"") + good + "\""), good);
    // A reference through a subschema with its own $id, and a pointer index no array has.
    CHECK_THROWS_AS(json_schema_to_gbnf(R"({"definitions":{"c":{"type":"integer"},"a":{"$id":"http://x/a.json",
        "definitions":{"c":{"type":"string"}},"properties":{"p":{"$ref":"#/definitions/c"}}}},
        "$ref":"#/definitions/a/properties/p"})"), SchemaError);
    CHECK_THROWS_AS(json_schema_to_gbnf(R"({"$defs":{"a":[1]},"$ref":"#/$defs/a/99999999999999999999999"})"), SchemaError);
    // A chain of 20,000 references and 50,000 properties: refused, quickly, without a stack overflow.
    std::string chain = R"({"$defs":{)";
    for (int i = 0; i < 20000; ++i) chain += fmt::format(R"("d{}":{{"$ref":"#/$defs/d{}"}},)", i, i + 1);
    chain += R"("d20000":{"type":"integer"}},"$ref":"#/$defs/d0"})";
    CHECK_THROWS_WITH_AS(json_schema_to_gbnf(chain), doctest::Contains("deeper than"), SchemaError);
    std::string wide = R"({"type":"object","properties":{)";
    for (int i = 0; i < 50000; ++i) wide += fmt::format(R"({}"p{}":true)", i ? "," : "", i);
    wide += "}}";
    CHECK_THROWS_WITH_AS(json_schema_to_gbnf(wide), doctest::Contains("grammar rules"), SchemaError);
}
