// `vkllm serve`: the OpenAI-compatible HTTP server. Listens first (so /health can say "loading"),
// then loads the model with one KV sequence per slot, builds the engine and serves until SIGINT or
// SIGTERM, which end open streams cleanly and exit 0 within a few seconds.
#include "apps/blend_options.h"
#include "apps/commands.h"
#include "apps/load_model.h"
#include "apps/speculation_options.h"
#include "apps/model_card.h"
#include "apps/vision_options.h"
#include "model/embedding.h"
#include "model/vision/multimodal_prompt.h"
#include "serving/answer/harmony.h"
#include "serving/engine/engine.h"
#include "serving/server/http_server.h"
#include "serving/server/request_plan.h"
#include "serving/chat_template/chat_template.h"

#include <fmt/format.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

namespace vkllm::apps {

namespace {

struct ServeOptions {
    std::string model;
    std::string host = "127.0.0.1";
    int port = 8080;
    uint32_t parallel = 4;
    uint32_t kv_budget = 0;
    uint32_t n_ctx = 0;
    uint32_t ubatch = 0;  // 0: 64, or an embedding model's (embedding_sizes)
    ops::KvType kv_type = ops::KvType::F16;
    std::string api_key, api_key_file;
    std::string chat_template;
    std::string alias;  // the model's id in responses; "": the file's name
    bool jinja = false;  // llama-server's --jinja: accepted, vkllm always renders templates with Jinja
    double timeout_s = 600;
    uint32_t queue = 64;
    uint32_t http_threads = 0;
    bool quiet = false;
    bool no_webui = false;
    bool embeddings = false;  // a decoder whose file names no pooling type as an embedding model
    std::string pooling;  // "": the file's
    std::string reasoning = "auto";
    std::string template_kwargs;  // JSON object text
    std::string cors_origins = "*";
    bool no_cors_credentials = false;
    VisionOptions vision;  // --mmproj, --image-max-pixels
    SpeculationOptions speculation;  // --draft, --draft-max, --draft-min, --lookup
    BlendFlags blend;  // --blend-separator, --blend-ratio, --kv-store
    bool allow_image_urls = false;
    size_t image_url_max_bytes = server::ImageInputOptions{}.max_url_bytes;
    double image_url_timeout_s = 10;
    DeviceOptions device;
};

// The engine's Ticket as the server's Generation.
class TicketGeneration final : public server::Generation {
public:
    explicit TicketGeneration(std::unique_ptr<engine::Ticket> t) : t_(std::move(t)) {}
    std::optional<engine::Event> next(std::chrono::milliseconds wait) override { return t_->next(wait); }
    void cancel() override { t_->cancel(); }

private:
    std::unique_ptr<engine::Ticket> t_;
};

// SIGINT and SIGTERM are blocked in every thread (they must be, before any thread starts) and taken
// by one thread with sigwait(), so the shutdown runs as ordinary code, not in a signal handler.
class SignalWaiter {
public:
    // `on_signal` runs on the waiter thread when the signal arrives, before wait() returns.
    explicit SignalWaiter(std::function<void(int)> on_signal) : on_signal_(std::move(on_signal)) {
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        thread_ = std::thread([this] {
            int sig = 0;
            sigwait(&set_, &sig);
            {
                std::lock_guard lk(mu_);
                signal_ = sig;
            }
            cv_.notify_all();
            if (!closing_ && on_signal_) on_signal_(sig);
        });
    }
    ~SignalWaiter() {
        // Wake the waiter when no signal came (an error unwinds through here).
        closing_ = true;
        if (!fired()) pthread_kill(thread_.native_handle(), SIGTERM);
        thread_.join();
    }
    bool fired() const {
        std::lock_guard lk(mu_);
        return signal_ != 0;
    }
    int wait() {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return signal_ != 0; });
        return signal_;
    }

private:
    sigset_t set_;
    std::thread thread_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    int signal_ = 0;
    std::function<void(int)> on_signal_;
    std::atomic<bool> closing_{false};  // the destructor's own wake-up: no callback
};

