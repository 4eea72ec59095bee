// The fill-in-the-middle prompt: the code before and after the cursor framed by the vocabulary's
// FIM tokens, with other files of the project before it, laid out as llama-server's /infill lays
// them out (Qwen2.5-Coder's repository-level pattern where the vocabulary has the repository and
// file-separator tokens):
//
//   [extra files]  [BOS]  <PRE> prefix prompt  <SUF> suffix  <MID>
//   extra files = <REPO>myproject\n  (<SEP>filename\n text)...  <SEP>filename\n
//
// Used by /infill and by the OpenAI `suffix` field of /v1/completions. Pure: tokens in, tokens out,
// unit-tested with a vocabulary that has FIM tokens (tests/serving/server/test_fim_prompt.cpp).
#pragma once

#include "model/tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server {

// A file of the project other than the one being edited (llama-server's input_extra chunk).
struct FimFile {
    std::string filename = "tmp";
    std::string text;
};

struct FimInput {
    std::vector<int32_t> prefix, suffix;  // the code before and after the cursor
    std::vector<int32_t> prompt;  // text already typed at the cursor: continues the prefix
    std::vector<FimFile> extra;
};

// How much of each part is kept, as llama-server budgets it: the prefix's last 3/4 of a batch,
// the suffix's first 1/4 (less the prompt), and the extra files' last tokens in what the context
// leaves after a batch and twice the tokens to generate.
struct FimBudget {
    size_t n_batch = 2048;
    size_t n_ctx = 2048;
    size_t n_predict = 0;  // tokens the request may generate (0: not limited)
};
// vkllm has no batch size: half the slot's context, at most llama-server's default batch of 2048.
FimBudget fim_budget(size_t n_ctx, int64_t n_predict);

// What the vocabulary lacks for infill: "" when it has the prefix, suffix and middle tokens, else
// llama-server's words ("prefix token is missing. suffix token is missing. ...").
std::string fim_missing(const Tokenizer& tok);

// The prompt's token ids. Throws std::invalid_argument when fim_missing(tok) is not empty.
std::vector<int32_t> fim_prompt(const Tokenizer& tok, const FimInput& in, const FimBudget& budget);

}  // namespace vkllm::server
