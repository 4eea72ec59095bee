// The global functions a template can call: jinja2's range, dict, namespace and joiner, and
// Hugging Face's raise_exception and strftime_now.
#include "serving/chat_template/jinja/interpreter.h"

#include <chrono>
#include <ctime>

namespace vkllm::chat_template::jinja {

namespace {

int64_t int_of(const Value& v) {
    if (!v.is_int() && !v.is_bool()) throw Error("'" + v.type_name() + "' object cannot be interpreted as an integer");
    return v.as_int();
}

Value g_range(Interpreter& in, Args& a) {
    if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) throw Error("range expected 1 to 3 integer arguments");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
        stop = int_of(a.pos[0]);
    } else {
        start = int_of(a.pos[0]);
        stop = int_of(a.pos[1]);
        if (a.pos.size() == 3) step = int_of(a.pos[2]);
    }
    if (step == 0) throw Error("range() arg 3 must not be zero");
    // The length, without overflow, charged as steps before anything is built.
    const long double len_ld = step > 0 ? (stop > start ? ((long double)stop - start + step - 1) / step : 0)
                                        : (start > stop ? ((long double)start - stop - step - 1) / -step : 0);
    const auto len = uint64_t(len_ld);
    if (len > in.config().max_steps) in.step(in.config().max_steps + 1);
    in.step(len);
    in.check_items(len);
    std::vector<Value> out;
    out.reserve(size_t(len));
    int64_t x = start;
    for (uint64_t i = 0; i < len; ++i, x += (i < len ? step : 0)) out.emplace_back(x);
    return Value::list(std::move(out));
}

// namespace(...) and dict(...): keyword arguments, or one mapping, or both.
Value mapping_from(const Args& a, Value target, const char* fn) {
    if (a.pos.size() > 1) throw Error(std::string(fn) + "() takes at most one positional argument");
    if (!a.pos.empty()) {
        const Value& src = a.pos[0];
        if (src.is_dict() || src.is_namespace()) {
            for (const auto& [k, v] : src.dict_obj().items) target.dict_obj().set(k, v);
        } else if (src.is_list()) {
            for (const Value& pair : src.items()) {
                if (!pair.is_list() || pair.items().size() != 2) throw Error(std::string(fn) + "(): expected pairs");
                target.dict_obj().set(pair.items()[0], pair.items()[1]);
            }
        } else if (!src.is_undefined()) {
            throw Error(std::string(fn) + "(): cannot build a mapping from " + src.type_name());
        }
    }
    for (const auto& [k, v] : a.kw) target.dict_obj().set(Value(k), v);
    return target;
}

Value g_namespace(Interpreter&, Args& a) { return mapping_from(a, Value::namespace_obj(), "namespace"); }
Value g_dict(Interpreter&, Args& a) { return mapping_from(a, Value::dict(), "dict"); }

Value g_raise_exception(Interpreter&, Args& a) {
    Error e(a.pos.empty() ? std::string("raise_exception() called") : a.pos[0].to_str());
    e.from_template = true;
    throw e;
}

Value g_strftime_now(Interpreter& in, Args& a) {
    if (a.pos.size() != 1 || !a.pos[0].is_string()) throw Error("strftime_now takes one format string");
    std::tm tm{};
    if (in.config().now) {
        tm = *in.config().now;
    } else {
        const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        localtime_r(&t, &tm);
    }
    const std::string& fmt = a.pos[0].str();
    if (fmt.empty()) return Value(std::string());
    // strftime gives 0 both for "too small" and for an empty result: grow a few times, then stop.
    for (size_t cap = 256 + fmt.size() * 4; cap <= (size_t(1) << 20); cap *= 4) {
        std::string buf(cap, '\0');
        const size_t n = std::strftime(buf.data(), cap, fmt.c_str(), &tm);
        if (n > 0) {
            buf.resize(n);
            return Value(std::move(buf));
        }
    }
    return Value(std::string());
}

Value g_joiner(Interpreter&, Args& a) {
    const std::string sep = arg(a, 0, "sep", Value(", ")).to_str();
    auto used = std::make_shared<bool>(false);
    return Value::callable("joiner", [sep, used](Interpreter&, Args&) {
        if (!*used) {
            *used = true;
            return Value(std::string());
        }
        return Value(sep);
    });
}

}  // namespace

void add_builtins(Scope& globals) {
    globals.vars["range"] = Value::callable("range", g_range);
    globals.vars["namespace"] = Value::callable("namespace", g_namespace);
    globals.vars["dict"] = Value::callable("dict", g_dict);
    globals.vars["raise_exception"] = Value::callable("raise_exception", g_raise_exception);
    globals.vars["strftime_now"] = Value::callable("strftime_now", g_strftime_now);
    globals.vars["joiner"] = Value::callable("joiner", g_joiner);
}

}  // namespace vkllm::chat_template::jinja
