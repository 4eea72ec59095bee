#include "serving/chat_template/jinja/parser.h"

#include "serving/chat_template/jinja/lexer.h"
#include "serving/chat_template/jinja/stack.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

namespace vkllm::chat_template::jinja {

namespace {

class Parser {
public:
    Parser(std::vector<Token> tokens, const ParseLimits& limits) : t_(std::move(tokens)), limits_(limits) {}

    Body parse_all() {
        std::string end;
        Body body = parse_body({}, end);
        return body;
    }

private:
    // --- tokens -------------------------------------------------------------------------------
    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    void next() {
        if (i_ + 1 < t_.size()) ++i_;
    }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }

    static std::string describe(const Token& t) {
        switch (t.type) {
            case Tok::Data: return "text";
            case Tok::VarBegin: return "'{{'";
            case Tok::VarEnd: return "'}}'";
            case Tok::BlockBegin: return "'{%'";
            case Tok::BlockEnd: return "'%}'";
            case Tok::Name: return "'" + t.text + "'";
            case Tok::String: return "string";
            case Tok::Int:
            case Tok::Float: return "number";
            case Tok::Op: return "'" + t.text + "'";
            case Tok::Eof: return "end of template";
        }
        return "token";
    }

    [[noreturn]] void fail(const std::string& msg) const { throw Error(msg, cur().line); }

    void expect_op(const char* op) {
        if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
        std::string n = cur().text;
        next();
        return n;
    }
    void expect_block_end() {
        if (cur().type != Tok::BlockEnd) fail("expected '%}', got " + describe(cur()));
        next();
    }

    // Recursion guard for expression and block nesting.
    struct Depth {
        Depth(uint32_t& d, uint32_t limit, const Parser& p, const char* what) : d_(d) {
            if (++d_ > limit) p.fail(std::string(what) + " nested too deeply (limit " + std::to_string(limit) + ")");
            try {
                p.stack_.check(what);
            } catch (Error& e) {
                --d_;
                e.line = p.cur().line;
                throw;
            }
        }
        ~Depth() { --d_; }
        uint32_t& d_;
    };

    ExprPtr node(ExprKind kind, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = line;
        return e;
    }
    // Fixes the node's height from its children and enforces the expression depth limit.
    ExprPtr done(ExprPtr e) {
        uint32_t h = 0;
        for (const auto& a : e->args)
            if (a) h = std::max(h, a->height);
        for (const auto& [k, a] : e->kwargs) h = std::max(h, a->height);
        e->height = h + 1;
        if (e->height > limits_.max_expr_depth)
            throw Error("expression nested too deeply (limit " + std::to_string(limits_.max_expr_depth) + ")", e->line);
        return e;
    }
    ExprPtr unary(const char* op, ExprPtr a, int line) {
        auto e = node(ExprKind::Unary, line);
        e->name = op;
        e->args.push_back(std::move(a));
        return done(std::move(e));
    }
    ExprPtr binary(ExprKind kind, std::string op, ExprPtr a, ExprPtr b, int line) {
        auto e = node(kind, line);
        e->name = std::move(op);
        e->args.push_back(std::move(a));
        e->args.push_back(std::move(b));
        return done(std::move(e));
    }

    // --- statements ---------------------------------------------------------------------------
    // Parses until a {% NAME %} with NAME in `ends` (or the end of the template when `ends` is
    // empty); leaves the position on that NAME and reports it in `found`.
    Body parse_body(std::initializer_list<const char*> ends, std::string& found) {
        Body body;
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        const std::string saved = std::exchange(expecting_, want);
        struct Restore {
            std::string& slot;
            std::string value;
            ~Restore() { slot = std::move(value); }
        } restore{expecting_, saved};
        while (true) {
            const Token& t = cur();
            if (t.type == Tok::Eof) {
                if (ends.size() == 0) return body;
                fail("unexpected end of template; jinja was looking for " + want);
            }
            if (t.type == Tok::Data) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Text;
                s->line = t.line;
                s->text = t.text;
                body.push_back(std::move(s));
                next();
            } else if (t.type == Tok::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Print;
                s->line = t.line;
                next();
                s->expr = parse_tuple(true, {});
                if (cur().type != Tok::VarEnd) fail("expected '}}', got " + describe(cur()));
                next();
                body.push_back(std::move(s));
            } else if (t.type == Tok::BlockBegin) {
                next();
                if (cur().type == Tok::Name)
                    for (const char* e : ends)
                        if (cur().text == e) {
                            found = e;
                            return body;
                        }
                body.push_back(parse_statement());
            } else {
                fail("unexpected " + describe(t));
            }
        }
    }

