#include "serving/chat_template/jinja/interpreter.h"

#include "serving/chat_template/jinja/pystr.h"

#include <cmath>
#include <limits>

namespace vkllm::chat_template::jinja {

namespace {

[[noreturn]] void fail_undefined(const Value& v) { throw Error(v.undefined_hint()); }

[[noreturn]] void overflow() {
    throw Error("integer overflow (Python's integers are unbounded; the template's values are not)");
}
int64_t add_checked(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) overflow();
    return r;
}
int64_t sub_checked(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) overflow();
    return r;
}
int64_t mul_checked(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) overflow();
    return r;
}

int64_t floor_div(int64_t a, int64_t b) {
    if (b == -1 && a == std::numeric_limits<int64_t>::min()) overflow();
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
    if (b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

// Python's index normalisation for slices: clamp into [lower, upper].
int64_t slice_index(const Value& v, int64_t def, int64_t len, bool negative_step) {
    if (v.is_none() || v.is_undefined()) return def;
    if (!v.is_int() && !v.is_bool()) throw Error("slice indices must be integers or None");
    int64_t i = v.as_int();
    if (i < 0) {
        i += len;
        if (i < 0) i = negative_step ? -1 : 0;
    } else if (i >= len) {
        i = negative_step ? len - 1 : len;
    }
    return i;
}

}  // namespace

const Value* Scope::find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
        auto it = s->vars.find(name);
        if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
}

Interpreter::DepthGuard::DepthGuard(Interpreter& in) { in.stack_->check("template"); }

std::string Interpreter::render(const Body& body, std::shared_ptr<Scope> globals) {
    steps_ = 0;
    macro_depth_ = 0;
    const StackBudget stack;
    stack_ = &stack;
    const size_t saved_max = max_text_bytes();
    set_max_text_bytes(config_.max_output_bytes);
    struct Restore {
        size_t v;
        std::vector<Value>& mutated;
        ~Restore() {
            set_max_text_bytes(v);
            for (Value& c : mutated) {
                if (c.is_list()) c.items().clear();
                if (c.is_dict() || c.is_namespace()) {
                    c.dict_obj().items.clear();
                    c.dict_obj().index.clear();
                }
            }
            mutated.clear();
        }
    } restore{saved_max, mutated_};
    auto scope = std::make_shared<Scope>();
    scope->parent = std::move(globals);
    std::string out;
    exec_body(body, out, scope);
    return out;
}

void Interpreter::step(uint64_t n) {
    steps_ += n;
    if (steps_ > config_.max_steps)
        throw Error("the template ran more than max_steps (" + std::to_string(config_.max_steps) +
                    ") steps (an endless or huge loop?)");
}

void Interpreter::check_size(size_t bytes) const {
    if (bytes > config_.max_output_bytes)
        throw Error("a value or the output would be larger than max_output_bytes (" +
                    std::to_string(config_.max_output_bytes) + ")");
}

void Interpreter::check_items(uint64_t n) const {
    if (n > config_.max_output_bytes / 4)
        throw Error("a list would have more than " + std::to_string(config_.max_output_bytes / 4) +
                    " items (max_output_bytes / 4)");
}

void Interpreter::write(std::string& out, const std::string& s) {
    check_size(out.size() + s.size());
    step(1 + s.size() / 64);
    out += s;
}

