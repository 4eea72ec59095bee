// Untrusted templates: endless recursion, huge loops, output and memory bombs, deep nesting and
// malformed source must each end in a TemplateError that names the template and the line, never a
// crash, hang or stack overflow. Time is bounded by the step limit each case must hit (named in the
// message), not measured here: a wall-clock bound fails on a slow or shared machine (21 s under
// ASan in CI for the 10^7 steps of the default limit) and proves nothing the step count does not.
#include "serving/chat_template/chat_template.h"

#include <doctest/doctest.h>

#include <string>
#include <pthread.h>

using vkllm::chat_template::ChatInputs;
using vkllm::chat_template::ChatTemplate;
using vkllm::chat_template::RenderLimits;
using vkllm::chat_template::TemplateError;

namespace {

// Parses and renders `source`; returns the TemplateError's message ("" when it rendered).
std::string failure(const std::string& source, RenderLimits limits = {}) {
    std::string msg;
    try {
        ChatTemplate t(source, "hostile", limits);
        ChatInputs in;
        in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
        (void)t.apply(in);
    } catch (const TemplateError& e) {
        msg = e.what();
    }
    return msg;
}

void check_fails_at(const std::string& source, int line, const std::string& words, RenderLimits limits = {}) {
    const std::string msg = failure(source, limits);
    INFO(source.substr(0, 200) << " -> " << msg);
    CHECK(msg.find("template 'hostile', line " + std::to_string(line) + ":") == 0);
    CHECK(msg.find(words) != std::string::npos);
}

std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

}  // namespace

TEST_CASE("hostile templates: endless recursion stops at max_depth") {
    check_fails_at("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", 1, "max_depth");
    // Mutual recursion, and recursion through a recursive for loop.
    check_fails_at("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}", 1, "max_depth");
    check_fails_at("{% set t = [[]] %}{% for x in t recursive %}{{ loop(t) }}{% endfor %}", 1, "nested too deeply");
    // Deep but finite recursion within the limit still works.
    ChatTemplate ok("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(150)|length }}",
                    "deep");
    CHECK(ok.apply({}) == "343");
}

TEST_CASE("hostile templates: huge loops run out of steps") {
    check_fails_at("{% for i in range(10**9) %}x{% endfor %}", 1, "max_steps");
    check_fails_at("\n{{ range(10**12)|length }}", 2, "max_steps");
    check_fails_at("{% for i in range(3000) %}{% for j in range(3000) %}{% for k in range(3000) %}{% endfor %}{% endfor %}{% endfor %}",
                   1, "max_steps");
    check_fails_at("{% set ns = namespace(n=0) %}{% for i in range(5000) %}{% for j in range(5000) %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}",
                   1, "max_steps");
}

TEST_CASE("hostile templates: output and memory bombs hit max_output_bytes") {
    check_fails_at("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", 1, "max_output_bytes");
    check_fails_at("{{ 'x' * 10**12 }}", 1, "max_output_bytes");
    check_fails_at("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", 1,
                   "max_output_bytes");
    check_fails_at("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", 1,
                   "items");
    check_fails_at("{{ [0] * 10**10 }}", 1, "max_steps");
    check_fails_at("{{ 'a'|center(10**12) }}", 1, "max_output_bytes");
    check_fails_at("{{ '%s' % ('x' * 10**7) }}", 1, "max_output_bytes");
    // A list that contains itself, printed or serialized: a depth error, not endless recursion.
    check_fails_at("{% set l = [] %}{% set _ = l.append(l) %}\n{{ l }}", 2, "nested more than");
    check_fails_at("{% set l = [] %}{% set _ = l.append(l) %}\n{{ l|tojson }}", 2, "nested more than");
    check_fails_at("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns == ns }}{{ ns }}", 1, "nested more than");
    // Smaller limits are honoured.
    RenderLimits small;
    small.max_output_bytes = 1000;
    check_fails_at("{% for i in range(100) %}0123456789abcdef{% endfor %}", 1, "max_output_bytes", small);
    small = {};
    small.max_steps = 1000;
    check_fails_at("{% for i in range(2000) %}{% endfor %}", 1, "max_steps", small);
}

