// Ollama's API request bodies as data: /api/chat and /api/generate parsed into the same checked
// engine requests the OpenAI routes build (ParsedRequest), their `options` mapped onto the sampler
// through one table (honoured, accepted as runtime tuning, or refused by name), and the bodies of
// /api/embed and /api/embeddings. No HTTP and no model here, so all of it is unit-tested on plain
// JSON (tests/serving/server/test_ollama_requests.cpp). Errors are ApiErrors whose message is what
// Ollama's {"error": "..."} carries.
#pragma once

#include "serving/server/openai_requests.h"

#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server::ollama {

enum class Route { Chat, Generate };

// `think`: absent (the model's default: a reasoning block the template writes is split off into
// `thinking`), true or a level ("high", "medium", "low"), or false.
enum class Think { Default, On, Off };

struct Request {
    Route route = Route::Chat;
    std::string model;  // as the client named it: echoed in every response object
    bool stream = true;  // Ollama streams unless told `"stream": false`
    // No messages (chat) or an empty prompt (generate): Ollama's way of loading a model, answered at
    // once with done_reason "load".
    bool load_only = false;
    bool raw = false;  // generate: the prompt goes to the model as it is, without the template
    Think think = Think::Default;
    std::string think_level;  // "high", "medium" or "low" when `think` named one
    std::vector<int32_t> context;  // generate: a previous response's `context`, continued
    uint32_t num_ctx = 0;  // options.num_ctx; 0: the server's context
    // The engine request and what shapes the answer: endpoint Chat for /api/chat and a templated
    // generate (messages), Completion for a raw generate (prompts).
    ParsedRequest parsed;
};

// 400 naming the field for a wrong type or value, an option that would change the output and
// cannot be honoured, images on a raw, suffix or context generate, a generate `template` (Ollama's Go
// templates; vkllm renders the model's Jinja template), a `suffix` with system or context (a
// suffix alone fills in the middle with the vocabulary's FIM tokens). `seed`: the sampler's seed
// when the request gives none (or a negative one, Ollama's "random").
Request parse_chat(const json& body, uint64_t seed);
Request parse_generate(const json& body, uint64_t seed);
// `images` (base64 strings, of a chat message or a generate) are read into parsed.images as image
// parts before the message's text, named "messages[i].images[k]" / "images[k]"; check_images then
// refuses them (400 naming the first) for a model that does not take images.
void check_images(const Request& r, bool takes_images);

// `options` onto the sampler and limits (exposed for the embedding routes, which only check them).
void parse_options(const json& body, Request& r);

// What `think` does with a model: `thinks` (its template writes a reasoning block) and `harmony`
// (gpt-oss' format, whose reasoning cannot be turned off). 400 "\"NAME\" does not support thinking"
// for think on a model that does not think, as Ollama answers; otherwise sets the reasoning split
// and the template's switches (enable_thinking; reasoning_effort for Harmony's levels).
void apply_think(Request& r, bool thinks, bool harmony);

// The context a request may use: options.num_ctx when given (a 400 when it is larger than the
// server's `server_ctx`), else the server's.
uint32_t context_limit(const Request& r, uint32_t server_ctx);

// POST /api/embed (`input`: a string or an array of strings; `truncate`, default true, cuts inputs
// longer than the model takes; `dimensions` only the model's width) and the older POST
// /api/embeddings (`prompt`: one string; an empty one answers an empty vector).
struct EmbedRequest {
    std::string model;
    std::vector<std::string> inputs;
    bool truncate = true;
    int64_t dimensions = 0;  // 0: not given
};
EmbedRequest parse_embed(const json& body);
EmbedRequest parse_embeddings(const json& body);
// 400 unless `dimensions` is absent or `width`: a vector cannot be shortened without a model trained for it.
void check_dimensions(const EmbedRequest& r, uint32_t width);

// Ollama's 400 for a body without a model: "model is required".
ApiError model_required();

}  // namespace vkllm::server::ollama