// --- statements -------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out, const std::shared_ptr<Scope>& scope) {
    for (const StmtPtr& s : body) {
        const Flow f = exec(*s, out, scope);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out, const std::shared_ptr<Scope>& scope) {
    DepthGuard guard(*this);
    try {
        switch (s.kind) {
            case StmtKind::Text: write(out, s.text); break;
            case StmtKind::Print: write(out, eval(*s.expr, scope).to_str()); break;
            case StmtKind::If:
                for (size_t i = 0; i < s.bodies.size(); ++i) {
                    if (i < s.conds.size() && !eval(*s.conds[i], scope).truthy()) continue;
                    return exec_body(s.bodies[i], out, scope);
                }
                break;
            case StmtKind::For: exec_for(s, eval(*s.expr, scope), out, scope, 0); break;
            case StmtKind::Set: exec_set(s, eval(*s.expr, scope), scope); break;
            case StmtKind::SetBlock: {
                std::string captured;
                exec_body(s.body, captured, scope);
                Value v(std::move(captured));
                if (s.expr) v = eval_filter(*s.expr, scope, &v);
                exec_set(s, v, scope);
                break;
            }
            case StmtKind::Macro: scope->vars[s.name] = define_macro(s, scope); break;
            case StmtKind::CallBlock: {
                // `caller()` renders the block's body, with the block's parameters, in this scope.
                std::weak_ptr<Scope> weak = scope;
                const Stmt* stmt = &s;
                Value caller = Value::callable("caller", [this, stmt, weak](Interpreter&, Args& args) {
                    std::shared_ptr<Scope> closure = weak.lock();
                    if (!closure) throw Error("caller() called after its block ended");
                    return call_macro(*stmt, closure, args, Value());
                });
                write(out, eval_call(*s.expr, scope, &caller).to_str());
                break;
            }
            case StmtKind::FilterBlock: {
                std::string captured;
                exec_body(s.body, captured, scope);
                Value v(std::move(captured));
                write(out, eval_filter(*s.expr, scope, &v).to_str());
                break;
            }
            case StmtKind::Break: return Flow::Break;
            case StmtKind::Continue: return Flow::Continue;
            case StmtKind::Generation: return exec_body(s.body, out, scope);
            case StmtKind::With: {
                auto inner = std::make_shared<Scope>();
                inner->parent = scope;
                for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.conds[i], scope);
                return exec_body(s.body, out, inner);
            }
        }
    } catch (Error& e) {
        if (e.line == 0) e.line = s.line;
        throw;
    }
    return Flow::Normal;
}

std::vector<Value> Interpreter::iterate(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined: return {};
        case Kind::List: return v.items();
        case Kind::Dict: {
            std::vector<Value> keys;
            for (const auto& kv : v.dict_obj().items) keys.push_back(kv.first);
            return keys;
        }
        case Kind::String: {
            std::vector<Value> chars;
            const std::vector<uint32_t> cps = pystr::decode(v.str());
            check_items(cps.size());
            step(cps.size() / 16);
            for (uint32_t cp : cps) {
                std::string c;
                pystr::append_utf8(c, cp);
                chars.emplace_back(std::move(c));
            }
            return chars;
        }
        default: throw Error("'" + v.type_name() + "' object is not iterable");
    }
}

