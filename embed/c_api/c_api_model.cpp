// C API: version, errors, devices, models, tokens and chat templates (include/vkllm/vkllm.h).
#include "embed/c_api/api_guard.h"
#include "embed/c_api/handles.h"
#include "model/embedding.h"
#include "model/forward/device_split.h"

#include "runtime/device.h"
#include "runtime/instance.h"
#include "runtime/vk_check.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/engine/speculation.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

using namespace vkllm;
using vkllm::c_api::ApiFailure;
using vkllm::c_api::guarded;
using vkllm::c_api::require;

namespace {

// Thrown from the progress callback to unwind the half-built model.
struct LoadCancelled {};

template <size_t N>
void copy_text(char (&dst)[N], std::string_view src) {
    const size_t n = std::min(src.size(), N - 1);
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
}

vkllm_device_type device_type(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return VKLLM_DEVICE_INTEGRATED_GPU;
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return VKLLM_DEVICE_DISCRETE_GPU;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return VKLLM_DEVICE_VIRTUAL_GPU;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return VKLLM_DEVICE_CPU;
        default: return VKLLM_DEVICE_OTHER;
    }
}

nlohmann::ordered_json messages_json(const vkllm_chat_message* messages, size_t n) {
    require(messages || n == 0, "messages is NULL but n_messages is " + std::to_string(n));
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (size_t i = 0; i < n; ++i) {
        require(messages[i].role != nullptr, fmt::format("messages[{}].role is NULL", i));
        require(messages[i].content != nullptr, fmt::format("messages[{}].content is NULL", i));
        out.push_back({{"role", messages[i].role}, {"content", messages[i].content}});
    }
    return out;
}

// vkllm_embed and vkllm_embed_batch: every text checked, then all evaluated as embed_batch packs them.
vkllm_status embed_texts(vkllm_model* model, const char* const* texts, const size_t* lens, size_t n, int32_t normalize,
                         float* out, size_t capacity, size_t* n_out) {
    vkllm_model& m = *c_api::live_model(model);
    require(n_out != nullptr, "n_out is NULL");
    require(out != nullptr || capacity == 0, "out is NULL but capacity is " + std::to_string(capacity));
    const Pooling pooling = m.pooling;
    require(
        m.role == ModelRole::Embed,
        m.role == ModelRole::Rerank
            ? std::string("this model is a reranker (pooling rank): it scores a query and a document together "
                          "(vkllm_rerank)")
            : fmt::format("a {} model makes no embeddings: vkllm_embed needs an embedding model (an encoder such as "
                          "bert, or a decoder whose file or params name a pooling)",
                          m.loaded.cfg.arch->name));
    require(normalize >= -1,
            fmt::format("normalize {} must be -1 (none), 0 (max-abs), 1, 2 or a p-norm p > 2", normalize));
    require(pooling != Pooling::None, "the model's pooling 'none' gives no one vector per text (set params.pooling)");
    const size_t dim = m.loaded.cfg.dim;
    // Every text checked first (an error names it), then the size: outputs are written only on
    // success or BUFFER_TOO_SMALL.
    std::vector<std::vector<int32_t>> inputs;
    for (size_t i = 0; i < n; ++i) {
        const std::string what = n == 1 ? std::string("the text") : fmt::format("texts[{}]", i);
        require(lens[i] > 0, what + " is empty");
        inputs.push_back(m.loaded.tokenizer->encode(std::string_view(texts[i], lens[i]), true));
        if (inputs.back().size() > embed_limit(*m.loaded.model))
            throw ApiFailure(VKLLM_ERR_CONTEXT_FULL,
                             fmt::format("{} has {} tokens, more than the {} this model takes at once", what,
                                         inputs.back().size(), embed_limit(*m.loaded.model)));
    }
    if (capacity < n * dim) {
        *n_out = n * dim;
        c_api::set_last_error(n == 1
                                  ? fmt::format("an embedding has {} values; the buffer holds {}", dim, capacity)
                                  : fmt::format("{} embeddings of {} values; the buffer holds {}", n, dim, capacity));
        return VKLLM_ERR_BUFFER_TOO_SMALL;
    }
    EmbedOptions eo;
    eo.normalize = normalize;
    eo.pooling = m.pooling;
    std::vector<Embedding> e;
    {
        std::lock_guard lock(m.embed_mutex);
        e = embed_batch(*m.loaded.model, inputs, eo);
    }
    for (size_t i = 0; i < n; ++i) std::copy(e[i].vectors.at(0).begin(), e[i].vectors.at(0).end(), out + i * dim);
    *n_out = n * dim;
    return VKLLM_OK;
}

}  // namespace

