// A chat prompt with images, with a stand-in for the vision encoder: one marker per image or a 400
// naming the template, the images read from their URLs and handed over in order, the encoder's
// refusals and a prompt too long for the context as 400s. Then over HTTP with a stand-in engine:
// /v1/models, /props and Ollama's capabilities say the model takes images; an OpenAI chat and
// Ollama's chat and generate carry them to the engine; a model without an encoder refuses them.
#include "model/gguf/gguf.h"
#include "serving/server/http_server.h"
#include "serving/server/image_prompt.h"

#include "support/image_files.h"
#include "support/test_context.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <mutex>

using namespace vkllm;
using namespace vkllm::server;

namespace {

std::string base64(const std::vector<uint8_t>& bytes) {
    static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t v = uint32_t(bytes[i]) << 16;
        if (n > 1) v |= uint32_t(bytes[i + 1]) << 8;
        if (n > 2) v |= bytes[i + 2];
        for (size_t k = 0; k < 4; ++k) out += k <= n ? abc[(v >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

// A w x h PNG as base64.
std::string png_base64(uint32_t w, uint32_t h) {
    std::vector<uint8_t> rgb(size_t(w) * h * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 13);
    return base64(image_files::png_rgb(w, h, rgb));
}

// The marker of /completion prompts in these tests (a server's is random).
constexpr std::string_view kTestMarker = "<__media_test__>";

// The stand-in encoder: each image is nx placeholder ids (-1 - k for image k), the text around the
// markers one token per character; the marker as the source says.
struct FakeVision {
    std::vector<std::pair<uint32_t, uint32_t>> seen;  // each call's images' sizes
    std::string text;
    ImagePromptSource source = ImagePromptSource::Chat;
    ImagePrompt operator()(const std::string& t, const std::vector<RgbImage>& images, ImagePromptSource from) {
        text = t;
        source = from;
        const std::string_view marker = from == ImagePromptSource::Chat ? chat_template::kImageMarker : kTestMarker;
        seen.clear();
        for (const RgbImage& im : images) seen.emplace_back(im.nx, im.ny);
        ImagePrompt p;
        size_t k = 0;
        for (size_t i = 0; i < t.size();) {
            if (t.compare(i, marker.size(), marker) == 0) {
                if (images.at(k).nx == 13) throw std::invalid_argument("13 pixels wide is unlucky");
                PromptEmbeddings e;
                e.first = uint32_t(p.tokens.size());
                e.n_rows = images[k].nx;
                e.rows = std::make_shared<std::vector<float>>(size_t(e.n_rows) * 4, 0.5f);
                p.images.push_back(e);
                p.tokens.insert(p.tokens.end(), e.n_rows, -1 - int32_t(k));
                ++k;
                i += marker.size();
            } else {
                p.tokens.push_back(static_cast<unsigned char>(t[i++]));
            }
        }
        return p;
    }
};

chat_template::ImageRef image_ref(const std::string& b64, size_t i) {
    return {"data:image/png;base64," + b64, "messages[0].content[" + std::to_string(i) + "].image_url"};
}

ApiError refusal(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        return e;
    }
    FAIL("expected a 400");
    return ApiError(0, "");
}

}  // namespace

TEST_CASE("image prompt: markers counted, images read in order and encoded, refusals as 400s") {
    CHECK(count_media_markers("") == 0);
    CHECK(count_media_markers("a<__media__>b<__media__><__media__>") == 3);
    CHECK(count_media_markers("<__media_<__media__>_>") == 1);

    auto vision = std::make_shared<FakeVision>();
    ImagePrompter prompter = [vision](const std::string& t, const std::vector<RgbImage>& im,
                                      ImagePromptSource from) { return (*vision)(t, im, from); };
    const std::vector<chat_template::ImageRef> refs = {image_ref(png_base64(5, 2), 0), image_ref(png_base64(3, 4), 2)};
    std::string text = "user: <__media__>\nwhat and <__media__>\nassistant:";
    ImagePromptInput in{&text, &refs, "chatml"};
    std::vector<PromptEmbeddings> images;
    std::vector<int32_t> tokens = image_prompt_tokens(in, prompter, {}, 64, images);
    CHECK(vision->seen == std::vector<std::pair<uint32_t, uint32_t>>{{5, 2}, {3, 4}});
    CHECK(vision->text == text);
    REQUIRE(images.size() == 2);
    CHECK(images[0].first == 6);
    CHECK(images[0].n_rows == 5);
    CHECK(images[1].n_rows == 3);
    CHECK(tokens.size() == text.size() - 2 * chat_template::kImageMarker.size() + 8);
    CHECK(tokens[6] == -1);

    // A template that drops or repeats a message's content.
    for (std::string t : {std::string("user: <__media__>\nassistant:"),
                          std::string("<__media__><__media__><__media__>"), std::string("no images")}) {
        CAPTURE(t);
        ImagePromptInput bad{&t, &refs, "llama3"};
        ApiError e = refusal([&] { image_prompt_tokens(bad, prompter, {}, 64, images); });
        CHECK(e.param() == "messages");
        CHECK(std::string(e.what()).find("'llama3'") != std::string::npos);
    }
    // An image that cannot be read names its field; the encoder is not asked.
    vision->seen.clear();
    const std::vector<chat_template::ImageRef> unreadable = {refs[0], {"data:image/png;base64,aGVsbG8=", "x[1]"}};
    ImagePromptInput in2{&text, &unreadable, "chatml"};
    CHECK(refusal([&] { image_prompt_tokens(in2, prompter, {}, 64, images); }).param() == "x[1]");
    CHECK(vision->seen.empty());
    ImageInputOptions tiny;
    tiny.limits.max_pixels = 9;
    CHECK(refusal([&] { image_prompt_tokens(in, prompter, tiny, 64, images); }).param() ==
          "messages[0].content[0].image_url");
    // The encoder's refusal.
    const std::vector<chat_template::ImageRef> unlucky = {refs[0], image_ref(png_base64(13, 1), 2)};
    ImagePromptInput in3{&text, &unlucky, "chatml"};
    ApiError e = refusal([&] { image_prompt_tokens(in3, prompter, {}, 64, images); });
    CHECK(std::string(e.what()).find("unlucky") != std::string::npos);
    // Too long: the counts, the images' share among them.
    REQUIRE(tokens.size() == 35);
    CHECK_NOTHROW(image_prompt_tokens(in, prompter, {}, 36, images));
    e = refusal([&] { image_prompt_tokens(in, prompter, {}, 35, images); });
    CHECK(e.code() == "context_length_exceeded");
    CHECK(std::string(e.what()).find(fmt::format("resulted in {} tokens, 8 of them for 2 images", tokens.size())) !=
          std::string::npos);
    CHECK(std::string(e.what()).find("maximum context length is 35 tokens") != std::string::npos);
    // Too many images: refused before any is read or encoded.
    vision->seen.clear();
    const std::vector<chat_template::ImageRef> many(kMaxImages + 1, refs[0]);
    std::string many_text;
    for (size_t i = 0; i < many.size(); ++i) many_text += "<__media__>";
    ImagePromptInput in4{&many_text, &many, "chatml"};
    e = refusal([&] { image_prompt_tokens(in4, prompter, {}, 100000, images); });
    CHECK(std::string(e.what()).find("at most 64") != std::string::npos);
    CHECK(vision->seen.empty());
    const std::vector<chat_template::ImageRef> three(3, refs[0]);
    std::string three_text = "<__media__><__media__><__media__>";
    ImagePromptInput in5{&three_text, &three, "chatml"};
    CHECK(refusal([&] { image_prompt_tokens(in5, prompter, {}, 3, images); }).param() == "messages");
    CHECK(vision->seen.empty());
    // No encoder.
    CHECK(refusal([&] { image_prompt_tokens(in, nullptr, {}, 64, images); }).param() == "messages");

    // /completion's prompt objects: the server's marker, the prompt's field in every refusal.
    std::string raw = "A <__media__> B";  // the default marker is text here
    ImagePromptInput completion{&raw, &refs, "", ImagePromptSource::Completion, kTestMarker, "prompt[1]"};
    e = refusal([&] { image_prompt_tokens(completion, prompter, {}, 64, images); });
    CHECK(e.param() == "prompt[1]");
    CHECK(std::string(e.what()).find("0 media markers (<__media_test__>, from GET /props) for 2 images") !=
          std::string::npos);
    raw = fmt::format("A {} B {}", kTestMarker, kTestMarker);
    tokens = image_prompt_tokens(completion, prompter, {}, 64, images);
    CHECK(vision->source == ImagePromptSource::Completion);
    CHECK(tokens.size() == 5 + 8);  // "A ", " B " and the images' rows
    e = refusal([&] { image_prompt_tokens(completion, prompter, {}, 13, images); });
    CHECK(e.type() == "exceed_context_size_error");
    CHECK(e.param() == "prompt[1]");
    CHECK(std::string(e.what()).find("request (13 tokens, 8 of them for 2 images) exceeds the available context "
                                     "size (13 tokens)") != std::string::npos);
    CHECK(refusal([&] { image_prompt_tokens(completion, nullptr, {}, 64, images); }).param() == "prompt[1]");
}

namespace {

// A generation that ends at once, counting the prompt.
class DoneGeneration final : public Generation {
public:
    explicit DoneGeneration(uint32_t prompt) : prompt_(prompt) {}
    std::optional<engine::Event> next(std::chrono::milliseconds) override {
        if (done_) return std::nullopt;
        done_ = true;
        engine::Event ev;
        ev.kind = engine::Event::Kind::Done;
        ev.prompt_tokens = prompt_;
        return ev;
    }
    void cancel() override {}

private:
    uint32_t prompt_;
    bool done_ = false;
};

struct ImageServer {
    std::mutex mu;
    std::vector<engine::CompletionRequest> requests;
    std::shared_ptr<FakeVision> vision = std::make_shared<FakeVision>();
    HttpServer server;
    int port = 0;

    ImageServer() : server(options()) { port = server.start(); }
    static ServerOptions options() {
        ServerOptions o;
        o.port = 0;
        o.log_requests = false;
        return o;
    }
    void serve(const Tokenizer& t, bool vision_on) {
        ServedModel m;
        m.id = "m";
        m.tokenizer = &t;
        m.n_ctx = 256;
        m.chat_template_name = "test";
        m.render_chat = [](const chat_template::ChatInputs& in) {
            std::string s;
            for (const auto& msg : in.messages)
                s += msg["role"].get<std::string>() + ": " + msg["content"].get<std::string>() + "\n";
            return s + "assistant:";
        };
        m.submit = [this](engine::CompletionRequest req) -> std::unique_ptr<Generation> {
            std::lock_guard lk(mu);
            requests.push_back(req);
            return std::make_unique<DoneGeneration>(uint32_t(req.prompt.size()));
        };
        if (vision_on) {
            auto v = vision;
            m.image_prompt = [v](const std::string& t, const std::vector<RgbImage>& im, ImagePromptSource from) {
                return (*v)(t, im, from);
            };
            m.media_marker = std::string(kTestMarker);
        }
        server.set_model(std::move(m));
    }
};

}  // namespace

TEST_CASE("http: a model with a vision encoder says so and takes images in OpenAI's and Ollama's chats") {
    const std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    GgufFile file = GgufFile::open(path);
    std::unique_ptr<Tokenizer> tok = make_tokenizer(file);
    ImageServer s;
    s.serve(*tok, true);
    httplib::Client cli("127.0.0.1", s.port);
    const json models = json::parse(cli.Get("/v1/models")->body);
    CHECK(models["data"][0]["capabilities"] == json::array({"completion", "multimodal"}));
    CHECK(json::parse(cli.Get("/props")->body)["modalities"]["vision"] == true);
    const json show = json::parse(cli.Post("/api/show", R"({"model":"m"})", "application/json")->body);
    CHECK(std::find(show["capabilities"].begin(), show["capabilities"].end(), "vision") != show["capabilities"].end());

    const std::string png = png_base64(6, 3);
    json body = {{"max_tokens", 1},
                 {"messages",
                  json::array({json{{"role", "user"},
                                    {"content", json::array({json{{"type", "text"}, {"text", "Describe"}},
                                                             json{{"type", "image_url"},
                                                                  {"image_url", {{"url", "data:image/png;base64," + png}}}},
                                                             json{{"type", "text"}, {"text", "please"}}})}}})}};
    auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    CHECK(s.vision->text == "user: Describe<__media__>please\nassistant:");
    CHECK(s.vision->seen == std::vector<std::pair<uint32_t, uint32_t>>{{6, 3}});
    {
        std::lock_guard lk(s.mu);
        REQUIRE(s.requests.size() == 1);
        const engine::CompletionRequest& req = s.requests[0];
        REQUIRE(req.images.size() == 1);
        CHECK(req.images[0].first == std::string("user: Describe").size());
        CHECK(req.images[0].n_rows == 6);
        CHECK(req.prompt[req.images[0].first] == -1);
        CHECK(json::parse(r->body)["usage"]["prompt_tokens"] == req.prompt.size());
    }
    // Several choices share the images.
    body["n"] = 2;
    REQUIRE(cli.Post("/v1/chat/completions", body.dump(), "application/json")->status == 200);
    {
        std::lock_guard lk(s.mu);
        REQUIRE(s.requests.size() == 3);
        CHECK(s.requests[1].images.size() == 1);
        CHECK(s.requests[2].images[0].rows == s.requests[1].images[0].rows);
    }
    body.erase("n");
    // A bad image names its part; a remote URL is off by default.
    body["messages"][0]["content"][1]["image_url"]["url"] = "data:image/png;base64,bm90IGFuIGltYWdl";
    r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["param"] == "messages[0].content[1].image_url");
    body["messages"][0]["content"][1]["image_url"]["url"] = "https://example.com/cat.png";
    r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("--allow-image-urls") != std::string::npos);