namespace {

void bind_targets(const Stmt& s, Scope& scope, const Value& item) {
    if (!s.tuple_target && s.targets.size() == 1) {
        scope.vars[s.targets[0]] = item;
        return;
    }
    if (!item.is_list())
        throw Error("cannot unpack a " + item.type_name() + " into " + std::to_string(s.targets.size()) + " names");
    const auto& parts = item.items();
    if (parts.size() != s.targets.size())
        throw Error(std::string(parts.size() > s.targets.size() ? "too many" : "not enough") +
                    " values to unpack (expected " + std::to_string(s.targets.size()) + ", got " +
                    std::to_string(parts.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i) scope.vars[s.targets[i]] = parts[i];
}

}  // namespace

void Interpreter::exec_for(const Stmt& s, const Value& iterable, std::string& out, const std::shared_ptr<Scope>& scope,
                           uint32_t depth0) {
    std::vector<Value> all = iterate(iterable);  // a snapshot: appending inside the loop does not extend it
    step(all.size() / 16);
    if (s.cond) {
        // `for x in xs if cond`: the condition sees the loop variables but not `loop`.
        std::vector<Value> kept;
        for (const Value& item : all) {
            step();
            auto tmp = std::make_shared<Scope>();
            tmp->parent = scope;
            bind_targets(s, *tmp, item);
            if (eval(*s.cond, tmp).truthy()) kept.push_back(item);
        }
        all = std::move(kept);
    }
    auto loop = std::make_shared<LoopObj>();
    loop->items = std::make_shared<const std::vector<Value>>(std::move(all));
    loop->depth0 = depth0;
    if (s.recursive) {
        const Stmt* stmt = &s;
        std::weak_ptr<Scope> weak = scope;
        loop->recurse = Value::callable("loop", [this, stmt, weak, depth0](Interpreter&, Args& args) {
            std::shared_ptr<Scope> outer = weak.lock();
            if (!outer) throw Error("loop() called after the loop ended");
            if (args.pos.size() != 1) throw Error("loop() takes one iterable");
            if (++macro_depth_ > config_.max_depth) throw Error("recursive loop nested too deeply");
            std::string sub;
            exec_for(*stmt, args.pos[0], sub, outer, depth0 + 1);
            --macro_depth_;
            return Value(std::move(sub));
        });
    }
    const Value loop_value = Value::loop(loop);
    const auto& items = *loop->items;
    for (size_t i = 0; i < items.size(); ++i) {
        step();
        loop->index0 = i;
        auto iter_scope = std::make_shared<Scope>();
        iter_scope->parent = scope;
        bind_targets(s, *iter_scope, items[i]);
        iter_scope->vars["loop"] = loop_value;
        if (exec_body(s.body, out, iter_scope) == Flow::Break) break;
    }
    if (items.empty()) exec_body(s.else_body, out, scope);
}

void Interpreter::exec_set(const Stmt& s, Value v, const std::shared_ptr<Scope>& scope) {
    if (!s.attr.empty()) {
        const Value* target = scope->find(s.targets[0]);
        if (!target || !target->is_namespace())
            throw Error("cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "': not a namespace");
        target->dict_obj().set(Value(s.attr), std::move(v));
        note_mutation(*target);
        return;
    }
    if (!s.tuple_target && s.targets.size() == 1) {
        scope->vars[s.targets[0]] = std::move(v);
        return;
    }
    bind_targets(s, *scope, v);
}

Value Interpreter::define_macro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    const Stmt* stmt = &s;
    // The macro sees its defining scope as it is when called (names set later included), as a
    // Python closure would.
    std::weak_ptr<Scope> weak = scope;
    return Value::callable(s.name, [this, stmt, weak](Interpreter&, Args& args) {
        std::shared_ptr<Scope> closure = weak.lock();
        if (!closure) throw Error("macro '" + stmt->name + "' called after its scope ended");
        Value caller;
        for (auto it = args.kw.begin(); it != args.kw.end(); ++it)
            if (it->first == "caller") {
                caller = it->second;
                args.kw.erase(it);
                break;
            }
        return call_macro(*stmt, closure, args, caller);
    });
}

Value Interpreter::call_macro(const Stmt& m, const std::shared_ptr<Scope>& closure, Args& args, const Value& caller) {
    if (macro_depth_ + 1 > config_.max_depth)
        throw Error("macro calls nested more than max_depth (" + std::to_string(config_.max_depth) +
                    ") deep (endless recursion?)");
    ++macro_depth_;
    struct Leave {
        uint32_t& d;
        ~Leave() { --d; }
    } leave{macro_depth_};
    step();
    auto scope = std::make_shared<Scope>();
    scope->parent = closure;
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.pos.size(); ++i) {
        if (i < m.params.size())
            scope->vars[m.params[i].name] = args.pos[i];
        else
            varargs.push_back(args.pos[i]);
    }
    Value kwargs = Value::dict();
    for (auto& [k, v] : args.kw) {
        bool is_param = false;
        for (size_t i = 0; i < m.params.size(); ++i)
            if (m.params[i].name == k) {
                if (i < args.pos.size())
                    throw Error("macro '" + m.name + "' got multiple values for argument '" + k + "'");
                scope->vars[k] = v;
                is_param = true;
            }
        if (!is_param) kwargs.dict_obj().set(Value(k), v);
    }
    for (const MacroParam& p : m.params) {
        if (scope->vars.count(p.name)) continue;
        scope->vars[p.name] = p.default_value ? eval(*p.default_value, scope)
                                              : Value::undefined("parameter '" + p.name + "' was not provided");
    }
    scope->vars["varargs"] = Value::list(std::move(varargs), true);
    scope->vars["kwargs"] = kwargs;
    if (!caller.is_undefined()) scope->vars["caller"] = caller;
    std::string out;
    exec_body(m.body, out, scope);
    return Value(std::move(out));
}

