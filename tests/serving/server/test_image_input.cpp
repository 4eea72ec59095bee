// A chat's image references to pixels: base64 (whitespace tolerated, padding strict), data URLs,
// the schemes refused (http(s) unless allowed, file:// and the rest always), fetching from a local
// server (redirects, the byte and time limits, HTTP errors) and decoding (not an image, too many
// pixels). Every refusal is a 400 naming the image's field.
#include "serving/server/image_input.h"

#include "support/image_files.h"

#include <doctest/doctest.h>
#include <httplib.h>

#include <string>
#include <thread>

using namespace vkllm;
using namespace vkllm::server;
using namespace std::chrono_literals;

namespace {

// An encoder written apart from the decoder under test (RFC 4648, section 4).
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

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

chat_template::ImageRef ref(std::string url) { return {std::move(url), "messages[0].content[1].image_url"}; }

// The 400 an image reference gets, checked to name its field.
ApiError refusal(const chat_template::ImageRef& r, const ImageInputOptions& opts = {}) {
    try {
        load_image(r, opts);
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.param() == r.param);
        CHECK(std::string(e.what()).find(r.param) != std::string::npos);
        return e;
    }
    FAIL("expected a 400 for " << r.url.substr(0, 80));
    return ApiError(0, "");
}

bool says(const ApiError& e, const std::string& text) {
    CAPTURE(e.what());
    return std::string(e.what()).find(text) != std::string::npos;
}

std::vector<uint8_t> small_png() {
    std::vector<uint8_t> rgb(5 * 3 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 7);
    return image_files::png_rgb(5, 3, rgb);
}

}  // namespace