namespace vkllm::c_api {

// Writes `text` NUL-terminated into buf/capacity and its length into *len (the rules of
// vkllm_detokenize and vkllm_apply_chat_template).
vkllm_status write_string(const std::string& text, char* buf, size_t capacity, size_t* len) {
    *len = text.size();
    if (capacity < text.size() + 1) {
        c_api::set_last_error(
            fmt::format("the text needs {} bytes with its NUL; the buffer holds {}", text.size() + 1, capacity));
        return VKLLM_ERR_BUFFER_TOO_SMALL;
    }
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    return VKLLM_OK;
}

// Shared with c_api_session.cpp: the rendered prompt of a conversation.
std::string render_chat(const vkllm_model& m, const vkllm_chat_message* messages, size_t n,
                        bool add_generation_prompt) {
    if (!m.chat_template) throw chat_template::TemplateError(m.chat_template_error);
    chat_template::ChatInputs in =
        chat_template::chat_inputs(*m.loaded.tokenizer, messages_json(messages, n), nullptr, nullptr);
    in.add_generation_prompt = add_generation_prompt;
    return m.chat_template->apply(in);
}

}  // namespace vkllm::c_api

extern "C" {

const char* vkllm_status_name(vkllm_status status) {
    switch (status) {
        case VKLLM_OK: return "VKLLM_OK";
        case VKLLM_CANCELLED: return "VKLLM_CANCELLED";
        case VKLLM_ERR_INVALID_ARGUMENT: return "VKLLM_ERR_INVALID_ARGUMENT";
        case VKLLM_ERR_INVALID_HANDLE: return "VKLLM_ERR_INVALID_HANDLE";
        case VKLLM_ERR_FILE: return "VKLLM_ERR_FILE";
        case VKLLM_ERR_MODEL: return "VKLLM_ERR_MODEL";
        case VKLLM_ERR_DEVICE: return "VKLLM_ERR_DEVICE";
        case VKLLM_ERR_OUT_OF_MEMORY: return "VKLLM_ERR_OUT_OF_MEMORY";
        case VKLLM_ERR_CONTEXT_FULL: return "VKLLM_ERR_CONTEXT_FULL";
        case VKLLM_ERR_BUSY: return "VKLLM_ERR_BUSY";
        case VKLLM_ERR_TEMPLATE: return "VKLLM_ERR_TEMPLATE";
        case VKLLM_ERR_BUFFER_TOO_SMALL: return "VKLLM_ERR_BUFFER_TOO_SMALL";
        case VKLLM_ERR_INTERNAL: return "VKLLM_ERR_INTERNAL";
    }
    return "unknown status";
}

const char* vkllm_last_error(void) { return c_api::last_error(); }

const char* vkllm_version(void) {
#define VKLLM_STR2(x) #x
#define VKLLM_STR(x) VKLLM_STR2(x)
    return VKLLM_STR(VKLLM_VERSION_MAJOR) "." VKLLM_STR(VKLLM_VERSION_MINOR) "." VKLLM_STR(VKLLM_VERSION_PATCH);
}

// --- devices -------------------------------------------------------------------------------------

vkllm_status vkllm_device_count(uint32_t* count) {
    return guarded([&] {
        require(count != nullptr, "count is NULL");
        Instance instance;
        *count = uint32_t(enumerate_devices(instance).size());
        return VKLLM_OK;
    });
}

vkllm_status vkllm_device_get_info(uint32_t index, vkllm_device_info* info) {
    return guarded([&] {
        require(info != nullptr, "info is NULL");
        Instance instance;
        const std::vector<PhysicalDeviceEntry> devices = enumerate_devices(instance);
        require(index < devices.size(),
                fmt::format("device index {} does not exist; there are {} devices", index, devices.size()));
        const DeviceCaps& c = devices[index].caps;
        vkllm_device_info d{};
        d.index = index;
        copy_text(d.name, c.name);
        copy_text(d.driver, c.driver_info.empty() ? c.driver_name : c.driver_name + " " + c.driver_info);
        d.type = device_type(c.type);
        d.vendor_id = c.vendor_id;
        d.device_id = c.device_id;
        d.api_version_major = VK_API_VERSION_MAJOR(c.api_version);
        d.api_version_minor = VK_API_VERSION_MINOR(c.api_version);
        d.api_version_patch = VK_API_VERSION_PATCH(c.api_version);
        d.device_local_memory = c.device_local_bytes;
        d.subgroup_size = c.subgroup_size;
        d.fp16 = c.fp16;
        d.int8 = c.int8;
        c_api::write_out(info, d, "vkllm_device_info");
        return VKLLM_OK;
    });
}

// --- models --------------------------------------------------------------------------------------

vkllm_model_params vkllm_model_default_params(void) {
    vkllm_model_params p{};
    p.struct_size = sizeof(p);
    p.device_index = -1;
    p.max_sessions = 1;
    p.kv_type = VKLLM_KV_F16;
    p.ubatch = 0;
    return p;
}

vkllm_status vkllm_model_load(const char* path, const vkllm_model_params* params, vkllm_model** out) {
    return guarded([&] {
        require(out != nullptr, "out is NULL");
        *out = nullptr;
        require(path != nullptr, "path is NULL");
        const vkllm_model_params p = c_api::read_params(params, vkllm_model_default_params(), "vkllm_model_params");
        require(p.device_index >= -1,
                fmt::format("device_index {} must be -1 (any) or a device index", p.device_index));
        require(p.max_sessions >= 1 && p.max_sessions <= 64,
                fmt::format("max_sessions {} must be 1..64", p.max_sessions));
        // A C caller may store any int in the enum field; loading one outside the enumerators as the
        // enum is undefined in C++ (UBSan reports it), so its bits are read as an integer first.
        static_assert(sizeof(vkllm_kv_type) == sizeof(int32_t));
        int32_t kv_raw = 0;
        std::memcpy(&kv_raw, &p.kv_type, sizeof kv_raw);
        require(kv_raw >= VKLLM_KV_F16 && kv_raw <= VKLLM_KV_Q8_0,
                fmt::format("kv_type {} is not a vkllm_kv_type", kv_raw));
        require(p.ubatch <= 8192, fmt::format("ubatch {} must be 0 (default) or 1..8192", p.ubatch));
        engine::SpeculationParams spec;  // 0 in draft_max / draft_min: the defaults
        spec.draft_model = p.draft_model ? p.draft_model : "";
        spec.lookup = p.lookup;
        if (p.draft_max) spec.draft_max = p.draft_max;
        if (p.draft_min) spec.draft_min = p.draft_min;
        try {
            engine::check_speculation(spec);
        } catch (const std::invalid_argument& e) {
            throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, e.what());
        }
        const bool speculates = spec.on();
        require(p.blend_ratio >= 0 && p.blend_ratio <= 1,
                fmt::format("blend_ratio {} must be 0 (default: 0.15) or within 0..1", p.blend_ratio));
        require(p.blend || (p.blend_ratio == 0 && !p.kv_store && !p.kv_store_mib),
                "blend_ratio, kv_store and kv_store_mib are CacheBlend's: set blend too");
        auto log = [fn = p.log, user = p.log_user_data](vkllm_log_level level, const std::string& msg) {
            if (fn) fn(level, msg.c_str(), user);
        };
        LoadOptions lo;
        if (p.device_name)
            lo.context.device.name = p.device_name;
        else if (p.device_index >= 0)
            lo.context.device.index = uint32_t(p.device_index);
        require(p.split == nullptr || p.devices != nullptr,
                "split is set but devices is NULL: name the devices to split over");
        if (p.devices) {
            require(p.device_name == nullptr && p.device_index == -1,
                    "devices splits the model over several devices; device_index and device_name pick one: set only "
                    "one of them");
            lo.devices = parse_devices(p.devices, "devices");
            if (p.split) lo.split_ratios = parse_split(p.split);
        }
        if (p.caps) lo.context.caps = CapsOverride::parse(p.caps);
        if (p.cache_dir && !*p.cache_dir)
            lo.context.pipeline_cache = false;
        else if (p.cache_dir)
            lo.context.cache_dir = std::filesystem::path(p.cache_dir);
        lo.context.instance.validation = p.validation;
        lo.context.instance.sink = [log](MessageSeverity s, std::string_view msg) noexcept {
            // Called from inside the driver (C frames): nothing may propagate out of it.
            try {
                log(s == MessageSeverity::Error     ? VKLLM_LOG_ERROR
                    : s == MessageSeverity::Warning ? VKLLM_LOG_WARNING
                                                    : VKLLM_LOG_INFO,
                    std::string(msg));
            } catch (...) {}
        };
        std::optional<Pooling> pooling;
        if (p.pooling) {
            pooling = parse_pooling(p.pooling);
            require(pooling && *pooling != Pooling::None && *pooling != Pooling::Rank,
                    fmt::format("pooling '{}' must be NULL (the file's), \"mean\", \"cls\" or \"last\"", p.pooling));
        }
        // An embedding model keeps no conversations (one sequence) and is sized by embedding_sizes.
        const ModelRole role = [&] {
            try {
                const ModelConfig cfg = ModelConfig::from_gguf(GgufFile::open(path));
                const ModelRole r = model_role(cfg, pooling.has_value());
                if (pooling && r != ModelRole::Embed)
                    throw ApiFailure(
                        VKLLM_ERR_INVALID_ARGUMENT,
                        fmt::format("pooling '{}' is for embedding models; this one is a reranker (pooling rank)",
                                    p.pooling));
                if (r == ModelRole::Rerank) {
                    try {
                        require_reranker(cfg);  // a decoder's rank pooling: refused before the upload
                    } catch (const std::invalid_argument& e) {
                        throw ApiFailure(VKLLM_ERR_MODEL, e.what());
                    }
                }
                if (embeds(r)) {
                    const EmbedSizes sizes = embedding_sizes(cfg, p.n_ctx, p.ubatch);
                    lo.model.n_ctx = sizes.n_ctx;
                    lo.model.ubatch = sizes.ubatch;
                }
                return r;
            } catch (const ApiFailure&) {
                throw;
            } catch (const std::exception&) {
                return ModelRole::Generate;  // load_model reports the file's problem
            }
        }();
        if (!embeds(role)) {
            lo.model.n_ctx = p.n_ctx;
            lo.model.ubatch = p.ubatch ? p.ubatch : 64;
            // An image whose rows see each other is one chunk (a Gemma 3 image's 256 rows).
            if (p.mmproj) {
                try {
                    check_model_path(p.mmproj);
                } catch (const ModelFileError& e) {
                    throw ApiFailure(VKLLM_ERR_FILE, fmt::format("mmproj: {}", e.what()));
                }
                lo.model.ubatch = std::max(lo.model.ubatch, vision_ubatch(p.mmproj));
            }
            lo.model.kv_budget = p.kv_budget;
            if (speculates) {
                if (p.draft_model) {
                    try {
                        check_model_path(p.draft_model);
                    } catch (const ModelFileError& e) {
                        throw ApiFailure(VKLLM_ERR_FILE, fmt::format("draft_model: {}", e.what()));
                    }
                }
                engine::fit_for_drafts(spec, lo.model);
            }
        } else if (speculates) {
            throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, "draft_model, lookup: an embedding model generates nothing");
        } else if (p.kv_budget) {
            throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT,
                             "kv_budget sizes the KV cache of sessions; an embedding model has none: leave it 0");
        }
        lo.model.kv_type = p.kv_type == VKLLM_KV_F32    ? ops::KvType::F32
                           : p.kv_type == VKLLM_KV_Q8_0 ? ops::KvType::Q8_0
                                                        : ops::KvType::F16;
        require(!p.blend || !embeds(role), "blend: an embedding model generates nothing to blend documents for");
        // CacheBlend's scratch sequence after the sessions' (serving/engine/blender.h).
        lo.model.n_seq = embeds(role) ? 1 : p.max_sessions + (p.blend ? 1 : 0);
        lo.model.spare_seqs = p.blend ? 1 : 0;  // borrows the sessions' blocks: no memory of its own
        lo.progress = [&](uint64_t done, uint64_t total) {
            if (p.progress && total > 0 && p.progress(float(double(done) / double(total)), p.progress_user_data) != 0)
                throw LoadCancelled{};
        };
        auto m = std::make_unique<vkllm_model>();
        // Before the upload: the tokenizer's warnings, and the chat template (a named one that fails
        // fails the load without uploading anything).
        lo.on_ready = [&](const LoadedModel& lm) {
            for (const std::string& w : lm.tokenizer->warnings()) log(VKLLM_LOG_WARNING, w);
            try {
                m->chat_template = std::make_unique<chat_template::ChatTemplate>(chat_template::resolve_chat_template(
                    p.chat_template ? p.chat_template : "",
                    std::string(lm.file->find_string("tokenizer.chat_template").value_or(""))));
            } catch (const chat_template::TemplateError& e) {
                // A template the caller named must work; the file's own only matters to vkllm_chat,
                // so a model whose template this interpreter cannot parse still loads and generates.
                if (p.chat_template) throw;
                m->chat_template_error = fmt::format("the model's chat template cannot be used: {}", e.what());
                log(VKLLM_LOG_WARNING, m->chat_template_error);
            }
        };
        try {
            m->loaded = load_model(path, lo);
        } catch (const ModelFileError& e) {
            throw ApiFailure(VKLLM_ERR_FILE, e.what());
        } catch (const LoadCancelled&) {
            throw ApiFailure(VKLLM_CANCELLED, "loading was stopped by the progress callback");
        } catch (const NoDeviceError& e) {  // no usable device, none with that name, loader too old
            throw ApiFailure(VKLLM_ERR_DEVICE, e.what());
        } catch (const DeviceLimitError& e) {  // the weights, the context or a buffer do not fit
            throw ApiFailure(VKLLM_ERR_OUT_OF_MEMORY, e.what());
        }
        m->role = role;
        m->pooling = pooling.value_or(m->loaded.cfg.pooling);
        m->image_max_pixels = p.image_max_pixels ? p.image_max_pixels : ImageLimits{}.max_pixels;
        if (p.mmproj) {
            require(!embeds(role), "mmproj: an embedding model takes no images");
            try {
                check_model_path(p.mmproj);
            } catch (const ModelFileError& e) {
                throw ApiFailure(VKLLM_ERR_FILE, fmt::format("mmproj: {}", e.what()));
            }
            m->vision = std::make_unique<VisionModel>(*m->loaded.ctx, p.mmproj, m->loaded.cfg.dim);
        }
        if (speculates) {
            // On the model's (first) device.
            ContextOptions device = lo.context;
            if (!lo.devices.empty()) device.device = lo.devices.front();
            try {
                engine::Speculation sp = engine::make_speculation(spec, m->loaded, device, p.max_sessions);
                m->draft = std::move(sp.draft_model);
                m->drafter = std::move(sp.drafter);
            } catch (const ModelFileError& e) {
                throw ApiFailure(VKLLM_ERR_FILE, e.what());
            } catch (const std::invalid_argument& e) {  // another vocabulary, a model that cannot draft
                throw ApiFailure(VKLLM_ERR_MODEL, e.what());
            }
        }
        if (p.blend) {
            engine::BlendOptions bo;
            if (p.blend_ratio > 0) bo.ratio = p.blend_ratio;
            if (p.kv_store) bo.store.disk_dir = p.kv_store;
            if (p.kv_store_mib) bo.store.host_bytes = uint64_t(p.kv_store_mib) << 20;
            if (const std::string why = engine::blend_refusal(*m->loaded.model); !why.empty())
                throw ApiFailure(VKLLM_ERR_MODEL, fmt::format("blend: CacheBlend cannot serve this {} model: {}",
                                                              m->loaded.cfg.arch->name, why));
            try {
                m->blender = std::make_shared<engine::Blender>(*m->loaded.model, p.max_sessions, bo);
            } catch (const std::invalid_argument& e) {  // an unusable kv_store directory
                throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, e.what());
            }
        }
        if (!embeds(role)) {
            engine::EngineOptions eo;
            eo.n_slots = p.max_sessions;
            eo.blender = m->blender;
            eo.drafter = m->drafter;
            eo.draft_max = spec.draft_max;
            eo.draft_min = spec.draft_min;
            eo.queue_limit = p.max_sessions;
            eo.default_timeout = std::chrono::hours(24 * 365);  // an embedding app decides when to stop (vkllm_cancel)
            m->engine = std::make_unique<engine::Engine>(*m->loaded.model, *m->loaded.tokenizer, eo);
        }
        m->max_sessions = p.max_sessions;
        c_api::register_model(m.get());
        *out = m.release();
        return VKLLM_OK;
    });
}

