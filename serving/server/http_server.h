// The HTTP side of `vkllm serve`: OpenAI's /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank
// and /v1/models, plus /health, /metrics, /tokenize, /detokenize and /apply-template, on cpp-httplib.
//
// It listens before the model is loaded (/health answers 503 "loading" until set_model()), checks
// the API key in constant time, caps header count and socket timeouts, and stops cleanly. The routes
// of each API live in their own files on a ServerCore (server_core.h: bodies under the size cap,
// errors in the API's shape, streams that cancel a request within one engine step when its client
// goes away). It
// knows the engine only through ServedModel's callbacks, so its tests run without a model or a
// device (tests/serving/server/test_http_server.cpp).
#pragma once

#include "model/tokenizer/tokenizer.h"
#include "serving/engine/engine.h"
#include "serving/server/cors.h"
#include "serving/server/image_prompt.h"
#include "serving/server/metrics.h"
#include "serving/answer/reasoning.h"
#include "serving/server/prompt.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace vkllm::server {

// One running request: the engine's Ticket behind an interface (the server library does not link
// the engine). Destroying it cancels the request.
class Generation {
public:
    virtual ~Generation() = default;
    virtual std::optional<engine::Event> next(std::chrono::milliseconds wait) = 0;
    virtual void cancel() = 0;
};

// The model file as Ollama's /api/tags, /api/show and /api/ps describe it; apps/model_card.cpp
// fills it from the GGUF.
struct ModelCard {
    uint64_t file_bytes = 0;
    int64_t modified_ns = 0;  // the file's modification time, Unix nanoseconds
    std::string digest;  // 64 hex digits that identify the file (its name, size, time and header)
    std::string architecture;  // general.architecture ("llama", "qwen3", "bert")
    uint64_t parameters = 0;  // the weights' values, all tensors together
    std::string file_type;  // "Q4_K_M", "F16": general.file_type, else the most common tensor type
    std::string license;  // general.license, when the file names one
    uint32_t trained_ctx = 0;  // <arch>.context_length
    // The file's metadata, key by key (arrays longer than 16 values emptied, as Ollama's show does
    // unless verbose; the chat template and general.name left out), plus general.parameter_count.
    nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
    std::string chat_template;  // the template's source as the server renders it
};

