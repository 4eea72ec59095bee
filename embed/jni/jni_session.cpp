// The native methods of a session: new, free, reset, cancel and stats, and generation (a prompt,
// chat messages, or OpenAI-style JSON with tools) with its GenerateParams and token callback, and
// the tool calls and reasoning it left.
#include "embed/jni/jni_callbacks.h"
#include "embed/jni/jni_support.h"
#include "embed/jni/jni_text.h"

#include <jni.h>
#include <vkllm/vkllm.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

using namespace vkllm::jni;

namespace {

// GenerateParams read into a vkllm_sampling; the strings it points to live in `holder`. False with
// an exception pending when a string cannot be read.
struct SamplingHolder {
    std::vector<std::string> stops;
    std::vector<const char*> stop_ptrs;
    std::string gbnf, schema;
};
bool read_sampling(JNIEnv* env, jobject params, vkllm_sampling& smp, SamplingHolder& h) {
    jobjectArray stop = static_cast<jobjectArray>(env->GetObjectField(params, refs.sampling_stop));
    if (!c_strings_of(env, stop, h.stops, "a stop string")) return false;
    for (const std::string& s : h.stops) h.stop_ptrs.push_back(s.c_str());
    smp = vkllm_sampling_default();
    auto* base = reinterpret_cast<unsigned char*>(&smp);
    for (size_t i = 0; i < std::size(kSamplingFields); ++i) {
        const SamplingField& f = kSamplingFields[i];
        const jfieldID id = refs.sampling_fields[i];
        switch (f.kind) {
            case 'F': {
                const float v = env->GetFloatField(params, id);
                std::memcpy(base + f.offset, &v, sizeof v);
                break;
            }
            case 'I': {
                const int32_t v = env->GetIntField(params, id);
                std::memcpy(base + f.offset, &v, sizeof v);
                break;
            }
            case 'J': {
                const uint64_t v = uint64_t(env->GetLongField(params, id));
                std::memcpy(base + f.offset, &v, sizeof v);
                break;
            }
            case 'Z': {
                const bool v = env->GetBooleanField(params, id) == JNI_TRUE;
                std::memcpy(base + f.offset, &v, sizeof v);
                break;
            }
        }
    }
    smp.stop = h.stop_ptrs.empty() ? nullptr : h.stop_ptrs.data();
    smp.n_stop = h.stop_ptrs.size();
    jstring jg = static_cast<jstring>(env->GetObjectField(params, refs.sampling_grammar));
    jstring js = static_cast<jstring>(env->GetObjectField(params, refs.sampling_json_schema));
    if (jg && !c_string_of(env, jg, h.gbnf, "grammar")) return false;
    if (js && !c_string_of(env, js, h.schema, "jsonSchema")) return false;
    smp.grammar = jg ? h.gbnf.c_str() : nullptr;
    smp.json_schema = js ? h.schema.c_str() : nullptr;
    return true;
}

// Runs `call(&sink)`, a generating C call whose pieces go to `callback`. Returns the generated
// text, also when cancelled (cancel(), or the callback returned false: no failure); else null with
// an exception pending: the callback's own, rethrown unchanged, or a VkllmException.
template <class Call>
jstring run_generation(JNIEnv* env, jobject callback, Call&& call) {
    PieceSink sink;
    sink.env = env;
    sink.callback = callback;
    const vkllm_status st = call(&sink);
    if (sink.error) {
        env->Throw(sink.error);
        return nullptr;
    }
    if (sink.out_of_memory) throw std::bad_alloc();
    if (st != VKLLM_OK && st != VKLLM_CANCELLED) {
        throw_status(env, st);
        return nullptr;
    }
    return new_string(env, sink.text);
}

}  // namespace

