// The images of a chat request, from the URLs its image parts carry (chat_template::ImageRef) to
// pixels: a data URL ("data:image/png;base64,...") is decoded here; an http(s) URL is fetched only
// when the server allows it (--allow-image-urls: the server would otherwise reach any address its
// clients name), under a byte and a time limit, following redirects to http(s) only; file:// and
// every other scheme are refused. The bytes go through model/image's decode_image under the
// server's pixel limit. Every refusal is a 400 (ApiError) naming the image's field and the reason.
#pragma once

#include "model/image/image_decode.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/server/openai_requests.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::server {

struct ImageInputOptions {
    ImageLimits limits;  // --image-max-pixels
    bool allow_urls = false;  // --allow-image-urls
    // --image-url-max-bytes: a fetched file larger than this is refused (a photo is a few MiB).
    size_t max_url_bytes = size_t(20) << 20;
    // --image-url-timeout: a fetch, redirects included, that takes longer is abandoned.
    std::chrono::milliseconds url_timeout{10000};
};

// Redirects a fetch follows at most.
inline constexpr int kMaxImageRedirects = 5;

// RFC 4648 base64 (the standard alphabet) to bytes. Whitespace anywhere is skipped (MIME wraps
// lines); the rest must be whole groups of four, '=' only as the last one or two characters of the
// last group. std::invalid_argument saying what is wrong otherwise.
std::vector<uint8_t> decode_base64(std::string_view text);

// The bytes a data URL carries: "data:image/<type>[;param=value...];base64,<data>" (the scheme and
// ";base64" in any case). The type is not trusted: decode_image reads the bytes' own signature.
// ApiError 400 naming `param` when the URL is not such a URL or its base64 is malformed.
std::vector<uint8_t> data_url_bytes(std::string_view url, const std::string& param);

// The bytes at an http(s) URL (opts.allow_urls is not checked here); ApiError 400 naming `param`
// when it cannot be fetched, answers other than 200, redirects elsewhere than http(s) or more than
// kMaxImageRedirects times, is larger than opts.max_url_bytes or takes longer than opts.url_timeout.
std::vector<uint8_t> fetch_image_url(const std::string& url, const ImageInputOptions& opts, const std::string& param);

// The bytes an image reference points to: a data URL, or an http(s) URL where opts.allow_urls;
// anything else a 400 naming ref.param.
std::vector<uint8_t> image_bytes(const chat_template::ImageRef& ref, const ImageInputOptions& opts);

// image_bytes decoded (decode_image under opts.limits); an ImageError is a 400 naming ref.param and
// the decoder's reason.
RgbImage load_image(const chat_template::ImageRef& ref, const ImageInputOptions& opts);

}  // namespace vkllm::server