// The loaded model as the server uses it; apps/cmd_serve.cpp fills it from the Engine.
struct ServedModel {
    std::string id;  // "model" in responses (unless the request names one) and in /v1/models
    ModelCard card;
    int64_t created = 0;  // Unix seconds, for /v1/models
    const Tokenizer* tokenizer = nullptr;
    uint32_t n_ctx = 0;  // context of one slot: a prompt must be shorter
    uint32_t n_slots = 1;  // requests generated at once (/props, /slots, id_slot)
    std::string model_path;  // the GGUF file (/props)
    std::string chat_template;  // the template's Jinja source (/props)
    ChatRenderer render_chat;
    // CacheBlend's --blend-separator ("": none): a prompt's text split there is its prefix, its
    // documents and its question, each tokenized on its own and the separators dropped
    // (prompt.h: encode_documents).
    std::string blend_separator;
    // The tool-call family of the chat template, and whether the template renders `tools` itself.
    const answer::ToolFormat* tool_format = &answer::tool_format(answer::ToolFamily::Generic);
    bool template_renders_tools = false;
    // The reasoning block the template writes (answer::reasoning_tags): replies may open with one; null: none.
    const answer::ReasoningTags* reasoning = nullptr;
    bool harmony = false;  // the template speaks gpt-oss' Harmony (answer::template_is_harmony)
    // What the template offers to turn reasoning on and off, the server's default (--reasoning) and
    // template variables every chat request gets under its own (--chat-template-kwargs).
    chat_template::ReasoningSwitch reasoning_switch;
    chat_template::Reasoning reasoning_default = chat_template::Reasoning::Auto;
    nlohmann::ordered_json template_kwargs;
    std::vector<int32_t> tool_control_tokens;  // chat_template::tool_control_tokens of the vocabulary and format
    std::string chat_template_name;  // the template's name (ChatTemplate::name), for errors about it
    // A model with a vision encoder beside it (`--mmproj`) sets image_prompt (image_prompt.h; in
    // `vkllm serve` model/vision's build_multimodal_prompt): chat requests and /completion's prompt
    // objects may then carry images, read as image_input says. Unset: the model takes no images, and
    // an image is a 400.
    ImagePrompter image_prompt;
    ImageInputOptions image_input;
    // What marks an image in a /completion prompt_string (/props media_marker): random per process,
    // as llama-server's, so that text which happens to spell a marker stays text.
    std::string media_marker;
    bool takes_images() const { return bool(image_prompt); }
    // Engine::submit: throws engine::QueueFullError, engine::EngineStoppedError or
    // std::invalid_argument as it does.
    std::function<std::unique_ptr<Generation>(engine::CompletionRequest)> submit;
    std::function<engine::EngineMetrics()> metrics;
    // An embedding model (an encoder: no LM head) sets these instead of submit: each input's token
    // ids ([CLS] ... [SEP] included) -> its pooled, normalised vector, in order (the server passes
    // up to kEmbedGroup inputs per call, which the model packs into as few forward passes as its
    // ubatch allows, checks for shutdown between calls, and turns away embedding requests beyond
    // threads - 2 with a 503). Inputs are at most embed_limit tokens (checked before the call); the
    // vectors have embedding_dim values.
    std::function<std::vector<std::vector<float>>(const std::vector<std::vector<int32_t>>&)> embed;
    uint32_t embedding_dim = 0;
    uint32_t embed_limit = 0;  // also the longest (query, document) pair of a reranker
    // A reranker (pooling rank) sets these instead of embed: the tokens of a (query, document) pair
    // (model/embedding.h rerank_tokens), and the relevance scores of pairs, in groups as embed.
    std::function<std::vector<int32_t>(std::string_view, std::string_view)> rerank_tokens;
    std::function<std::vector<float>(const std::vector<std::vector<int32_t>>&)> rerank;
};

// Inputs (or rerank pairs) the server hands the model per call.
inline constexpr size_t kEmbedGroup = 64;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;  // 0: any free port (start() returns it)
    std::string api_key;  // empty: no key needed
    size_t max_body_bytes = 8u << 20;
    size_t max_headers = 64;  // header lines per request (each at most 8 KiB: cpp-httplib's limit)
    std::chrono::seconds read_timeout{10};  // a client that sends nothing for this long is dropped
    std::chrono::seconds write_timeout{10};  // a client that reads nothing for this long is dropped
    std::chrono::seconds keep_alive_timeout{2};
    uint32_t threads = 16;  // connections served at once (each open stream holds one)
    std::chrono::milliseconds poll{100};  // how often a waiting request checks for shutdown
    std::chrono::milliseconds ping_interval{2000};  // an SSE comment after this much silence finds dead clients
    bool log_requests = true;  // one line per request on stderr
    CorsPolicy cors;  // which web pages may call the server (cors.h)
    bool webui = true;  // the chat page at GET / (serving/server/webui_routes.cpp); `serve --no-webui` turns it off
};

class HttpServer {
public:
    explicit HttpServer(ServerOptions opts);
    ~HttpServer();  // stop()
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds (std::runtime_error naming the address when it cannot) and serves on threads of its
    // own. Returns the port. Ignores SIGPIPE for the process: a client that hangs up mid-response
    // must cost a failed write, not the server.
    int start();
    // From here on requests are served with this model.
    void set_model(ServedModel m);
    // New completion requests are refused with 503; running ones go on (the engine's shutdown
    // ends them, and their streams close cleanly).
    void begin_shutdown();
    // Waits until no stream is open, at most `timeout`; true when none is.
    bool wait_streams(std::chrono::milliseconds timeout);
    // Closes the listening socket and joins the server's threads (an idle keep-alive connection
    // delays this by at most keep_alive_timeout). Idempotent.
    void stop();

    ServerCounters counters() const;
    // "http://127.0.0.1:8080" (IPv6 hosts in brackets).
    std::string url() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Equal strings, in time that depends on their lengths only (API keys).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace vkllm::server
