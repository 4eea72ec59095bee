#include "embed/c_api/api_guard.h"

#include "model/arch/model_config.h"
#include "model/forward/model_gpu.h"
#include "model/gguf/gguf.h"
#include "runtime/vk_check.h"
#include "serving/engine/engine.h"
#include "serving/chat_template/chat_template.h"

#include <new>

namespace vkllm::c_api {

namespace {
thread_local std::string last_error_message;
}

void set_last_error(const std::string& message) { last_error_message = message; }
void clear_last_error() { last_error_message.clear(); }
const char* last_error() { return last_error_message.c_str(); }

vkllm_status status_of_current_exception() {
    // Every branch only copies a message: nothing here may throw out of a catch handler, except
    // std::bad_alloc while copying, which the outer catch(...) maps without allocating.
    try {
        try {
            throw;
        } catch (const ApiFailure& e) {
            set_last_error(e.what());
            return e.status();
        } catch (const GgufError& e) {  // ModelConfigError (unsupported architecture, bad shapes) too
            set_last_error(e.what());
            return VKLLM_ERR_MODEL;
        } catch (const ContextFullError& e) {
            set_last_error(e.what());
            return VKLLM_ERR_CONTEXT_FULL;
        } catch (const chat_template::TemplateError& e) {
            set_last_error(e.what());
            return VKLLM_ERR_TEMPLATE;
        } catch (const DeviceLimitError& e) {  // at load, the fit is told apart (vkllm_model_load)
            set_last_error(e.what());
            return VKLLM_ERR_DEVICE;
        } catch (const VulkanError& e) {
            set_last_error(e.what());
            const VkResult r = e.result();
            return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? VKLLM_ERR_OUT_OF_MEMORY
                                                                                          : VKLLM_ERR_DEVICE;
        } catch (const engine::QueueFullError& e) {
            set_last_error(e.what());
            return VKLLM_ERR_BUSY;
        } catch (const std::invalid_argument& e) {
            set_last_error(e.what());
            return VKLLM_ERR_INVALID_ARGUMENT;
        } catch (const std::bad_alloc&) {
            set_last_error("out of host memory");
            return VKLLM_ERR_OUT_OF_MEMORY;
        } catch (const std::exception& e) {
            set_last_error(e.what());
            return VKLLM_ERR_INTERNAL;
        } catch (...) {
            set_last_error("unknown internal error");
            return VKLLM_ERR_INTERNAL;
        }
    } catch (...) {
        return VKLLM_ERR_OUT_OF_MEMORY;
    }
}

}  // namespace vkllm::c_api
