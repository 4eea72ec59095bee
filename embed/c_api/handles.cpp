#include "embed/c_api/handles.h"

#include "embed/c_api/api_guard.h"

#include <unordered_set>

namespace vkllm::c_api {

namespace {

// Leaked on purpose: entry points may run during static destruction (an app's own destructors),
// and the registry must outlive them.
struct Registry {
    std::mutex mutex;
    std::unordered_set<const void*> models, sessions;
};
Registry& registry() {
    static Registry* r = new Registry;
    return *r;
}

}  // namespace

void register_model(vkllm_model* m) {
    std::lock_guard lock(registry().mutex);
    registry().models.insert(m);
}

void register_session(vkllm_session* s) {
    std::lock_guard lock(registry().mutex);
    registry().sessions.insert(s);
}

bool unregister_model(vkllm_model* m) {
    std::lock_guard lock(registry().mutex);
    return registry().models.erase(m) > 0;
}

bool unregister_session(vkllm_session* s) {
    std::lock_guard lock(registry().mutex);
    return registry().sessions.erase(s) > 0;
}

vkllm_model* live_model(const vkllm_model* m) {
    if (!m) throw ApiFailure(VKLLM_ERR_INVALID_HANDLE, "the model handle is NULL");
    std::lock_guard lock(registry().mutex);
    if (!registry().models.count(m))
        throw ApiFailure(VKLLM_ERR_INVALID_HANDLE,
                         "the model handle is not a live model (freed, or not from vkllm_model_load)");
    return const_cast<vkllm_model*>(m);
}

vkllm_session* live_session(const vkllm_session* s) {
    if (!s) throw ApiFailure(VKLLM_ERR_INVALID_HANDLE, "the session handle is NULL");
    std::lock_guard lock(registry().mutex);
    if (!registry().sessions.count(s))
        throw ApiFailure(
            VKLLM_ERR_INVALID_HANDLE,
            "the session handle is not a live session (freed, freed with its model, or not from vkllm_session_new)");
    return const_cast<vkllm_session*>(s);
}

bool is_live_model(const vkllm_model* m) {
    std::lock_guard lock(registry().mutex);
    return m && registry().models.count(m) > 0;
}

bool is_live_session(const vkllm_session* s) {
    std::lock_guard lock(registry().mutex);
    return s && registry().sessions.count(s) > 0;
}

bool session_generating(vkllm_session& s) {
    std::lock_guard lock(s.mutex);
    return s.generating;
}

}  // namespace vkllm::c_api