    StmtPtr parse_statement() {
        Depth guard(block_depth_, limits_.max_block_depth, *this, "blocks");
        if (cur().type != Tok::Name) fail("expected a statement name, got " + describe(cur()));
        const std::string tag = cur().text;
        auto s = std::make_unique<Stmt>();
        s->line = cur().line;
        next();
        if (tag == "if") return parse_if(std::move(s));
        if (tag == "for") return parse_for(std::move(s));
        if (tag == "set") return parse_set(std::move(s));
        if (tag == "macro") return parse_macro(std::move(s));
        if (tag == "call") return parse_call_block(std::move(s));
        if (tag == "filter") {
            s->kind = StmtKind::FilterBlock;
            s->expr = parse_filter_chain(nullptr);
            expect_block_end();
            parse_closed_body(s->body, "endfilter");
            return s;
        }
        if (tag == "with") {
            s->kind = StmtKind::With;
            while (cur().type != Tok::BlockEnd) {
                if (!s->targets.empty()) expect_op(",");
                s->targets.push_back(expect_name());
                expect_op("=");
                s->conds.push_back(parse_expression(true));
            }
            expect_block_end();
            parse_closed_body(s->body, "endwith");
            return s;
        }
        if (tag == "generation") {
            s->kind = StmtKind::Generation;
            expect_block_end();
            parse_closed_body(s->body, "endgeneration");
            return s;
        }
        if (tag == "break" || tag == "continue") {
            if (loop_depth_ == 0) throw Error("'" + tag + "' outside of a loop", s->line);
            s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
            expect_block_end();
            return s;
        }
        throw Error("unknown tag '" + tag + "'" + (expecting_.empty() ? "" : "; jinja was looking for " + expecting_),
                    s->line);
    }

    void parse_closed_body(Body& body, const char* end) {
        std::string found;
        body = parse_body({end}, found);
        next();
        expect_block_end();
    }

    StmtPtr parse_if(StmtPtr s) {
        s->kind = StmtKind::If;
        while (true) {
            s->conds.push_back(parse_tuple(false, {}));
            expect_block_end();
            std::string found;
            s->bodies.push_back(parse_body({"elif", "else", "endif"}, found));
            next();
            if (found == "elif") continue;
            if (found == "else") {
                expect_block_end();
                s->bodies.push_back(parse_body({"endif"}, found));
                next();
            }
            expect_block_end();
            return s;
        }
    }

    // Names to assign: `a`, `a, b` or `(a, b)`.
    void parse_targets(Stmt& s) {
        const bool paren = skip_op("(");
        s.targets.push_back(expect_name());
        while (skip_op(",")) {
            s.tuple_target = true;
            if (cur().type != Tok::Name) break;  // trailing comma
            s.targets.push_back(expect_name());
        }
        if (paren) {
            s.tuple_target = true;
            expect_op(")");
        }
    }

    StmtPtr parse_for(StmtPtr s) {
        s->kind = StmtKind::For;
        parse_targets(*s);
        if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
        s->expr = parse_tuple(false, {"recursive"});
        if (skip_name("if")) s->cond = parse_expression(true);
        if (skip_name("recursive")) s->recursive = true;
        expect_block_end();
        ++loop_depth_;
        std::string found;
        s->body = parse_body({"endfor", "else"}, found);
        --loop_depth_;
        next();
        if (found == "else") {
            expect_block_end();
            // break/continue in the else block belong to an enclosing loop, if any.
            const uint32_t saved = loop_depth_;
            s->else_body = parse_body({"endfor"}, found);
            loop_depth_ = saved;
            next();
        }
        expect_block_end();
        return s;
    }

