#include "serving/answer/tool_cursor.h"

#include <algorithm>

namespace vkllm::answer::detail {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
    return s;
}

size_t json_end(std::string_view s, size_t pos) {
    if (pos >= s.size() || (s[pos] != '{' && s[pos] != '[')) return std::string_view::npos;
    int depth = 0;
    bool in_string = false;
    for (size_t i = pos; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return std::string_view::npos;
}

// --- Cursor ------------------------------------------------------------------------------------

void Cursor::expect_or_end(std::string_view lit) {
    skip_ws();
    if (at_end()) return;
    if (lit.starts_with(rest())) {  // cut inside the marker
        pos_ = s_.size();
        return;
    }
    expect(lit);
}

std::string Cursor::until(std::string_view lit) {
    if (!ok_) return {};
    const size_t e = s_.find(lit, pos_);
    if (e == std::string_view::npos) {
        ok_ = false;
        return {};
    }
    std::string out(trim(s_.substr(pos_, e - pos_)));
    pos_ = e + lit.size();
    return out;
}

json Cursor::value() {
    if (!ok_) return nullptr;
    skip_ws();
    const size_t e = json_end(s_, pos_);
    if (e == std::string_view::npos) {
        ok_ = false;
        return nullptr;
    }
    json v = parse_json_bounded(s_.substr(pos_, e - pos_));
    if (v.is_discarded()) {
        ok_ = false;
        return nullptr;
    }
    pos_ = e;
    return v;
}

void Cursor::add_call(std::string name, json args, std::string id) {
    if (!ok_) return;
    if (args.is_string()) {
        json parsed = parse_json_bounded(args.get<std::string>());
        args = parsed.is_discarded() ? json(nullptr) : std::move(parsed);
    }
    if (name.empty() || !args.is_object() || !known(name)) {
        ok_ = false;
        return;
    }
    // Bare values (Qwen3-Coder's) are the model's bytes, which need not be valid UTF-8.
    calls_.push_back({std::move(id), std::move(name), args.dump(-1, ' ', false, json::error_handler_t::replace)});
}

void Cursor::add_actions(const json& list, const char* no_call) {
    if (!list.is_array()) ok_ = false;
    const size_t before = calls_.size();
    for (size_t i = 0; ok_ && i < list.size(); ++i) {
        const json& a = list[i];
        if (!a.is_object() || !a.contains("tool_name") || !a["tool_name"].is_string()) {
            ok_ = false;
            break;
        }
        const std::string name = a["tool_name"].get<std::string>();
        if (no_call && name == no_call && !known(name)) continue;
        add_call(name, a.contains("parameters") ? a["parameters"] : json::object());
    }
    if (calls_.size() == before) ok_ = false;
}

void Cursor::add_call_object(const json& obj, const char* args_key, const char* alt_key, bool args_optional) {
    if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) {
        ok_ = false;
        return;
    }
    const char* key = obj.contains(args_key) ? args_key : alt_key && obj.contains(alt_key) ? alt_key : nullptr;
    std::string id = obj.contains("id") && obj["id"].is_string() ? obj["id"].get<std::string>() : std::string();
    if (!key && !args_optional) {
        ok_ = false;
        return;
    }
    add_call(obj["name"].get<std::string>(), key ? obj[key] : json::object(), std::move(id));
}

const json* Cursor::tool_parameters(const std::string& name) const {
    if (!tools_.is_array()) return nullptr;
    for (const json& t : tools_)
        if (t.contains("function") && t["function"].value("name", "") == name && t["function"].contains("parameters"))
            return &t["function"]["parameters"];
    return nullptr;
}

// --- values between tags -----------------------------------------------------------------------

const json* resolve_local(const json& params, const json* s) {
    for (int hops = 0; s && s->is_object() && s->contains("$ref"); ++hops) {
        const json& ref = (*s)["$ref"];
        if (hops >= 16 || !ref.is_string() || !ref.get<std::string>().starts_with("#")) return nullptr;
        try {
            const json::json_pointer ptr(ref.get<std::string>().substr(1));
            s = params.contains(ptr) ? &params.at(ptr) : nullptr;
        } catch (const json::exception&) {
            return nullptr;
        }
    }
    return s;
}

ValueForm value_form(const json* params, const std::string& key) {
    // Any JSON may stand where a schema is expected (true, "string" from a careless client).
    if (!params || !params->is_object() || !params->contains("properties") || !(*params)["properties"].is_object() ||
        !(*params)["properties"].contains(key))
        return ValueForm::Unknown;
    const json* p = resolve_local(*params, &(*params)["properties"][key]);
    if (!p || !p->is_object()) return ValueForm::Unknown;
    if (p->contains("type")) {
        const json& t = (*p)["type"];
        if (t == "string" || t == json::array({"string"})) return ValueForm::Bare;
        if (t.is_array() && std::find(t.begin(), t.end(), json("string")) != t.end()) return ValueForm::Mixed;
        return ValueForm::Json;
    }
    const json values = p->contains("const") ? json::array({(*p)["const"]}) : p->value("enum", json());
    if (values.is_array() && !values.empty())
        return std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); }) ? ValueForm::Bare
                                                                                                      : ValueForm::Json;
    return ValueForm::Unknown;
}

namespace {

// JSON text, or Python's spelling of true, false and null (Qwen3-Coder's template writes them so).
json json_or_python(std::string_view text) {
    const std::string_view t = trim(text);
    if (t == "True") return true;
    if (t == "False") return false;
    if (t == "None") return nullptr;
    return parse_json_bounded(text);
}

}  // namespace

std::optional<json> tagged_value(std::string_view rest, std::string_view close, bool newlines, const json* params,
                                 const std::string& key, size_t& len) {
    const ValueForm form = value_form(params, key);
    for (size_t e = rest.find(close); e != std::string_view::npos; e = rest.find(close, e + 1)) {
        std::string_view v = rest.substr(0, e);
        if (newlines) {
            if (v.starts_with("\n")) v.remove_prefix(1);
            if (v.ends_with("\n")) v.remove_suffix(1);
        }
        len = e + close.size();
        if (form == ValueForm::Bare) return json(std::string(v));
        json j = json_or_python(v);
        if (!j.is_discarded()) return j;
        if (form != ValueForm::Json) return json(std::string(v));
    }
    return std::nullopt;
}

bool read_tagged_arg(Cursor& c, const std::string& key, std::string_view close, bool newlines, const json* params,
                     json& args) {
    const std::string_view rest = c.rest();
    size_t len = 0;
    std::optional<json> v =
        c.ok() && !key.empty() ? tagged_value(rest, close, newlines, params, key, len) : std::nullopt;
    if (!v) {
        c.fail();
        return false;
    }
    args[key] = std::move(*v);
    c.expect(rest.substr(0, len));
    c.skip_ws();
    return true;
}

}  // namespace vkllm::answer::detail
