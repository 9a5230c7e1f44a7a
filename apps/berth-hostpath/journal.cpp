#include "journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "persistence/crashpoint.hpp"
#include "persistence/durable_file.hpp"

namespace berth::hostpath {

namespace {

std::runtime_error io_error(const char* what, const std::filesystem::path& file) {
  return std::runtime_error(std::string("cannot ") + what + " " + file.string() + ": "
                            + std::strerror(errno));
}

bool hex8(std::string_view s, uint32_t& out) {
  if (s.size() != 8)
    return false;
  out = 0;
  for (char c : s) {
    out <<= 4;
    if (c >= '0' && c <= '9')
      out |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      out |= static_cast<uint32_t>(c - 'a' + 10);
    else
      return false;
  }
  return true;
}

// The records of one line, or why it is not intact.
bool parse_line(std::string_view line, std::vector<record>& out, std::string& why) {
  uint32_t crc = 0;
  if (line.size() < 10 || line[8] != ' ' || !hex8(line.substr(0, 8), crc)) {
    why = "no checksum";
    return false;
  }
  auto body = line.substr(9);
  if (crc32_of(body) != crc) {
    why = "checksum mismatch";
    return false;
  }
  try {
    out = decode_records(std::string(body));
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  return true;
}

}  // namespace

uint32_t crc32_of(std::string_view bytes) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes)
    c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::string encode_journal_line(const std::vector<record>& rs) {
  auto body = encode_records(rs);
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", crc32_of(body));
  std::string line;
  line.reserve(body.size() + 10);
  line.append(crc, 8).append(" ").append(body).append("\n");
  return line;
}

replayed replay_journal(std::string_view bytes, state& s, const std::string& what) {
  replayed r;
  size_t at = 0;
  while (at < bytes.size()) {
    auto lf = bytes.find('\n', at);
    if (lf == std::string_view::npos) {
      r.torn = true;  // the last line's append never finished
      break;
    }
    std::vector<record> rs;
    std::string why;
    if (!parse_line(bytes.substr(at, lf - at), rs, why)) {
      if (lf + 1 == bytes.size()) {
        r.torn = true;  // the last line, written but not wholly on disk
        break;
      }
      throw std::runtime_error("journal " + what + " is damaged at byte " + std::to_string(at)
                               + " (" + why + ") and has intact lines after it: refusing to "
                               + "start without them (the mounts they record would be "
                               + "forgotten). Inspect or restore the file, then restart.");
    }
    apply_change(s, rs);
    at = lf + 1;
    r.valid_bytes = static_cast<int64_t>(at);
    ++r.lines;
  }
  return r;
}

store::store(std::filesystem::path snapshot, std::filesystem::path journal, int64_t limit,
             int64_t floor)
    : snapshot_(std::move(snapshot)), journal_(std::move(journal)), limit_(limit), floor_(floor) {}

store::~store() {
  if (fd_ >= 0)
    ::close(fd_);
}

void store::open_journal() {
  if (fd_ >= 0)
    return;
  bool existed = std::filesystem::exists(journal_);
  fd_ = ::open(journal_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw io_error("open", journal_);
  if (!existed)
    if (auto f = fsync_dir_of(journal_.string()))  // the new name, before anything relies on it
      throw std::runtime_error(f->message);
}

state store::load() {
  state s;
  {
    std::ifstream in(snapshot_);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      snapshot_bytes_ = static_cast<int64_t>(text.str().size());
      s = decode_state(text.str(), snapshot_.string());
    } else {
      snapshot_bytes_ = 0;
    }
  }
  open_journal();
  std::string bytes;
  {
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      throw io_error("stat", journal_);
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      auto n = ::pread(fd_, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        throw io_error("read", journal_);
      if (n == 0)
        break;
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  }
  auto r = replay_journal(bytes, s, journal_.string());
  if (r.torn) {
    // Cut the torn line off before anything is appended after it, where it
    // would become damage in the middle.
    if (::ftruncate(fd_, r.valid_bytes) != 0)
      throw io_error("truncate the torn end of", journal_);
    if (::fsync(fd_) != 0)
      throw io_error("fsync", journal_);
  }
  journal_bytes_ = r.valid_bytes;
  broken_ = false;
  return s;
}

void store::append(const std::vector<record>& rs) {
  if (rs.empty())
    return;
  open_journal();
  auto line = encode_journal_line(rs);
  std::string_view rest = line;
  broken_ = true;  // until the line is whole and synced
  while (!rest.empty()) {
    auto n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw io_error("append to", journal_);
    rest.remove_prefix(static_cast<size_t>(n));
  }
  crashpoint("hostpath.journal", "after_write");
  if (::fdatasync(fd_) != 0)
    throw io_error("fdatasync", journal_);
  crashpoint("hostpath.journal", "after_sync");
  broken_ = false;
  journal_bytes_ += static_cast<int64_t>(line.size());
}

bool store::must_compact() const {
  if (broken_)
    return true;
  if (limit_ >= 0)
    return journal_bytes_ >= limit_;
  return journal_bytes_ >= std::max(floor_, 2 * snapshot_bytes_);
}

void store::compact(const state& s) {
  open_journal();
  broken_ = true;  // until the journal is empty again
  snapshot_bytes_ = save_state(snapshot_, s);
  if (::ftruncate(fd_, 0) != 0)
    throw io_error("empty", journal_);
  if (::fsync(fd_) != 0)
    throw io_error("fsync", journal_);
  crashpoint("hostpath.journal", "after_truncate");
  journal_bytes_ = 0;
  broken_ = false;
}

void store::create_snapshot_if_missing() {
  if (!std::filesystem::exists(snapshot_))
    snapshot_bytes_ = save_state(snapshot_, state{});
}

}  // namespace berth::hostpath
