// Grammars that constrain generation: GBNF as llama.cpp writes it (grammars/README.md in
// llama.cpp), parsed into rules of code-point sets and rule references, and a matcher that follows
// generated text through them (the set of possible parse stacks, as llama.cpp's llama-grammar
// does). Sampling will mask the tokens the matcher refuses; this file knows nothing of tokens.
//
// Syntax: `name ::= alternatives`, one rule per line (a rule continues on the next line after
// `::=`, after `|` and inside parentheses); `#` comments; "literal" strings and [character classes]
// with ranges and ^ negation, escapes \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH; `.` (any
// character); (groups); repetition * + ? {m} {m,} {m,n}. Names are letters, digits and '-'. The
// grammar starts at `root`.
//
// Hostile grammars are bounded: left recursion, undefined rules, a missing root, more than
// kMaxRules rules or kMaxElements elements after expanding repetitions, repetition bounds above
// kMaxRepeat and groups nested deeper than kMaxDepth are refused at parse time with the line and
// column; a matcher whose stacks would pass kMaxStacks (a grammar too ambiguous to follow) or nest
// more than kMaxDepth rules throws GrammarError when it happens. Text is strict UTF-8 (RFC 3629:
// no overlong forms, surrogates or code points above U+10FFFF), in the grammar and in the matcher.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkllm::grammar {

inline constexpr size_t kMaxRules = 10000;
inline constexpr size_t kMaxElements = 200000;
inline constexpr uint32_t kMaxRepeat = 1000;
inline constexpr size_t kMaxStacks = 4096;
inline constexpr size_t kMaxDepth = 512;  // nested groups in the text; rules pending on one parse stack

class GrammarError : public std::invalid_argument {
public:
    // line and column from 1; 0 when the error is not at one place (a missing root, a matcher limit).
    GrammarError(const std::string& what, uint32_t line = 0, uint32_t column = 0);
    uint32_t line() const { return line_; }
    uint32_t column() const { return column_; }

private:
    uint32_t line_, column_;
};

// One element of a sequence: a set of code points, or a reference to a rule.
struct Element {
    enum class Kind { Chars, Rule };
    Kind kind = Kind::Chars;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // Chars: inclusive ranges
    bool negated = false;  // Chars: every code point but those
    uint32_t rule = 0;  // Rule: index into Grammar::rules
    bool matches(uint32_t cp) const;
    // Whether some code point in [lo, hi] matches (for a partly received UTF-8 character).
    bool matches_any(uint32_t lo, uint32_t hi) const;
};
using Sequence = std::vector<Element>;

struct Rule {
    std::string name;  // "root", a grammar's own names, or "name_N" for groups and repetitions (no clash:
        // '_' is not a name character of GBNF)
    std::vector<Sequence> alternatives;
};

struct Grammar {
    std::vector<Rule> rules;
    uint32_t root = 0;

    // Throws GrammarError naming the line and column of the first problem.
    static Grammar parse(std::string_view gbnf);
};

// Follows text through a grammar, one UTF-8 piece at a time.
class Matcher {
public:
    explicit Matcher(const Grammar& g);  // g must outlive the matcher
    explicit Matcher(Grammar&&) = delete;  // a temporary would not

    // Consumes `bytes` when the grammar allows them next (a UTF-8 character may be split over
    // calls); false, consuming nothing, when it does not.
    bool accept(std::string_view bytes);
    // The text so far is a whole sentence of the grammar (generation may stop here).
    bool can_end() const;
    // Whether a code point may come next.
    bool allows(uint32_t cp) const;
    // Whether accept(bytes) would succeed (nothing is consumed).
    bool allows_bytes(std::string_view bytes) const;

    // Where the matcher is, as a value: for walking many continuations from one place (a token
    // trie) without re-reading their shared prefixes.
    class State;
    State state() const;
    // Follows one byte from `st` (in place); false when the grammar refuses it (st is then unusable).
    bool step(State& st, uint8_t byte) const;
    // Whether step(st, byte) would succeed, without copying or changing anything.
    bool may_step(const State& st, uint8_t byte) const;
    // The matcher's own state (the text so far), without a copy.
    const State& current() const { return here_; }
    // The text so far is a whole sentence and nothing can follow it.
    bool complete() const;

private:
    struct Pos {
        uint32_t rule, alt, elem;
        bool operator<(const Pos& o) const;
        bool operator==(const Pos& o) const;
    };
    using Stack = std::vector<Pos>;  // back(): the element to match next; below it, where callers go on

public:
    class State {
        friend class Matcher;
        std::vector<Stack> stacks_;
        std::string partial_;
    };

private:
    void expand(Stack s, std::vector<Stack>& out) const;
    bool advance(const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& next) const;
    bool partial_allowed(const std::vector<Stack>& stacks, const std::string& partial) const;
    // Whether the element on top of some stack matches `cp`.
    bool top_matches(const std::vector<Stack>& stacks, uint32_t cp) const;
    // Follows `bytes` from (stacks, partial), updating both; false when the grammar refuses them.
    bool consume(std::string_view bytes, std::vector<Stack>& stacks, std::string& partial) const;

    const Grammar* g_;
    // here_.stacks_: every way the text so far can continue (an empty stack: it can end);
    // here_.partial_: the received bytes of an unfinished UTF-8 character.
    State here_;
};

// Where a lazy grammar starts to hold: the first place the generated text holds a trigger's
// `text` (the grammar then follows the text from there, `text` included), or with `at_start` only
// where the text begins with it after whitespace. Before that the text is free: a tool call the
// model may or may not write (tool_choice auto) is constrained from its marker on.
struct Trigger {
    std::string text;
    bool at_start = false;
};
struct LazyStart {
    std::vector<Trigger> triggers;  // empty: the grammar is not lazy
    // A block at the start of the text where triggers are not looked for (a reasoning block: a model
    // thinking about a call is not calling yet): from `skip_open` (after whitespace; from the first
    // byte when `skip_inside`) through `skip_close`. at_start triggers then look after the block.
    std::string skip_open, skip_close;
    bool skip_inside = false;
    bool lazy() const { return !triggers.empty(); }
};
// Where in `text` the grammar starts to hold; npos when nowhere (yet).
size_t find_trigger(std::string_view text, const LazyStart& start);

}  // namespace vkllm::grammar
