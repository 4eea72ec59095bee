// The model as Ollama's API names and describes it: the `name:tag` names clients send mapped onto
// the one model this server serves, and the bodies of /api/tags, /api/show, /api/ps and
// /api/version, from the ModelCard the server was given. No HTTP here: unit-tested on plain data
// (tests/serving/server/test_ollama_models.cpp).
#pragma once

#include "serving/server/http_server.h"
#include "serving/server/openai_requests.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace vkllm::server::ollama {

// The Ollama release whose API these routes follow (think, tools, structured outputs, logprobs):
// what /api/version answers, so that clients which check it turn those features on.
inline constexpr const char* kApiVersion = "0.13.0";

// The served model's name in listings: its id with ":latest" appended unless it has a tag already.
std::string listed_name(std::string_view id);
// Whether a client's `name` names the model `id`: the id or its listed name, letters in any case
// (Ollama's own lookup ignores case).
bool names_model(std::string_view name, std::string_view id);
// Ollama's 404 for any other name: "model 'NAME' not found".
ApiError model_not_found(const std::string& name);
// 404 unless `name` names the served model.
void check_model_name(const std::string& name, const ServedModel& m);

// Ollama's human count: 8030261248 -> "8.0B", 7000000000 -> "7B", 260000 -> "260K", 1500000 -> "1.50M".
std::string parameter_size(uint64_t n);

// What the model can do, as Ollama lists it: "completion" (with "tools" where its template renders
// tools, "thinking" where it writes a reasoning block) or "embedding".
json capabilities(const ServedModel& m);

// {"parent_model", "format": "gguf", "family", "families", "parameter_size", "quantization_level"}.
json details_json(const ModelCard& c);
// GET /api/tags: {"models": [{"name", "model", "modified_at", "size", "digest", "details"}]}.
json tags_json(const ServedModel& m);
// GET /api/ps: the model with "expires_at" (never: it stays loaded), "size_vram", "context_length".
json ps_json(const ServedModel& m);
// POST /api/show: "modelfile", "parameters", "template", "details", "model_info", "capabilities",
// "modified_at" (and "license" where the file has one).
json show_json(const ServedModel& m);
// GET /api/version.
json version_json();

}  // namespace vkllm::server::ollama
