#include "model/tokenizer/special_tokens.h"

#include <algorithm>
#include <cstring>

namespace vkllm {

void SpecialTokens::build(std::vector<Entry> entries) {
    std::erase_if(entries, [](const Entry& e) { return e.text.empty(); });
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
    });
    entries_ = std::move(entries);
    n_always_ = size_t(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.control; }));
    std::fill(std::begin(root_), std::end(root_), -1);
    edges_.clear();
    terminal_.assign(1, -1);  // node 0 stands for the root itself and is never a terminal
    for (size_t i = 0; i < entries_.size(); ++i) {
        const std::string_view t = entries_[i].text;
        int32_t node = root_[uint8_t(t[0])];
        if (node < 0) {
            node = root_[uint8_t(t[0])] = int32_t(terminal_.size());
            terminal_.push_back(-1);
        }
        for (size_t k = 1; k < t.size(); ++k) {
            auto [it, added] = edges_.try_emplace(uint64_t(node) << 8 | uint8_t(t[k]), int32_t(terminal_.size()));
            if (added) terminal_.push_back(-1);
            node = it->second;
        }
        if (terminal_[size_t(node)] < 0) terminal_[size_t(node)] = int32_t(i);  // same text twice: first wins
    }
}

void SpecialTokens::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
    out.clear();
    const size_t n = text.size();
    if (n == 0) return;
    if (parse_special ? entries_.empty() : n_always_ == 0) {
        out.push_back({-1, 0, uint32_t(n)});
        return;
    }
    // Every occurrence of every candidate, as (entry index, position): one trie walk per position.
    std::vector<std::pair<uint32_t, uint32_t>> hits;
    for (size_t pos = 0; pos < n; ++pos) {
        int32_t node = root_[uint8_t(text[pos])];
        for (size_t k = pos + 1; node >= 0; ++k) {
            const int32_t e = terminal_[size_t(node)];
            if (e >= 0 && (parse_special || !entries_[size_t(e)].control)) hits.push_back({uint32_t(e), uint32_t(pos)});
            if (k == n) break;
            auto it = edges_.find(uint64_t(node) << 8 | uint8_t(text[k]));
            node = it == edges_.end() ? -1 : it->second;
        }
    }
    if (hits.empty()) {
        out.push_back({-1, 0, uint32_t(n)});
        return;
    }
    std::sort(hits.begin(), hits.end());
    // 0: plain text, 1: a special token, 2: whitespace an rstrip token dropped.
    std::vector<uint8_t> state(n, 0);
    std::vector<std::pair<uint32_t, int32_t>> starts;  // accepted tokens: (position, entry)
    for (size_t i = 0; i < hits.size();) {
        const uint32_t e = hits[i].first;
        const Entry& entry = entries_[e];
        const size_t len = entry.text.size();
        size_t resume = 0;  // llama.cpp searches on after the previous cut of the same token
        for (; i < hits.size() && hits[i].first == e; ++i) {
            const size_t pos = hits[i].second;
            if (pos < resume) continue;
            if (std::any_of(state.begin() + long(pos), state.begin() + long(pos + len),
                            [](uint8_t s) { return s != 0; }))
                continue;
            std::memset(state.data() + pos, 1, len);
            starts.push_back({uint32_t(pos), int32_t(e)});
            size_t end = pos + len;
            if (entry.rstrip)
                while (end < n && state[end] == 0 && (text[end] == ' ' || (text[end] >= '\t' && text[end] <= '\r')))
                    state[end++] = 2;
            resume = end;
        }
    }
    std::sort(starts.begin(), starts.end());
    size_t next_token = 0;
    for (size_t pos = 0; pos < n;) {
        if (state[pos] == 1) {
            const Entry& entry = entries_[size_t(starts[next_token++].second)];
            out.push_back({entry.id, uint32_t(pos), uint32_t(pos + entry.text.size())});
            pos += entry.text.size();
        } else if (state[pos] == 2) {
            ++pos;
        } else {
            size_t end = pos;
            while (end < n && state[end] == 0) ++end;
            out.push_back({-1, uint32_t(pos), uint32_t(end)});
            pos = end;
        }
    }
}

}  // namespace vkllm
