// Fuzz target: the volume spec parser (messages/codec), JSON and YAML, for
// registration and for create, and the JSON view of what it accepts.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "messages/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto use : {berth::spec_use::registration, berth::spec_use::create}) {
    auto parsed = berth::parse_volume_spec(text, use);
    if (auto* v = std::get_if<berth::v1::Volume>(&parsed)) (void)berth::volume_json(*v, nullptr).dump();
  }
  return 0;
}
