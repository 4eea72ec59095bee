// What a test reads of one engine request: every event until Done.
#pragma once

#include "serving/engine/engine.h"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

namespace vkllm::test {

struct Outcome {
    std::string text;
    std::vector<int32_t> tokens;  // the sampled tokens, in order
    std::vector<engine::TokenLogprob> logprobs;
    engine::Event done;
    size_t text_events = 0;
};

// Every event of a ticket until Done (fails the test after 120 s).
inline Outcome collect(engine::Ticket& t) {
    using namespace std::chrono_literals;
    Outcome o;
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < deadline) {
        std::optional<engine::Event> e = t.next(100ms);
        if (!e) continue;
        if (e->kind == engine::Event::Kind::Done) {
            o.done = std::move(*e);
            return o;
        }
        o.text += e->text;
        o.tokens.insert(o.tokens.end(), e->tokens.begin(), e->tokens.end());
        o.logprobs.insert(o.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
        ++o.text_events;
    }
    FAIL("request did not finish within 120 s");
    return o;
}

}  // namespace vkllm::test
