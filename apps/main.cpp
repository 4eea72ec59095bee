// vkllm: one executable, one subcommand per job. Each subcommand is in apps/cmd_*.cpp.
#include "apps/commands.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

int main(int argc, char** argv) {
    CLI::App app{"vkllm: LLaMA-family inference on any Vulkan device"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "vkllm 0.1.0");
    vkllm::apps::register_devices(app);
    vkllm::apps::register_gen_model(app);
    vkllm::apps::register_run(app);
    vkllm::apps::register_bench(app);
    vkllm::apps::register_bench_ops(app);
    vkllm::apps::register_bench_blend(app);
    vkllm::apps::register_perplexity(app);
    vkllm::apps::register_tokenize(app);
    vkllm::apps::register_bench_serve(app);
    vkllm::apps::register_chat_template(app);
    vkllm::apps::register_serve(app);
    vkllm::apps::register_chat(app);
    vkllm::apps::register_embed(app);
    vkllm::apps::register_tune(app);
    // CLI11 would only say "a subcommand is required" for a mistyped one: name it instead.
    if (argc > 1 && argv[1][0] != '-') {
        bool known = false;
        std::string names;
        for (const CLI::App* sub : app.get_subcommands({})) {
            known = known || sub->get_name() == argv[1];
            names += (names.empty() ? "" : ", ") + sub->get_name();
        }
        if (!known) {
            fmt::print(stderr, "vkllm: error: unknown command '{}'; commands: {}\n", argv[1], names);
            return 2;
        }
    }
    // llama-server's -np: CLI11 names one-dash options with one letter, so the spelling scripts pass
    // becomes serve's --parallel before parsing.
    if (argc > 1 && std::strcmp(argv[1], "serve") == 0)
        for (int i = 2; i < argc; ++i)
            if (std::strcmp(argv[i], "-np") == 0) argv[i] = const_cast<char*>("--parallel");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "\nvkllm: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
