// `vkllm run`: generate text from a prompt, streaming it to stdout.
#include "apps/commands.h"
#include "apps/load_model.h"
#include "apps/speculation_options.h"
#include "apps/vision_options.h"
#include "model/forward/forward_check.h"
#include "model/forward/model_cpu.h"
#include "model/grammar/json_schema.h"
#include "model/vision/multimodal_prompt.h"
#include "serving/engine/generate.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <random>

namespace vkllm::apps {

namespace {

struct RunOptions {
    std::string model;
    std::string prompt;
    int32_t n_predict = 128;
    SamplerParams sampler;
    int64_t seed = -1;
    uint32_t n_ctx = 0;
    uint32_t ubatch = 64;
    ops::KvType kv_type = ops::KvType::F16;
    bool check = false;
    bool no_echo = false;
    bool parse_special = false;
    // The structure of the output: at most one (CLI11 excludes the others).
    std::string grammar, grammar_file, json_schema, json_schema_file;
    DeviceOptions device;
    VisionOptions vision;
    SpeculationOptions speculation;
};

std::string read_text_file(const std::string& path, const char* option) {
    std::optional<std::string> text = read_whole_file(path);
    if (!text) throw std::invalid_argument(fmt::format("{} {}: cannot open the file", option, path));
    return *std::move(text);
}

// The grammar the options ask for, or null; errors name the option (and the line and column, or
// the schema keyword).
std::shared_ptr<const grammar::Grammar> output_grammar(const RunOptions& o) {
    const char* option = !o.grammar.empty()            ? "--grammar"
                         : !o.grammar_file.empty()     ? "--grammar-file"
                         : !o.json_schema.empty()      ? "--json-schema"
                         : !o.json_schema_file.empty() ? "--json-schema-file"
                                                       : nullptr;
    if (!option) return nullptr;
    try {
        if (!o.grammar.empty()) return std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(o.grammar));
        if (!o.grammar_file.empty())
            return std::make_shared<const grammar::Grammar>(
                grammar::Grammar::parse(read_text_file(o.grammar_file, option)));
        if (!o.json_schema.empty())
            return std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(o.json_schema));
        return std::make_shared<const grammar::Grammar>(
            grammar::json_schema_grammar(read_text_file(o.json_schema_file, option)));
    } catch (const grammar::SchemaError& e) {
        throw std::invalid_argument(fmt::format("{}: {}", option, e.what()));
    } catch (const grammar::GrammarError& e) {
        throw std::invalid_argument(fmt::format("{}: {}", option, e.what()));
    }
}

void run(const RunOptions& o) {
    ModelOptions lo;
    lo.n_ctx = o.n_ctx;
    lo.ubatch = o.ubatch;
    lo.kv_type = o.kv_type;
    engine::GenerateParams gp;
    gp.n_predict = o.n_predict;
    gp.sampler = o.sampler;
    gp.sampler.seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();
    gp.sampler.validate();
    gp.grammar = output_grammar(o);  // before loading: a bad grammar fails at once
    if (gp.grammar && o.check) throw std::invalid_argument("--check runs greedy without a grammar; drop one of them");

    if (!o.vision.images.empty() && o.vision.mmproj.empty())
        throw std::invalid_argument("--image needs a vision encoder for the model: give its mmproj file (--mmproj)");
    // Images are read before the model loads: a bad one fails at once.
    std::vector<RgbImage> images;
    for (const std::string& f : o.vision.images) images.push_back(read_image(f, o.vision.limits()));
    if (!images.empty() && o.check) throw std::invalid_argument("--check does not take images yet");

    std::string path = resolve_model_path(o.model);
    o.vision.fit_ubatch(lo);
    o.speculation.fit_model(lo);
    if (o.speculation.on() && o.check) throw std::invalid_argument("--check does not take --draft or --lookup");
    LoadedModel m = load_model(path, o.device, lo, false, ModelUse::GenerateAny);
    for (const std::string& w : m.tokenizer->warnings()) fmt::print(stderr, "vkllm: warning: {}\n", w);
    const std::unique_ptr<VisionModel> vision = load_vision(m, o.vision, false);
    if (m.encoder && o.speculation.on()) throw std::invalid_argument("an encoder-decoder model takes no draft");
    const engine::Speculation spec = make_speculation(o.speculation, m, o.device, 1, false);
    gp.drafter = spec.drafter;
    gp.draft_max = o.speculation.params.draft_max;
    gp.draft_min = o.speculation.params.draft_min;
    MultimodalPrompt mm = build_multimodal_prompt(*m.tokenizer, vision.get(), o.prompt, images, true, o.parse_special);
    if (!images.empty())
        fmt::print(stderr, "images: {} in {} prompt tokens, encoded in {:.0f} ms\n", images.size(), mm.tokens.size(),
                   mm.encode_ms);
    std::vector<int32_t> prompt = std::move(mm.tokens);
    gp.images = std::move(mm.images);
    if (prompt.empty() && m.tokenizer->bos_id() >= 0) prompt.push_back(m.tokenizer->bos_id());  // "" means BOS only
    if (prompt.empty()) throw std::invalid_argument("the prompt encodes to no tokens and the vocabulary has no BOS");
    if (m.encoder && !gp.images.empty()) throw std::invalid_argument("an encoder-decoder model takes no images");
    if (m.encoder) {
        // T5: the encoder reads the prompt; the decoder generates from its start token.
        if (o.check) throw std::invalid_argument("--check does not run encoder-decoder models yet");
        prompt = {encode_for_decoder(m, prompt)};
    }

    if (o.check) {
        // Run the host reference beside the device over the prompt and every generated token.
        ModelCpu cpu(*m.file, m.cfg, m.model->n_ctx(), lo.kv_type, lo.ubatch);
        std::vector<int32_t> tokens = prompt;
        double worst_logits = 0;
        const bool int_dot = m.model->int_dot_matvecs();
        const double limit = int_dot ? kCheckNmseIntDot : kCheckNmse;
        if (int_dot)
            fmt::print(stderr,
                       "check: this device takes the integer-dot matvecs (activations quantized to 8 bits): "
                       "threshold {:g}; --caps no-int-dot checks the float path at {:g}\n",
                       limit, kCheckNmse);
        for (int32_t step = 0; step <= o.n_predict; ++step) {
            CheckReport r = check_forward(*m.model, cpu, tokens, limit, limit);
            worst_logits = std::max(worst_logits, r.logits_nmse);
            if (!r.ok) {
                throw std::runtime_error(fmt::format("--check: device and reference diverge at position {}: {}",
                                                     m.model->n_past() - tokens.size(), r.first_divergence));
            }
            if (step == o.n_predict) break;
            int32_t next = r.gpu_argmax;
            if (m.tokenizer->is_eog(next)) break;
            std::fputs(m.tokenizer->decode_piece(next, tokens.back()).c_str(), stdout);
            std::fflush(stdout);
            tokens = {next};
            if (m.model->n_past() + 1 > m.model->n_ctx()) break;
        }
        fmt::print(stderr, "\ncheck: OK, device matches the host reference at every layer (worst logits nmse {:.3g})\n",
                   worst_logits);
        return;
    }

    // The prompt is echoed with the first generated piece, not before: a run that fails up front
    // (prompt longer than the context, non-finite logits) must leave stdout empty.
    bool echoed = o.no_echo;
    auto echo = [&] {
        if (echoed) return;
        echoed = true;
        std::fputs(o.prompt.c_str(), stdout);
        std::fflush(stdout);
    };
    engine::GenerateStats st = engine::generate(*m.model, *m.tokenizer, prompt, gp, [&](std::string_view piece) {
        echo();
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    });
    echo();
    fmt::print(stderr,
               "\n\nload: {:.0f} ms | prompt: {} tokens, {:.1f} tokens/s | generation: {} tokens, {:.1f} tokens/s{}{}"
               " | seed {}\n",
               m.load_ms, st.prompt_tokens, st.prompt_tps(), st.generated_tokens, st.generate_tps(),
               st.stopped_at_eos ? " (stopped at EOS)" : "",
               spec.drafter ? fmt::format(" | drafts: {} of {} kept in {} steps", st.accepted_tokens, st.draft_tokens,
                                          st.decode_steps)
                            : std::string(),
               gp.sampler.seed);
}

}  // namespace

