#include "serving/server/metrics.h"

#include <fmt/format.h>

namespace vkllm::server {

namespace {

// One metric family: HELP, TYPE and a sample without labels.
template <class T>
void family(std::string& out, const char* name, const char* type, const char* help, T value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string prometheus_text(const std::optional<engine::EngineMetrics>& engine, const ServerCounters& server) {
    std::string out;
    family(out, "vkllm_ready", "gauge", "1 when the model is loaded and requests are served, 0 while loading.",
           server.ready ? 1 : 0);
    if (engine) {
        const engine::EngineMetrics& m = *engine;
        family(out, "vkllm_slots", "gauge", "Slots (concurrent conversations, --parallel).", m.slots);
        family(out, "vkllm_slots_busy", "gauge", "Slots serving a request now.", m.slots_busy);
        family(out, "vkllm_requests_queued", "gauge", "Requests waiting for a free slot.", m.queued);
        family(out, "vkllm_requests_total", "counter", "Requests the engine accepted.", m.requests_total);
        family(out, "vkllm_requests_cancelled_total", "counter",
               "Requests cancelled (client gone, or shutdown) before they finished.", m.requests_cancelled);
        family(out, "vkllm_requests_failed_total", "counter", "Requests that ended with an error.", m.requests_failed);
        family(out, "vkllm_prompt_tokens_total", "counter", "Prompt tokens of all requests.", m.prompt_tokens_total);
        family(out, "vkllm_prompt_tokens_cached_total", "counter",
               "Prompt tokens not evaluated: reused from the slot's previous conversation, or shared from another "
               "slot's KV blocks.",
               m.cached_tokens_total);
        family(out, "vkllm_generated_tokens_total", "counter", "Tokens generated.", m.generated_tokens_total);
        family(out, "vkllm_decode_steps_total", "counter", "Batched decode passes.", m.steps_total);
        family(out, "vkllm_draft_tokens_total", "counter",
               "Speculative decoding: tokens drafted and verified for finished requests.", m.draft_tokens_total);
        family(out, "vkllm_draft_tokens_accepted_total", "counter",
               "Speculative decoding: drafted tokens the model kept (each a token without a decode pass of its own).",
               m.accepted_tokens_total);
        if (m.blending) {
            family(out, "vkllm_blend_documents_total", "counter", "CacheBlend: documents blended into prompts.",
                   m.blend_documents_total);
            family(out, "vkllm_blend_documents_stored_total", "counter",
                   "CacheBlend: blended documents the document store held (the others were evaluated alone first).",
                   m.blend_documents_stored_total);
            family(out, "vkllm_blend_tokens_total", "counter", "CacheBlend: tokens of the blended documents.",
                   m.blend_tokens_total);
            family(out, "vkllm_blend_recomputed_tokens_total", "counter",
                   "CacheBlend: document tokens evaluated again in every layer.", m.blend_recomputed_tokens_total);
            family(out, "vkllm_blend_fallbacks_total", "counter",
                   "CacheBlend: blends the model refused or had no room for (the documents were evaluated as text).",
                   m.blend_fallbacks_total);
            family(out, "vkllm_blend_store_bytes", "gauge", "CacheBlend: the document store's bytes in host memory.",
                   m.blend_store_bytes);
            family(out, "vkllm_blend_store_disk_bytes", "gauge", "CacheBlend: the document store's bytes on disk.",
                   m.blend_store_disk_bytes);
        }
        family(
            out, "vkllm_decode_batch_size_sum", "counter",
            "Sum over decode passes of the slots each decoded (divide by vkllm_decode_steps_total for the mean batch).",
            m.batch_size_sum);
        family(out, "vkllm_prompt_seconds_total", "counter", "Time spent evaluating prompts.", m.prompt_seconds_total);
        family(out, "vkllm_decode_seconds_total", "counter", "Time spent in decode passes.", m.decode_seconds_total);
        family(out, "vkllm_kv_blocks_used", "gauge",
               "KV cache blocks held by some slot (a block shared by several slots counts once).", m.kv_blocks_used);
        family(out, "vkllm_kv_blocks", "gauge", "KV cache blocks in the pool.", m.kv_blocks_total);
        family(out, "vkllm_kv_block_bytes", "gauge", "Device bytes of one KV block over all layers (K and V).",
               m.kv_block_bytes);
    }
    family(out, "vkllm_http_streams_open", "gauge", "Event streams (stream: true) being written now.",
           server.streams_open);
    out +=
        "# HELP vkllm_http_requests_total HTTP requests answered, by status code.\n"
        "# TYPE vkllm_http_requests_total counter\n";
    for (const auto& [status, n] : server.http_by_status)
        out += fmt::format("vkllm_http_requests_total{{status=\"{}\"}} {}\n", status, n);
    return out;
}

}  // namespace vkllm::server