// --- expressions ------------------------------------------------------------------------------

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
    DepthGuard guard(*this);
    step();
    try {
        return eval_node(e, scope);
    } catch (Error& err) {
        if (err.line == 0) err.line = e.line;
        throw;
    }
}

void Interpreter::eval_args(const Expr& e, const std::shared_ptr<Scope>& scope, Args& args) {
    for (size_t i = 1; i < e.args.size(); ++i) args.pos.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) args.kw.emplace_back(k, eval(*v, scope));
}

Value Interpreter::eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* block_input) {
    Value input;
    if (!e.args[0]) {
        if (!block_input) throw Error("filter without input");
        input = *block_input;
    } else if (e.args[0]->kind == ExprKind::Filter && block_input) {
        input = eval_filter(*e.args[0], scope, block_input);
    } else {
        input = eval(*e.args[0], scope);
    }
    Args args;
    eval_args(e, scope, args);
    return filter(e.name, input, args);
}

Value Interpreter::eval_call(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* caller) {
    const Value callee = eval(*e.args[0], scope);
    Args args;
    eval_args(e, scope, args);
    if (caller) args.kw.emplace_back("caller", *caller);
    return call(callee, args);
}

Value Interpreter::call(const Value& callee, Args& args) {
    if (callee.is_undefined()) fail_undefined(callee);
    if (callee.is_loop()) {
        const Value& r = callee.loop_obj().recurse;
        if (!r.is_callable()) throw Error("the loop is not recursive: write 'for ... recursive' to call loop()");
        return call(r, args);
    }
    if (!callee.is_callable()) throw Error("'" + callee.type_name() + "' object is not callable");
    return callee.callable_obj().fn(*this, args);
}

Value Interpreter::filter(const std::string& name, const Value& input, Args& args) {
    FilterFn f = find_filter(name);
    if (!f) throw Error("no filter named '" + name + "'");
    return f(*this, input, args);
}

bool Interpreter::test(const std::string& name, const Value& input, Args& args) {
    TestFn t = find_test(name);
    if (!t) throw Error("no test named '" + name + "'");
    return t(*this, input, args);
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
        case Kind::Undefined: fail_undefined(obj);
        case Kind::Dict: {
            // Python attributes (the dict methods) come before keys, as in jinja2: `d.items` is
            // the method even when the dict has a key "items".
            if (auto m = find_method(obj, name)) return *m;
            if (const Value* v = obj.dict_obj().find(Value(name))) return *v;
            return Value::undefined("'dict object' has no attribute '" + name + "'");
        }
        case Kind::Namespace: {
            if (const Value* v = obj.dict_obj().find(Value(name))) return *v;
            return Value::undefined("'Namespace object' has no attribute '" + name + "'");
        }
        case Kind::Loop: {
            const LoopObj& l = obj.loop_obj();
            const auto n = int64_t(l.items->size()), i = int64_t(l.index0);
            if (name == "index") return Value(i + 1);
            if (name == "index0") return Value(i);
            if (name == "revindex") return Value(n - i);
            if (name == "revindex0") return Value(n - i - 1);
            if (name == "first") return Value(i == 0);
            if (name == "last") return Value(i == n - 1);
            if (name == "length") return Value(n);
            if (name == "depth") return Value(int64_t(l.depth0) + 1);
            if (name == "depth0") return Value(int64_t(l.depth0));
            if (name == "previtem")
                return i > 0 ? (*l.items)[size_t(i - 1)] : Value::undefined("there is no previous item");
            if (name == "nextitem")
                return i + 1 < n ? (*l.items)[size_t(i + 1)] : Value::undefined("there is no next item");
            if (name == "cycle") {
                return Value::callable("cycle", [i](Interpreter&, Args& args) {
                    if (args.pos.empty()) throw Error("no items for cycling given");
                    return args.pos[size_t(i) % args.pos.size()];
                });
            }
            if (name == "changed") {
                LoopObj* lp = &obj.loop_obj();
                Value keep = obj;  // the callable keeps the loop alive
                return Value::callable("changed", [lp, keep](Interpreter&, Args& args) {
                    Value v = Value::list(args.pos);
                    if (lp->changed_seen && equals(v, lp->last_changed)) return Value(false);
                    lp->changed_seen = true;
                    lp->last_changed = v;
                    return Value(true);
                });
            }
            return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
        }
        default: {
            if (auto m = find_method(obj, name)) return *m;
            return Value::undefined("'" + (obj.is_none() ? std::string("None") : obj.type_name() + " object") +
                                    "' has no attribute '" + name + "'");
        }
    }
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
    switch (obj.kind()) {
        case Kind::Undefined: fail_undefined(obj);
        case Kind::Dict:
            if (const Value* v = obj.dict_obj().find(key)) return *v;
            break;
        case Kind::List:
        case Kind::String:
            if (key.is_int() || key.is_bool()) {
                int64_t i = key.as_int();
                if (obj.is_list()) {
                    const auto n = int64_t(obj.items().size());
                    if (i < 0) i += n;
                    if (i >= 0 && i < n) return obj.items()[size_t(i)];
                    return Value::undefined(std::string("'") + obj.type_name() + " object' has no element " +
                                            std::to_string(key.as_int()));
                }
                const std::vector<uint32_t> cps = pystr::decode(obj.str());
                const auto n = int64_t(cps.size());
                if (i < 0) i += n;
                if (i >= 0 && i < n) return Value(pystr::encode(cps, size_t(i), size_t(i) + 1));
                return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
            }
            break;
        default: break;
    }
    // jinja2 falls back to the attribute of that name.
    if (key.is_string()) return getattr(obj, key.str());
    if (obj.is_dict()) return Value::undefined("'dict object' has no attribute " + key.repr());
    return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

