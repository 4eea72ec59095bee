// `vkllm run --mmproj --image` and `vkllm chat` with /image: a random gemma3 model and mmproj from
// gen-model and a PNG from the fixtures; every refusal names what is wrong and exits non-zero
// without output: an image without --mmproj, a missing or corrupt picture, a picture over
// --image-max-pixels, marker counts that do not match, an mmproj for another text model.
#include "support/run_vkllm.h"

#include <filesystem>
#include <fstream>

using namespace vkllm::test;

namespace {

const std::string kPng = std::string(VKLLM_SOURCE_DIR) + "/tests/fixtures/vision/peer/cat.png";

// text-gemma3.gguf and text-gemma3-mmproj.gguf under test-tmp (and a 128-wide text model).
std::string vision_dir() {
    const std::filesystem::path dir = std::filesystem::path(VKLLM_BINARY_DIR) / "test-tmp" / "vision-cli";
    std::filesystem::create_directories(dir);
    const std::string d = dir.string();
    REQUIRE(run_vkllm("gen-model --arch gemma3 --dim 64 --layers 2 --heads 4 --ffn 128 --vocab 512 --type f16 "
                      "--seed 55 --mmproj gemma3 -o " + d + "/text-gemma3.gguf", "vision-gen").status == 0);
    REQUIRE(run_vkllm("gen-model --dim 128 --layers 1 --heads 4 --ffn 128 --vocab 512 --type f16 -o " + d +
                      "/wide.gguf", "vision-gen-wide").status == 0);
    return d;
}

}  // namespace

TEST_CASE("cli: vkllm run and chat take pictures; bad images and mismatched files are refused by name") {
    const std::string d = vision_dir();
    const std::string model = "-m " + d + "/text-gemma3.gguf --mmproj " + d + "/text-gemma3-mmproj.gguf";
    CliResult ok = run_vkllm("run " + model + " --image " + kPng + " -p 'Look: <__media__> now' -n 4 --temp 0", "vision-run");
    CHECK(ok.status == 0);
    CHECK(ok.out.rfind("Look: <__media__> now", 0) == 0);
    CHECK(ok.err.find("images: 1 in 45 prompt tokens") != std::string::npos);  // llama-server's count (test_images_peer)

    auto refused = [&](const std::string& args, const std::string& message, const std::string& tag) {
        CliResult r = run_vkllm(args, tag);
        CHECK(r.status != 0);
        CHECK(r.out.empty());
        CHECK(r.err.find(message) != std::string::npos);
    };
    refused("run -m " + d + "/text-gemma3.gguf --image " + kPng + " -p x", "--image needs a vision encoder", "vision-none");
    refused("run " + model + " --image /nonexistent.png -p x", "--image /nonexistent.png: cannot open the file", "vision-missing");
    const std::string junk = d + "/junk.png";
    std::ofstream(junk) << "\x89PNG\r\n\x1a\n and then nothing";
    refused("run " + model + " --image " + junk + " -p x", "--image " + junk, "vision-junk");
    refused("run " + model + " --image " + kPng + " --image-max-pixels 1000 -p x", "1000", "vision-limit");
    refused("run " + model + " --image " + kPng + " -p '<__media__> and <__media__>'", "2 image markers", "vision-markers");
    refused("run -m " + d + "/wide.gguf --mmproj " + d + "/text-gemma3-mmproj.gguf --image " + kPng + " -p x",
            "text model's embedding length is 128", "vision-wide");

    // chat: /image attaches to the next message; the next turn reuses the picture from the cache.
    const std::string script = d + "/chat.txt";
    std::ofstream(script) << "/image " << kPng << "\nWhat is it?\n/image /nonexistent.png\nAnd now?\n/exit\n";
    CliResult chat = run_vkllm("chat " + model + " -n 3 --temp 0 --stats --chat-template chatml", "vision-chat", script);
    CHECK(chat.status == 0);
    CHECK(chat.err.find("attached to your next message: 97 x 61") != std::string::npos);
    CHECK(chat.err.find("/image /nonexistent.png: cannot open the file") != std::string::npos);
    CHECK(chat.err.find("reused from the cache") != std::string::npos);
}
