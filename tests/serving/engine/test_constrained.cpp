// Constrained generation: the sampler's token filter against the definition (every refused token's
// logit at -inf, the same seed), TokenConstraint's allowed set against following each token with a
// fresh matcher, and grammars steering stories260K (a model that never writes JSON by itself)
// through engine::generate: every text is a sentence of its grammar, ends where the grammar is
// complete, and stops at -n where it can never end.
#include "support/test_context.h"

#include "model/grammar/json_schema.h"
#include "model/grammar/token_constraint.h"
#include "support/model_test_util.h"
#include "serving/engine/generate.h"

#include <cmath>
#include <limits>
#include <random>

using namespace vkllm;
using namespace vkllm::engine;

namespace {

// Allows the tokens whose id is a multiple of `step` (and counts the questions). With
// `decide_after`, it decides every token once asked that many times, as TokenConstraint does.
struct EveryNth : TokenFilter {
    int32_t step = 3;
    size_t asked = 0;
    size_t n = 0, decide_after = 0;
    std::vector<uint8_t> mask;
    bool allowed(int32_t t) override {
        ++asked;
        if (decide_after && asked >= decide_after && mask.empty())
            for (size_t i = 0; i < n; ++i) mask.push_back(i % size_t(step) == 0 ? 1 : 0);
        return t % step == 0;
    }
    std::span<const uint8_t> decided() const override { return mask; }
};

bool is_sentence(const grammar::Grammar& g, const std::string& text) {
    grammar::Matcher m(g);
    return m.accept(text) && m.can_end();
}

// Token ids spelling `text` exactly (longest piece first; SentencePiece's encode would add its
// dummy-prefix space).
std::vector<int32_t> spell(const Tokenizer& tok, std::string_view text) {
    std::vector<int32_t> out;
    while (!text.empty()) {
        int32_t best = -1;
        size_t best_len = 0;
        for (int32_t id = 0; id < int32_t(tok.n_vocab()); ++id) {
            const std::string p = tok.token_to_piece(id, false);
            if (p.size() > best_len && text.substr(0, p.size()) == p) best = id, best_len = p.size();
        }
        REQUIRE(best >= 0);
        out.push_back(best);
        text.remove_prefix(best_len);
    }
    return out;
}

}  // namespace

TEST_CASE("sampler: a filter is the same as -inf for every refused token, for every sampler setting") {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    struct Setting {
        float temperature;
        int32_t top_k;
        float top_p, min_p, repeat_penalty;
    };
    const Setting settings[] = {{0, 40, 1, 0, 1},        {0.8f, 40, 0.95f, 0.05f, 1}, {1.0f, 5, 1, 0, 1},
                                {1.5f, 0, 0.9f, 0, 1.1f}, {0.7f, 200, 1, 0.1f, 1.3f},  {1.0f, 1, 1, 0, 1}};
    for (const size_t n : {size_t(7), size_t(512), size_t(5000)}) {
        for (const Setting& st : settings) {
            for (uint64_t seed = 0; seed < 20; ++seed) {
                CAPTURE(n);
                CAPTURE(st.temperature);
                CAPTURE(st.top_k);
                CAPTURE(seed);
                std::vector<float> logits(n);
                for (float& v : logits) v = nd(rng);
                SamplerParams p;
                p.temperature = st.temperature;
                p.top_k = st.top_k;
                p.top_p = st.top_p;
                p.min_p = st.min_p;
                p.repeat_penalty = st.repeat_penalty;
                p.seed = seed;
                std::vector<float> lb = logits;
                for (size_t i = 0; i < n; ++i)
                    if (i % 3 != 0) lb[i] = -std::numeric_limits<float>::infinity();
                Sampler b(p);
                for (int32_t t : {1, 3, 6, 9}) b.accept(t);
                const int32_t tb = b.sample(lb);
                // Asking in logit order throughout, or reading a decided mask after a few questions
                // (the first batch, or within it).
                for (const size_t decide_after : {size_t(0), size_t(1), size_t(64), size_t(100)}) {
                    CAPTURE(decide_after);
                    Sampler a(p);
                    for (int32_t t : {1, 3, 6, 9}) a.accept(t);
                    EveryNth f;
                    f.n = n;
                    f.decide_after = decide_after;
                    std::vector<float> la = logits;
                    const int32_t ta = a.sample(la, &f);
                    CHECK(ta == tb);
                    CHECK(ta % 3 == 0);
                    if (st.temperature == 0) CHECK(f.asked < n);  // greedy stops at the first allowed token
                }
            }
        }
    }
    // A filter that allows nothing: -1, not a refused token.
    EveryNth none;
    none.step = 1 << 30;
    std::vector<float> logits(100, 0.5f);
    SamplerParams p;
    p.temperature = 0.8f;
    Sampler s(p);
    logits[0] = -1;  // token 0 is a multiple of anything: make it the only allowed one, then refuse it too
    CHECK(s.sample(logits, &none) == 0);
    struct Nothing : TokenFilter {
        bool allowed(int32_t) override { return false; }
    } nothing;
    CHECK(s.sample(logits, &nothing) == -1);
}

