// libFuzzer target: the GBNF parser, the JSON-Schema compiler and the matcher, and the tool-call
// parser and forced-call grammars, on arbitrary input.
//
// The first byte picks the input's kind (mod 4: 0 GBNF, 1 a JSON schema, 2 a model's reply to parse
// for tool calls, 3 a tool's parameters to force a call with); the rest is the text.
// - A grammar that parses is followed over a few fixed texts and over the input itself, byte by
//   byte, and asked can_end / complete, as sampling would.
// - A reply is parsed in the family the first byte's upper bits pick, whole and streamed in pieces
//   of a size it also picks: both must give the same content and calls, and with the calls streamed
//   as deltas, the fragments must add up to the arguments; and read as a gpt-oss (Harmony) answer,
//   whole and streamed alike.
// - Parameters are compiled into a forced call's grammar for a JSON-call family and a named-prefix one,
//   and into tool_choice auto's lazy grammar.
// The only acceptable failures are GrammarError, SchemaError and ToolError (malformed input,
// limits); anything else -- another exception, a crash, a hang past -timeout, a leak or a sanitizer
// report -- is a finding. Seeds (fuzz_make_seeds): grammars written here, the schemas of the JSON
// Schema Test Suite, and tool-call replies.
#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "serving/answer/harmony.h"
#include "serving/answer/tool_calls.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace vkllm::grammar;
using vkllm::answer::ReplyStream;
using Json = nlohmann::ordered_json;

namespace {

void follow(const std::string& gbnf, const std::string& text) {
    const Grammar g = Grammar::parse(gbnf);
    for (const std::string& probe : {std::string("{\"a\": [1, \"x\"]}"), std::string("hello world"), text}) {
        Matcher m(g);
        for (const char c : probe) {
            if (!m.accept(std::string_view(&c, 1))) break;
            (void)m.can_end();
            (void)m.complete();
        }
    }
}

const Json& fuzz_tools() {
    static const Json tools = Json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{)"
                                          R"("type":"object","properties":{"city":{"type":"string"}}}}},)"
                                          R"({"type":"function","function":{"name":"f"}}])");
    return tools;
}

void parse_reply(uint8_t selector, const std::string& text) {
    const auto formats = vkllm::answer::tool_formats();
    const vkllm::answer::ToolFormat& format =
        vkllm::answer::tool_format(formats[(selector >> 2) % formats.size()].family);
    const ReplyStream::Rest whole = vkllm::answer::parse_reply(format, fuzz_tools(), text);
    const size_t piece = 1 + (selector >> 5);
    ReplyStream s(format, fuzz_tools());
    std::string content;
    for (size_t i = 0; i < text.size(); i += piece) content += s.push(std::string_view(text).substr(i, piece));
    ReplyStream::Rest rest = s.finish();
    content += rest.content;
    bool same = content == whole.content && rest.calls.size() == whole.calls.size();
    for (size_t i = 0; same && i < rest.calls.size(); ++i)
        same = rest.calls[i].name == whole.calls[i].name && rest.calls[i].arguments == whole.calls[i].arguments;
    if (!same) {
        std::fprintf(stderr, "fuzz_grammar: the streamed reply (pieces of %zu) differs from the whole one (%s)\n",
                     piece, format.name);
        std::abort();
    }

    // Calls streamed as deltas: the fragments of each call add up to its arguments, and the content
    // is the whole reply's (less the markup of a call cut after its deltas went out).
    ReplyStream f(format, fuzz_tools());
    f.stream_arguments();
    std::vector<std::string> names, args;
    bool ok = true;
    auto take = [&](const std::vector<vkllm::answer::CallDelta>& ds) {
        for (const auto& d : ds) {
            if (d.index == names.size() && !d.name.empty()) {
                names.push_back(d.name);
                args.emplace_back();
            } else if (d.index >= names.size() || !d.name.empty()) {
                ok = false;
                continue;
            }
            args[d.index] += d.arguments;
        }
    };
    std::string fcontent;
    for (size_t i = 0; i < text.size(); i += piece) {
        fcontent += f.push(std::string_view(text).substr(i, piece));
        take(f.take_deltas());
    }
    ReplyStream::Rest frest = f.finish();
    take(frest.deltas);
    fcontent += frest.content;
    if (!frest.calls.empty()) {
        ok = ok && fcontent == whole.content && frest.calls.size() == whole.calls.size();
        if (f.streams_arguments()) ok = ok && names.size() == frest.calls.size();
        for (size_t i = 0; ok && i < frest.calls.size(); ++i) {
            ok = frest.calls[i].name == whole.calls[i].name && frest.calls[i].arguments == whole.calls[i].arguments;
            if (f.streams_arguments())
                ok = ok && names[i] == frest.calls[i].name && args[i] == frest.calls[i].arguments;
        }
    } else {
        ok = ok && whole.content.starts_with(fcontent) && (names.empty() ? fcontent == whole.content : true);
    }
    if (!ok) {
        std::fprintf(stderr, "fuzz_grammar: streamed call deltas (pieces of %zu) disagree with the whole reply (%s)\n",
                     piece, format.name);
        std::abort();
    }
}

