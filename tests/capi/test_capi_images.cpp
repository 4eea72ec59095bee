// Pictures through the C API (libvkllm.so alone): a random gemma3 model with a random mmproj from
// `vkllm gen-model`, vkllm_chat_images with a PNG's bytes, the cache reused on a follow-up turn,
// and every refusal named: no vision encoder, a bad file, a marker count that does not match, a
// message index out of range.
#include "capi_testing.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

using namespace capi_test;

namespace {

// A random gemma3 text model (ChatML template) and its mmproj; "" when gen-model's vocabulary is missing.
std::string vision_model() {
    const std::string out = std::string(VKLLM_TMP_DIR) + "/capi-vision.gguf";
    std::filesystem::create_directories(VKLLM_TMP_DIR);
    const std::string gen = std::string(VKLLM_EXE) +
                            " gen-model --arch gemma3 --dim 64 --layers 2 --heads 4 --ffn 128 --vocab 512 --type f16 "
                            "--seed 55 --mmproj gemma3 -o " +
                            out + " 2>/dev/null";
    REQUIRE(std::system(gen.c_str()) == 0);
    return out;
}

}  // namespace

TEST_CASE("capi: vkllm_chat_images answers about a picture; a follow-up reuses it; bad images are refused by name") {
    const std::string path = vision_model();
    const std::string mmproj = path.substr(0, path.size() - 5) + "-mmproj.gguf";
    const std::string png = read_file(std::string(VKLLM_FIXTURES_DIR) + "/vision/peer/cat.png");
    REQUIRE(!png.empty());
    vkllm_model_params p = test_params();
    p.chat_template = "chatml";
    p.mmproj = mmproj.c_str();
    vkllm_model* m = nullptr;
    REQUIRE(vkllm_model_load(path.c_str(), &p, &m) == VKLLM_OK);
    vkllm_model_info info{};
    info.struct_size = sizeof(info);
    REQUIRE(vkllm_model_get_info(m, &info) == VKLLM_OK);
    CHECK(info.vision);
    Session session(m);
    vkllm_sampling s = vkllm_sampling_default();
    s.temperature = 0;
    s.n_predict = 4;
    vkllm_chat_message msgs[] = {{"user", "What is in this picture?"}};
    const vkllm_chat_image image{0, png.data(), png.size()};
    Collected first;
    REQUIRE(vkllm_chat_images(session.s, msgs, 1, &image, 1, &s, collect, &first) == VKLLM_OK);
    vkllm_generation_stats st{};
    st.struct_size = sizeof(st);
    REQUIRE(vkllm_session_get_stats(session.s, &st) == VKLLM_OK);
    const uint32_t prompt1 = st.prompt_tokens;
    CHECK(prompt1 > 4);  // the image's rows and markers are in the prompt
    // The same picture again in a longer conversation: its rows come from the cache.
    vkllm_chat_message turn2[] = {{"user", "What is in this picture?"}, {"assistant", first.text.c_str()}, {"user", "Sure?"}};
    Collected second;
    REQUIRE(vkllm_chat_images(session.s, turn2, 3, &image, 1, &s, collect, &second) == VKLLM_OK);
    REQUIRE(vkllm_session_get_stats(session.s, &st) == VKLLM_OK);
    CHECK(st.cached_tokens >= prompt1 - 1);

    // The marker in the text places the picture; a count that does not match is refused.
    vkllm_chat_message marked[] = {{"user", "Look: <__media__> and <__media__>"}};
    CHECK(vkllm_chat_images(session.s, marked, 1, &image, 1, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "marks 2 image places"));
    const std::string junk = "not an image at all";
    const vkllm_chat_image bad{0, junk.data(), junk.size()};
    CHECK(vkllm_chat_images(session.s, msgs, 1, &bad, 1, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "images[0]"));
    const vkllm_chat_image stray{3, png.data(), png.size()};
    CHECK(vkllm_chat_images(session.s, msgs, 1, &stray, 1, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "not a message index"));
    vkllm_model_free(m);

    // A model without a vision encoder takes no images; a missing mmproj file is VKLLM_ERR_FILE.
    Model plain;
    Session ps(plain.m);
    CHECK(vkllm_chat_images(ps.s, msgs, 1, &image, 1, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "without a vision encoder"));
    vkllm_model_params q = test_params();
    q.mmproj = "/nonexistent/mmproj.gguf";
    vkllm_model* none = nullptr;
    CHECK(vkllm_model_load(path.c_str(), &q, &none) == VKLLM_ERR_FILE);
    CHECK(none == nullptr);
}

