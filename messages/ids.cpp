#include "messages/ids.hpp"

#include <cstdint>
#include <random>

namespace berth {

namespace {
const char* const hex = "0123456789abcdef";
}

std::string random_uuid() {
  std::random_device rd;  // /dev/urandom on Linux
  unsigned char b[16];
  for (size_t i = 0; i < sizeof b; i += 4) {
    auto x = rd();
    for (size_t k = 0; k < 4; ++k) b[i + k] = static_cast<unsigned char>(x >> (8 * k));
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  std::string out;
  for (size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[b[i] >> 4];
    out += hex[b[i] & 15];
  }
  return out;
}

std::string random_alloc_id() {
  std::random_device rd;
  uint64_t x = (uint64_t{rd()} << 32) ^ rd();
  std::string id;
  for (int i = 0; i < 12; ++i, x >>= 4) id += hex[x & 15];
  return id;
}

std::string id_of_key(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  std::string id;
  for (int i = 0; i < 12; ++i, h >>= 4) id += hex[h & 15];
  return id;
}

}  // namespace berth
