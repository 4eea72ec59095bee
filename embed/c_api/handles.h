// What the C API's opaque handles are, and the registry of live ones: every entry point looks its
// handle up first, so a freed or made-up pointer is VKLLM_ERR_INVALID_HANDLE rather than a crash.
#pragma once

#include "vkllm/vkllm.h"

#include "model/embedding.h"
#include "model/load.h"
#include "model/vision/vision_model.h"
#include "serving/engine/blender.h"
#include "serving/engine/drafter.h"
#include "serving/engine/engine.h"
#include "serving/chat_template/chat_template.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct vkllm_model {
    // Members in construction order; destroyed in reverse (the engine's thread first).
    std::unique_ptr<vkllm::chat_template::ChatTemplate> chat_template;  // null when the file's own failed to parse
    std::string chat_template_error;  // then: why, for vkllm_chat
    vkllm::LoadedModel loaded;  // file, config, tokenizer, device, model (model/load.h)
    std::unique_ptr<vkllm::VisionModel> vision;  // vkllm_model_params.mmproj on the model's device, or null
    uint64_t image_max_pixels = 0;
    // Speculative decoding (vkllm_model_params.draft_model / lookup): the draft model, if any, and
    // the drafter the engine asks; both outlive the engine.
    std::unique_ptr<vkllm::LoadedModel> draft;
    std::shared_ptr<vkllm::engine::Drafter> drafter;
    // CacheBlend (vkllm_model_params.blend): blends vkllm_generate_documents' documents; outlives the engine.
    std::shared_ptr<vkllm::engine::Blender> blender;
    std::unique_ptr<vkllm::engine::Engine>
        engine;  // one slot per session; runs every generation (null for an embedding model)
    vkllm::ModelRole role = vkllm::ModelRole::Generate;  // what it was loaded for (model_role)
    vkllm::Pooling pooling = vkllm::Pooling::None;  // in effect: params.pooling, else the file's
    std::mutex embed_mutex;  // vkllm_embed and vkllm_rerank: one evaluation at a time
    uint32_t max_sessions = 1;
    std::mutex sessions_mutex;
    std::vector<vkllm_session*> sessions;  // open sessions, freed with the model
};

struct vkllm_session {
    vkllm_model* model = nullptr;
    uint32_t slot = 0;  // the engine slot (KV cache) this conversation owns
    vkllm_session_params params{};
    std::vector<int32_t> history;  // the conversation's tokens (prompts and generated), for vkllm_generate
    std::vector<vkllm::PromptEmbeddings> images;  // the pictures among them (vkllm_chat_images)
    // Guards `generating`, `cancel_requested`, `ticket` and `stats`: vkllm_cancel and
    // vkllm_session_get_stats may run on any thread.
    std::mutex mutex;
    bool generating = false;
    bool cancel_requested = false;  // vkllm_cancel during this generation
    vkllm_generation_stats stats{};  // of the last finished generation
    std::string tool_calls = "[]";  // of the last vkllm_chat_json answer (OpenAI's JSON array)
    std::string reasoning;  // of the last vkllm_chat_json answer: its reasoning block
    vkllm::engine::Ticket* ticket = nullptr;  // the running request, owned by the generating call
};

namespace vkllm::c_api {

// The registry. Lookups throw ApiFailure(VKLLM_ERR_INVALID_HANDLE) for NULL or unknown handles.
void register_model(vkllm_model* m);
void register_session(vkllm_session* s);
// Removes the handle; false when it was not live (a double free, or a session freed with its model).
bool unregister_model(vkllm_model* m);
bool unregister_session(vkllm_session* s);
vkllm_model* live_model(const vkllm_model* m);
vkllm_session* live_session(const vkllm_session* s);
bool is_live_model(const vkllm_model* m);
bool is_live_session(const vkllm_session* s);
// Whether a generation runs on the session now (the free functions refuse then).
bool session_generating(vkllm_session& s);

}  // namespace vkllm::c_api
