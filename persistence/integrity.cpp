#include "persistence/integrity.hpp"

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace berth {

namespace fs = std::filesystem;

const char* const recovery_hint =
    "To recover, move the data directory aside (keep it for inspection) and either start berthd "
    "on an empty data directory and restore a snapshot with `berth operator snapshot restore "
    "FILE` (a file from `berth operator snapshot save`), or, on a server of a cluster, start it "
    "on an empty data directory with --join so that it rejoins the cluster and the leader sends "
    "it a snapshot";

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}


// "BERTHSNP", a format number, the payload's length and its CRC-32.
constexpr std::string_view snapshot_magic = "BERTHSNP";
constexpr uint32_t snapshot_format = 1;
constexpr size_t snapshot_header = 8 + 4 + 8 + 4;

}  // namespace

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

uint32_t crc32(std::string_view bytes, uint32_t crc) {
  static const auto table = make_crc_table();
  crc = ~crc;
  for (unsigned char ch : bytes) crc = table[(crc ^ ch) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string damage_message(const std::string& path, const std::string& detail) {
  return path + " is damaged (" + detail + "); berthd will not run on wrong state. " +
         recovery_hint + ".";
}

bool is_damage(const failure& f) {
  return f.message.find(recovery_hint) != std::string::npos;
}

std::optional<failure> check_sqlite_header(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  auto size = fs::file_size(path, ec);
  if (ec) return failure{errc::internal, path + ": cannot read its size: " + ec.message()};
  if (size == 0) {
    auto wal = fs::file_size(path + "-wal", ec);
    if (!ec && wal > 0)
      return failure{errc::internal,
                     damage_message(path, "the file is empty but its write-ahead log " + path +
                                              "-wal is not: truncated")};
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  unsigned char h[100] = {0};
  in.read(reinterpret_cast<char*>(h), sizeof h);
  if (static_cast<size_t>(in.gcount()) < sizeof h)
    return failure{errc::internal,
                   damage_message(path, "only " + std::to_string(size) +
                                            " bytes, shorter than a SQLite header: truncated")};
  if (std::memcmp(h, "SQLite format 3", 16) != 0)
    return failure{errc::internal,
                   damage_message(path, "not a SQLite database: its header is overwritten")};
  uint32_t page_size = (uint32_t{h[16]} << 8) | h[17];
  if (page_size == 1) page_size = 65536;
  if (page_size < 512 || (page_size & (page_size - 1)) != 0)
    return failure{errc::internal, damage_message(path, "its header names an invalid page size")};
  // A checkpoint copies the write-ahead log's pages into the file in page
  // order, page 1 (the header, with the new page count) first, and resets
  // the log only after the last page is written and synced.  A process that
  // died during one leaves a file shorter than its header says beside a log
  // that still holds every page: SQLite replays the log at open and the
  // quick_check that follows looks at the result.  So the size checks hold
  // only for a file without a log.
  auto wal = fs::file_size(path + "-wal", ec);
  if (!ec && wal > 0) return std::nullopt;
  // The page count in the header is valid when the "version-valid-for"
  // number equals the change counter (every SQLite since 3.7.0 writes both).
  uint32_t pages = be32(h + 28);
  if (pages != 0 && be32(h + 92) == be32(h + 24) &&
      size < static_cast<uint64_t>(pages) * page_size)
    return failure{errc::internal, damage_message(path, "truncated: " + std::to_string(size) +
                                                            " bytes, but its header records " +
                                                            std::to_string(pages) + " pages of " +
                                                            std::to_string(page_size) + " bytes")};
  if (size % page_size != 0)
    return failure{errc::internal,
                   damage_message(path, "truncated: " + std::to_string(size) +
                                            " bytes is not a whole number of " +
                                            std::to_string(page_size) + "-byte pages")};
  return std::nullopt;
}

std::string encode_snapshot_file(std::string_view snapshot) {
  std::string out(snapshot_magic);
  put_le(out, snapshot_format, 4);
  put_le(out, snapshot.size(), 8);
  put_le(out, crc32(snapshot), 4);
  out.append(snapshot);
  return out;
}

expected<std::string> decode_snapshot_file(const std::string& path, std::string_view bytes) {
  if (bytes.substr(0, snapshot_magic.size()) != snapshot_magic) return std::string(bytes);
  if (bytes.size() < snapshot_header)
    return failure{errc::internal, damage_message(path, "truncated inside its header")};
  auto format = get_le(bytes, 8, 4);
  if (format != snapshot_format)
    return failure{errc::internal,
                   damage_message(path, "unknown snapshot format " + std::to_string(format) +
                                            " (written by a newer berth?)")};
  auto length = get_le(bytes, 12, 8);
  auto payload = bytes.substr(snapshot_header);
  if (payload.size() != length)
    return failure{
        errc::internal,
        damage_message(path, (payload.size() < length ? "truncated: " : "too long: ") +
                                 std::to_string(payload.size()) +
                                 " bytes of snapshot, the header says " + std::to_string(length))};
  auto crc = static_cast<uint32_t>(get_le(bytes, 20, 4));
  if (crc32(payload) != crc)
    return failure{errc::internal,
                   damage_message(path, "its checksum does not match its contents")};
  return std::string(payload);
}

expected<std::string> read_snapshot_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure{errc::internal, path + ": cannot be read (check its permissions)"};
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return failure{errc::internal, path + ": cannot be read"};
  return decode_snapshot_file(path, bytes);
}

}  // namespace berth
