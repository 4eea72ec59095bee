// Special tokens inside text: cutting a text into plain pieces and special-token ids before the
// tokenizer proper runs, as llama.cpp's tokenizer_st_partition does.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vkllm {

class SpecialTokens {
public:
    struct Entry {
        int32_t id;
        std::string_view text;  // must outlive this object
        bool control;  // matched only with parse_special (control and unknown-type tokens)
        bool rstrip;  // ASCII whitespace right after it is dropped
    };
    struct Fragment {
        int32_t token;  // >= 0: this special token; -1: plain text [begin, end)
        uint32_t begin, end;
    };

    // Longer texts take precedence over shorter ones (ties: the lower id), whatever their position:
    // llama.cpp cuts the text at every occurrence of the longest special token first, then looks
    // for the next one in the pieces left, and so on.
    void build(std::vector<Entry> entries);

    // Cuts `text` into fragments in order; plain fragments are never empty.
    void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

private:
    std::vector<Entry> entries_;  // by precedence
    size_t n_always_ = 0;  // entries that are not control
    int32_t root_[256];  // first byte -> trie node, -1 if none
    std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
    std::vector<int32_t> terminal_;  // node -> entry index, -1 if none
};

}  // namespace vkllm