TEST_CASE("capi: a picture encoded on one thread while another session generates: no race on the device's queue") {
    const std::string path = vision_model();
    const std::string mmproj = path.substr(0, path.size() - 5) + "-mmproj.gguf";
    const std::string png = read_file(std::string(VKLLM_FIXTURES_DIR) + "/vision/peer/cat.png");
    vkllm_model_params p = test_params();  // the validation layer reports any threading error
    p.chat_template = "chatml";
    p.mmproj = mmproj.c_str();
    p.max_sessions = 2;
    const int errors_before = validation_errors.load();
    vkllm_model* m = nullptr;
    REQUIRE(vkllm_model_load(path.c_str(), &p, &m) == VKLLM_OK);
    {
        Session text(m), pictures(m);
        vkllm_sampling s = vkllm_sampling_default();
        s.temperature = 0;
        s.n_predict = 200;
        std::thread talker([&] {
            for (int i = 0; i < 3; ++i) {
                CHECK(vkllm_session_reset(text.s) == VKLLM_OK);
                CHECK(vkllm_generate(text.s, "Once upon a time", &s, nullptr, nullptr) == VKLLM_OK);
            }
        });
        vkllm_sampling one = s;
        one.n_predict = 1;
        // Two pictures in turn: the encoder's cache holds both, the engine evaluates them every time.
        for (int i = 0; i < 6; ++i) {
            vkllm_chat_message msg[] = {{"user", "What is this?"}};
            const std::string other = read_file(std::string(VKLLM_FIXTURES_DIR) + "/vision/peer/" + (i % 2 ? "sq.png" : "cat.png"));
            const vkllm_chat_image image{0, other.data(), other.size()};
            CHECK(vkllm_chat_images(pictures.s, msg, 1, &image, 1, &one, nullptr, nullptr) == VKLLM_OK);
        }
        talker.join();
    }
    vkllm_model_free(m);
    CHECK(validation_errors.load() == errors_before);
}

TEST_CASE("capi: vkllm_generate continues a conversation with pictures; <__media__> quoted in an answer stays text") {
    const std::string path = vision_model();
    const std::string mmproj = path.substr(0, path.size() - 5) + "-mmproj.gguf";
    const std::string png = read_file(std::string(VKLLM_FIXTURES_DIR) + "/vision/peer/sq.png");
    vkllm_model_params p = test_params();
    p.chat_template = "chatml";
    p.mmproj = mmproj.c_str();
    vkllm_model* m = nullptr;
    REQUIRE(vkllm_model_load(path.c_str(), &p, &m) == VKLLM_OK);
    {
        Session session(m);
        vkllm_sampling s = vkllm_sampling_default();
        s.temperature = 0;
        s.n_predict = 3;
        vkllm_chat_message msgs[] = {{"user", "Look"}};
        const vkllm_chat_image image{0, png.data(), png.size()};
        REQUIRE(vkllm_chat_images(session.s, msgs, 1, &image, 1, &s, nullptr, nullptr) == VKLLM_OK);
        CHECK(vkllm_generate(session.s, " and more", &s, nullptr, nullptr) == VKLLM_OK);
        // An earlier answer that quotes the marker: the conversation goes on, the picture still counted once.
        vkllm_chat_message turn2[] = {{"user", "Look"}, {"assistant", "I see <__media__> here"}, {"user", "Again?"}};
        CHECK(vkllm_chat_images(session.s, turn2, 3, &image, 1, &s, nullptr, nullptr) == VKLLM_OK);
    }
    vkllm_model_free(m);
}
