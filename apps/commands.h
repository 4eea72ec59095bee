// Each `vkllm` subcommand lives in its own apps/cmd_*.cpp and registers itself here.
// A subcommand's callback throws on error; main() turns exceptions into a message and exit code 1.
#pragma once

#include <CLI/CLI.hpp>

namespace vkllm::apps {

void register_devices(CLI::App& app);
void register_gen_model(CLI::App& app);
void register_run(CLI::App& app);
void register_bench(CLI::App& app);
void register_bench_ops(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_bench_serve(CLI::App& app);
void register_chat_template(CLI::App& app);
void register_serve(CLI::App& app);
void register_chat(CLI::App& app);
void register_embed(CLI::App& app);
void register_tune(CLI::App& app);
void register_bench_blend(CLI::App& app);

}  // namespace vkllm::apps