void vkllm_model_free(vkllm_model* model) {
    (void)guarded([&] {
        if (!model || !c_api::is_live_model(model)) return VKLLM_OK;
        std::vector<vkllm_session*> open;
        {
            std::lock_guard lock(model->sessions_mutex);
            for (vkllm_session* s : model->sessions)
                if (c_api::session_generating(*s))
                    throw ApiFailure(VKLLM_ERR_BUSY,
                                     "vkllm_model_free: a session of the model is generating; the "
                                     "model was not freed (cancel it and free it after it returned)");
            open.swap(model->sessions);
        }
        c_api::unregister_model(model);
        for (vkllm_session* s : open)
            if (c_api::unregister_session(s)) delete s;
        delete model;
        return VKLLM_OK;
    });
}

vkllm_status vkllm_model_get_info(const vkllm_model* model, vkllm_model_info* info) {
    return guarded([&] {
        const vkllm_model& m = *c_api::live_model(model);
        vkllm_model_info i{};
        copy_text(i.architecture, m.loaded.cfg.arch->name);
        copy_text(i.device, device_names(m.loaded));
        // No template when the file's own failed to parse (the model still generates).
        const std::string tmpl = !m.chat_template ? std::string()
                                 : m.chat_template->name() == "tokenizer.chat_template"
                                     ? std::string("model")
                                     : std::string(m.chat_template->name());
        copy_text(i.chat_template, tmpl);
        i.n_vocab = m.loaded.cfg.n_vocab;
        i.n_layers = m.loaded.cfg.n_layers;
        i.dim = m.loaded.cfg.dim;
        i.n_heads = m.loaded.cfg.n_heads;
        i.n_kv_heads = m.loaded.cfg.n_kv_heads;
        i.head_dim = m.loaded.cfg.head_dim;
        i.n_ctx = m.loaded.model->n_ctx();
        i.n_ctx_train = m.loaded.cfg.n_ctx_train;
        i.max_sessions = m.engine ? m.max_sessions : 0;  // an embedding model has no sessions
        i.bos_token = m.loaded.tokenizer->bos_id();
        i.eos_token = m.loaded.tokenizer->eos_id();
        for (const ModelGpu::StageInfo& st : m.loaded.model->stages()) {
            i.weights_bytes += st.memory->weights;
            i.kv_cache_bytes += st.memory->kv_cache;
            i.scratch_bytes += st.memory->scratch;
        }
        i.embeddings = embeds(m.role);
        i.embedding_dim = i.embeddings ? m.loaded.cfg.dim : 0;
        i.max_embed_tokens = i.embeddings ? embed_limit(*m.loaded.model) : 0;
        copy_text(i.pooling, pooling_name(m.pooling));
        i.kv_budget = m.engine ? m.loaded.model->memory_plan().kv_budget : 0;
        i.vision = m.vision != nullptr;
        c_api::write_out(info, i, "vkllm_model_info");
        return VKLLM_OK;
    });
}

