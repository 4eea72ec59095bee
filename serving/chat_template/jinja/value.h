// The values a template computes with, modelled on the Python objects jinja2 hands templates:
// undefined, none, bool, int, float, str, list/tuple, dict (insertion-ordered), namespace,
// callables (macros, globals, bound methods) and the loop object. Strings and containers are
// shared by reference, as in Python: copying a Value is cheap, and `list.append` through one
// reference is seen through every other.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vkllm::chat_template::jinja {

// Every parse or render failure. `line` is 0 until the innermost template node that sees the
// error fills it in; ChatTemplate turns it into a TemplateError naming the template and line.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg, int line = 0) : std::runtime_error(msg), line(line) {}
    int line;
    bool from_template = false;  // raised by the template's own raise_exception()
};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable, Loop };

class Value;
struct ListObj;
struct DictObj;
struct CallableObj;
struct LoopObj;
class Interpreter;

// Arguments of a call: positional, then keyword (in the order written).
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

class Value {
public:
    Value() = default;  // undefined
    static Value undefined(std::string hint);  // hint: the message a use of it raises
    static Value none();
    Value(bool b);
    Value(int64_t i);
    Value(int i) : Value(int64_t(i)) {}
    Value(double f);
    Value(std::string s);
    Value(const char* s) : Value(std::string(s)) {}
    // A "safe" string (markupsafe's Markup, from |safe or |escape): `markup + str` escapes the
    // str, and `markup % args` its string arguments, as in jinja2 even without autoescaping.
    static Value markup(std::string s);
    static Value list(std::vector<Value> items = {}, bool tuple = false);
    static Value generator(std::vector<Value> items);
    static Value dict();
    static Value namespace_obj();
    static Value callable(std::string name, std::function<Value(Interpreter&, Args&)> fn);
    static Value loop(std::shared_ptr<LoopObj> loop);
    // JSON nested deeper than max_depth (a hostile request) is an error, not a stack overflow.
    static Value from_json(const nlohmann::ordered_json& j, uint32_t max_depth = 128);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_float() const { return kind_ == Kind::Float; }
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_markup() const { return kind_ == Kind::String && b_; }
    bool is_list() const { return kind_ == Kind::List; }
    bool is_tuple() const;
    bool is_generator() const;
    bool is_dict() const { return kind_ == Kind::Dict; }
    bool is_namespace() const { return kind_ == Kind::Namespace; }
    bool is_callable() const { return kind_ == Kind::Callable; }
    bool is_loop() const { return kind_ == Kind::Loop; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == Kind::Bool ? int64_t(b_) : i_; }  // Int or Bool
    double as_float() const;  // any number
    const std::string& str() const { return *s_; }  // String only
    const std::shared_ptr<const std::string>& str_ptr() const { return s_; }
    ListObj& list_obj() const;
    std::vector<Value>& items() const;  // List only
    DictObj& dict_obj() const;  // Dict or Namespace
    CallableObj& callable_obj() const;
    LoopObj& loop_obj() const;
    const std::string& undefined_hint() const;

    bool truthy() const;  // Python truthiness
    std::string to_str() const;  // Python str()
    std::string repr() const;  // Python repr()
    std::string type_name() const;  // Python's type name, for messages ("dict", "NoneType")
    bool same_object(const Value& o) const;  // Python `is`

private:
    Kind kind_ = Kind::Undefined;
    bool b_ = false;
    int64_t i_ = 0;
    double f_ = 0;
    std::shared_ptr<const std::string> s_;  // String; Undefined: the hint
    std::shared_ptr<void> obj_;  // List, Dict, Namespace, Callable, Loop
};

struct ListObj {
    std::vector<Value> items;
    bool tuple = false;  // prints as (a, b)
    bool generator = false;  // what jinja2's map/select/... return: always true, no len(), not JSON
};

// A dict keeps its keys in insertion order, as Python's does; string, int and bool keys are
// hashed (int 1, float 1.0 and True are one key, as in Python).
struct DictObj {
    std::vector<std::pair<Value, Value>> items;
    std::unordered_map<std::string, size_t> index;

    const Value* find(const Value& key) const;
    void set(const Value& key, Value v);
    static std::string hash_key(const Value& key);  // throws for unhashable keys (list, dict)
};

struct CallableObj {
    std::string name;
    std::function<Value(Interpreter&, Args&)> fn;
};

// Python semantics shared by the interpreter, the filters and the methods.
bool equals(const Value& a, const Value& b);  // ==
int compare(const Value& a, const Value& b);  // <, >: -1/0/1; Error for unorderable types
std::string format_float(double f);  // Python repr(float)
std::string quote_string(const std::string& s);  // Python repr(str)
// json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent < 0: none, else the string
// `indent_str` is the unit (Python allows an int or a str).
struct JsonStyle {
    bool ensure_ascii = false;
    bool pretty = false;  // indent given
    std::string indent_unit;
    std::string item_sep = ", ", key_sep = ": ";
    bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);
std::string html_escape(const std::string& s);  // markupsafe.escape: & < > " '

// The largest text that printing a value (str, repr, tojson) may build on this thread; the
// interpreter sets it to the render's output limit, so a self-containing list cannot blow up.
void set_max_text_bytes(size_t n);
size_t max_text_bytes();

}  // namespace vkllm::chat_template::jinja
