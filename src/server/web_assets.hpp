// The web chat page (web/index.html, app.js, style.css), compiled into the server (cmake/embed_web.cmake), so it
// works offline and needs no files beside the binary. GET / serves index.html.
#pragma once

#include <span>
#include <string_view>

namespace photon::server {

struct WebAsset {
  std::string_view path;  ///< "/index.html", "/app.js", "/style.css"
  std::string_view content_type;
  std::string_view body;
};

/// Every embedded file; static storage.
std::span<const WebAsset> web_assets();

}  // namespace photon::server
