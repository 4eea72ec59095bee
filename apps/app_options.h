// Options shared by the subcommands that open a device (--device, --caps, --validate, cache).
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace vkllm::apps {

// Option checks whose messages name the requirement: CLI11's NonNegativeNumber / PositiveNumber
// print their range as [0, 1.797...e308] and call "abc" out of range.
CLI::Validator non_negative_number();  // "--seed: must be >= 0, got -2"
CLI::Validator positive_number();  // "--ctx: 'abc' is not a number"

// The whole of a file's bytes; nullopt when it cannot be opened (the caller names what it is).
std::optional<std::string> read_whole_file(const std::string& path);

// --kv-type, one of the ops::kv_type_name names, parsed into `kv` (whose value is the default).
void add_kv_type_option(CLI::App* cmd, ops::KvType& kv);

struct DeviceOptions {
    std::string device;  // index or name substring
    std::string caps;  // CapsOverride spec
    bool validate = false;  // Khronos validation layer
    std::string cache_dir;  // pipeline cache directory
    bool no_cache = false;
    // A model split over devices (the commands that run a decoder: run, chat, serve, perplexity, bench).
    std::string devices;  // "0,1": indices or name substrings
    std::string split;  // "layer" or "layer:R0,R1,..."; "": by memory when --devices names several
    // The commands that run a model (run, chat, serve, bench) read `vkllm tune`'s file beside the
    // pipeline cache unless --no-tune (docs/tuning.md).
    bool reads_tuning = false, no_tune = false;

    void add_to(CLI::App* cmd);
    void add_split_to(CLI::App* cmd);  // --devices and --split
    void add_tune_to(CLI::App* cmd);  // --no-tune; the command reads the tuning file
    ContextOptions context_options() const;  // throws std::invalid_argument on a bad --caps/--device
    // The devices a split names (empty: one device, context_options()'s); --split without --devices
    // takes every device. std::invalid_argument for --device with --devices, or an empty entry.
    std::vector<DeviceSelector> split_devices() const;
};

}  // namespace vkllm::apps
