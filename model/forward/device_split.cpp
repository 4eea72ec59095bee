#include "model/forward/device_split.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace vkllm {

std::string layer_span(const LayerRange& r) {
    return r.count == 1 ? fmt::format("{}", r.first) : fmt::format("{}-{}", r.first, r.end() - 1);
}

std::vector<uint32_t> split_layer_counts(uint32_t n_layers, std::span<const double> shares) {
    if (shares.empty()) throw std::invalid_argument("a split needs at least one device");
    double total = 0;
    for (double s : shares) {
        if (!std::isfinite(s) || s < 0)
            throw std::invalid_argument(fmt::format("split ratio {} is not a non-negative number", s));
        total += s;
    }
    if (total <= 0) throw std::invalid_argument("split ratios are all 0: no device would hold a layer");
    std::vector<uint32_t> counts(shares.size());
    std::vector<std::pair<double, size_t>> remainders;
    uint32_t given = 0;
    for (size_t i = 0; i < shares.size(); ++i) {
        const double exact = n_layers * shares[i] / total;
        counts[i] = uint32_t(std::floor(exact));
        given += counts[i];
        remainders.push_back({exact - counts[i], i});
    }
    // Largest fractional parts first; among equal ones the earlier device.
    std::stable_sort(remainders.begin(), remainders.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t j = 0; given < n_layers; ++j, ++given) ++counts[remainders[j % remainders.size()].second];
    return counts;
}

SplitPlan plan_split(std::span<const SplitDevice> devices, const GgufFile& file, const ModelConfig& cfg,
                     const ModelOptions& opts, std::span<const double> ratios) {
    if (devices.empty()) throw std::invalid_argument("a split needs at least one device");
    check_splittable(cfg, 2);
    SplitPlan plan;
    if (ratios.empty()) {
        plan.by_memory = true;
        for (const SplitDevice& d : devices) plan.shares.push_back(double(d.caps.device_local_bytes));
    } else {
        if (ratios.size() != devices.size())
            throw std::invalid_argument(
                fmt::format("--split gives {} ratios for {} devices", ratios.size(), devices.size()));
        plan.shares.assign(ratios.begin(), ratios.end());
    }
    const std::vector<uint32_t> counts = split_layer_counts(cfg.n_layers, plan.shares);

    // Each part on its own first (the context each could hold when none was asked for), then all at
    // the smallest, so that every part keeps the same rows.
    auto plan_parts = [&](const ModelOptions& o) {
        std::vector<SplitPart> parts;
        std::vector<std::string> misfits;
        uint32_t first = 0;
        for (size_t d = 0; d < devices.size(); ++d) {
            if (counts[d] == 0) continue;
            SplitPart part{d, LayerRange{first, counts[d]}, {}};
            first += counts[d];
            try {
                part.memory = plan_memory(devices[d].caps, file, cfg, o, part.layers);
            } catch (const DeviceLimitError& e) {
                const DeviceCaps& c = devices[d].caps;
                misfits.push_back(fmt::format("device {} ({}, {} device-local), layers {}: {}", devices[d].index,
                                              c.name, format_mib(c.device_local_bytes), layer_span(part.layers),
                                              e.what()));
            }
            parts.push_back(part);
        }
        if (!misfits.empty()) {
            std::string msg = fmt::format("the model does not fit this split of its {} layers:", cfg.n_layers);
            for (const std::string& m : misfits) msg += "\n  " + m;
            throw DeviceLimitError(msg);
        }
        return parts;
    };
    plan.parts = plan_parts(opts);
    plan.n_ctx = plan.parts.front().memory.n_ctx;
    for (const SplitPart& p : plan.parts) plan.n_ctx = std::min(plan.n_ctx, p.memory.n_ctx);
    if (opts.n_ctx == 0) {
        ModelOptions fixed = opts;
        fixed.n_ctx = plan.n_ctx;
        plan.parts = plan_parts(fixed);
    }
    return plan;
}

std::vector<double> parse_split(const std::string& spec) {
    const std::string mode = spec.substr(0, spec.find(':'));
    if (mode != "layer")
        throw std::invalid_argument(
            fmt::format("--split '{}': expected layer or layer:R0,R1,... (only whole layers are "
                        "split over devices)",
                        spec));
    std::vector<double> ratios;
    if (spec.size() == mode.size()) return ratios;
    for (const std::string& item : comma_items(spec.substr(mode.size() + 1))) {
        double v = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ec != std::errc() || end != item.data() + item.size() || !std::isfinite(v) || v < 0)
            throw std::invalid_argument(fmt::format("--split '{}': '{}' is not a non-negative ratio", spec, item));
        ratios.push_back(v);
    }
    return ratios;
}

std::vector<DeviceSelector> parse_devices(const std::string& list, std::string_view option) {
    std::vector<DeviceSelector> out;
    for (const std::string& item : comma_items(list)) {
        if (item.empty()) throw std::invalid_argument(fmt::format("{} '{}': an empty entry", option, list));
        out.push_back(DeviceSelector::parse(item));
    }
    return out;
}

std::vector<std::string> comma_items(const std::string& list) {
    std::vector<std::string> items;
    for (size_t pos = 0;;) {
        const size_t comma = list.find(',', pos);
        items.push_back(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
        if (comma == std::string::npos) return items;
        pos = comma + 1;
    }
}

}  // namespace vkllm
