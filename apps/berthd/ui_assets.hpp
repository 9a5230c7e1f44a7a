// The web UI's files (ui/: index.html, app.js, style.css), compiled into
// berthd: cmake/embed_ui.cmake writes them into a generated source at build
// time, so berthd serves them from memory and needs no files beside it.
#pragma once

#include <string_view>

namespace berth {

struct ui_asset {
  std::string_view name;          // "index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view body;
};

// The file of ui/ with this name, or null.
const ui_asset* find_ui_asset(std::string_view name);

}  // namespace berth
