// A checked request made ready for the model, the same way for every API that generates (OpenAI's
// chat and completions, Ollama's chat and generate, llama-server's /completion): the template's
// variables (the request's own, then its reasoning switch, then the server's --chat-template-kwargs
// and --reasoning), the tool-call format, Harmony, the prompts' token ids and the reasoning block
// to split off the reply.
#pragma once

#include "serving/server/http_server.h"

#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server {

// The prompts' token ids (chat: one; completions: one per prompt), each shorter than `limit`; a
// chat's images (req.images) are read and encoded into req.engine.images (image_prompt.h); each
// prompt's documents (m.blend_separator) into req.prompt_documents.
// 400s name the request's fields; `reasoning_param` is the field that asked for reasoning
// ("reasoning_effort", Ollama's "think").
std::vector<std::vector<int32_t>> prepare_generation(ParsedRequest& req, const ServedModel& m, uint32_t limit,
                                                     const std::string& reasoning_param = "reasoning_effort");

// The server's --reasoning checked against the template when it starts: std::invalid_argument
// when the template cannot do it.
void check_reasoning_default(const ServedModel& m);

}  // namespace vkllm::server
