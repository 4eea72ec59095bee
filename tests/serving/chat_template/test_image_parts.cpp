// Image parts of chat messages: each image_url part becomes the image marker where it was, its URL
// and field listed in message order; refused by name for a model without a vision encoder, and a
// text holding the marker itself refused when there are images. Also through the server's request
// parser (parse_chat_request's takes_images).
#include "serving/chat_template/chat_prompt.h"
#include "serving/server/openai_requests.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace vkllm::chat_template;
using json = nlohmann::ordered_json;

namespace {

json text_part(const std::string& t) { return json{{"type", "text"}, {"text", t}}; }
json image_part(const std::string& url) { return json{{"type", "image_url"}, {"image_url", {{"url", url}}}}; }
json user(json content) { return json{{"role", "user"}, {"content", std::move(content)}}; }

// The field a MessageError names, or "" when none is thrown.
std::string refused_at(const json& messages, std::vector<ImageRef>* images) {
    try {
        parse_messages(messages, images);
    } catch (const MessageError& e) {
        CAPTURE(e.what());
        CHECK(std::string(e.what()).find(e.param()) != std::string::npos);  // the message names it too
        return e.param();
    }
    return "";
}

}  // namespace

TEST_CASE("image parts become the marker where they were, in message order") {
    json msgs = json::array({
        json{{"role", "system"}, {"content", "You look at pictures."}},
        user(json::array({text_part("What is in"), image_part("data:image/png;base64,AAAA"), text_part("and in"),
                          json{{"type", "image_url"}, {"image_url", "https://example.com/b.jpg"}, {"detail", "high"}}})),
        json{{"role", "assistant"}, {"content", "Cats."}},
        user(json::array({image_part("data:image/jpeg;base64,BBBB")})),
    });
    std::vector<ImageRef> images;
    json out = parse_messages(msgs, &images);
    CHECK(out[0]["content"] == "You look at pictures.");
    // As llama-server joins them: a newline between text parts, none around an image.
    CHECK(out[1]["content"] == "What is in<__media__>and in<__media__>");
    CHECK(out[3]["content"] == "<__media__>");
    REQUIRE(images.size() == 3);
    CHECK(images[0].url == "data:image/png;base64,AAAA");
    CHECK(images[0].param == "messages[1].content[1].image_url");
    CHECK(images[1].url == "https://example.com/b.jpg");  // the URL alone, as OpenAI also takes it
    CHECK(images[1].param == "messages[1].content[3].image_url");
    CHECK(images[2].param == "messages[3].content[0].image_url");
    CHECK(kImageMarker == "<__media__>");  // llama.cpp's mtmd default marker

    // Images side by side, and text parts around them.
    json mixed = json::array({user(json::array({text_part("A"), text_part("B"), image_part("u"), image_part("v"),
                                                text_part("C"), text_part("D")}))});
    CHECK(parse_messages(mixed, &images)[0]["content"] == "A\nB<__media__><__media__>C\nD");
    CHECK(images.size() == 5);
    images.resize(3);

    // Text parts alone are joined as before, with or without the list.
    json plain = json::array({user(json::array({text_part("A"), text_part("B")}))});
    CHECK(parse_messages(plain, &images)[0]["content"] == "A\nB");
    CHECK(images.size() == 3);  // nothing appended
    CHECK(parse_messages(plain)[0]["content"] == "A\nB");
}

TEST_CASE("a model without a vision encoder refuses image parts by name") {
    json msgs = json::array({user("Hi"), user(json::array({text_part("x"), image_part("data:image/png;base64,AA")}))});
    CHECK(refused_at(msgs, nullptr) == "messages[1].content[1].type");
    try {
        parse_messages(msgs);
    } catch (const MessageError& e) {
        CHECK(std::string(e.what()).find("takes no images") != std::string::npos);
        CHECK(std::string(e.what()).find("--mmproj") != std::string::npos);
    }
    std::vector<ImageRef> images;
    CHECK(refused_at(msgs, &images).empty());
}

TEST_CASE("malformed image parts are refused naming the field") {
    std::vector<ImageRef> images;
    auto one = [](json part) { return json::array({user(json::array({std::move(part)}))}); };
    CHECK(refused_at(one(json{{"type", "image_url"}}), &images) == "messages[0].content[0].image_url");
    CHECK(refused_at(one(json{{"type", "image_url"}, {"image_url", nullptr}}), &images) ==
          "messages[0].content[0].image_url");
    CHECK(refused_at(one(json{{"type", "image_url"}, {"image_url", 5}}), &images) ==
          "messages[0].content[0].image_url");
    CHECK(refused_at(one(json{{"type", "image_url"}, {"image_url", json::object()}}), &images) ==
          "messages[0].content[0].image_url.url");
    CHECK(refused_at(one(json{{"type", "image_url"}, {"image_url", {{"url", 7}}}}), &images) ==
          "messages[0].content[0].image_url.url");
    CHECK(refused_at(one(image_part("")), &images) == "messages[0].content[0].image_url");
    CHECK(refused_at(one(json{{"type", "input_audio"}, {"input_audio", json::object()}}), &images) ==
          "messages[0].content[0].type");
}

TEST_CASE("a text holding the marker is refused when images are present, and kept when not") {
    std::vector<ImageRef> images;
    // In a text part before the image, and in a plain string content after it.
    json in_part = json::array({user(json::array({text_part("see <__media__> here"), image_part("u")}))});
    CHECK(refused_at(in_part, &images) == "messages[0].content[0].text");
    images.clear();
    json in_string = json::array({user(json::array({image_part("u")})), user("and <__media__>")});
    CHECK(refused_at(in_string, &images) == "messages[1].content");
    images.clear();
    // No images: the marker is only text.
    json text_only = json::array({user("what does <__media__> mean?")});
    CHECK(refused_at(text_only, &images).empty());
    CHECK(parse_messages(text_only, &images)[0]["content"] == "what does <__media__> mean?");
    CHECK(images.empty());
}

TEST_CASE("parse_chat_request reads images only for a model that takes them") {
    using namespace vkllm::server;
    json body = {{"messages", json::array({user(json::array({text_part("Describe"), image_part("data:x")}))})}};
    ParsedRequest r = parse_chat_request(body, 1, true);
    REQUIRE(r.images.size() == 1);
    CHECK(r.images[0].url == "data:x");
    CHECK(r.messages[0]["content"] == "Describe<__media__>");
    try {
        parse_chat_request(body, 1);
        FAIL("expected a 400");
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.param() == "messages[0].content[1].type");
    }
}