Value Interpreter::slice(const Value& v, const Value& start, const Value& stop, const Value& stride) {
    if (v.is_undefined()) fail_undefined(v);
    int64_t step_by = 1;
    if (!stride.is_none() && !stride.is_undefined()) {
        if (!stride.is_int()) throw Error("slice indices must be integers or None");
        step_by = stride.as_int();
        if (step_by == 0) throw Error("slice step cannot be zero");
        if (step_by == std::numeric_limits<int64_t>::min()) step_by = -std::numeric_limits<int64_t>::max();
    }
    auto pick = [&](int64_t len) {
        std::vector<size_t> idx;
        const bool neg = step_by < 0;
        int64_t b = slice_index(start, neg ? len - 1 : 0, len, neg);
        int64_t e = slice_index(stop, neg ? -1 : len, len, neg);
        if (!stop.is_none() && !stop.is_undefined() && neg && stop.as_int() < -len) e = -1;
        for (int64_t i = b; neg ? i > e : i < e; i += step_by) {
            idx.push_back(size_t(i));
            if ((neg && i < std::numeric_limits<int64_t>::min() - step_by) ||
                (!neg && i > std::numeric_limits<int64_t>::max() - step_by))
                break;
        }
        step(idx.size() / 16);
        return idx;
    };
    if (v.is_string()) {
        const std::vector<uint32_t> cps = pystr::decode(v.str());
        std::string out;
        for (size_t i : pick(int64_t(cps.size()))) pystr::append_utf8(out, cps[i]);
        return Value(std::move(out));
    }
    if (v.is_list()) {
        const auto& items = v.items();
        std::vector<Value> out;
        for (size_t i : pick(int64_t(items.size()))) out.push_back(items[i]);
        return Value::list(std::move(out), v.is_tuple());
    }
    throw Error("'" + v.type_name() + "' object is not subscriptable");
}

