// The native methods of a model: load (with its progress and log listeners) and free, its
// information, and what it does without a session: tokenize, detokenize, the chat template,
// embeddings and rerank scores.
#include "embed/jni/jni_callbacks.h"
#include "embed/jni/jni_support.h"
#include "embed/jni/jni_text.h"

#include <jni.h>
#include <vkllm/vkllm.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace vkllm::jni;

extern "C" {

JNIEXPORT jlong JNICALL Java_dev_vkllm_Native_modelLoad(
    JNIEnv* env, jclass, jstring path, jint device_index, jstring device_name, jstring caps, jint n_ctx,
    jint max_sessions, jint kv_type, jint ubatch, jstring chat_template, jstring cache_dir, jboolean validation,
    jobject progress, jlong log_sink, jstring pooling, jstring devices, jstring split, jint kv_budget, jstring mmproj,
    jlong image_max_pixels, jstring draft_model, jint lookup, jint draft_max, jint draft_min, jboolean blend,
    jfloat blend_ratio, jstring kv_store, jint kv_store_mib) {
    return guarded(env, jlong(0), [&]() -> jlong {
        std::string c_path;
        OptionalCString c_device, c_caps, c_template, c_cache, c_pooling, c_devices, c_split, c_mmproj, c_draft,
            c_store;
        if (!c_string_of(env, path, c_path, "path") ||
            !optional_c_string_of(env, device_name, c_device, "deviceName") ||
            !optional_c_string_of(env, caps, c_caps, "caps") ||
            !optional_c_string_of(env, chat_template, c_template, "chatTemplate") ||
            !optional_c_string_of(env, cache_dir, c_cache, "cacheDir") ||
            !optional_c_string_of(env, pooling, c_pooling, "pooling") ||
            !optional_c_string_of(env, devices, c_devices, "devices") ||
            !optional_c_string_of(env, split, c_split, "split") ||
            !optional_c_string_of(env, mmproj, c_mmproj, "mmproj") ||
            !optional_c_string_of(env, draft_model, c_draft, "draftModel") ||
            !optional_c_string_of(env, kv_store, c_store, "kvStore"))
            return 0;
        // Java has no unsigned int: a negative count would wrap to billions in C; refuse it here
        // with the name Java knows it by.
        if (n_ctx < 0 || max_sessions < 0 || ubatch < 0 || kv_budget < 0 || lookup < 0 || draft_max < 0 ||
            draft_min < 0 || kv_store_mib < 0) {
            throw_java(env, "java/lang/IllegalArgumentException",
                       "nCtx, maxSessions, ubatch, kvBudget, lookup, draftMax, draftMin and kvStoreMib must not be "
                       "negative");
            return 0;
        }
        // The ordinal of ModelParams.KvType, whose order is vkllm_kv_type's (checked before the cast:
        // an int outside an enum's values is undefined behaviour in C++).
        if (kv_type < VKLLM_KV_F16 || kv_type > VKLLM_KV_Q8_0) {
            throw_java(env, "java/lang/IllegalArgumentException", "kvType is not a ModelParams.KvType");
            return 0;
        }
        vkllm_model_params p = vkllm_model_default_params();
        p.device_index = device_index;
        p.device_name = c_device.c_str();
        p.caps = c_caps.c_str();
        p.devices = c_devices.c_str();
        p.split = c_split.c_str();
        p.n_ctx = uint32_t(n_ctx);
        p.max_sessions = uint32_t(max_sessions);
        p.kv_type = static_cast<vkllm_kv_type>(kv_type);
        p.ubatch = uint32_t(ubatch);
        p.kv_budget = uint32_t(kv_budget);
        p.chat_template = c_template.c_str();
        p.cache_dir = c_cache.c_str();
        p.validation = validation == JNI_TRUE;
        p.pooling = c_pooling.c_str();
        p.mmproj = c_mmproj.c_str();
        p.image_max_pixels = uint64_t(image_max_pixels);  // ModelParams refuses negative ones
        p.draft_model = c_draft.c_str();
        p.lookup = uint32_t(lookup);
        p.draft_max = uint32_t(draft_max);
        p.draft_min = uint32_t(draft_min);
        p.blend = blend == JNI_TRUE;
        p.blend_ratio = blend_ratio;
        p.kv_store = c_store.c_str();
        p.kv_store_mib = uint32_t(kv_store_mib);
        if (log_sink != 0) {
            p.log = on_log;
            p.log_user_data = reinterpret_cast<LogSink*>(static_cast<intptr_t>(log_sink));
        }
        ProgressSink sink;
        if (progress) {
            sink.env = env;
            sink.listener = progress;
            p.progress = on_progress;
            p.progress_user_data = &sink;
        }
        vkllm_model* model = nullptr;
        const vkllm_status st = vkllm_model_load(c_path.c_str(), &p, &model);
        if (sink.error) {
            vkllm_model_free(model);  // NULL unless the listener threw on the last report
            env->Throw(sink.error);
            return 0;
        }
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return 0;
        }
        return handle_of(model);
    });
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_modelFree(JNIEnv*, jclass, jlong model) {
    vkllm_model_free(model_of(model));
}

JNIEXPORT jlong JNICALL Java_dev_vkllm_Native_logSinkNew(JNIEnv* env, jclass, jobject listener) {
    return guarded(env, jlong(0), [&]() -> jlong {
        auto* sink = new LogSink;
        sink->listener = env->NewGlobalRef(listener);
        if (!sink->listener) {
            delete sink;
            return 0;  // OutOfMemoryError pending
        }
        return handle_of(sink);
    });
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_logSinkFree(JNIEnv* env, jclass, jlong sink_handle) {
    auto* sink = reinterpret_cast<LogSink*>(static_cast<intptr_t>(sink_handle));
    if (!sink) return;
    env->DeleteGlobalRef(sink->listener);
    delete sink;
}

JNIEXPORT jobject JNICALL Java_dev_vkllm_Native_modelInfo(JNIEnv* env, jclass, jlong model) {
    return guarded(env, jobject(nullptr), [&]() -> jobject {
        vkllm_model_info info{};
        info.struct_size = sizeof(info);
        const vkllm_status st = vkllm_model_get_info(model_of(model), &info);
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        auto field = [&](const char* chars, size_t capacity) {
            return new_string(env, std::string(chars, strnlen(chars, capacity)));
        };
        jstring arch = field(info.architecture, sizeof(info.architecture));
        jstring device = arch ? field(info.device, sizeof(info.device)) : nullptr;
        jstring tmpl = device ? field(info.chat_template, sizeof(info.chat_template)) : nullptr;
        jstring pooling = tmpl ? field(info.pooling, sizeof(info.pooling)) : nullptr;
        if (!pooling) return nullptr;
        return env->NewObject(
            refs.model_info, refs.model_info_init, arch, device, tmpl, jint(info.n_vocab), jint(info.n_layers),
            jint(info.dim), jint(info.n_heads), jint(info.n_kv_heads), jint(info.head_dim), jint(info.n_ctx),
            jint(info.n_ctx_train), jint(info.max_sessions), jint(info.bos_token), jint(info.eos_token),
            jlong(info.weights_bytes), jlong(info.kv_cache_bytes), jlong(info.scratch_bytes),
            info.embeddings ? JNI_TRUE : JNI_FALSE, jint(info.embedding_dim), jint(info.max_embed_tokens), pooling,
            jint(info.kv_budget), info.vision ? JNI_TRUE : JNI_FALSE);
    });
}

JNIEXPORT jintArray JNICALL Java_dev_vkllm_Native_tokenize(JNIEnv* env, jclass, jlong model, jstring text,
                                                           jboolean add_special, jboolean parse_special) {
    return guarded(env, jintArray(nullptr), [&]() -> jintArray {
        std::string c_text;
        if (!utf8_of(env, text, c_text)) return nullptr;
        // About one token per 2 bytes in practice; the second call is rare.
        std::vector<int32_t> ids(c_text.size() / 2 + 8);
        size_t n = 0;
        vkllm_status st = vkllm_tokenize(model_of(model), c_text.data(), c_text.size(), add_special == JNI_TRUE,
                                         parse_special == JNI_TRUE, ids.data(), ids.size(), &n);
        if (st == VKLLM_ERR_BUFFER_TOO_SMALL) {
            ids.resize(n);
            st = vkllm_tokenize(model_of(model), c_text.data(), c_text.size(), add_special == JNI_TRUE,
                                parse_special == JNI_TRUE, ids.data(), ids.size(), &n);
        }
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        jintArray out = env->NewIntArray(jsize(n));
        if (out && n > 0) env->SetIntArrayRegion(out, 0, jsize(n), reinterpret_cast<const jint*>(ids.data()));
        return out;
    });
}

JNIEXPORT jobjectArray JNICALL Java_dev_vkllm_Native_embedBatch(JNIEnv* env, jclass, jlong model, jobjectArray texts,
                                                                jint normalize) {
    return guarded(env, jobjectArray(nullptr), [&]() -> jobjectArray {
        std::vector<std::string> c_texts;
        if (!utf8_strings_of(env, texts, c_texts, "texts")) return nullptr;
        const TextList list(c_texts);
        const size_t n = c_texts.size();
        size_t count = 0;
        // The size first (answered before anything runs), then the vectors, all in one call.
        vkllm_status st =
            vkllm_embed_batch(model_of(model), list.ptrs.data(), list.lens.data(), n, normalize, nullptr, 0, &count);
        std::vector<float> v(count);
        if (st == VKLLM_ERR_BUFFER_TOO_SMALL)
            st = vkllm_embed_batch(model_of(model), list.ptrs.data(), list.lens.data(), n, normalize, v.data(),
                                   v.size(), &count);
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        const size_t dim = n > 0 ? count / n : 0;
        jclass float_array = env->FindClass("[F");
        if (!float_array) return nullptr;
        jobjectArray out = env->NewObjectArray(jsize(n), float_array, nullptr);
        env->DeleteLocalRef(float_array);
        if (!out) return nullptr;
        for (size_t i = 0; i < n; ++i) {
            jfloatArray row = env->NewFloatArray(jsize(dim));
            if (!row) return nullptr;
            if (dim > 0) env->SetFloatArrayRegion(row, 0, jsize(dim), v.data() + i * dim);
            env->SetObjectArrayElement(out, jsize(i), row);
            // One local reference per text would overflow the frame's table in a large batch.
            env->DeleteLocalRef(row);
            if (env->ExceptionCheck()) return nullptr;
        }
        return out;
    });
}

JNIEXPORT jfloatArray JNICALL Java_dev_vkllm_Native_rerank(JNIEnv* env, jclass, jlong model, jstring query,
                                                           jobjectArray documents) {
    return guarded(env, jfloatArray(nullptr), [&]() -> jfloatArray {
        std::string c_query;
        std::vector<std::string> c_documents;
        if (!query) {
            throw_java(env, "java/lang/NullPointerException", "query");
            return nullptr;
        }
        if (!utf8_of(env, query, c_query) || !utf8_strings_of(env, documents, c_documents, "documents")) return nullptr;
        const TextList list(c_documents);
        const size_t n = c_documents.size();
        std::vector<float> scores(n);
        const vkllm_status st = vkllm_rerank(model_of(model), c_query.data(), c_query.size(), list.ptrs.data(),
                                             list.lens.data(), n, scores.data());
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        jfloatArray out = env->NewFloatArray(jsize(n));
        if (out && n > 0) env->SetFloatArrayRegion(out, 0, jsize(n), scores.data());
        return out;
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_detokenize(JNIEnv* env, jclass, jlong model, jintArray tokens) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const jsize n = env->GetArrayLength(tokens);
        std::vector<int32_t> ids(size_t(n) + 1);
        env->GetIntArrayRegion(tokens, 0, n, reinterpret_cast<jint*>(ids.data()));
        if (env->ExceptionCheck()) return nullptr;
        const std::optional<std::string> text =
            fill_text(env, size_t(n) * 8 + 16, [&](char* buf, size_t capacity, size_t* len) {
                return vkllm_detokenize(model_of(model), ids.data(), size_t(n), buf, capacity, len);
            });
        return text ? new_string(env, *text) : nullptr;
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_applyChatTemplate(JNIEnv* env, jclass, jlong model, jobjectArray roles,
                                                                  jobjectArray contents,
                                                                  jboolean add_generation_prompt) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::vector<std::string> r, c;
        if (!c_strings_of(env, roles, r, "a message role") || !c_strings_of(env, contents, c, "a message content"))
            return nullptr;
        std::vector<vkllm_chat_message> messages(r.size());
        size_t guess = 64;
        for (size_t i = 0; i < r.size(); ++i) {
            messages[i] = {r[i].c_str(), c[i].c_str()};
            guess += r[i].size() + c[i].size() + 32;
        }
        const std::optional<std::string> text = fill_text(env, guess, [&](char* buf, size_t capacity, size_t* len) {
            return vkllm_apply_chat_template(model_of(model), messages.data(), messages.size(),
                                             add_generation_prompt == JNI_TRUE, buf, capacity, len);
        });
        return text ? new_string(env, *text) : nullptr;
    });
}

}  // extern "C"