extern "C" {

JNIEXPORT jlong JNICALL Java_dev_vkllm_Native_sessionNew(JNIEnv* env, jclass, jlong model, jboolean parse_special) {
    vkllm_session_params p = vkllm_session_default_params();
    p.parse_special = parse_special == JNI_TRUE;
    vkllm_session* session = nullptr;
    const vkllm_status st = vkllm_session_new(model_of(model), &p, &session);
    if (st != VKLLM_OK) {
        throw_status(env, st);
        return 0;
    }
    return handle_of(session);
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_sessionFree(JNIEnv*, jclass, jlong session) {
    vkllm_session_free(session_of(session));
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_sessionReset(JNIEnv* env, jclass, jlong session) {
    const vkllm_status st = vkllm_session_reset(session_of(session));
    if (st != VKLLM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_cancel(JNIEnv*, jclass, jlong session) {
    // Nothing to report: the Java side only calls it on a live handle, and a generation that
    // already ended is no failure.
    (void)vkllm_cancel(session_of(session));
}

JNIEXPORT jobject JNICALL Java_dev_vkllm_Native_stats(JNIEnv* env, jclass, jlong session) {
    vkllm_generation_stats s{};
    s.struct_size = sizeof(s);
    const vkllm_status st = vkllm_session_get_stats(session_of(session), &s);
    if (st != VKLLM_OK) {
        throw_status(env, st);
        return nullptr;
    }
    return env->NewObject(refs.generation_stats, refs.generation_stats_init, jint(s.prompt_tokens),
                          jint(s.cached_tokens), jint(s.generated_tokens), jint(s.n_past), jdouble(s.prompt_ms),
                          jdouble(s.generate_ms), jdouble(s.prompt_tokens_per_s), jdouble(s.generate_tokens_per_s),
                          jint(s.finish), jint(s.draft_tokens), jint(s.accepted_tokens), jint(s.blended_documents),
                          jint(s.stored_documents), jint(s.blended_tokens), jint(s.recomputed_tokens));
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_generate(JNIEnv* env, jclass, jlong session, jstring prompt,
                                                         jobjectArray roles, jobjectArray contents, jobject params,
                                                         jobject callback) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::string c_prompt;
        std::vector<std::string> r, c;
        if (prompt && !c_string_of(env, prompt, c_prompt, "prompt")) return nullptr;
        if (!prompt &&
            (!c_strings_of(env, roles, r, "a message role") || !c_strings_of(env, contents, c, "a message content")))
            return nullptr;
        std::vector<vkllm_chat_message> messages(r.size());
        for (size_t i = 0; i < r.size(); ++i) messages[i] = {r[i].c_str(), c[i].c_str()};
        vkllm_sampling smp;
        SamplingHolder holder;
        if (!read_sampling(env, params, smp, holder)) return nullptr;

        return run_generation(env, callback, [&](PieceSink* sink) {
            return prompt ? vkllm_generate(session_of(session), c_prompt.c_str(), &smp, on_piece, sink)
                          : vkllm_chat(session_of(session), messages.data(), messages.size(), &smp, on_piece, sink);
        });
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_generateDocuments(JNIEnv* env, jclass, jlong session, jstring prefix,
                                                                  jobjectArray documents, jstring question,
                                                                  jobject params, jobject callback) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::string c_prefix, c_question;
        std::vector<std::string> docs;
        if (!c_string_of(env, prefix, c_prefix, "prefix") || !c_strings_of(env, documents, docs, "a document") ||
            !c_string_of(env, question, c_question, "question"))
            return nullptr;
        std::vector<const char*> ptrs;
        for (const std::string& d : docs) ptrs.push_back(d.c_str());
        vkllm_sampling smp;
        SamplingHolder holder;
        if (!read_sampling(env, params, smp, holder)) return nullptr;
        return run_generation(env, callback, [&](PieceSink* sink) {
            return vkllm_generate_documents(session_of(session), c_prefix.c_str(), ptrs.data(), ptrs.size(),
                                            c_question.c_str(), &smp, on_piece, sink);
        });
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_chatImages(JNIEnv* env, jclass, jlong session, jobjectArray roles,
                                                           jobjectArray contents, jintArray owner, jobjectArray images,
                                                           jobject params, jobject callback) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::vector<std::string> r, c;
        if (!c_strings_of(env, roles, r, "a message role") || !c_strings_of(env, contents, c, "a message content"))
            return nullptr;
        std::vector<vkllm_chat_message> messages(r.size());
        for (size_t i = 0; i < r.size(); ++i) messages[i] = {r[i].c_str(), c[i].c_str()};
        // The Java side builds owner and images together: equal lengths, no null entries.
        const jsize n = env->GetArrayLength(images);
        std::vector<jint> owners(size_t(env->GetArrayLength(owner)));
        env->GetIntArrayRegion(owner, 0, jsize(owners.size()), owners.data());
        const size_t count = size_t(n);
        std::vector<std::vector<uint8_t>> bytes(count);
        std::vector<vkllm_chat_image> list(count);
        for (size_t i = 0; i < count; ++i) {
            auto arr = static_cast<jbyteArray>(env->GetObjectArrayElement(images, jsize(i)));
            std::vector<uint8_t>& b = bytes[i];
            b.resize(size_t(env->GetArrayLength(arr)));
            env->GetByteArrayRegion(arr, 0, jsize(b.size()), reinterpret_cast<jbyte*>(b.data()));
            env->DeleteLocalRef(arr);
            list[i] = {size_t(owners.at(i)), b.data(), b.size()};
        }
        vkllm_sampling smp;
        SamplingHolder holder;
        if (!read_sampling(env, params, smp, holder)) return nullptr;
        return run_generation(env, callback, [&](PieceSink* sink) {
            return vkllm_chat_images(session_of(session), messages.data(), messages.size(), list.data(), list.size(),
                                     &smp, on_piece, sink);
        });
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_chatJson(JNIEnv* env, jclass, jlong session, jstring messages,
                                                         jstring tools, jstring tool_choice, jboolean parallel,
                                                         jstring template_kwargs, jobject params, jobject callback) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::string c_messages;
        OptionalCString c_tools, c_choice, c_kwargs;
        if (!c_string_of(env, messages, c_messages, "messagesJson") ||
            !optional_c_string_of(env, tools, c_tools, "toolsJson") ||
            !optional_c_string_of(env, tool_choice, c_choice, "toolChoice") ||
            !optional_c_string_of(env, template_kwargs, c_kwargs, "templateKwargsJson"))
            return nullptr;
        vkllm_chat_json_params p = vkllm_chat_json_default_params();
        p.messages = c_messages.c_str();
        p.tools = c_tools.c_str();
        p.tool_choice = c_choice.c_str();
        p.parallel_tool_calls = parallel == JNI_TRUE;
        p.template_kwargs = c_kwargs.c_str();
        vkllm_sampling smp;
        SamplingHolder holder;
        if (!read_sampling(env, params, smp, holder)) return nullptr;
        return run_generation(env, callback, [&](PieceSink* sink) {
            return vkllm_chat_json(session_of(session), &p, &smp, on_piece, sink);
        });
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_toolCalls(JNIEnv* env, jclass, jlong session) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const std::optional<std::string> text = fill_text(env, 256, [&](char* buf, size_t capacity, size_t* len) {
            return vkllm_session_get_tool_calls(session_of(session), buf, capacity, len);
        });
        return text ? new_string(env, *text) : nullptr;
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_reasoning(JNIEnv* env, jclass, jlong session) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const std::optional<std::string> text = fill_text(env, 256, [&](char* buf, size_t capacity, size_t* len) {
            return vkllm_session_get_reasoning(session_of(session), buf, capacity, len);
        });
        return text ? new_string(env, *text) : nullptr;
    });
}

}  // extern "C"