std::string read_api_key_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::invalid_argument(fmt::format("--api-key-file: cannot read '{}'", path));
    std::string key;
    std::getline(f, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.empty()) throw std::invalid_argument(fmt::format("--api-key-file: the first line of '{}' is empty", path));
    return key;
}

void wait_and_stop(server::HttpServer& http, SignalWaiter& signals, engine::Engine* engine);

// --pooling: the pooling /v1/embeddings uses (unset: the file's), checked before the model loads.
std::optional<Pooling> served_pooling(const ServeOptions& o, const std::string& path, const ModelConfig& cfg,
                                      ModelRole role) {
    if (o.pooling.empty()) {
        if (role == ModelRole::Embed && cfg.pooling == Pooling::None)
            throw std::invalid_argument(
                fmt::format("{}: pooling type 'none' gives no one vector per input, which "
                            "/v1/embeddings returns: give --pooling mean, cls or last",
                            path));
        return std::nullopt;
    }
    const std::optional<Pooling> p = parse_pooling(o.pooling);
    if (!p || *p == Pooling::None || *p == Pooling::Rank)
        throw std::invalid_argument(
            fmt::format("--pooling '{}': expected mean, cls or last (/v1/embeddings returns one "
                        "vector per input; a reranker's rank pooling comes from its file)",
                        o.pooling));
    if (role != ModelRole::Embed)
        throw std::invalid_argument(fmt::format(
            "--pooling is for embedding models; {} is {}", path,
            role == ModelRole::Rerank ? "a reranker (pooling rank)" : "a decoder served for text (add --embeddings)"));
    return p;
}

// An embedding model (an encoder, or a decoder with a pooling type or --embeddings): /v1/embeddings,
// or /v1/rerank for a reranker (pooling rank); one request's inputs after another's (one device,
// one model).
void serve_embeddings(server::HttpServer& http, LoadedModel& m, const std::string& path, const std::string& id,
                      ModelRole role, std::optional<Pooling> pooling, std::atomic<bool>& loaded) {
    const bool reranker = role == ModelRole::Rerank;
    auto mu = std::make_shared<std::mutex>();
    server::ServedModel sm;
    sm.id = id;
    sm.model_path = path;
    sm.created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    sm.tokenizer = m.tokenizer.get();
    sm.n_ctx = m.model->n_ctx();
    sm.card = model_card(m, path, "");
    sm.embedding_dim = m.cfg.dim;
    sm.embed_limit = embed_limit(*m.model);
    ModelGpu* model = m.model.get();
    if (reranker) {
        const GgufFile* file = m.file.get();
        const Tokenizer* tok = m.tokenizer.get();
        sm.rerank_tokens = [file, tok](std::string_view query, std::string_view doc) {
            return rerank_tokens(*file, *tok, query, doc);
        };
        sm.rerank = [model, mu](const std::vector<std::vector<int32_t>>& pairs) {
            std::lock_guard lk(*mu);
            std::vector<float> out;
            for (const RerankScore& r : score_pairs(*model, pairs)) out.push_back(r.score);
            return out;
        };
    } else {
        sm.embed = [model, mu, pooling](const std::vector<std::vector<int32_t>>& inputs) {
            std::lock_guard lk(*mu);
            std::vector<std::vector<float>> out;
            for (Embedding& e : embed_batch(*model, inputs, {.pooling = pooling}))
                out.push_back(std::move(e.vectors.at(0)));
            return out;
        };
    }
    http.set_model(std::move(sm));
    loaded = true;
    if (reranker)
        fmt::print(
            "vkllm serve: ready: {}/v1 (reranker {}: /v1/rerank, query and document of up to {} tokens together)\n",
            http.url(), std::filesystem::path(path).filename().string(), embed_limit(*m.model));
    else
        fmt::print(
            "vkllm serve: ready: {}/v1 (embedding model {}, {} dimensions, pooling {}, inputs of up to {} tokens)\n",
            http.url(), std::filesystem::path(path).filename().string(), m.cfg.dim,
            pooling_name(pooling.value_or(m.cfg.pooling)), embed_limit(*m.model));
    std::fflush(stdout);
}