// --- tokens and templates ------------------------------------------------------------------------

vkllm_status vkllm_tokenize(const vkllm_model* model, const char* text, size_t len, bool add_special,
                            bool parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
    return guarded([&] {
        const vkllm_model& m = *c_api::live_model(model);
        require(text != nullptr || len == 0, "text is NULL");
        require(n_tokens != nullptr, "n_tokens is NULL");
        require(tokens != nullptr || capacity == 0, "tokens is NULL but capacity is " + std::to_string(capacity));
        const std::vector<int32_t> ids =
            m.loaded.tokenizer->encode(std::string_view(text ? text : "", len), add_special, parse_special);
        *n_tokens = ids.size();
        if (capacity < ids.size()) {
            c_api::set_last_error(fmt::format("the text has {} tokens; the buffer holds {}", ids.size(), capacity));
            return VKLLM_ERR_BUFFER_TOO_SMALL;
        }
        std::copy(ids.begin(), ids.end(), tokens);
        return VKLLM_OK;
    });
}

vkllm_status vkllm_detokenize(const vkllm_model* model, const int32_t* tokens, size_t n, char* buf, size_t capacity,
                              size_t* len) {
    return guarded([&] {
        const vkllm_model& m = *c_api::live_model(model);
        require(tokens != nullptr || n == 0, "tokens is NULL but n is " + std::to_string(n));
        require(buf != nullptr || capacity == 0, "buf is NULL but capacity is " + std::to_string(capacity));
        require(len != nullptr, "len is NULL");
        for (size_t i = 0; i < n; ++i)
            require(tokens[i] >= 0 && size_t(tokens[i]) < m.loaded.tokenizer->n_vocab(),
                    fmt::format("tokens[{}] = {} is not in the vocabulary ({} tokens)", i, tokens[i],
                                m.loaded.tokenizer->n_vocab()));
        return c_api::write_string(m.loaded.tokenizer->decode(std::span<const int32_t>(tokens, n)), buf, capacity, len);
    });
}

