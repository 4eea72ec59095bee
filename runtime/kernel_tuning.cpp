#include "runtime/kernel_tuning.h"

#include "runtime/shader_registry.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <stdexcept>

#ifndef VKLLM_VERSION_STRING
#error "VKLLM_VERSION_STRING: set by CMakeLists.txt from the project version"
#endif

namespace vkllm {

namespace {

// The fields of TunedConfig by name, in the order the file and describe() list them.
constexpr std::pair<const char*, uint32_t TunedConfig::*> kFields[] = {
    {"wg", &TunedConfig::wg}, {"rows", &TunedConfig::rows}, {"bm", &TunedConfig::bm},
    {"bn", &TunedConfig::bn}, {"bk", &TunedConfig::bk},     {"tm", &TunedConfig::tm},
    {"tn", &TunedConfig::tn}, {"sgm", &TunedConfig::sgm},   {"sgn", &TunedConfig::sgn},
};

std::string uuid_hex(const DeviceCaps& caps) {
    std::string s;
    for (uint8_t b : caps.pipeline_cache_uuid) s += fmt::format("{:02x}", b);
    return s;
}

}  // namespace

std::string describe(const TunedConfig& c) {
    std::string s;
    for (const auto& [name, field] : kFields)
        if (c.*field) s += fmt::format("{}{}={}", s.empty() ? "" : " ", name, c.*field);
    return s.empty() ? "default" : s;
}

std::string tuning_bucket(uint32_t m) { return m == 1 ? "1" : m <= 8 ? "2-8" : std::to_string(m); }

KernelTuning::Header KernelTuning::header_for(const DeviceCaps& caps) {
    return {VKLLM_VERSION_STRING, caps.name,      caps.vendor_id,     caps.device_id,
            caps.driver_version,  uuid_hex(caps), shader_table_hash()};
}

const TunedConfig* KernelTuning::find(std::string_view row, uint32_t wtype, uint32_t n, uint32_t k, uint32_t m) const {
    auto it = entries.find(TuningKey{std::string(row), wtype, n, k, tuning_bucket(m)});
    return it == entries.end() ? nullptr : &it->second;
}

std::string KernelTuning::to_json() const {
    nlohmann::ordered_json j;
    j["vkllm_version"] = header.vkllm_version;
    j["device"] = header.device;
    j["vendor_id"] = header.vendor_id;
    j["device_id"] = header.device_id;
    j["driver_version"] = header.driver_version;
    j["pipeline_cache_uuid"] = header.pipeline_cache_uuid;
    j["shader_hash"] = fmt::format("{:016x}", header.shader_hash);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& [key, c] : entries) {
        nlohmann::ordered_json e = {
            {"row", key.row}, {"wtype", key.wtype}, {"n", key.n}, {"k", key.k}, {"m", key.bucket}};
        for (const auto& [name, field] : kFields)
            if (c.*field) e[name] = c.*field;
        list.push_back(std::move(e));
    }
    j["entries"] = std::move(list);
    return j.dump(1) + "\n";
}

KernelTuning KernelTuning::parse(std::string_view text) {
    KernelTuning t;
    try {
        const nlohmann::json j = nlohmann::json::parse(text);
        Header& h = t.header;
        h.vkllm_version = j.at("vkllm_version").get<std::string>();
        h.device = j.at("device").get<std::string>();
        h.vendor_id = j.at("vendor_id").get<uint32_t>();
        h.device_id = j.at("device_id").get<uint32_t>();
        h.driver_version = j.at("driver_version").get<uint32_t>();
        h.pipeline_cache_uuid = j.at("pipeline_cache_uuid").get<std::string>();
        h.shader_hash = std::stoull(j.at("shader_hash").get<std::string>(), nullptr, 16);
        for (const nlohmann::json& e : j.at("entries")) {
            TuningKey key{e.at("row").get<std::string>(), e.at("wtype").get<uint32_t>(), e.at("n").get<uint32_t>(),
                          e.at("k").get<uint32_t>(), e.at("m").get<std::string>()};
            TunedConfig c;
            for (const auto& [name, field] : kFields)
                if (e.contains(name)) c.*field = e[name].get<uint32_t>();
            if (c == TunedConfig{}) throw std::runtime_error(fmt::format("entry {} sets no number", key.row));
            t.entries[std::move(key)] = c;
        }
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(e.what());
    } catch (const std::logic_error& e) {  // std::stoull
        throw std::runtime_error(fmt::format("shader_hash: {}", e.what()));
    }
    return t;
}

void KernelTuning::save(const std::filesystem::path& path) const {
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        const std::string text = to_json();
        f.write(text.data(), std::streamsize(text.size()));
        if (!f) throw std::runtime_error(fmt::format("cannot write {}", tmp.string()));
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), ec.message()));
}

std::string kernel_tuning_file_name(const DeviceCaps& caps) { return fmt::format("tuning-{}.json", uuid_hex(caps)); }

TuningLoad load_kernel_tuning(const DeviceCaps& caps, const std::filesystem::path& file) {
    std::ifstream f(file, std::ios::binary);
    if (!f) return {};
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto ignored = [&](const std::string& why) {
        return TuningLoad{nullptr, fmt::format("vkllm: warning: ignoring the kernel tuning file {}: {}; run `vkllm "
                                               "tune` again to measure this setup",
                                               file.string(), why)};
    };
    auto t = std::make_shared<KernelTuning>();
    try {
        *t = KernelTuning::parse(text);
    } catch (const std::runtime_error& e) {
        return ignored(fmt::format("corrupt ({})", e.what()));
    }
    const KernelTuning::Header want = KernelTuning::header_for(caps), &got = t->header;
    if (got.vendor_id != want.vendor_id || got.device_id != want.device_id || got.device != want.device ||
        got.pipeline_cache_uuid != want.pipeline_cache_uuid)
        return ignored(fmt::format("foreign (measured on {}, this is {})", got.device, want.device));
    if (got.driver_version != want.driver_version)
        return ignored(
            fmt::format("stale (driver version {:#x}, this driver is {:#x})", got.driver_version, want.driver_version));
    if (got.vkllm_version != want.vkllm_version)
        return ignored(fmt::format("stale (vkllm {}, this is {})", got.vkllm_version, want.vkllm_version));
    if (got.shader_hash != want.shader_hash) return ignored("stale (measured with other shaders)");
    t->file = file;
    return {std::move(t), {}};
}

}  // namespace vkllm