void register_run(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    auto* cmd = app.add_subcommand("run", "Generate text from a prompt (streams to stdout)");
    cmd->add_option("-m,--model", o->model, "GGUF model file (default: ../shared/models/stories260K.gguf)");
    cmd->add_option("-p,--prompt", o->prompt, "Prompt text; \"\" means BOS only");
    cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")
        ->check(non_negative_number())
        ->capture_default_str();
    cmd->add_option("--temp", o->sampler.temperature, "Temperature; 0 = greedy")
        ->check(non_negative_number())
        ->capture_default_str();
    cmd->add_option("--top-k", o->sampler.top_k, "Top-k (0 = off)")
        ->check(non_negative_number())
        ->capture_default_str();
    cmd->add_option("--top-p", o->sampler.top_p, "Top-p nucleus (1 = off)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    cmd->add_option("--min-p", o->sampler.min_p, "Min-p (0 = off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
    cmd->add_option("--repeat-penalty", o->sampler.repeat_penalty, "Repetition penalty (1 = off)")
        ->check(positive_number())
        ->capture_default_str();
    cmd->add_option("--repeat-last-n", o->sampler.repeat_last_n, "Tokens the penalty looks back over")
        ->check(non_negative_number())
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Random seed (default: random; printed at the end)")
        ->check(non_negative_number());
    cmd->add_option("-c,--ctx", o->n_ctx, "Context length (default: the model's, capped by device memory)")
        ->check(positive_number());
    cmd->add_option("--ubatch", o->ubatch, "Prompt tokens per forward chunk")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    add_kv_type_option(cmd, o->kv_type);
    cmd->add_flag("--check", o->check,
                  "Run the host reference beside the device (greedy) and report the first divergence");
    cmd->add_flag("--no-echo", o->no_echo, "Do not print the prompt before the generated text");
    cmd->add_flag("--parse-special", o->parse_special,
                  "Turn the text of control tokens in the prompt (<|eot_id|>, <|im_start|>, ...) into those tokens");
    auto* g = cmd->add_option("--grammar", o->grammar,
                              "The output must be a sentence of this GBNF grammar (llama.cpp's syntax)");
    auto* gf = cmd->add_option("--grammar-file", o->grammar_file, "As --grammar, from a file");
    auto* js = cmd->add_option("--json-schema", o->json_schema,
                               "The output must be JSON valid against this schema (see docs/structured-output.md)");
    auto* jf = cmd->add_option("--json-schema-file", o->json_schema_file, "As --json-schema, from a file");
    g->excludes(gf, js, jf);
    gf->excludes(js, jf);
    js->excludes(jf);
    o->vision.add_to(cmd, true);
    o->speculation.add_to(cmd);
    o->device.add_to(cmd);
    o->device.add_split_to(cmd);
    o->device.add_tune_to(cmd);
    cmd->callback([o] { run(*o); });
}

}  // namespace vkllm::apps