vkllm_status vkllm_embed(vkllm_model* model, const char* text, size_t len, int32_t normalize, float* out,
                         size_t capacity, size_t* n_out) {
    return guarded([&] {
        require(text != nullptr || len == 0, "text is NULL");
        const char* texts[] = {text ? text : ""};
        return embed_texts(model, texts, &len, 1, normalize, out, capacity, n_out);
    });
}

vkllm_status vkllm_embed_batch(vkllm_model* model, const char* const* texts, const size_t* lens, size_t n,
                               int32_t normalize, float* out, size_t capacity, size_t* n_out) {
    return guarded([&] {
        require(n == 0 || (texts != nullptr && lens != nullptr), "texts or lens is NULL");
        for (size_t i = 0; i < n; ++i)
            require(texts[i] != nullptr || lens[i] == 0, fmt::format("texts[{}] is NULL", i));
        return embed_texts(model, texts, lens, n, normalize, out, capacity, n_out);
    });
}

vkllm_status vkllm_rerank(vkllm_model* model, const char* query, size_t query_len, const char* const* documents,
                          const size_t* lens, size_t n, float* scores) {
    return guarded([&] {
        vkllm_model& m = *c_api::live_model(model);
        require(query != nullptr || query_len == 0, "query is NULL");
        require(n == 0 || (documents != nullptr && lens != nullptr && scores != nullptr),
                "documents, lens or scores is NULL");
        require(m.role == ModelRole::Rerank,
                fmt::format("this {} model is not a reranker (pooling '{}'): vkllm_rerank needs pooling 'rank'",
                            m.loaded.cfg.arch->name, pooling_name(m.pooling)));
        require(query_len > 0, "the query is empty");
        std::vector<std::vector<int32_t>> pairs;
        for (size_t i = 0; i < n; ++i) {
            require(documents[i] != nullptr || lens[i] == 0, fmt::format("documents[{}] is NULL", i));
            require(lens[i] > 0, fmt::format("documents[{}] is empty", i));
            pairs.push_back(rerank_tokens(*m.loaded.file, *m.loaded.tokenizer, std::string_view(query, query_len),
                                          std::string_view(documents[i], lens[i])));
            if (pairs.back().size() > embed_limit(*m.loaded.model))
                throw ApiFailure(
                    VKLLM_ERR_CONTEXT_FULL,
                    fmt::format("the query and documents[{}] have {} tokens together, more than the {} this "
                                "model takes at once",
                                i, pairs.back().size(), embed_limit(*m.loaded.model)));
        }
        std::lock_guard lock(m.embed_mutex);
        const std::vector<RerankScore> r = score_pairs(*m.loaded.model, pairs);
        for (size_t i = 0; i < n; ++i) scores[i] = r[i].score;
        return VKLLM_OK;
    });
}

vkllm_status vkllm_apply_chat_template(const vkllm_model* model, const vkllm_chat_message* messages, size_t n_messages,
                                       bool add_generation_prompt, char* buf, size_t capacity, size_t* len) {
    return guarded([&] {
        const vkllm_model& m = *c_api::live_model(model);
        require(buf != nullptr || capacity == 0, "buf is NULL but capacity is " + std::to_string(capacity));
        require(len != nullptr, "len is NULL");
        return c_api::write_string(c_api::render_chat(m, messages, n_messages, add_generation_prompt), buf, capacity,
                                   len);
    });
}

}  // extern "C"