    StmtPtr parse_set(StmtPtr s) {
        if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
            s->targets.push_back(expect_name());
            next();
            s->attr = expect_name();
        } else {
            parse_targets(*s);
        }
        if (skip_op("=")) {
            s->kind = StmtKind::Set;
            s->expr = parse_tuple(true, {});
            expect_block_end();
            return s;
        }
        if (s->tuple_target) fail("a block set takes one name");
        s->kind = StmtKind::SetBlock;
        if (is_op("|")) s->expr = parse_filter_chain(nullptr);
        expect_block_end();
        parse_closed_body(s->body, "endset");
        return s;
    }

    void parse_params(std::vector<MacroParam>& params) {
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            if (is_op(")")) break;
            MacroParam p;
            p.name = expect_name();
            if (skip_op("="))
                p.default_value = parse_expression(true);
            else if (!params.empty() && params.back().default_value)
                fail("a parameter without a default follows one with a default");
            params.push_back(std::move(p));
        }
        next();
    }

    StmtPtr parse_macro(StmtPtr s) {
        s->kind = StmtKind::Macro;
        s->name = expect_name();
        parse_params(s->params);
        expect_block_end();
        const uint32_t saved = loop_depth_;
        loop_depth_ = 0;  // a loop around the definition is not the macro's
        std::string found;
        s->body = parse_body({"endmacro"}, found);
        loop_depth_ = saved;
        next();
        if (cur().type == Tok::Name) next();  // {% endmacro name %}
        expect_block_end();
        return s;
    }

    StmtPtr parse_call_block(StmtPtr s) {
        s->kind = StmtKind::CallBlock;
        if (is_op("(")) parse_params(s->params);
        s->expr = parse_expression(true);
        if (s->expr->kind != ExprKind::Call) throw Error("expected a call after {% call %}", s->line);
        expect_block_end();
        const uint32_t saved = loop_depth_;
        loop_depth_ = 0;
        std::string found;
        s->body = parse_body({"endcall"}, found);
        loop_depth_ = saved;
        next();
        expect_block_end();
        return s;
    }

    // --- expressions --------------------------------------------------------------------------
    bool at_tuple_end(std::initializer_list<const char*> extra_end) const {
        const Token& t = cur();
        if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
        if (t.type == Tok::Op && (t.text == ")" || t.text == "]")) return true;
        if (t.type == Tok::Name)
            for (const char* e : extra_end)
                if (t.text == e) return true;
        return false;
    }

    // `a`, or `a, b, ...` as a tuple. With `condexpr` false, `x if y` is not an inline if (the
    // `if` of a for loop follows).
    ExprPtr parse_tuple(bool condexpr, std::initializer_list<const char*> extra_end, bool explicit_parens = false) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool comma = false;
        while (true) {
            if (!items.empty()) {
                if (!skip_op(",")) break;
                comma = true;
            }
            if (at_tuple_end(extra_end)) break;
            items.push_back(condexpr ? parse_expression(true) : parse_or());
            if (!is_op(",")) break;
        }
        if (!comma && items.size() == 1) return std::move(items[0]);
        if (items.empty() && !explicit_parens) fail("expected an expression, got " + describe(cur()));
        auto e = node(ExprKind::Tuple, line);
        e->args = std::move(items);
        return done(std::move(e));
    }

    ExprPtr parse_expression(bool condexpr) {
        Depth guard(expr_depth_, limits_.max_expr_depth, *this, "expression");
        if (!condexpr) return parse_or();
        ExprPtr e = parse_or();
        while (is_name("if")) {
            const int line = cur().line;
            next();
            ExprPtr cond = parse_or();
            ExprPtr other;
            if (skip_name("else")) other = parse_expression(true);
            auto c = node(ExprKind::CondExpr, line);
            c->args.push_back(std::move(cond));
            c->args.push_back(std::move(e));
            c->args.push_back(std::move(other));
            e = done(std::move(c));
        }
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (is_name("or")) {
            const int line = cur().line;
            next();
            e = binary(ExprKind::Or, "or", std::move(e), parse_and(), line);
        }
        return e;
    }

    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (is_name("and")) {
            const int line = cur().line;
            next();
            e = binary(ExprKind::And, "and", std::move(e), parse_not(), line);
        }
        return e;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            Depth guard(expr_depth_, limits_.max_expr_depth, *this, "expression");
            const int line = cur().line;
            next();
            return unary("not", parse_not(), line);
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::vector<std::string> ops;
        std::vector<ExprPtr> operands;
        while (true) {
            std::string op;
            if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = cur().text;
                next();
            } else if (is_name("in")) {
                op = "in";
                next();
            } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
                op = "not in";
                next();
                next();
            } else {
                break;
            }
            ops.push_back(op);
            operands.push_back(parse_math1());
        }
        if (ops.empty()) return first;
        auto e = node(ExprKind::Compare, line);
        e->args.push_back(std::move(first));
        for (auto& o : operands) e->args.push_back(std::move(o));
        e->ops = std::move(ops);
        return done(std::move(e));
    }

    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            const std::string op = cur().text;
            const int line = cur().line;
            next();
            e = binary(ExprKind::Binary, op, std::move(e), parse_concat(), line);
        }
        return e;
    }

    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (is_op("~")) {
            const int line = cur().line;
            next();
            e = binary(ExprKind::Binary, "~", std::move(e), parse_math2(), line);
        }
        return e;
    }

    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const std::string op = cur().text;
            const int line = cur().line;
            next();
            e = binary(ExprKind::Binary, op, std::move(e), parse_pow(), line);
        }
        return e;
    }

    ExprPtr parse_pow() {
        ExprPtr e = parse_unary(true);
        while (is_op("**")) {
            const int line = cur().line;
            next();
            e = binary(ExprKind::Binary, "**", std::move(e), parse_unary(true), line);
        }
        return e;
    }

    ExprPtr parse_unary(bool with_filter) {
        Depth guard(expr_depth_, limits_.max_expr_depth, *this, "expression");
        const int line = cur().line;
        ExprPtr e;
        if (is_op("-")) {
            next();
            e = unary("-", parse_unary(false), line);
        } else if (is_op("+")) {
            next();
            e = unary("+", parse_unary(false), line);
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        const int line = t.line;
        if (t.type == Tok::Name) {
            auto e = node(ExprKind::Const, line);
            if (t.text == "true" || t.text == "True")
                e->value = Value(true);
            else if (t.text == "false" || t.text == "False")
                e->value = Value(false);
            else if (t.text == "none" || t.text == "None")
                e->value = Value::none();
            else {
                e->kind = ExprKind::Name;
                e->name = t.text;
            }
            next();
            return done(std::move(e));
        }
        if (t.type == Tok::String) {
            std::string s;
            while (cur().type == Tok::String) {  // adjacent literals concatenate
                s += cur().text;
                next();
            }
            auto e = node(ExprKind::Const, line);
            e->value = Value(std::move(s));
            return done(std::move(e));
        }
        if (t.type == Tok::Int || t.type == Tok::Float) {
            auto e = node(ExprKind::Const, line);
            e->value = t.type == Tok::Int ? Value(t.int_value) : Value(t.float_value);
            next();
            return done(std::move(e));
        }
        if (is_op("(")) {
            next();
            ExprPtr e = parse_tuple(true, {}, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            next();
            auto e = node(ExprKind::List, line);
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_expression(true));
            }
            next();
            return done(std::move(e));
        }
        if (is_op("{")) {
            next();
            auto e = node(ExprKind::Dict, line);
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_expression(true));
                expect_op(":");
                e->args.push_back(parse_expression(true));
            }
            next();
            return done(std::move(e));
        }
        fail("unexpected " + describe(t));
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            const int line = cur().line;
            if (is_op(".")) {
                next();
                if (cur().type == Tok::Name) {
                    auto g = node(ExprKind::GetAttr, line);
                    g->name = cur().text;
                    next();
                    g->args.push_back(std::move(e));
                    e = done(std::move(g));
                } else if (cur().type == Tok::Int) {
                    auto g = node(ExprKind::GetItem, line);
                    auto idx = node(ExprKind::Const, line);
                    idx->value = Value(cur().int_value);
                    next();
                    g->args.push_back(std::move(e));
                    g->args.push_back(done(std::move(idx)));
                    e = done(std::move(g));
                } else {
                    fail("expected an attribute name after '.', got " + describe(cur()));
                }
            } else if (is_op("[")) {
                next();
                e = parse_subscript(std::move(e), line);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr target, int line) {
        // [i], [a:b], [a:b:c], each part optional in a slice.
        ExprPtr parts[3];
        int colons = 0;
        if (!is_op(":")) parts[0] = parse_expression(true);
        while (colons < 2 && skip_op(":")) {
            ++colons;
            if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression(true);
        }
        expect_op("]");
        if (colons == 0) {
            if (!parts[0]) fail("expected a subscript");
            return binary(ExprKind::GetItem, "", std::move(target), std::move(parts[0]), line);
        }
        auto s = node(ExprKind::Slice, line);
        s->args.push_back(std::move(target));
        for (auto& p : parts) s->args.push_back(std::move(p));
        return done(std::move(s));
    }

    // `(args)` into e->args (after any already there) and e->kwargs.
    void parse_args(Expr& e) {
        expect_op("(");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string name = cur().text;
                next();
                next();
                e.kwargs.emplace_back(std::move(name), parse_expression(true));
            } else {
                if (!e.kwargs.empty()) fail("a positional argument follows a keyword argument");
                e.args.push_back(parse_expression(true));
            }
        }
        next();
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto c = node(ExprKind::Call, cur().line);
        c->args.push_back(std::move(callee));
        parse_args(*c);
        return done(std::move(c));
    }

    std::string dotted_name() {
        std::string n = expect_name();
        while (is_op(".") && peek().type == Tok::Name) {
            next();
            n += "." + expect_name();
        }
        return n;
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            if (is_op("|")) {
                e = parse_filter_chain(std::move(e), true);
            } else if (is_name("is")) {
                e = parse_test(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    // `| f | g(x)`: each filter takes the previous one's result. `input` null: a {% filter %}
    // or {% set x | f %} block, whose body is the input.
    ExprPtr parse_filter_chain(ExprPtr input, bool single = false) {
        bool first = true;
        while (first || (!single && is_op("|"))) {
            if (!(first && !input && !is_op("|"))) expect_op("|");
            first = false;
            auto f = node(ExprKind::Filter, cur().line);
            f->name = dotted_name();
            f->args.push_back(std::move(input));
            if (is_op("(")) parse_args(*f);
            input = done(std::move(f));
            if (single) break;
        }
        return input;
    }

    ExprPtr parse_test(ExprPtr e) {
        auto t = node(ExprKind::Test, cur().line);
        next();  // is
        if (skip_name("not")) t->negated = true;
        t->name = dotted_name();
        t->args.push_back(std::move(e));
        const Token& c = cur();
        if (is_op("(")) {
            parse_args(*t);
        } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                    is_op("[") || is_op("{")) &&
                   !(c.type == Tok::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
            // `x is divisibleby 3`, `x is equalto 'y'`: one argument without parentheses.
            if (c.type == Tok::Name && c.text == "is") fail("tests cannot be chained with 'is'");
            t->args.push_back(parse_postfix(parse_primary()));
        }
        return done(std::move(t));
    }

    std::vector<Token> t_;
    size_t i_ = 0;
    ParseLimits limits_;
    uint32_t block_depth_ = 0, expr_depth_ = 0, loop_depth_ = 0;
    std::string expecting_;  // the end tags of the innermost open block, for messages
    StackBudget stack_;
};

}  // namespace

Body parse_template(const std::string& source, const ParseLimits& limits) {
    Parser p(tokenize(source), limits);
    return p.parse_all();
}

}  // namespace vkllm::chat_template::jinja