TEST_CASE("base64: whitespace is skipped, padding is strict") {
    CHECK(decode_base64("aGVsbG8=") == bytes_of("hello"));
    CHECK(decode_base64("YQ==") == bytes_of("a"));
    CHECK(decode_base64("YWJj") == bytes_of("abc"));
    CHECK(decode_base64(" aGVs\r\nbG8=\n") == bytes_of("hello"));
    CHECK(decode_base64("Y Q = =") == bytes_of("a"));
    std::vector<uint8_t> all(256);
    for (size_t i = 0; i < all.size(); ++i) all[i] = uint8_t(i);
    CHECK(decode_base64(base64(all)) == all);
    for (const char* bad : {"", "  \n", "aGVsbG8", "YQ", "YQ=", "aGVsbG8==", "YQ===", "a===", "=YQ=", "aGVs=bG8",
                            "YQ==YQ==", "aGVsbG8-", "aGVs_bG8", "aGVsbG8=\x01", "\xff\xfe"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(decode_base64(bad), std::invalid_argument);
    }
}

TEST_CASE("data URLs: data:image/<type>;base64 only, the base64 checked") {
    const std::string param = "messages[2].content[0].image_url";
    CHECK(data_url_bytes("data:image/png;base64,aGVsbG8=", param) == bytes_of("hello"));
    CHECK(data_url_bytes("DATA:Image/JPEG;BASE64,aGVsbG8=", param) == bytes_of("hello"));
    CHECK(data_url_bytes("data:image/webp;name=x.webp;base64,aGVs\nbG8=", param) == bytes_of("hello"));
    for (const char* bad : {"data:text/plain;base64,aGVsbG8=", "data:image/png,hello", "data:image/png;base64",
                            "data:;base64,aGVsbG8=", "data:image/png;base64,aGVsbG8", "data:image/png;base64,",
                            "data:image/png;base64,aGV*bG8=", "https://example.com/a.png"}) {
        CAPTURE(bad);
        try {
            data_url_bytes(bad, param);
            FAIL("accepted");
        } catch (const ApiError& e) {
            CHECK(e.status() == 400);
            CHECK(e.param() == param);
        }
    }
}

TEST_CASE("schemes: http(s) only with --allow-image-urls, file:// and the rest never") {
    CHECK(says(refusal(ref("http://127.0.0.1:1/a.png")), "--allow-image-urls"));
    CHECK(says(refusal(ref("HTTPS://example.com/a.png")), "remote image URLs are off"));
    ImageInputOptions allow;
    allow.allow_urls = true;
    for (const char* url : {"file:///etc/passwd", "FILE:///etc/hosts", "ftp://example.com/a.png", "/etc/passwd",
                            "a.png", "javascript:alert(1)", "gopher://x"}) {
        CAPTURE(url);
        CHECK(says(refusal(ref(url), allow), "never read"));
        CHECK(says(refusal(ref(url)), "never read"));
    }
    // Credentials in the URL, or no host at all.
    CHECK(says(refusal(ref("http://user:pw@127.0.0.1:1/a.png"), allow), "not an http or https URL"));
    CHECK(says(refusal(ref("http:///a.png"), allow), "not an http or https URL"));
}

TEST_CASE("decoding: the image's pixels, or a 400 with the decoder's reason") {
    const std::vector<uint8_t> png = small_png();
    RgbImage img = load_image(ref("data:image/png;base64," + base64(png)), {});
    CHECK(img.nx == 5);
    CHECK(img.ny == 3);
    CHECK(img.rgb.size() == 5 * 3 * 3);
    CHECK(img.rgb[4] == 28);
    // Not an image, a truncated one, one over the pixel limit.
    CHECK(says(refusal(ref("data:image/png;base64," + base64(bytes_of("hello, not a picture")))), "cannot be read"));
    CHECK(says(refusal(ref("data:image/png;base64," + base64({png.begin(), png.begin() + 40}))), "cannot be read"));
    ImageInputOptions small;
    small.limits.max_pixels = 14;
    CHECK(says(refusal(ref("data:image/png;base64," + base64(png)), small), "cannot be read"));
}

TEST_CASE("fetching: redirects to http(s) only, the byte and time limits, HTTP errors") {
    const std::vector<uint8_t> png = small_png();
    const std::string png_body(png.begin(), png.end());
    httplib::Server srv;
    srv.Get("/a.png", [&](const httplib::Request&, httplib::Response& res) { res.set_content(png_body, "image/png"); });
    srv.Get("/to-png", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/a.png"); });
    srv.Get("/to-file", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("file:///etc/passwd"); });
    srv.Get("/loop", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/loop"); });
    srv.Get("/big", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(std::string(4096, 'x'), "image/png");
    });
    // No Content-Length: the limit is found while reading.
    srv.Get("/big-chunked", [](const httplib::Request&, httplib::Response& res) {
        res.set_chunked_content_provider("image/png", [](size_t, httplib::DataSink& sink) {
            const std::string piece(1024, 'x');
            for (int i = 0; i < 8; ++i)
                if (!sink.write(piece.data(), piece.size())) return false;
            sink.done();
            return true;
        });
    });
    // A trickle that would go on past the time limit.
    srv.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
        res.set_chunked_content_provider("image/png", [](size_t, httplib::DataSink& sink) {
            for (int i = 0; i < 40; ++i) {
                if (!sink.write("x", 1)) return false;
                std::this_thread::sleep_for(50ms);
            }
            sink.done();
            return true;
        });
    });
    const int port = srv.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    std::thread serving([&] { srv.listen_after_bind(); });
    const std::string base = "http://127.0.0.1:" + std::to_string(port);

    ImageInputOptions opts;
    opts.allow_urls = true;
    opts.max_url_bytes = 2048;
    opts.url_timeout = 500ms;
    CHECK(image_bytes(ref(base + "/a.png"), opts) == png);
    CHECK(image_bytes(ref(base + "/to-png#fragment"), opts) == png);
    CHECK(load_image(ref(base + "/to-png"), opts).nx == 5);
    CHECK(says(refusal(ref(base + "/to-file"), opts), "only http and https URLs are followed"));
    CHECK(says(refusal(ref(base + "/loop"), opts), "redirects more than"));
    CHECK(says(refusal(ref(base + "/big"), opts), "--image-url-max-bytes"));
    CHECK(says(refusal(ref(base + "/big-chunked"), opts), "--image-url-max-bytes"));
    CHECK(says(refusal(ref(base + "/missing.png"), opts), "HTTP 404"));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(says(refusal(ref(base + "/slow"), opts), "--image-url-timeout"));
    CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
    // Not allowed: nothing is fetched.
    CHECK(says(refusal(ref(base + "/a.png")), "--allow-image-urls"));
    srv.stop();
    serving.join();
    // Nobody listening.
    CHECK(says(refusal(ref(base + "/a.png"), opts), "cannot fetch"));
}