// gpt-oss answers: HarmonyStream whole and in pieces gives the same reasoning, content and calls,
// and never lets a marker through.
void parse_harmony(uint8_t selector, const std::string& text) {
    auto run = [&](size_t piece) {
        vkllm::answer::HarmonyStream h(fuzz_tools(), (selector & 0x10) != 0);
        std::string reasoning, content;
        for (size_t i = 0; i < text.size(); i += piece) {
            const auto p = h.push(std::string_view(text).substr(i, piece));
            reasoning += p.reasoning;
            content += p.content;
        }
        auto rest = h.finish();
        rest.reasoning = reasoning + rest.reasoning;
        rest.content = content + rest.content;
        return rest;
    };
    const auto whole = run(std::max<size_t>(text.size(), 1));
    const size_t piece = 1 + (selector >> 5);
    const auto streamed = run(piece);
    bool same = whole.reasoning == streamed.reasoning && whole.content == streamed.content &&
                whole.calls.size() == streamed.calls.size();
    for (size_t i = 0; same && i < whole.calls.size(); ++i)
        same = whole.calls[i].name == streamed.calls[i].name && whole.calls[i].arguments == streamed.calls[i].arguments;
    if (!same) {
        std::fprintf(stderr, "fuzz_grammar: a streamed Harmony answer (pieces of %zu) differs from the whole one\n",
                     piece);
        std::abort();
    }
}

void force(const std::string& parameters) {
    const Json p = vkllm::answer::parse_json_bounded(parameters);
    if (p.is_discarded()) return;
    Json tools = Json::array({Json{{"type", "function"}, {"function", {{"name", "t"}, {"parameters", p}}}}});
    try {
        vkllm::answer::check_tools(tools);
    } catch (const vkllm::answer::ToolError&) {
        return;
    }
    for (auto family : {vkllm::answer::ToolFamily::Hermes, vkllm::answer::ToolFamily::DeepSeekR1}) {
        const auto fc = vkllm::answer::forced_call(vkllm::answer::tool_format(family), tools, "t", true);
        follow(fc.gbnf, parameters);
    }
    // Qwen3-Coder's grammar lists each parameter (bare strings, JSON values compiled per parameter):
    // it must be built or refused cleanly for any parameters, and take the text it is given or not.
    const auto coder =
        vkllm::answer::forced_call(vkllm::answer::tool_format(vkllm::answer::ToolFamily::QwenCoder), tools, "", true);
    follow(coder.gbnf, "<function=t>\n" + parameters);
    // tool_choice auto's lazy grammar of the same tools (none where the parameters are outside the subset).
    for (auto family : {vkllm::answer::ToolFamily::Hermes, vkllm::answer::ToolFamily::Generic}) {
        const auto lc = vkllm::answer::lazy_call(vkllm::answer::tool_format(family), tools, true);
        if (!lc.gbnf.empty()) follow(lc.gbnf, "<tool_call>" + parameters);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        switch (data[0] & 3) {
            case 0: follow(text, text); break;
            case 1: follow(json_schema_to_gbnf(text), text); break;
            case 2:
                parse_reply(data[0], text);
                parse_harmony(data[0], text);
                break;
            case 3: force(text); break;
        }
    } catch (const GrammarError&) {
    } catch (const SchemaError&) {
    } catch (const vkllm::answer::ToolError&) {
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_grammar: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
