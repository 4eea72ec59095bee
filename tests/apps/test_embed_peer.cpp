// Embeddings against llama.cpp: `vkllm gen-model --arch bert|nomic-bert|jina-bert-v2|qwen3` writes the random-weight models
// of tests/fixtures/embeddings/peer.json again (with the bge WordPiece vocab, or the Unigram one of
// tests/fixtures/tokenizer for the XLM-RoBERTa-shaped cases), and `vkllm embed`
// must give every input the vectors llama-server --embeddings returned for the same file, within the
// cosine similarity the case lists, with the same token count (make_fixtures.py there regenerates
// them). Also the command's errors.
#include "support/run_vkllm.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using vkllm::test::run_vkllm;

namespace {

const fs::path kFixtures = vkllm::test::fixtures_dir() / "embeddings";
const fs::path kModels = vkllm::test::models_dir();
const fs::path kVocab = kModels / "ggml-vocab-bert-bge.gguf";
// Vocabs committed beside the tokenizer fixtures (the Unigram one, XLM-RoBERTa's layout) come first.
const fs::path kLocalVocabs = vkllm::test::fixtures_dir() / "tokenizer";

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
    return ab / std::sqrt(aa * bb);
}

fs::path tmp_dir() {
    const fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "embeddings";
    fs::create_directories(dir);
    return dir;
}

// peer.json, and its inputs written one per line to `lines` (in tmp_dir()).
nlohmann::json load_peer(const char* lines, fs::path& path) {
    std::ifstream in(kFixtures / "peer.json");
    REQUIRE(in.good());
    const nlohmann::json fx = nlohmann::json::parse(in);
    path = tmp_dir() / lines;
    std::ofstream f(path, std::ios::binary);
    for (const auto& t : fx["inputs"]) f << t.get<std::string>() << "\n";
    return fx;
}

// Writes a case's model again with gen-model (its vocab and options) and returns its path.
fs::path generate(const nlohmann::json& c, const std::string& label) {
    const fs::path model = tmp_dir() / (c["name"].get<std::string>() + ".gguf");
    const std::string file = "ggml-vocab-" + c["vocab"].get<std::string>() + ".gguf";
    const fs::path vocab = fs::exists(kLocalVocabs / file) ? kLocalVocabs / file : kModels / file;
    auto gen = run_vkllm(fmt::format("gen-model --vocab-from {} {} -o {}", vocab.string(), c["options"].get<std::string>(),
                                     model.string()), label);
    REQUIRE(gen.status == 0);
    return model;
}

}  // namespace

TEST_CASE("embed: vkllm embed equals llama-server --embeddings on random BERT, XLM-RoBERTa, nomic-bert, jina-bert-v2 and Qwen3 models") {
    if (!fs::exists(kVocab)) {
        MESSAGE("skipped: " << kVocab << " is missing");
        return;
    }
    fs::path inputs;
    const nlohmann::json fx = load_peer("inputs.txt", inputs);
    for (const auto& c : fx["cases"]) {
        const std::string name = c["name"];
        CAPTURE(name);
        const fs::path model = generate(c, "embed_gen");
        auto r = run_vkllm(fmt::format("embed -m {} -f {} --batch-lines --json", model.string(), inputs.string()), "embed");
        INFO(r.err);
        REQUIRE(r.status == 0);
        const nlohmann::json got = nlohmann::json::parse(r.out);
        REQUIRE(got["data"].size() == c["vectors"].size());
        CHECK(got["usage"]["prompt_tokens"] == c["prompt_tokens"]);
        double worst = 1;
        for (size_t i = 0; i < got["data"].size(); ++i) {
            CHECK(got["data"][i]["index"] == i);
            const auto g = got["data"][i]["embedding"].get<std::vector<double>>();
            const auto p = c["vectors"][i].get<std::vector<double>>();
            REQUIRE(g.size() == p.size());
            worst = std::min(worst, cosine(g, p));
        }
        MESSAGE(fmt::format("{}: worst cosine similarity to llama.cpp {:.8f} over {} inputs", name, worst, got["data"].size()));
        // A miss far below the threshold after a change to gen-model means the files changed:
        // re-run tests/fixtures/embeddings/make_fixtures.py.
        CHECK(worst >= c["min_cosine"].get<double>());
        fs::remove(model);
    }
}

TEST_CASE("embed: vkllm embed --rerank equals llama-server --reranking on random BERT, XLM-RoBERTa and jina-bert-v2 rerankers") {
    if (!fs::exists(kVocab)) {
        MESSAGE("skipped: " << kVocab << " is missing");
        return;
    }
    fs::path docs;
    const nlohmann::json fx = load_peer("documents.txt", docs);
    REQUIRE(fx["rerank_cases"].size() == 3);
    for (const auto& c : fx["rerank_cases"]) {
        const std::string name = c["name"];
        CAPTURE(name);
        const fs::path model = generate(c, "rerank_gen");
        auto r = run_vkllm(fmt::format("embed -m {} --rerank \"{}\" -f {} --batch-lines --json", model.string(),
                                       fx["rerank_query"].get<std::string>(), docs.string()), "rerank");
        INFO(r.err);
        REQUIRE(r.status == 0);
        const nlohmann::json got = nlohmann::json::parse(r.out);
        const auto want = c["scores"].get<std::vector<double>>();
        REQUIRE(got["results"].size() == want.size());
        CHECK(got["usage"]["prompt_tokens"] == c["prompt_tokens"]);
        double worst = 0, prev = INFINITY;
        for (const auto& x : got["results"]) {
            const double score = x["relevance_score"];
            CHECK(score <= prev);  // by descending score
            prev = score;
            worst = std::max(worst, std::fabs(score - want.at(x["index"].get<size_t>())));
        }
        MESSAGE(fmt::format("{}: largest score difference to llama.cpp {:.2g} over {} documents", name, worst, want.size()));
        CHECK(worst <= c["max_diff"].get<double>());
        fs::remove(model);
    }
}

