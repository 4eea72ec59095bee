// The rules of a grammar compiled from a JSON schema, and the GBNF text of JSON values: what the
// schema compiler (json_schema.cpp) shares with the parts it hands numeric bounds
// (json_schema_numbers.cpp) and patterns (json_schema_pattern.cpp) to. Internal to model/grammar/.
#pragma once

#include "model/grammar/json_schema.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkllm::grammar::detail {

using Json = nlohmann::ordered_json;

[[noreturn]] inline void refuse(const std::string& keyword, const std::string& where, const std::string& why) {
    throw SchemaError(why, keyword, where);
}

// A GBNF string literal of raw text.
std::string lit(std::string_view s);
// One character as JSON writes it inside a string.
std::string json_char(uint32_t cp);
inline std::string join(const std::vector<std::string>& v, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(sep) : "") + v[i];
    return out;
}

// The rules of one compiled grammar besides its top rule and the common ones, in the order made.
class SchemaRules {
public:
    // A name new rules must avoid (the top rule's, the caller's own rules').
    void take(const std::string& name) { taken_.insert(name); }
    // A new rule named after `hint` (its letters and digits, lowercased, '-' between; a number
    // appended when the name is taken). Throws SchemaError past kMaxRules rules.
    std::string add(const std::string& hint, std::string body);
    // The body of a rule made by add(), to fill in later (a rule that refers to itself).
    std::string& body(const std::string& name);
    // Rules made once per grammar, found by what they match ("digits-1-15"): nullptr when not made.
    const std::string* shared(const std::string& key) const;
    const std::string& share(const std::string& key, std::string name);
    // "name ::= body" lines.
    std::string text() const;

private:
    static bool reserved(const std::string& n);

    std::vector<std::pair<std::string, std::string>> rules_;
    std::set<std::string> taken_;
    std::map<std::string, int> next_suffix_;  // per base name: the next number to try
    std::map<std::string, size_t> index_;  // rule name -> place in rules_
    std::map<std::string, std::string> shared_;  // shared rules by what they match
};

}  // namespace vkllm::grammar::detail