    // /apply-template shows where the images go, without reading them.
    const json tmpl = json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "A"},
        {"type": "image_url", "image_url": "data:image/png;base64,AA=="}]}]})");
    r = cli.Post("/apply-template", tmpl.dump(), "application/json");
    REQUIRE(r->status == 200);
    CHECK(json::parse(r->body)["prompt"] == "user: A<__media__>\nassistant:");

    // Ollama: a message's images, and a generate's.
    json chat = {{"model", "m"},
                 {"stream", false},
                 {"messages", json::array({json{{"role", "user"}, {"content", "What?"}, {"images", {png, png}}}})}};
    r = cli.Post("/api/chat", chat.dump(), "application/json");
    REQUIRE(r->status == 200);
    CHECK(s.vision->text == "user: <__media__><__media__>What?\nassistant:");
    json gen = {{"model", "m"}, {"stream", false}, {"prompt", "Describe"}, {"images", {png}}};
    r = cli.Post("/api/generate", gen.dump(), "application/json");
    REQUIRE(r->status == 200);
    CHECK(s.vision->text == "user: <__media__>Describe\nassistant:");
    {
        std::lock_guard lk(s.mu);
        REQUIRE(s.requests.size() == 5);
        CHECK(s.requests[3].images.size() == 2);
        CHECK(s.requests[4].images.size() == 1);
    }
    gen["images"] = {"not base64!"};
    r = cli.Post("/api/generate", gen.dump(), "application/json");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"].get<std::string>().find("images[0]") != std::string::npos);

    // llama-server's /completion: a prompt object with /props' marker per image, alone or in a batch.
    CHECK(json::parse(cli.Get("/props")->body)["media_marker"] == kTestMarker);
    const std::string marker(kTestMarker);
    json comp = {{"n_predict", 1},
                 {"prompt", {{"prompt_string", "Look: " + marker + " and " + marker}, {"multimodal_data", {png, png}}}}};
    r = cli.Post("/completion", comp.dump(), "application/json");
    REQUIRE(r->status == 200);
    CHECK(s.vision->source == ImagePromptSource::Completion);
    CHECK(s.vision->text == "Look: " + marker + " and " + marker);
    // The response's prompt shows each image as the marker (the stand-in's text tokens are characters).
    CHECK(count_media_markers(json::parse(r->body)["prompt"].get<std::string>(), marker) == 2);
    {
        std::lock_guard lk(s.mu);
        REQUIRE(s.requests.size() == 6);
        REQUIRE(s.requests[5].images.size() == 2);
        CHECK(s.requests[5].images[1].first == 6 + 6 + 5);
    }
    comp["prompt"] = json::array({"plain text", comp["prompt"], json{{"prompt_string", "no images"}}});
    r = cli.Post("/completion", comp.dump(), "application/json");
    REQUIRE(r->status == 200);
    {
        std::lock_guard lk(s.mu);
        REQUIRE(s.requests.size() == 9);
        CHECK(s.requests[6].images.empty());
        CHECK(s.requests[7].images.size() == 2);
        CHECK(s.requests[8].images.empty());
        CHECK(s.requests[8].prompt == tok->encode("no images", true, true));
    }
    // Refusals name the prompt's field: markers that do not match, a bad image, a wrong shape, the
    // default marker (text to this server, as to llama-server), the old top-level fields.
    auto refused = [&](const json& prompt) {
        json b = {{"n_predict", 1}, {"prompt", prompt}};
        auto res = cli.Post("/completion", b.dump(), "application/json");
        CHECK(res->status == 400);
        return json::parse(res->body)["error"];
    };
    CHECK(refused({{"prompt_string", "one " + marker}, {"multimodal_data", {png, png}}})["param"] == "prompt");
    CHECK(refused({{"prompt_string", "<__media__>"}, {"multimodal_data", {png}}})["message"].get<std::string>().find(
              "0 media markers") != std::string::npos);
    CHECK(refused(json::array({"a", {{"prompt_string", marker}, {"multimodal_data", {"bm90IGFuIGltYWdl"}}}}))["param"] ==
          "prompt[1].multimodal_data[0]");
    CHECK(refused({{"prompt_string", marker}, {"multimodal_data", "x"}})["param"] == "prompt.multimodal_data");
    CHECK(refused({{"prompt_string", marker}, {"multimodal_data", {1}}})["param"] == "prompt.multimodal_data[0]");
    CHECK(refused({{"multimodal_data", {png}}})["param"] == "prompt");
    CHECK(refused({{"prompt_string", marker}, {"images", {png}}})["param"] == "prompt.images");
    // A batch's images together are bounded as one chat's, before any is read.
    json half = {{"prompt_string", marker}, {"multimodal_data", json::array()}};
    std::string many_markers;
    for (size_t k = 0; k < kMaxImages / 2 + 1; ++k) {
        half["multimodal_data"].push_back(png);
        many_markers += marker;
    }
    half["prompt_string"] = many_markers;
    s.vision->seen.clear();
    CHECK(refused(json::array({half, half}))["message"].get<std::string>().find("at most 64") != std::string::npos);
    CHECK(s.vision->seen.empty());
    json old = {{"prompt", "x"}, {"multimodal_data", {png}}};
    r = cli.Post("/completion", old.dump(), "application/json");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("media_marker") != std::string::npos);
    s.server.stop();
}

