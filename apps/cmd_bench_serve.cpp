// `vkllm bench-serve`: what the serving engine gives several clients at once, without HTTP in the
// way: generation throughput of one stream against N concurrent streams (continuous batching),
// and the time to first token of a follow-up chat turn against the length of the conversation
// before it (prefix reuse: it should grow with the new tokens only), and the KV cache that slots
// sharing one system prompt hold against one slot holding it (the paged cache stores it once).
#include "apps/commands.h"
#include "apps/load_model.h"
#include "serving/engine/engine.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <random>

namespace vkllm::apps {

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct ServeBenchOptions {
    std::string model;
    uint32_t parallel = 8;
    uint32_t n_prompt = 32;
    uint32_t n_gen = 64;
    uint32_t ctx = 1024;
    uint32_t ubatch = 64;
    uint32_t shared_prefix = 1000;
    uint32_t kv_budget = 0;
    bool json = false;
    DeviceOptions device;
};

std::vector<int32_t> random_tokens(uint32_t n, uint32_t n_vocab, std::mt19937& rng) {
    std::uniform_int_distribution<int32_t> d(3, int32_t(n_vocab) - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = d(rng);
    return t;
}

engine::CompletionRequest request(std::vector<int32_t> prompt, uint32_t n_gen) {
    engine::CompletionRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = int32_t(n_gen);
    r.sampler.temperature = 0;
    r.ignore_eos = true;  // every stream generates exactly n_gen tokens
    return r;
}

engine::Event wait_done(engine::Ticket& t) {
    for (;;) {
        std::optional<engine::Event> e = t.next(1000ms);
        if (e && e->kind == engine::Event::Kind::Done) {
            if (e->finish == engine::FinishReason::Error) throw std::runtime_error("request failed: " + e->error);
            return *e;
        }
    }
}

struct StreamsResult {
    uint32_t streams = 0;
    uint64_t tokens = 0;
    double wall_s = 0;
    double mean_ttft_ms = 0;
    double tps() const { return wall_s > 0 ? double(tokens) / wall_s : 0; }
};

// `n` requests submitted at once; tokens generated per second of wall time, prefill included.
StreamsResult run_streams(engine::Engine& e, uint32_t n, const ServeBenchOptions& o, uint32_t n_vocab,
                          std::mt19937& rng) {
    std::vector<std::unique_ptr<engine::Ticket>> tickets;
    const auto t0 = clock_type::now();
    for (uint32_t i = 0; i < n; ++i)
        tickets.push_back(e.submit(request(random_tokens(o.n_prompt, n_vocab, rng), o.n_gen)));
    StreamsResult r;
    r.streams = n;
    for (auto& t : tickets) {
        engine::Event d = wait_done(*t);
        r.tokens += d.completion_tokens;
        r.mean_ttft_ms += (d.queue_ms + d.prompt_ms) / n;
    }
    r.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    return r;
}

struct TurnResult {
    uint32_t history = 0, new_tokens = 0;
    double ttft_follow_up_ms = 0, ttft_cold_ms = 0;
    uint32_t cached = 0;
};

// A conversation of `history` tokens, then a turn that adds `new_tokens`: the follow-up's time
// to first token on the slot that holds the conversation, and the same prompt on a cold slot.
TurnResult run_turn(engine::Engine& e, uint32_t history, uint32_t new_tokens, uint32_t n_vocab, std::mt19937& rng) {
    TurnResult r{history, new_tokens};
    std::vector<int32_t> convo = random_tokens(history, n_vocab, rng);
    {
        auto t = e.submit(request(convo, 1));
        wait_done(*t);
    }
    std::vector<int32_t> more = random_tokens(new_tokens, n_vocab, rng);
    std::vector<int32_t> follow = convo;
    follow.insert(follow.end(), more.begin(), more.end());
    {
        auto t = e.submit(request(follow, 1));
        engine::Event d = wait_done(*t);
        r.ttft_follow_up_ms = d.prompt_ms;
        r.cached = d.cached_tokens;
    }
    // A prompt of the same length that shares nothing with any slot.
    {
        auto t = e.submit(request(random_tokens(uint32_t(follow.size()), n_vocab, rng), 1));
        r.ttft_cold_ms = wait_done(*t).prompt_ms;
    }
    return r;
}

struct SharedPrefixResult {
    uint32_t prefix = 0, own = 0, slots = 0;
    uint64_t one_slot_bytes = 0, all_slots_bytes = 0;
    uint32_t one_slot_blocks = 0, all_slots_blocks = 0;
    double first_ttft_ms = 0, others_mean_ttft_ms = 0;
    uint64_t cached = 0;  // prompt tokens the other slots did not evaluate
};

// Every slot's request: the same `prefix` tokens (a system prompt), then `own` tokens of its own,
// one token generated; request i is pinned to slot i, so that every slot ends up holding one. The
// first goes alone; the others, sent together once it is done, share its blocks. The engine is
// fresh (every slot empty), so the KV cache in use is theirs alone.
SharedPrefixResult run_shared_prefix(ModelGpu& model, const Tokenizer& tok, const ServeBenchOptions& o,
                                     uint32_t n_vocab, std::mt19937& rng) {
    SharedPrefixResult r{o.shared_prefix, 8, o.parallel};
    const std::vector<int32_t> prefix = random_tokens(o.shared_prefix, n_vocab, rng);
    auto pinned = [&](uint32_t slot) {
        std::vector<int32_t> p = prefix;
        for (int32_t t : random_tokens(r.own, n_vocab, rng)) p.push_back(t);
        engine::CompletionRequest q = request(std::move(p), 1);
        q.slot = int32_t(slot);
        return q;
    };
    engine::Engine e(model, tok, {.n_slots = o.parallel, .queue_limit = 1024});
    {
        auto t = e.submit(pinned(0));
        r.first_ttft_ms = wait_done(*t).prompt_ms;
    }
    const engine::EngineMetrics one = e.metrics();
    r.one_slot_blocks = one.kv_blocks_used;
    r.one_slot_bytes = uint64_t(one.kv_blocks_used) * one.kv_block_bytes;
    std::vector<std::unique_ptr<engine::Ticket>> tickets;
    for (uint32_t i = 1; i < o.parallel; ++i) tickets.push_back(e.submit(pinned(i)));
    for (auto& t : tickets) {
        const engine::Event d = wait_done(*t);
        r.others_mean_ttft_ms += d.prompt_ms / double(tickets.size());
        r.cached += d.cached_tokens;
    }
    const engine::EngineMetrics all = e.metrics();
    r.all_slots_blocks = all.kv_blocks_used;
    r.all_slots_bytes = uint64_t(all.kv_blocks_used) * all.kv_block_bytes;
    return r;
}

void bench_serve(const ServeBenchOptions& o) {
    ModelOptions mo;
    mo.n_ctx = o.ctx;
    mo.ubatch = o.ubatch;
    mo.n_seq = o.parallel;
    mo.kv_budget = o.kv_budget;
    LoadedModel m = load_model(resolve_model_path(o.model), o.device, mo, o.json);
    auto engine = std::make_unique<engine::Engine>(*m.model, *m.tokenizer,
                                                   engine::EngineOptions{.n_slots = o.parallel, .queue_limit = 1024});
    engine::Engine& e = *engine;
    std::mt19937 rng(1234);
    const uint32_t n_vocab = m.cfg.n_vocab;
    if (o.n_prompt + o.n_gen > m.model->n_ctx())
        throw std::invalid_argument(fmt::format("--prompt {} + --gen {} exceed the context per slot ({})", o.n_prompt,
                                                o.n_gen, m.model->n_ctx()));
    run_streams(e, std::min(o.parallel, 2u), o, n_vocab, rng);  // warm-up: every recording made once

    std::vector<StreamsResult> streams;
    for (uint32_t n : {1u, o.parallel}) streams.push_back(run_streams(e, n, o, n_vocab, rng));
    std::vector<TurnResult> turns;
    for (uint32_t history : {64u, 256u, 768u})
        for (uint32_t fresh : {16u, 128u})
            if (history + fresh + 1 <= m.model->n_ctx()) turns.push_back(run_turn(e, history, fresh, n_vocab, rng));
    engine.reset();  // the shared-prefix run starts from empty slots
    std::optional<SharedPrefixResult> shared;
    if (o.shared_prefix > 0 && o.parallel > 1 && o.shared_prefix + 8 + 1 <= m.model->n_ctx())
        shared = run_shared_prefix(*m.model, *m.tokenizer, o, n_vocab, rng);

    const double ratio = streams[0].tps() > 0 ? streams.back().tps() / streams[0].tps() : 0;
    if (o.json) {
        nlohmann::json j;
        j["model"] = o.model;
        j["device"] = device_names(m);
        j["parallel"] = o.parallel;
        for (auto& s : streams)
            j["streams"].push_back({{"streams", s.streams},
                                    {"tokens", s.tokens},
                                    {"wall_s", s.wall_s},
                                    {"tokens_per_s", s.tps()},
                                    {"mean_ttft_ms", s.mean_ttft_ms}});
        j["aggregate_over_single"] = ratio;
        for (auto& t : turns)
            j["follow_up"].push_back({{"history", t.history},
                                      {"new_tokens", t.new_tokens},
                                      {"cached", t.cached},
                                      {"ttft_ms", t.ttft_follow_up_ms},
                                      {"cold_ttft_ms", t.ttft_cold_ms}});
        if (shared)
            j["shared_prefix"] = {
                {"prefix_tokens", shared->prefix},
                {"own_tokens", shared->own},
                {"slots", shared->slots},
                {"one_slot_kv_bytes", shared->one_slot_bytes},
                {"all_slots_kv_bytes", shared->all_slots_bytes},
                {"one_slot_kv_blocks", shared->one_slot_blocks},
                {"all_slots_kv_blocks", shared->all_slots_blocks},
                {"kv_ratio", double(shared->all_slots_bytes) / double(std::max<uint64_t>(shared->one_slot_bytes, 1))},
                {"first_ttft_ms", shared->first_ttft_ms},
                {"others_mean_ttft_ms", shared->others_mean_ttft_ms},
                {"cached_tokens", shared->cached}};
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("model {} on {}, {} slots, prompt {} + {} generated tokens per stream\n\n", o.model, device_names(m),
               o.parallel, o.n_prompt, o.n_gen);
    fmt::print("| streams | tokens | wall s | generated t/s | mean time to first token |\n|---|---|---|---|---|\n");
    for (auto& s : streams)
        fmt::print("| {} | {} | {:.2f} | {:.1f} | {:.0f} ms |\n", s.streams, s.tokens, s.wall_s, s.tps(),
                   s.mean_ttft_ms);
    fmt::print("\naggregate throughput, {} streams / 1 stream: {:.2f}x\n\n", o.parallel, ratio);
    fmt::print(
        "| conversation tokens | new tokens | reused | follow-up TTFT | same prompt, cold slot "
        "|\n|---|---|---|---|---|\n");
    for (auto& t : turns)
        fmt::print("| {} | {} | {} | {:.0f} ms | {:.0f} ms |\n", t.history, t.new_tokens, t.cached, t.ttft_follow_up_ms,
                   t.ttft_cold_ms);
    if (shared) {
        const SharedPrefixResult& s = *shared;
        fmt::print("\n{} slots, each prompt a shared {}-token prefix + {} tokens of its own:\n\n", s.slots, s.prefix,
                   s.own);
        fmt::print("| slots holding it | KV blocks | KV cache | time to first token |\n|---|---|---|---|\n");
        fmt::print("| 1 | {} | {} | {:.0f} ms |\n", s.one_slot_blocks, format_mib(s.one_slot_bytes), s.first_ttft_ms);
        fmt::print("| {} | {} | {} ({:.2f}x) | {:.0f} ms (mean of the other {}; {} prompt tokens shared) |\n", s.slots,
                   s.all_slots_blocks, format_mib(s.all_slots_bytes),
                   double(s.all_slots_bytes) / double(std::max<uint64_t>(s.one_slot_bytes, 1)), s.others_mean_ttft_ms,
                   s.slots - 1, s.cached);
    }
}

}  // namespace

void register_bench_serve(CLI::App& app) {
    auto o = std::make_shared<ServeBenchOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench-serve", "Serving engine throughput: N concurrent streams against one, and follow-up-turn latency");
    cmd->add_option("-m,--model", o->model, "GGUF model (default: stories260K from ../shared/models)");
    cmd->add_option("--parallel", o->parallel, "Concurrent streams (slots)")->check(CLI::Range(1u, 64u));
    cmd->add_option("--prompt", o->n_prompt, "Prompt tokens per stream")->check(CLI::Range(1u, 1u << 20));
    cmd->add_option("--gen", o->n_gen, "Tokens generated per stream")->check(CLI::Range(1u, 1u << 20));
    cmd->add_option("--ctx", o->ctx, "Context per slot")->check(CLI::Range(16u, 1u << 20));
    cmd->add_option("--ubatch", o->ubatch, "Prompt tokens per forward chunk")->check(CLI::Range(1u, 4096u));
    cmd->add_option("--kv-budget", o->kv_budget,
                    "Tokens of KV cache for all slots together (default: --parallel x --ctx)")
        ->check(CLI::Range(1u, 1u << 30));
    cmd->add_option("--shared-prefix", o->shared_prefix,
                    "Tokens of the system prompt every slot shares in the KV-memory run (0: skip it; skipped where it "
                    "does not fit --ctx)")
        ->check(CLI::Range(0u, 1u << 20));
    cmd->add_flag("--json", o->json, "Print the figures as JSON");
    o->device.add_to(cmd);
    o->device.add_split_to(cmd);
    cmd->callback([o] { bench_serve(*o); });
}

}  // namespace vkllm::apps
