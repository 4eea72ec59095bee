// The syntax tree of a parsed template: expressions and statements, each with its source line.
// Names of filters, tests and functions stay names here: they are looked up when rendered, so
// an unknown filter in a branch never taken is no error (as in jinja2, where it is; but a
// template that works in jinja2 must work here).
#pragma once

#include "serving/chat_template/jinja/value.h"

#include <memory>
#include <string>
#include <vector>

namespace vkllm::chat_template::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
    Const,  // value
    Name,  // name
    List,  // args
    Tuple,  // args
    Dict,  // args: key, value, key, value, ...
    GetAttr,  // args[0].name
    GetItem,  // args[0][args[1]]
    Slice,  // args[0][args[1]:args[2]:args[3]] (null for absent parts)
    Call,  // args[0](args[1..], kwargs)
    Filter,  // args[0] | name(args[1..], kwargs); args[0] null in {% filter %} blocks
    Test,  // args[0] is name(args[1..], kwargs); negated: `is not`
    Unary,  // op args[0]: "-", "+", "not"
    Binary,  // args[0] op args[1]: + - * / // % ** ~
    And,  // args[0] and args[1]
    Or,  // args[0] or args[1]
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained as in Python)
    CondExpr,  // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct Expr {
    ExprKind kind;
    int line = 0;
    uint32_t height = 1;  // of this subtree (the parser bounds it)
    Value value;  // Const
    std::string name;  // Name, GetAttr, Filter, Test; Unary and Binary: the operator
    bool negated = false;  // Test: `is not`
    std::vector<ExprPtr> args;  // operands, see ExprKind
    std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter, Test
    std::vector<std::string> ops;  // Compare
};

enum class StmtKind {
    Text,  // text
    Print,  // {{ expr }}
    If,  // conds[i] -> bodies[i]; a final body without a condition is the else
    For,  // for targets in expr [if cond] body [else else_body]
    Set,  // set targets = expr; or set ns.attr = expr (attr non-empty)
    SetBlock,  // set target %} body {% endset (optionally | filters: expr with null input)
    Macro,  // macro name(params) body
    CallBlock,  // call(params) expr %} body: expr is called with `caller` bound to the body
    FilterBlock,  // filter expr %} body
    Break,
    Continue,
    Generation,  // {% generation %} body: Hugging Face's marker, rendered as its body
    With,  // with targets[i] = conds[i], ... %} body: the names exist only in the body
};

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null: none given
};

struct Stmt {
    StmtKind kind;
    int line = 0;
    std::string text;  // Text
    ExprPtr expr;  // Print, For (iterable), Set, FilterBlock, CallBlock, SetBlock filters
    ExprPtr cond;  // For: the `if` filter
    std::vector<std::string> targets;  // For / Set / SetBlock names; tuple unpacking when > 1 or tuple_target
    bool tuple_target = false;
    std::string attr;  // Set / SetBlock: namespace attribute
    bool recursive = false;  // For
    std::vector<ExprPtr> conds;  // If
    std::vector<Body> bodies;  // If branches
    Body body, else_body;
    std::string name;  // Macro
    std::vector<MacroParam> params;  // Macro, CallBlock
};

}  // namespace vkllm::chat_template::jinja