TEST_CASE("http: a model without a vision encoder refuses images and does not claim them") {
    const std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    GgufFile file = GgufFile::open(path);
    std::unique_ptr<Tokenizer> tok = make_tokenizer(file);
    ImageServer s;
    s.serve(*tok, false);
    httplib::Client cli("127.0.0.1", s.port);
    CHECK_FALSE(json::parse(cli.Get("/v1/models")->body)["data"][0].contains("capabilities"));
    CHECK(json::parse(cli.Get("/props")->body)["modalities"]["vision"] == false);
    CHECK(json::parse(cli.Get("/props")->body)["media_marker"].is_null());
    json comp = {{"prompt", {{"prompt_string", "<__media__>"}, {"multimodal_data", {"AA=="}}}}};
    auto rc = cli.Post("/completion", comp.dump(), "application/json");
    CHECK(rc->status == 400);
    CHECK(json::parse(rc->body)["error"]["message"].get<std::string>().find("--mmproj") != std::string::npos);
    json body = {{"messages", json::array({json{{"role", "user"},
                                                {"content", json::array({json{{"type", "image_url"},
                                                                              {"image_url", "data:image/png;base64,AA=="}}})}}})}};
    auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["param"] == "messages[0].content[0].type");
    json chat = {{"model", "m"},
                 {"stream", false},
                 {"messages", json::array({json{{"role", "user"}, {"content", "What?"}, {"images", {"aGVs"}}}})}};
    r = cli.Post("/api/chat", chat.dump(), "application/json");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"].get<std::string>().find("takes no images") != std::string::npos);
    json tmpl = {{"messages", body["messages"]}};
    CHECK(cli.Post("/apply-template", tmpl.dump(), "application/json")->status == 400);
    std::lock_guard lk(s.mu);
    CHECK(s.requests.empty());
    s.server.stop();
}