Value Interpreter::binary_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
        std::string s = a.to_str();
        const std::string t = b.to_str();
        check_size(s.size() + t.size());
        return Value(s + t);
    }
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    const bool nums = a.is_number() && b.is_number();
    const bool ints = nums && !a.is_float() && !b.is_float();
    auto unsupported = [&]() -> Value {
        throw Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    };
    if (op == "+") {
        if (ints) {
            return Value(add_checked(a.as_int(), b.as_int()));
        }
        if (nums) return Value(a.as_float() + b.as_float());
        if (a.is_string() && b.is_string()) {
            check_size(a.str().size() + b.str().size());
            step((a.str().size() + b.str().size()) / 256);
            if (a.is_markup() || b.is_markup())  // Markup escapes the plain side
                return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                                     (b.is_markup() ? b.str() : html_escape(b.str())));
            return Value(a.str() + b.str());
        }
        if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
            check_items(uint64_t(a.items().size()) + b.items().size());
            step((a.items().size() + b.items().size()) / 4);
            std::vector<Value> items = a.items();
            items.insert(items.end(), b.items().begin(), b.items().end());
            return Value::list(std::move(items), a.is_tuple());
        }
        return unsupported();
    }
    if (op == "-") {
        if (ints) {
            return Value(sub_checked(a.as_int(), b.as_int()));
        }
        if (nums) return Value(a.as_float() - b.as_float());
        return unsupported();
    }
    if (op == "*") {
        if (ints) {
            return Value(mul_checked(a.as_int(), b.as_int()));
        }
        if (nums) return Value(a.as_float() * b.as_float());
        const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
        const Value* count = seq == &a ? &b : &a;
        if (!seq || !(count->is_int() || count->is_bool())) return unsupported();
        const int64_t n = std::max<int64_t>(0, count->as_int());
        if (seq->is_string()) {
            if (n > 0 && seq->str().size() > 0)
                check_size(uint64_t(n) > SIZE_MAX / seq->str().size() ? SIZE_MAX : size_t(n) * seq->str().size());
            std::string out;
            for (int64_t i = 0; i < n; ++i) out += seq->str();
            step(out.size() / 64);
            return Value(std::move(out));
        }
        const size_t len = seq->items().size();
        if (n > 0 && len > 0) {
            if (uint64_t(n) > config_.max_steps / len) step(config_.max_steps + 1);
            check_items(uint64_t(n) * len);
            step(uint64_t(n) * len);
        }
        std::vector<Value> out;
        for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
        return Value::list(std::move(out), seq->is_tuple());
    }
    if (op == "/") {
        if (!nums) return unsupported();
        if (b.as_float() == 0) throw Error("division by zero");
        return Value(a.as_float() / b.as_float());
    }
    if (op == "//") {
        if (!nums) return unsupported();
        if (ints) {
            if (b.as_int() == 0) throw Error("integer division or modulo by zero");
            return Value(floor_div(a.as_int(), b.as_int()));
        }
        if (b.as_float() == 0) throw Error("float floor division by zero");
        return Value(std::floor(a.as_float() / b.as_float()));
    }
    if (op == "%") {
        if (a.is_string()) return py_mod_format(*this, a.str(), b, a.is_markup());
        if (!nums) return unsupported();
        if (ints) {
            if (b.as_int() == 0) throw Error("integer division or modulo by zero");
            return Value(floor_mod(a.as_int(), b.as_int()));
        }
        if (b.as_float() == 0) throw Error("float modulo");
        double r = std::fmod(a.as_float(), b.as_float());
        if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
        return Value(r);
    }
    if (op == "**") {
        if (!nums) return unsupported();
        if (ints && b.as_int() >= 0) {
            int64_t base = a.as_int(), e = b.as_int(), r = 1;
            while (e > 0) {
                if (e & 1) r = mul_checked(r, base);
                e >>= 1;
                if (e > 0) base = mul_checked(base, base);
            }
            return Value(r);
        }
        if (a.as_float() == 0 && b.as_float() < 0) throw Error("0.0 cannot be raised to a negative power");
        return Value(std::pow(a.as_float(), b.as_float()));
    }
    throw Error("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Kind::Undefined: return false;
        case Kind::String:
            if (!item.is_string())
                throw Error("'in <string>' requires string as left operand, not " + item.type_name());
            return container.str().find(item.str()) != std::string::npos;
        case Kind::List:
            for (const Value& v : container.items())
                if (equals(v, item)) return true;
            return false;
        case Kind::Dict:
        case Kind::Namespace: return container.dict_obj().find(item) != nullptr;
        default: throw Error("argument of type '" + container.type_name() + "' is not iterable");
    }
}