void serve(const ServeOptions& o) {
    // A signal while the model loads: nothing is served yet and the upload cannot be interrupted,
    // so leave at once; the OS releases the device memory.
    std::atomic<bool> loaded{false};
    SignalWaiter signals([&loaded](int sig) {  // first: every thread started later inherits the blocked mask
        if (loaded) return;
        fmt::print(stderr, "vkllm serve: {} while loading the model: exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        std::fflush(stderr);
        std::_Exit(0);
    });

    server::ServerOptions so;
    so.host = o.host;
    so.port = o.port;
    so.api_key = o.api_key_file.empty() ? o.api_key : read_api_key_file(o.api_key_file);
    // Every running or queued request holds a connection thread, so the pool must outnumber
    // slots + queue, or the queue-full 503 could never be reached and /health would wait.
    // Capped: a --queue of thousands should not mean thousands of idle threads.
    so.threads = o.http_threads ? o.http_threads : std::min(o.parallel + o.queue + 8, 512u);
    so.log_requests = !o.quiet;
    so.cors.origins = server::parse_cors_origins(o.cors_origins);
    so.cors.credentials = !o.no_cors_credentials;
    so.webui = !o.no_webui;
    ModelOptions mo;
    mo.n_ctx = o.n_ctx;
    const std::string path = resolve_model_path(o.model);
    // An embedding model keeps no conversations: one sequence, sized by embedding_sizes.
    const ModelConfig peeked = ModelConfig::from_gguf(GgufFile::open(path));
    const ModelRole role = model_role(peeked, o.embeddings);
    const std::optional<Pooling> pooling = served_pooling(o, path, peeked, role);
    if (role == ModelRole::Rerank) require_reranker(peeked);  // a decoder's rank pooling is refused here
    if (embeds(role)) {
        const EmbedSizes sizes = embedding_sizes(peeked, o.n_ctx, o.ubatch);
        mo.n_ctx = sizes.n_ctx;
        mo.ubatch = sizes.ubatch;
    } else {
        mo.ubatch = o.ubatch ? o.ubatch : 64;
        o.vision.fit_ubatch(mo);  // a Gemma 3 image's rows are one chunk
        o.speculation.fit_model(mo);
    }
    mo.kv_type = o.kv_type;
    mo.n_seq = embeds(role) ? 1 : o.parallel;
    if (!embeds(role)) o.blend.fit_model(mo);
    if (!embeds(role)) mo.kv_budget = o.kv_budget;

    if (embeds(role) && o.speculation.on())
        throw std::invalid_argument("--draft, --lookup: an embedding model generates nothing to draft");
    if (embeds(role) && o.blend.on())
        throw std::invalid_argument("--blend-separator: an embedding model generates nothing to blend documents for");
    if (embeds(role) && !o.vision.mmproj.empty())
        throw std::invalid_argument("--mmproj: an embedding model takes no images (images go into chat requests)");
    if (o.allow_image_urls && o.vision.mmproj.empty())
        throw std::invalid_argument("--allow-image-urls needs a vision encoder for the model (--mmproj)");

    server::HttpServer http(so);
    http.start();
    fmt::print("vkllm serve: listening on {} (loading {})\n", http.url(), path);
    std::fflush(stdout);

    const std::string model_id = o.alias.empty() ? std::filesystem::path(path).filename().string() : o.alias;
    LoadedModel m = load_model(path, o.device, mo, false, ModelUse::Any);
    for (const std::string& w : m.tokenizer->warnings()) fmt::print(stderr, "vkllm: warning: {}\n", w);
    if (embeds(role)) {
        serve_embeddings(http, m, path, model_id, role, pooling, loaded);
        wait_and_stop(http, signals, nullptr);
        return;
    }
    auto tmpl = std::make_shared<chat_template::ChatTemplate>(chat_template_for(m, o.chat_template));
    // The vision encoder shares the text model's device context: it encodes on the HTTP threads
    // while the engine's thread runs the text model, and the Context's queue takes their work in
    // turn. Before the engine: gone after it (the server's callback below uses it only while
    // requests run, and wait_and_stop ends them first).
    std::unique_ptr<VisionModel> vision;
    if (!o.vision.mmproj.empty()) {
        check_model_path(o.vision.mmproj);
        vision = std::make_unique<VisionModel>(*m.ctx, o.vision.mmproj, m.cfg.dim);
        const VisionConfig& vc = vision->config();
        fmt::print(stderr, "vision: {} ({} projector, {}x{} tiles of {} patches)\n", o.vision.mmproj, vc.desc->name,
                   vc.image_size, vc.image_size, vc.n_patches());
    }

    engine::EngineOptions eo;
    eo.n_slots = o.parallel;
    eo.queue_limit = o.queue;
    eo.default_timeout = std::chrono::milliseconds(int64_t(o.timeout_s * 1000));
    // Before the engine: the draft model outlives it.
    const engine::Speculation spec = make_speculation(o.speculation, m, o.device, o.parallel, false);
    eo.drafter = spec.drafter;
    eo.draft_max = o.speculation.params.draft_max;
    eo.draft_min = o.speculation.params.draft_min;
    eo.blender = make_blender(o.blend, *m.model, o.parallel);
    engine::Engine engine(*m.model, *m.tokenizer, eo);

    server::ServedModel sm;
    sm.id = model_id;
    sm.created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    sm.tokenizer = m.tokenizer.get();
    sm.n_ctx = engine.n_ctx_per_slot();
    sm.card = model_card(m, path, std::string(tmpl->source()));
    sm.n_slots = o.parallel;
    sm.model_path = path;
    sm.chat_template = tmpl->source();
    sm.render_chat = [tmpl](const chat_template::ChatInputs& in) { return tmpl->apply(in); };
    sm.blend_separator = o.blend.separator;
    sm.tool_format = &answer::detect_tool_format(tmpl->source());
    sm.template_renders_tools = answer::template_renders_tools(tmpl->source());
    sm.reasoning = answer::reasoning_tags(tmpl->source());
    sm.harmony = answer::template_is_harmony(tmpl->source());
    sm.tool_control_tokens = chat_template::tool_control_tokens(*m.tokenizer, *sm.tool_format);
    sm.chat_template_name = tmpl->name();
    if (vision) {
        const Tokenizer* tok = m.tokenizer.get();
        VisionModel* v = vision.get();
        // The prompt split at its markers, each piece tokenized as mtmd does; a chat's first piece
        // with the chat prompt's own BOS rule (one BOS, even when the template writes it), a
        // /completion prompt as /completion tokenizes a string.
        sm.media_marker = private_media_marker();
        sm.image_prompt = [v, tok, marker = sm.media_marker](const std::string& text,
                                                             const std::vector<RgbImage>& images,
                                                             server::ImagePromptSource source) {
            MultimodalPrompt mm =
                source == server::ImagePromptSource::Chat
                    ? build_multimodal_prompt(*tok, v, text, images, true, true,
                                              [tok](std::string_view piece) {
                                                  return chat_template::encode_prompt(*tok, std::string(piece));
                                              })
                    : build_multimodal_prompt(*tok, v, text, images, true, true, {}, marker);
            return server::ImagePrompt{std::move(mm.tokens), std::move(mm.images)};
        };
        sm.image_input.limits = o.vision.limits();
        sm.image_input.allow_urls = o.allow_image_urls;
        sm.image_input.max_url_bytes = o.image_url_max_bytes;
        sm.image_input.url_timeout = std::chrono::milliseconds(int64_t(o.image_url_timeout_s * 1000));
    }
    sm.reasoning_switch = chat_template::reasoning_switch(tmpl->source(), sm.reasoning != nullptr, sm.harmony);
    sm.reasoning_default = chat_template::parse_reasoning(o.reasoning);
    if (!o.template_kwargs.empty()) sm.template_kwargs = nlohmann::ordered_json::parse(o.template_kwargs);
    try {
        server::check_reasoning_default(sm);
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(
            fmt::format("--reasoning {} with chat template '{}': {}", o.reasoning, tmpl->name(), e.what()));
    }
    sm.submit = [&engine](engine::CompletionRequest req) -> std::unique_ptr<server::Generation> {
        return std::make_unique<TicketGeneration>(engine.submit(std::move(req)));
    };
    sm.metrics = [&engine] { return engine.metrics(); };
    http.set_model(std::move(sm));
    loaded = true;
    fmt::print("vkllm serve: ready: {}/v1 (model {}, chat template '{}', tool calls '{}', {} slots of {} tokens{})\n",
               http.url(), std::filesystem::path(path).filename().string(), tmpl->name(),
               answer::detect_tool_format(tmpl->source()).name, o.parallel, engine.n_ctx_per_slot(),
               vision ? fmt::format(", images through {}{}", std::filesystem::path(o.vision.mmproj).filename().string(),
                                    o.allow_image_urls ? " (http(s) URLs allowed)" : "")
                      : "");
    if (!o.no_webui) fmt::print("vkllm serve: chat page: {}/\n", http.url());
    std::fflush(stdout);

    wait_and_stop(http, signals, &engine);
}

void wait_and_stop(server::HttpServer& http, SignalWaiter& signals, engine::Engine* engine) {
    int sig = signals.wait();
    auto t0 = std::chrono::steady_clock::now();
    fmt::print(stderr, "vkllm serve: {}: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http.begin_shutdown();  // new requests: 503
    if (engine) engine->shutdown();  // every request ends (Cancelled); streams send their last event
    if (!http.wait_streams(std::chrono::milliseconds(1500)))
        fmt::print(stderr, "vkllm serve: some streams did not end in time; closing them\n");
    // stop() joins the connection threads; one stuck on a slow client could hold it for a read
    // timeout, and the promise is that every connection is closed within 4 s.
    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
        http.stop();
        stopped = true;
    });
    while (!stopped && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(4000))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!stopped) {
        fmt::print(stderr, "vkllm serve: connections still open after 4 s: exiting without waiting for them\n");
        std::fflush(stderr);
        std::_Exit(0);
    }
    stopper.join();
    fmt::print(stderr, "vkllm serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, completions, models)");
    cmd->add_option("-m,--model", o->model, "GGUF model file (default: ../shared/models/stories260K.gguf)");
    cmd->add_option("--host", o->host, "Address to listen on; 0.0.0.0 exposes the server to the network")
        ->capture_default_str();
    cmd->add_option("--port", o->port, "TCP port (0: any free port, printed)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    cmd->add_option("--kv-budget", o->kv_budget,
                    "Tokens of KV cache for all slots together (a pool of 8-token blocks shared by the slots; a shared "
                    "prompt start is held once). Default: --parallel x --ctx; --ctx is at most this. A request waits "
                    "until the running ones leave room for its prompt + max_tokens")
        ->check(positive_number());
    cmd->add_option("--parallel", o->parallel,
                    "Slots: requests generated at once, sharing the KV cache (--kv-budget); -np as llama-server")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd->add_option("-c,--ctx,--ctx-size", o->n_ctx,
                    "Context per slot in tokens (prompt + output of one request); without "
                    "--kv-budget device memory holds --parallel times this. Default: the model's, "
                    "capped by device memory (and by --kv-budget)")
        ->check(positive_number());
    cmd->add_option("--ubatch", o->ubatch,
                    "Prompt tokens per forward chunk (default 64; an encoder's: its context, "
                    "as each input is evaluated at once; a decoder embedding model's: 512)")
        ->check(CLI::Range(1, 8192));
    cmd->add_flag("--embeddings", o->embeddings,
                  "Serve a decoder as an embedding model (/v1/embeddings) although its file names no pooling type "
                  "(give --pooling); encoders and decoders with one (Qwen3-Embedding) are served so anyway");
    cmd->add_option("--pooling", o->pooling, "mean, cls or last: the embedding model's pooling (default: its file's)");
    add_kv_type_option(cmd, o->kv_type);
    auto* key = cmd->add_option("--api-key", o->api_key,
                                "Require 'Authorization: Bearer KEY' (visible in ps: prefer --api-key-file)");
    cmd->add_option("--api-key-file", o->api_key_file, "Read the API key from the first line of a file")->excludes(key);
    cmd->add_option("--chat-template", o->chat_template,
                    "Built-in template name (chatml, llama2, llama3, ...) or a Jinja file; default: the model's own");
    cmd->add_option("--alias", o->alias, "The model's name in responses and /v1/models (default: the file's name)");
    cmd->add_flag("--jinja", o->jinja,
                  "Accepted for llama-server's scripts: vkllm always renders templates with Jinja");
    cmd->add_option("--timeout", o->timeout_s, "Longest time one request may take, queue included (seconds)")
        ->check(CLI::Range(0.001, 1e7))
        ->capture_default_str();
    cmd->add_option("--queue", o->queue, "Requests that may wait for a slot; beyond: 503 with Retry-After")
        ->check(CLI::Range(0, 100000))
        ->capture_default_str();
    cmd->add_option("--http-threads", o->http_threads,
                    "Connections served at once (default: parallel + queue + 8, at most 512)")
        ->check(CLI::Range(2, 4096));
    cmd->add_flag("--quiet", o->quiet, "No line per request on stderr");
    cmd->add_option("--reasoning", o->reasoning,
                    "Reasoning of every chat request that does not say (reasoning_effort, Ollama's think): on, off, "
                    "or auto (the template's default); set through the template's switch (enable_thinking, thinking, "
                    "reasoning_effort), refused at start where it has none")
        ->check(CLI::IsMember({"on", "off", "auto"}))
        ->capture_default_str();
    cmd->add_option("--chat-template-kwargs", o->template_kwargs,
                    "Template variables for every chat request, as a JSON object ('{\"enable_thinking\": false}'); "
                    "a request's chat_template_kwargs take precedence")
        ->check([](const std::string& v) {
            const auto j = nlohmann::ordered_json::parse(v, nullptr, false);
            return j.is_object() ? std::string() : std::string("--chat-template-kwargs: not a JSON object");
        });
    cmd->add_option("--cors-origins", o->cors_origins,
                    "Web pages that may call the server from a browser: * (any, the default, as llama-server), "
                    "localhost (pages on this machine), none, or a comma-separated list of origins "
                    "(https://app.example.com)")
        ->check([](const std::string& v) {
            try {
                server::parse_cors_origins(v);
                return std::string();
            } catch (const std::invalid_argument& e) {
                return std::string(e.what());
            }
        })
        ->capture_default_str();
    cmd->add_flag("--no-cors-credentials", o->no_cors_credentials,
                  "Do not allow cross-origin requests with credentials (then --cors-origins * answers a literal *)");
    cmd->add_flag("--no-webui", o->no_webui, "Serve no chat page at / (the API only)");
    o->vision.add_to(cmd, false);
    o->speculation.add_to(cmd);
    o->blend.add_to(cmd);
    cmd->add_flag("--allow-image-urls", o->allow_image_urls,
                  "Fetch http(s) image URLs of chat requests (with --mmproj). Off by default: the server would reach "
                  "any address its clients name; data: URLs are always taken, file:// never");
    cmd->add_option("--image-url-max-bytes", o->image_url_max_bytes,
                    "--allow-image-urls: the largest image file fetched, in bytes")
        ->check(CLI::Range(size_t(1), size_t(1) << 30))
        ->capture_default_str();
    cmd->add_option("--image-url-timeout", o->image_url_timeout_s,
                    "--allow-image-urls: the longest time one image may take to fetch, redirects included (seconds)")
        ->check(CLI::Range(0.001, 600.0))
        ->capture_default_str();
    o->device.add_to(cmd);
    o->device.add_split_to(cmd);
    o->device.add_tune_to(cmd);
    cmd->callback([o] { serve(*o); });
}

}  // namespace vkllm::apps
