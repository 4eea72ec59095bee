// Kernel configurations measured on this device by `vkllm tune` (runtime/ops/tuning.h measures
// them; the kernel table's planners apply them, runtime/ops/kernel_table.cpp): the file beside the
// pipeline cache, its key and its entries. A file is only ever trusted for the device, driver,
// vkllm version and shader table that measured it (docs/tuning.md).
#pragma once

#include "runtime/caps.h"

#include <compare>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace vkllm {

// The numbers of one tuned configuration; 0: the row's own value. A kernel reads the fields it has:
// matvec rows wg and rows; tiled and integer-dot matmul bm, bn, bk, tm, tn; cooperative-matrix
// matmul bm, bn, bk, sgm, sgn.
struct TunedConfig {
    uint32_t wg = 0, rows = 0;
    uint32_t bm = 0, bn = 0, bk = 0, tm = 0, tn = 0, sgm = 0, sgn = 0;
    bool operator==(const TunedConfig&) const = default;
};
// "wg=128 rows=2", "bm=64 bn=128 bk=32 tm=4 tn=8": the fields that are set.
std::string describe(const TunedConfig& c);

// The m bucket of a call: "1" (a decode step), "2-8" (a decode batch), else m itself (a prompt
// chunk of the ubatch; an expert matmul's expected slots), so that a tile measured for one prompt
// chunk size is not applied to another.
std::string tuning_bucket(uint32_t m);

// An entry's shape class: the kernel table row, the weight type (GGUF type id), the projection's
// exact n and k, the m bucket.
struct TuningKey {
    std::string row;
    uint32_t wtype = 0, n = 0, k = 0;
    std::string bucket;
    auto operator<=>(const TuningKey&) const = default;
};

class KernelTuning {
public:
    // What a file was measured on; all of it must match for the file to be used.
    struct Header {
        std::string vkllm_version;
        std::string device;
        uint32_t vendor_id = 0, device_id = 0, driver_version = 0;
        std::string pipeline_cache_uuid;  // hex, as in the file's name
        uint64_t shader_hash = 0;  // the embedded shader table's (shader_table_hash)
        bool operator==(const Header&) const = default;
    };
    // This build on this device.
    static Header header_for(const DeviceCaps& caps);

    Header header;
    std::map<TuningKey, TunedConfig> entries;
    std::filesystem::path file;  // where it was read from or written to (reports); not stored

    const TunedConfig* find(std::string_view row, uint32_t wtype, uint32_t n, uint32_t k, uint32_t m) const;

    std::string to_json() const;
    // Throws std::runtime_error saying what is wrong with the text.
    static KernelTuning parse(std::string_view text);
    // Atomically (temp + rename); throws std::runtime_error when the file cannot be written.
    void save(const std::filesystem::path& path) const;
};

// "tuning-<pipeline cache uuid>.json": beside the pipeline cache, one per device.
std::string kernel_tuning_file_name(const DeviceCaps& caps);

// What loading found: the table (null when there is none to use) and, when a file was there but
// is not used, one line saying why (corrupt, foreign: another device, stale: another driver,
// vkllm version or shader table).
struct TuningLoad {
    std::shared_ptr<const KernelTuning> tuning;
    std::string warning;
};
// A missing file is no table and no warning.
TuningLoad load_kernel_tuning(const DeviceCaps& caps, const std::filesystem::path& file);

}  // namespace vkllm
