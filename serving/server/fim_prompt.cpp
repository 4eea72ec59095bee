#include "serving/server/fim_prompt.h"

#include <algorithm>
#include <stdexcept>

namespace vkllm::server {

FimBudget fim_budget(size_t n_ctx, int64_t n_predict) {
    FimBudget b;
    b.n_ctx = n_ctx;
    b.n_batch = std::min<size_t>(2048, std::max<size_t>(4, n_ctx / 2));
    b.n_predict = n_predict > 0 ? size_t(n_predict) : 0;
    return b;
}

std::string fim_missing(const Tokenizer& tok) {
    const FimTokens& f = tok.fim();
    std::string missing;
    if (f.pre < 0) missing += "prefix token is missing. ";
    if (f.suf < 0) missing += "suffix token is missing. ";
    if (f.mid < 0) missing += "middle token is missing. ";
    return missing;
}

std::vector<int32_t> fim_prompt(const Tokenizer& tok, const FimInput& in, const FimBudget& budget) {
    if (const std::string missing = fim_missing(tok); !missing.empty())
        throw std::invalid_argument("Infill is not supported by this model: " + missing);
    const FimTokens& f = tok.fim();
    auto append = [](std::vector<int32_t>& to, const std::vector<int32_t>& from) {
        to.insert(to.end(), from.begin(), from.end());
    };
    // Names and separators are plain text: a file name never becomes a control token.
    auto text = [&](const std::string& s) { return tok.encode(s, false, false); };

    std::vector<int32_t> extra;
    if (f.rep >= 0) {
        extra.push_back(f.rep);
        append(extra, text("myproject\n"));  // llama-server's project name: clients cannot give one
    }
    for (const FimFile& file : in.extra) {
        if (f.sep >= 0) {
            extra.push_back(f.sep);
            append(extra, text(file.filename + "\n"));
        } else {
            append(extra, text("\n\n--- snippet ---\n\n"));
        }
        append(extra, text(file.text));
    }
    if (f.sep >= 0) {
        extra.push_back(f.sep);
        append(extra, text("filename\n"));  // the edited file's name, which clients cannot give either
    }

    const size_t quarter = budget.n_batch / 4;
    const size_t prefix_take = std::min(in.prefix.size(), 3 * quarter);
    const size_t suffix_room = quarter > 2 + in.prompt.size() ? quarter - 2 - in.prompt.size() : 0;
    const size_t suffix_take = std::min(in.suffix.size(), suffix_room);
    const size_t reserved = budget.n_batch + 2 * budget.n_predict;
    const size_t extra_take = std::min(extra.size(), budget.n_ctx > reserved ? budget.n_ctx - reserved : 0);

    std::vector<int32_t> out(extra.end() - std::ptrdiff_t(extra_take), extra.end());
    if (tok.add_bos() && tok.bos_id() >= 0) out.push_back(tok.bos_id());  // after the files, as llama-server
    out.push_back(f.pre);
    out.insert(out.end(), in.prefix.end() - std::ptrdiff_t(prefix_take), in.prefix.end());
    append(out, in.prompt);
    out.push_back(f.suf);
    out.insert(out.end(), in.suffix.begin(), in.suffix.begin() + std::ptrdiff_t(suffix_take));
    out.push_back(f.mid);
    return out;
}

}  // namespace vkllm::server
