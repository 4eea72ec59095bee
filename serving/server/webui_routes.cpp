// The chat page's routes: GET / and each of its files under /assets/, from the table built into
// the binary (serving/webui/). They are public, since the page itself holds no secret: the API calls
// it makes carry the key, which it asks for when the server answers 401.
#include "serving/server/server_core.h"
#include "serving/webui/asset_reply.h"

namespace vkllm::server {

void add_webui_routes(ServerCore& core) {
    if (!core.options().webui) return;
    for (const webui::Asset& asset : webui::assets()) {
        core.make_public(std::string(asset.path));
        core.get(std::string(asset.path), [&asset](const ServerCore::Request& req, ServerCore::Response& res) {
            webui::Reply r =
                webui::reply_for(asset, req.get_header_value("Accept-Encoding"), req.get_header_value("If-None-Match"));
            res.status = r.status;
            for (auto& [name, value] : r.headers)
                if (name != "Content-Type") res.set_header(name, value);
            if (r.status != 200) return;
            // Through a content provider of known length, which cpp-httplib sends as it is: a body
            // set with set_content() of a text type it would compress again for a client that takes
            // gzip or brotli, over the Content-Encoding already there.
            const std::string_view body = r.body;
            res.set_content_provider(body.size(), std::string(asset.content_type),
                                     [body](size_t offset, size_t length, httplib::DataSink& sink) {
                                         return sink.write(body.data() + offset, length);
                                     });
        });
    }
}

}  // namespace vkllm::server