Value Interpreter::eval_node(const Expr& e, const std::shared_ptr<Scope>& scope) {
    switch (e.kind) {
        case ExprKind::Const: return e.value;
        case ExprKind::Name: {
            if (const Value* v = scope->find(e.name)) return *v;
            return Value::undefined("'" + e.name + "' is undefined");
        }
        case ExprKind::List:
        case ExprKind::Tuple: {
            std::vector<Value> items;
            items.reserve(e.args.size());
            for (const auto& a : e.args) items.push_back(eval(*a, scope));
            return Value::list(std::move(items), e.kind == ExprKind::Tuple);
        }
        case ExprKind::Dict: {
            Value d = Value::dict();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value k = eval(*e.args[i], scope);
                d.dict_obj().set(k, eval(*e.args[i + 1], scope));
            }
            return d;
        }
        case ExprKind::GetAttr: return getattr(eval(*e.args[0], scope), e.name);
        case ExprKind::GetItem: {
            Value obj = eval(*e.args[0], scope);
            return getitem(obj, eval(*e.args[1], scope));
        }
        case ExprKind::Slice: {
            Value obj = eval(*e.args[0], scope);
            Value parts[3];
            for (int i = 0; i < 3; ++i)
                parts[i] = e.args[size_t(i) + 1] ? eval(*e.args[size_t(i) + 1], scope) : Value::none();
            return slice(obj, parts[0], parts[1], parts[2]);
        }
        case ExprKind::Call: return eval_call(e, scope, nullptr);
        case ExprKind::Filter: return eval_filter(e, scope, nullptr);
        case ExprKind::Test: {
            Value v = eval(*e.args[0], scope);
            Args args;
            eval_args(e, scope, args);
            return Value(test(e.name, v, args) != e.negated);
        }
        case ExprKind::Unary: {
            Value v = eval(*e.args[0], scope);
            if (e.name == "not") return Value(!v.truthy());
            if (v.is_undefined()) fail_undefined(v);
            if (!v.is_number()) throw Error("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
            if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
            if (v.is_float()) return Value(-v.as_float());
            return Value(sub_checked(0, v.as_int()));
        }
        case ExprKind::Binary: {
            Value a = eval(*e.args[0], scope);
            Value b = eval(*e.args[1], scope);
            return binary_op(e.name, a, b);
        }
        case ExprKind::And: {
            Value a = eval(*e.args[0], scope);
            return a.truthy() ? eval(*e.args[1], scope) : a;
        }
        case ExprKind::Or: {
            Value a = eval(*e.args[0], scope);
            return a.truthy() ? a : eval(*e.args[1], scope);
        }
        case ExprKind::Compare: {
            Value left = eval(*e.args[0], scope);
            for (size_t i = 0; i < e.ops.size(); ++i) {
                Value right = eval(*e.args[i + 1], scope);
                const std::string& op = e.ops[i];
                bool r;
                if (op == "==")
                    r = equals(left, right);
                else if (op == "!=")
                    r = !equals(left, right);
                else if (op == "in")
                    r = contains(right, left);
                else if (op == "not in")
                    r = !contains(right, left);
                else {
                    if (left.is_undefined()) fail_undefined(left);
                    if (right.is_undefined()) fail_undefined(right);
                    const int c = compare(left, right);
                    r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
                }
                if (!r) return Value(false);
                left = std::move(right);
            }
            return Value(true);
        }
        case ExprKind::CondExpr: {
            if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
            if (e.args[2]) return eval(*e.args[2], scope);
            return Value::undefined("the inline if's condition was false and it has no else");
        }
    }
    throw Error("unknown expression");
}

Value arg(const Args& a, size_t pos, const char* name, Value def) {
    if (pos < a.pos.size()) return a.pos[pos];
    for (const auto& [k, v] : a.kw)
        if (k == name) return v;
    return def;
}

bool has_arg(const Args& a, size_t pos, const char* name) {
    if (pos < a.pos.size()) return true;
    for (const auto& [k, v] : a.kw)
        if (k == name) return true;
    return false;
}

}  // namespace vkllm::chat_template::jinja
