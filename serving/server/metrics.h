// /metrics: the engine's counters and the HTTP server's own, in Prometheus' text exposition format
// (version 0.0.4), so any Prometheus-compatible scraper reads them without an adapter.
#pragma once

#include "serving/engine/engine.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace vkllm::server {

struct ServerCounters {
    bool ready = false;  // the model is loaded
    std::map<int, uint64_t> http_by_status;  // status -> count
    uint32_t streams_open = 0;  // event streams being written now
};

// Every metric with its # HELP and # TYPE lines; the engine's only once it exists (nullopt while
// the model loads).
std::string prometheus_text(const std::optional<engine::EngineMetrics>& engine, const ServerCounters& server);

}  // namespace vkllm::server
