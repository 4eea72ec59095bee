// The C boundary: every entry point runs its body through guarded(), which turns any exception
// into a vkllm_status and the thread's last-error message, so nothing C++ ever crosses it.
#pragma once

#include "vkllm/vkllm.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace vkllm::c_api {

// A failure whose status is known where it is raised (bad arguments, invalid handles, ...).
class ApiFailure : public std::runtime_error {
public:
    ApiFailure(vkllm_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    vkllm_status status() const { return status_; }

private:
    vkllm_status status_;
};

void set_last_error(const std::string& message);
void clear_last_error();
const char* last_error();

// The status and message of the exception being handled (call inside a catch block only).
vkllm_status status_of_current_exception();

template <class F>
vkllm_status guarded(F&& body) noexcept {
    clear_last_error();
    try {
        return body();
    } catch (...) {
        return status_of_current_exception();
    }
}

// Copies a caller's params struct over the defaults: as many bytes as the caller's struct_size
// says (an older, shorter struct keeps the newer fields' defaults). ApiFailure when struct_size
// is smaller than the size field itself or larger than this library knows (a newer header).
template <class T>
T read_params(const T* given, T defaults, const char* what) {
    if (!given) return defaults;
    if (given->struct_size < sizeof(size_t) || given->struct_size > sizeof(T))
        throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT,
                         std::string(what) + ".struct_size is " + std::to_string(given->struct_size) +
                             "; this library's struct has " + std::to_string(sizeof(T)) +
                             " bytes (start from the *_default* function of the header you build with)");
    std::memcpy(static_cast<void*>(&defaults), given, given->struct_size);
    defaults.struct_size = sizeof(T);
    return defaults;
}

// An output struct the caller sized: struct_size must cover at least the size field and at most
// what this library knows; the library fills min(struct_size, sizeof(T)) bytes.
template <class T>
void write_out(T* out, const T& value, const char* what) {
    if (!out) throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
    const size_t n = out->struct_size;
    if (n < sizeof(size_t) || n > sizeof(T))
        throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, std::string(what) + "->struct_size is " + std::to_string(n) +
                                                         "; set it to sizeof(" + what + ") (" +
                                                         std::to_string(sizeof(T)) + " bytes in this library)");
    T copy = value;
    copy.struct_size = n;
    std::memcpy(static_cast<void*>(out), &copy, n);
}

inline void require(bool ok, const std::string& message) {
    if (!ok) throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, message);
}

// Writes `text` NUL-terminated into buf/capacity and its length into *len: the rules of
// vkllm_detokenize, vkllm_apply_chat_template and vkllm_session_get_tool_calls.
vkllm_status write_string(const std::string& text, char* buf, size_t capacity, size_t* len);

}  // namespace vkllm::c_api