TEST_CASE("hostile templates: deep nesting is a syntax error, not a stack overflow") {
    check_fails_at(repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000), 1, "nested too deeply");
    check_fails_at("{{ " + repeat("(", 20000) + "1" + repeat(")", 20000) + " }}", 1, "nested too deeply");
    check_fails_at("{{ " + repeat("[", 20000) + repeat("]", 20000) + " }}", 1, "nested too deeply");
    check_fails_at("{{ 1" + repeat("|abs", 20000) + " }}", 1, "nested too deeply");
    check_fails_at("{{ 1" + repeat(" + 1", 20000) + " }}", 1, "nested too deeply");
    check_fails_at("{{ " + repeat("not ", 20000) + "1 }}", 1, "nested too deeply");
    check_fails_at("{{ " + repeat("-", 20000) + "1 }}", 1, "nested too deeply");
    check_fails_at(repeat("{% for x in [1] %}", 3000), 1, "nested too deeply");
    // Each nesting within the limits, but together deeper than a 512 KiB thread stack allows:
    // the interpreter measures the stack it has left and stops with an error, not a crash.
    struct Job {
        std::string msg;
        static void* run(void* p) {
            auto* job = static_cast<Job*>(p);
            try {
                ChatTemplate t("{% macro f(n) %}{{ " + repeat("(", 200) + "f(n + 1)" + repeat(")", 200) +
                                   " }}{% endmacro %}{{ f(0) }}",
                               "hostile");
                (void)t.apply({});
            } catch (const TemplateError& e) {
                job->msg = e.what();
            }
            return nullptr;
        }
    } job;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    pthread_t th;
    REQUIRE(pthread_create(&th, &attr, &Job::run, &job) == 0);
    pthread_join(th, nullptr);
    pthread_attr_destroy(&attr);
    INFO(job.msg);
    CHECK(job.msg.find("template 'hostile', line 1:") == 0);
}

TEST_CASE("hostile templates: malformed source names the line") {
    check_fails_at("a\nb\n{{ x", 3, "missing '}}'");
    check_fails_at("a\n{% if x", 2, "missing '%}'");
    check_fails_at("a\n\n{# comment", 3, "comment");
    check_fails_at("{% raw %}\nxx", 1, "endraw");
    check_fails_at("\n{{ 'abc }}", 2, "unterminated string");
    check_fails_at("{% if x %}\nx\n", 2, "endif");  // the final newline is dropped
    check_fails_at("{% for x in y %}\n{% endif %}", 2, "endfor");
    check_fails_at("\n{% endif %}", 2, "unknown tag 'endif'");
    check_fails_at("{% include 'other.jinja' %}", 1, "unknown tag 'include'");
    check_fails_at("{{ x | }}", 1, "expected a name");
    check_fails_at("{{ 1 + }}", 1, "unexpected");
    check_fails_at("{% set %}", 1, "expected a name");
    check_fails_at("{% break %}", 1, "outside of a loop");
    check_fails_at("{{ ) }}", 1, "unexpected ')'");
    check_fails_at("{{ 99999999999999999999999 }}", 1, "too large");
    check_fails_at("{{ '\\x4' }}", 1, "escape");
}

TEST_CASE("hostile templates: render errors name the line") {
    check_fails_at("ok\n{{ 'x'|no_such_filter }}", 2, "no filter named 'no_such_filter'");
    check_fails_at("ok\n\n{{ 1 is no_such_test }}", 3, "no test named 'no_such_test'");
    check_fails_at("{% for m in messages %}\n{{ m.content.missing.deeper }}\n{% endfor %}", 2, "has no attribute 'missing'");
    check_fails_at("\n{{ raise_exception('Only user and assistant roles are supported') }}", 2, "Only user and assistant");
    check_fails_at("{{ 2**62 * 4 }}", 1, "integer overflow");
    check_fails_at("{% set a, b = [1, 2, 3] %}", 1, "too many values");
    check_fails_at("{{ none.x.y }}", 1, "has no attribute 'x'");
    check_fails_at("{{ [1][1:2:0] }}", 1, "slice step");
    check_fails_at("{{ 'x'.split('') }}", 1, "empty separator");
    check_fails_at("{{ '%d' % 'x' }}", 1, "number is required");
    check_fails_at("{{ {[1]: 2} }}", 1, "unhashable");
    // An unknown filter or test in a branch never taken is no error (jinja2 resolves them late too).
    CHECK(failure("{% if false %}{{ x|no_such_filter }}{{ x is no_such_test }}{% endif %}") == "");
}