TEST_CASE("embed: pooling, normalisation and the errors of vkllm embed; generating commands refuse encoders") {
    const fs::path model = tmp_dir() / "small-bert.gguf";
    REQUIRE(run_vkllm(fmt::format("gen-model --arch bert --dim 64 --layers 2 --heads 4 --ffn 96 --vocab 300 --ctx 32 "
                                  "--type f32 -o {}", model.string()), "embed_gen").status == 0);
    auto vec = [&](const std::string& extra) {
        auto r = run_vkllm(fmt::format("embed -m {} -p 'abc def' {}", model.string(), extra), "embed");
        INFO(r.err);
        REQUIRE(r.status == 0);
        std::vector<std::vector<double>> rows;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream vals(line);
            rows.emplace_back();
            for (double v; vals >> v;) rows.back().push_back(v);
        }
        return rows;
    };
    // --pooling none: one vector per token ([CLS] a b c ▁def... [SEP]); mean is their average.
    const auto none = vec("--pooling none --normalize -1"), mean = vec("--pooling mean --normalize -1");
    REQUIRE(none.size() >= 3);
    REQUIRE(mean.size() == 1);
    for (size_t d = 0; d < 64; ++d) {
        double s = 0;
        for (const auto& r : none) s += r[d];
        CHECK(mean[0][d] == doctest::Approx(s / double(none.size())).epsilon(1e-4));
    }
    const auto cls = vec("--pooling cls --normalize -1"), last = vec("--pooling last --normalize -1");
    REQUIRE((cls.size() == 1 && last.size() == 1));
    for (size_t d = 0; d < 64; ++d) {
        CHECK(cls[0][d] == doctest::Approx(none.front()[d]).epsilon(1e-4));
        CHECK(last[0][d] == doctest::Approx(none.back()[d]).epsilon(1e-4));
    }
    // L2 by default: unit length; 0: the largest magnitude is 32760.
    double n2 = 0, mx = 0;
    const auto l2 = vec(""), int16 = vec("--normalize 0");
    for (double v : l2.at(0)) n2 += v * v;
    for (double v : int16.at(0)) mx = std::max(mx, std::fabs(v));
    CHECK(n2 == doctest::Approx(1.0).epsilon(1e-4));
    CHECK(mx == doctest::Approx(32760).epsilon(1e-4));

    auto err = [&](const std::string& args, const std::string& want) {
        auto r = run_vkllm(args, "embed_err");
        CHECK(r.status != 0);
        INFO(r.err);
        CHECK(r.err.find(want) != std::string::npos);
    };
    err(fmt::format("embed -m {} -p x --pooling max", model.string()), "--pooling 'max': expected none, mean, cls or last");
    err(fmt::format("embed -m {} -p x --rerank q", model.string()),
        "--rerank: this bert model is not a reranker: its pooling is 'mean', reranking needs 'rank'");
    err(fmt::format("embed -m {} -p x --rerank ''", model.string()), "--rerank: the query is empty");
    err(fmt::format("embed -m {} -p x --rerank q --pooling cls", model.string()), "--rerank scores with the model's rank pooling");
    err(fmt::format("embed -m {} -p x --pooling rank", model.string()), "(reranking is --rerank QUERY with a reranker)");
    err(fmt::format("embed -m {} -p x --normalize -3", model.string()), "normalization -3");
    err(fmt::format("embed -m {}", model.string()), "no text: give -p TEXT or -f FILE");
    const std::string long_text = [] {
        std::string s;
        for (int i = 0; i < 40; ++i) s += "ab ";
        return s;
    }();
    err(fmt::format("embed -m {} -p '{}'", model.string(), long_text),
        "the input has 42 tokens, more than the 32 this model takes at once (its context)");
    err(fmt::format("embed -m {} -p '{}' --ubatch 16", model.string(), long_text),
        "the input has 42 tokens, more than the 16 this model takes at once (its ubatch; load it with a larger ubatch)");
    // Generating commands refuse an embedding model by name, before anything is uploaded.
    for (const char* cmd : {"run -p x -n 2", "bench -p 8 -n 2 -r 1", "chat", "bench-serve"})
        err(fmt::format("{} -m {}", cmd, model.string()), "a bert model is an embedding model (an encoder without a "
                                                          "language-model head): it generates no text");
    // A decoder needs a pooling type (said after loading, before evaluating).
    const fs::path dec = tmp_dir() / "small-llama.gguf";
    REQUIRE(run_vkllm(fmt::format("gen-model --arch llama --dim 64 --layers 1 --heads 4 --ffn 96 --vocab 300 --ctx 32 "
                                  "--type f32 -o {}", dec.string()), "embed_gen").status == 0);
    err(fmt::format("embed -m {} -p x", dec.string()),
        "this llama model is a decoder without a pooling type (llama.pooling_type): give one");
}