TEST_CASE("token constraint: the allowed set equals following each token with a fresh matcher") {
    const std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::LoadedModel m = test::open_model(path);
    auto tok = make_tokenizer(m.file);
    auto pieces = std::make_shared<const grammar::TokenPieces>(*tok);
    auto g = std::make_shared<const grammar::Grammar>(
        grammar::Grammar::parse(R"(root ::= "{\"name\": \"" [a-z ]+ "\", \"age\": " [0-9]+ "}")"));
    grammar::TokenConstraint c(g, pieces);
    std::string text;
    // Follow a sentence piece by piece; at each state compare every token's verdict with a fresh
    // matcher fed the text so far plus the token's bytes.
    const std::vector<std::string> steps = {"{\"", "name", "\": \"", "tim", " ", "\", \"age\": ", "4", "2"};
    for (const std::string& step : steps) {
        size_t n_allowed = 0;
        for (int32_t id = 0; id < int32_t(tok->n_vocab()); ++id) {
            bool expected;
            if (tok->is_eog(id)) {
                expected = is_sentence(*g, text);
            } else {
                const std::string piece = tok->token_to_piece(id, false);
                grammar::Matcher fresh(*g);
                expected = !piece.empty() && fresh.accept(text) && fresh.accept(piece);
            }
            CAPTURE(text);
            CAPTURE(id);
            CHECK(c.allowed(id) == expected);
            // Asked first in a state (no mask decided yet), the answer is the same.
            grammar::TokenConstraint once(g, pieces);
            CHECK(once.accept_text(text));
            CHECK(once.allowed(id) == expected);
            n_allowed += expected;
        }
        // Every token asked, few allowed: the constraint has decided them all, end included.
        const std::span<const uint8_t> mask = c.decided();
        REQUIRE(mask.size() == tok->n_vocab());
        for (int32_t id = 0; id < int32_t(tok->n_vocab()); ++id) CHECK((mask[size_t(id)] != 0) == c.allowed(id));
        CHECK(n_allowed > 0);
        // The step's text as tokens, accepted one by one.
        for (int32_t id : spell(*tok, step)) c.accept(id);
        text += step;
    }
    CHECK(!c.can_end());
    for (int32_t id : spell(*tok, "}")) c.accept(id);
    CHECK(c.can_end());
    CHECK(c.complete());
    CHECK_THROWS_AS(c.accept(spell(*tok, "a")[0]), grammar::GrammarError);
}

TEST_CASE("token constraint: a control token a request speaks stands for its text; the others stay out") {
    const std::string path = test::model_path("ggml-vocab-llama-bpe.gguf");
    if (path.empty()) return;
    auto tok = make_tokenizer(GgufFile::open(path));  // a vocabulary without weights
    const int32_t header = 128006, header_end = 128007, eot = 128009;  // <|start_header_id|>, <|end_header_id|>, <|eot_id|>
    REQUIRE(tok->token_to_piece(header, true) == "<|start_header_id|>");
    REQUIRE(tok->token_to_piece(header, false).empty());  // a control token: no text unless shown
    auto g = std::make_shared<const grammar::Grammar>(
        grammar::Grammar::parse(R"(root ::= "<|start_header_id|>" [a-z]+ "<|end_header_id|>")"));

    const std::vector<int32_t> spoken = {header, eot};
    auto speaking = std::make_shared<const grammar::TokenPieces>(*tok, spoken);
    CHECK(speaking->bytes(header) == "<|start_header_id|>");
    CHECK(speaking->bytes(header_end).empty());
    CHECK(speaking->bytes(eot).empty());  // an end of generation stays one, spoken or not
    CHECK(speaking->is_eog(eot));
    grammar::TokenConstraint c(g, speaking);
    CHECK(c.allowed(header));
    CHECK_FALSE(c.allowed(header_end));
    CHECK_FALSE(c.allowed(eot));
    c.accept(header);
    for (int32_t id : spell(*tok, "user")) c.accept(id);
    // Not spoken: the closing marker can only be spelled in text pieces ("<|", "end", ...).
    CHECK_FALSE(c.allowed(header_end));
    size_t n_allowed = 0;
    for (int32_t id = 0; id < int32_t(tok->n_vocab()); ++id) n_allowed += c.allowed(id) ? 1 : 0;
    CHECK(n_allowed > 0);

    // Without the request speaking it, the marker is text pieces only.
    auto silent = std::make_shared<const grammar::TokenPieces>(*tok);
    CHECK(silent->bytes(header).empty());
    grammar::TokenConstraint quiet(g, silent);
    CHECK_FALSE(quiet.allowed(header));
    CHECK(quiet.allowed(spell(*tok, "<|")[0]));
}

TEST_CASE("generate: grammars steer stories260K, greedy and sampled") {
    const std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    test::LoadedModel m = test::open_model(path);
    auto tok = make_tokenizer(m.file);
    ModelGpu gpu(test::context(), m.file, m.cfg, {});
    const std::vector<int32_t> prompt = tok->encode("Once upon a time", true);
    auto run = [&](const std::string& gbnf, float temperature, uint64_t seed, int32_t n) {
        GenerateParams gp;
        gp.n_predict = n;
        gp.sampler.temperature = temperature;
        gp.sampler.seed = seed;
        gp.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
        std::string text;
        GenerateStats st = generate(gpu, *tok, prompt, gp, [&](std::string_view p) { text += p; });
        return std::make_pair(text, st);
    };
    const std::string json = R"(root ::= "{\"name\": \"" [a-zA-Z ]{1,20} "\", \"age\": " [1-9] [0-9]? "}")";
    const auto g = grammar::Grammar::parse(json);
    for (float temperature : {0.0f, 0.8f, 1.5f}) {
        for (uint64_t seed : {1u, 2u, 3u}) {
            CAPTURE(temperature);
            CAPTURE(seed);
            auto [text, st] = run(json, temperature, seed, 60);
            CHECK(is_sentence(g, text));
            CHECK(st.stopped_at_eos);
            CHECK(st.decode_steps + 1 == st.generated_tokens);  // complete: no step spent on an end token
            // The host's share of choosing the tokens is measured, and is part of the time.
            CHECK(st.sample_ms > 0);
            CHECK(st.sample_ms < st.prompt_ms + st.generate_ms);
            if (temperature == 0) break;
        }
    }
    // The same seed, the same text.
    CHECK(run(json, 1.0f, 9, 60).first == run(json, 1.0f, 9, 60).first);

    // A grammar that never ends runs to -n.
    auto [forever, st] = run("root ::= [a-z ] root", 0.8f, 4, 12);
    CHECK(!st.stopped_at_eos);
    CHECK(st.generated_tokens == 12);
    CHECK(forever.find_first_not_of("abcdefghijklmnopqrstuvwxyz ") == std::string::npos);

    // Where the grammar may end and also go on, the model decides; either way the text is a sentence.
    const std::string words = R"(root ::= [A-Za-z]+ (" " [A-Za-z]+)* ".")";
    auto [sentence, st2] = run(words, 0.0f, 0, 40);
    CHECK(is_sentence(grammar::Grammar::parse(words), sentence));
}

TEST_CASE("generate: a lazy grammar holds from its trigger on, and only there") {
    const std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    test::LoadedModel m = test::open_model(path);
    auto tok = make_tokenizer(m.file);
    ModelGpu gpu(test::context(), m.file, m.cfg, {});
    const std::vector<int32_t> prompt = tok->encode("Once upon a time", true);
    auto run = [&](const std::string& gbnf, const grammar::LazyStart& start) {
        GenerateParams gp;
        gp.n_predict = 40;
        gp.sampler.temperature = 0;
        if (!gbnf.empty()) gp.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
        gp.grammar_start = start;
        std::vector<std::string> pieces;
        GenerateStats st = generate(gpu, *tok, prompt, gp, [&](std::string_view p) { pieces.emplace_back(p); });
        return std::make_pair(pieces, st);
    };
    const auto [free_pieces, free_st] = run("", {});
    std::string free_text;
    for (const std::string& p : free_pieces) free_text += p;
    // A trigger that the greedy text first holds exactly where token k begins, spanning two tokens
    // (the second of two bytes or more, so that the trigger less its last byte ends inside it).
    size_t k = 3, offset = 0;
    for (size_t i = 0; i < k; ++i) offset += free_pieces[i].size();
    for (; k + 2 < free_pieces.size(); offset += free_pieces[k++].size())
        if (free_pieces[k + 1].size() >= 2 && free_text.find(free_pieces[k] + free_pieces[k + 1].substr(0, 1)) == offset) break;
    REQUIRE(k + 2 < free_pieces.size());
    const std::string trigger = free_pieces[k] + free_pieces[k + 1];
    CAPTURE(free_text);
    CAPTURE(trigger);

    // Before the trigger the text is the free text; from it on, a sentence of the grammar.
    const std::string gbnf = "root ::= " + grammar::gbnf_literal(trigger) + " \" \" [a-z]{1,8} \"!\"";
    const auto [pieces, st] = run(gbnf, {{{trigger, false}}});
    std::string text;
    for (const std::string& p : pieces) text += p;
    CHECK(text.substr(0, offset) == free_text.substr(0, offset));
    CHECK(is_sentence(grammar::Grammar::parse(gbnf), text.substr(offset)));
    CHECK(st.stopped_at_eos);  // the grammar was complete

    // Text at the trigger that the grammar refuses drops it: the rest stays free.
    const std::string cut = trigger.substr(0, trigger.size() - 1);  // completed mid-token, with a byte the grammar refuses
    const auto [dropped, st3] = run("root ::= " + grammar::gbnf_literal(cut) + " \"\\x01\"", {{{cut, false}}});
    std::string dropped_text;
    for (const std::string& p : dropped) dropped_text += p;
    CHECK(dropped_text == free_text);

    // A trigger inside a skipped block (a reasoning block) does not start the grammar.
    grammar::LazyStart skipped{{{trigger, false}}};
    skipped.skip_inside = true;
    skipped.skip_close = "\x01never";
    const auto [inside, st4] = run(gbnf, skipped);
    std::string inside_text;
    for (const std::string& p : inside) inside_text += p;
    CHECK(inside_text == free_text);
}
