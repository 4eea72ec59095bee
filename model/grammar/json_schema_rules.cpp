#include "model/grammar/json_schema_rules.h"

#include "model/grammar/grammar.h"
#include "model/tokenizer/utf8.h"

#include <fmt/format.h>

#include <cctype>

namespace vkllm::grammar::detail {

std::string lit(std::string_view s) {
    std::string out = "\"";
    for (const char ch : s) {
        const auto c = uint8_t(ch);
        if (c == '"' || c == '\\')
            out += '\\', out += ch;
        else if (c < 0x20 || c == 0x7f)
            out += fmt::format("\\x{:02X}", c);
        else
            out += ch;
    }
    return out + "\"";
}

std::string json_char(uint32_t cp) {
    switch (cp) {
        case '"': return lit("\\\"");
        case '\\': return lit("\\\\");
        case '\n': return lit("\\n");
        case '\r': return lit("\\r");
        case '\t': return lit("\\t");
        case '\b': return lit("\\b");
        case '\f': return lit("\\f");
        default: break;
    }
    if (cp < 0x20) return lit(fmt::format("\\u{:04x}", cp));
    std::string u8;
    utf8::append(u8, cp);
    return lit(u8);
}

std::string SchemaRules::add(const std::string& hint, std::string body) {
    std::string base;
    for (const char c : hint)
        if (std::isalnum(uint8_t(c)))
            base += char(std::tolower(uint8_t(c)));
        else if (!base.empty() && base.back() != '-')
            base += '-';
    while (!base.empty() && base.back() == '-') base.pop_back();
    if (base.empty() || std::isdigit(uint8_t(base[0]))) base = "s" + base;
    if (base.size() > 40) base.resize(40);
    if (rules_.size() >= kMaxRules)
        refuse("", "", fmt::format("the schema needs more than {} grammar rules", kMaxRules));
    std::string name = base;
    for (int& next = next_suffix_[base]; taken_.count(name) || reserved(name);)
        name = fmt::format("{}-{}", base, next++);
    taken_.insert(name);
    index_[name] = rules_.size();
    rules_.emplace_back(name, std::move(body));
    return name;
}

bool SchemaRules::reserved(const std::string& n) {
    return n == "root" || n == "space" || n == "char" || n == "char-cp" || n == "string" || n == "integer" ||
           n == "number" || n == "boolean" || n == "null" || n == "value" || n == "object" || n == "array";
}

std::string& SchemaRules::body(const std::string& name) { return rules_.at(index_.at(name)).second; }

const std::string* SchemaRules::shared(const std::string& key) const {
    const auto it = shared_.find(key);
    return it == shared_.end() ? nullptr : &it->second;
}

const std::string& SchemaRules::share(const std::string& key, std::string name) {
    return shared_[key] = std::move(name);
}

std::string SchemaRules::text() const {
    std::string out;
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out;
}

}  // namespace vkllm::grammar::detail
