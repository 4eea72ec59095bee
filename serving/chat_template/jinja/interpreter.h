// Renders a parsed template: a tree-walking interpreter with jinja2's scoping (a `set` inside a
// for-loop iteration or a macro stays there; namespace attributes are shared) and bounded work:
// every loop iteration, macro call, expression node and byte of output costs steps, macro calls
// nest to at most max_depth, native recursion stays inside the thread's stack, and the output
// is capped. Nothing touches files, the environment or the network.
#pragma once

#include "serving/chat_template/jinja/ast.h"
#include "serving/chat_template/jinja/stack.h"
#include "serving/chat_template/jinja/value.h"

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace vkllm::chat_template::jinja {

struct RenderConfig {
    size_t max_output_bytes = 4u << 20;
    uint64_t max_steps = 10'000'000;
    uint32_t max_depth = 200;
    std::optional<std::tm> now;  // strftime_now's time; absent: the local clock
};

// Variables: one frame per for-loop iteration, macro call and the template itself.
struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
    const Value* find(const std::string& name) const;
};

// `loop` inside a for: its position in the (filtered) items.
struct LoopObj {
    std::shared_ptr<const std::vector<Value>> items;
    size_t index0 = 0;
    uint32_t depth0 = 0;
    Value recurse;  // `loop(children)` in a recursive loop; undefined otherwise
    Value last_changed;  // loop.changed(...)
    bool changed_seen = false;
};

class Interpreter {
public:
    Interpreter(const RenderConfig& config) : config_(config) {}

    // Renders `body` with `globals` (the template's variables and functions) as the outer scope.
    std::string render(const Body& body, std::shared_ptr<Scope> globals);

    // --- services for the filters, tests, methods and global functions ------------------------
    const RenderConfig& config() const { return config_; }
    void step(uint64_t n = 1);
    void check_size(size_t bytes) const;  // Error when a string would pass the output limit
    void check_items(uint64_t n) const;  // Error when a list would pass max_output_bytes / 4 items
    Value call(const Value& callee, Args& args);
    Value getattr(const Value& obj, const std::string& name);
    Value getitem(const Value& obj, const Value& key);
    Value filter(const std::string& name, const Value& input, Args& args);
    bool test(const std::string& name, const Value& input, Args& args);
    std::vector<Value> iterate(const Value& v);  // what `for x in v` visits
    // A list or namespace changed in place: only mutation can make a value contain itself, so
    // these are emptied when the render ends, which frees any such cycle.
    void note_mutation(const Value& container) { mutated_.push_back(container); }

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec_body(const Body& body, std::string& out, const std::shared_ptr<Scope>& scope);
    Flow exec(const Stmt& s, std::string& out, const std::shared_ptr<Scope>& scope);
    void exec_for(const Stmt& s, const Value& iterable, std::string& out, const std::shared_ptr<Scope>& scope,
                  uint32_t depth0);
    void exec_set(const Stmt& s, Value v, const std::shared_ptr<Scope>& scope);
    Value define_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
    Value call_macro(const Stmt& m, const std::shared_ptr<Scope>& closure, Args& args, const Value& caller);
    void write(std::string& out, const std::string& s);

    Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
    Value eval_node(const Expr& e, const std::shared_ptr<Scope>& scope);
    Value eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* block_input);
    Value eval_call(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* caller);
    void eval_args(const Expr& e, const std::shared_ptr<Scope>& scope, Args& args);
    Value binary_op(const std::string& op, const Value& a, const Value& b);
    Value slice(const Value& v, const Value& start, const Value& stop, const Value& stride);

    // Native recursion guard: template nesting may not exhaust the thread's stack.
    struct DepthGuard {
        explicit DepthGuard(Interpreter& in);
    };

    RenderConfig config_;
    uint64_t steps_ = 0;
    uint32_t macro_depth_ = 0;
    const StackBudget* stack_ = nullptr;  // of the render in progress
    std::vector<Value> mutated_;
};

// Python semantics used by the interpreter and the filters.
bool contains(const Value& container, const Value& item);  // `item in container`
// "fmt" % args; a markup format escapes its string arguments.
Value py_mod_format(Interpreter& in, const std::string& fmt, const Value& args, bool markup = false);

// Registries (filters.cpp, methods.cpp, builtins.cpp). Each returns null / nullopt when unknown.
using FilterFn = Value (*)(Interpreter&, const Value&, Args&);
using TestFn = bool (*)(Interpreter&, const Value&, Args&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
std::optional<Value> find_method(const Value& obj, const std::string& name);  // bound method
void add_builtins(Scope& globals);  // range, namespace, dict, raise_exception, strftime_now, ...

// Argument access for the built-in functions: position `pos` or keyword `name`, else `def`.
Value arg(const Args& a, size_t pos, const char* name, Value def = Value());
bool has_arg(const Args& a, size_t pos, const char* name);

}  // namespace vkllm::chat_template::jinja
