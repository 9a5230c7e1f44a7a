#include "persistence/snapshot_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "persistence/integrity.hpp"

namespace berth {

namespace {

constexpr std::string_view magic = "BERTHSNP";
constexpr uint32_t format = 2;
constexpr size_t piece = 1 << 20;  // what is read or written at once

failure io_failure(const char* what, const std::string& path, int err) {
  return {errc::internal, std::string("cannot ") + what + " " + path + ": " + std::strerror(err)};
}


// An open file descriptor, closed on every way out.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

// Reads exactly `n` bytes at `offset` (fewer only at the end of the file).
ssize_t read_at(int fd, char* buf, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    auto r = ::pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

bool write_at(int fd, std::string_view bytes, uint64_t offset) {
  while (!bytes.empty()) {
    auto n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

int create_private(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  // A file that existed keeps its mode through O_TRUNC: 0600 before any byte.
  if (fd >= 0 && ::fchmod(fd, 0600) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

std::optional<failure> sync_and_close(fd_guard& f, const std::string& path) {
  if (::fsync(f.fd) != 0) return io_failure("fsync", path, errno);
  if (::close(f.release()) != 0) return io_failure("close", path, errno);
  return std::nullopt;
}

}  // namespace

bool is_streamed_snapshot_file(const std::string& path) {
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return false;
  char h[12];
  if (read_at(f.fd, h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) return false;
  std::string_view v(h, sizeof h);
  return v.substr(0, magic.size()) == magic && get_le(v, 8, 4) == format;
}

std::optional<failure> write_snapshot_file(const std::string& path, std::string_view snapshot,
                                           const std::string& db_path) {
  fd_guard in{::open(db_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return io_failure("open", db_path, errno);
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) return io_failure("read the size of", db_path, errno);
  auto db_length = static_cast<uint64_t>(st.st_size);
  fd_guard out{create_private(path)};
  if (out.fd < 0) return io_failure("create", path, errno);
  // The header's checksum is known only at the end: it is written last.
  uint64_t at = snapshot_file_header;
  if (!write_at(out.fd, snapshot, at)) return io_failure("write", path, errno);
  at += snapshot.size();
  uint32_t crc = crc32(snapshot);
  std::string buf(piece, '\0');
  for (uint64_t done = 0; done < db_length;) {
    auto n = read_at(in.fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(piece, db_length - done)), done);
    if (n < 0) return io_failure("read", db_path, errno);
    if (n == 0) return failure{errc::internal, db_path + " became shorter while it was copied"};
    std::string_view part(buf.data(), static_cast<size_t>(n));
    crc = crc32(part, crc);
    if (!write_at(out.fd, part, at)) return io_failure("write", path, errno);
    at += part.size();
    done += part.size();
  }
  std::string header(magic);
  put_le(header, format, 4);
  put_le(header, snapshot.size(), 8);
  put_le(header, db_length, 8);
  put_le(header, crc, 4);
  if (!write_at(out.fd, header, 0)) return io_failure("write", path, errno);
  return sync_and_close(out, path);
}

expected<snapshot_file> read_snapshot_file_parts(const std::string& path, bool verify) {
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return failure{errc::internal, path + ": cannot be read: " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    return failure{errc::internal, path + ": cannot be read: " + std::strerror(errno)};
  auto size = static_cast<uint64_t>(st.st_size);
  char h[snapshot_file_header];
  auto got = read_at(f.fd, h, sizeof h, 0);
  if (got < 0) return failure{errc::internal, path + ": cannot be read: " + std::strerror(errno)};
  std::string_view header(h, static_cast<size_t>(got));
  if (header.size() < 12 || header.substr(0, magic.size()) != magic)
    return failure{errc::internal, damage_message(path, "it is not a berth snapshot file")};
  if (get_le(header, 8, 4) != format)
    return failure{errc::internal, damage_message(path, "unknown snapshot format " +
                                                            std::to_string(get_le(header, 8, 4)) +
                                                            " (written by a newer berth?)")};
  if (header.size() < snapshot_file_header)
    return failure{errc::internal, damage_message(path, "truncated inside its header")};
  snapshot_file out;
  auto snap_length = get_le(header, 12, 8);
  out.db_length = get_le(header, 20, 8);
  out.db_offset = snapshot_file_header + snap_length;
  if (size != out.size())
    return failure{errc::internal,
                   damage_message(path, (size < out.size() ? "truncated: " : "too long: ") +
                                            std::to_string(size) + " bytes, the header says " +
                                            std::to_string(out.size()))};
  out.snapshot.resize(static_cast<size_t>(snap_length));
  if (read_at(f.fd, out.snapshot.data(), out.snapshot.size(), snapshot_file_header) !=
      static_cast<ssize_t>(out.snapshot.size()))
    return failure{errc::internal, damage_message(path, "truncated inside its snapshot")};
  if (!verify) return out;
  uint32_t crc = crc32(out.snapshot);
  std::string buf(piece, '\0');
  for (uint64_t at = out.db_offset; at < size;) {
    auto n = read_at(f.fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(piece, size - at)), at);
    if (n <= 0)
      return failure{errc::internal,
                     path + ": cannot be read: " + std::strerror(n < 0 ? errno : EIO)};
    if (at == out.db_offset &&
        std::string_view(buf.data(), static_cast<size_t>(n)).compare(0, 16, std::string_view("SQLite format 3\0", 16)) != 0)
      return failure{errc::internal,
                     damage_message(path, "the state database inside it is not one")};
    crc = crc32(std::string_view(buf.data(), static_cast<size_t>(n)), crc);
    at += static_cast<uint64_t>(n);
  }
  if (out.db_length == 0)
    return failure{errc::internal, damage_message(path, "the state database inside it is empty")};
  if (crc != static_cast<uint32_t>(get_le(header, 28, 4)))
    return failure{errc::internal,
                   damage_message(path, "its checksum does not match its contents")};
  return out;
}

std::optional<failure> extract_snapshot_db(const std::string& path, const snapshot_file& parts,
                                           const std::string& to) {
  fd_guard in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return io_failure("open", path, errno);
  fd_guard out{create_private(to)};
  if (out.fd < 0) return io_failure("create", to, errno);
  std::string buf(piece, '\0');
  for (uint64_t done = 0; done < parts.db_length;) {
    auto want = static_cast<size_t>(std::min<uint64_t>(piece, parts.db_length - done));
    auto n = read_at(in.fd, buf.data(), want, parts.db_offset + done);
    if (n < 0) return io_failure("read", path, errno);
    if (static_cast<size_t>(n) != want) return failure{errc::internal, path + " is truncated"};
    if (!write_at(out.fd, std::string_view(buf.data(), want), done)) return io_failure("write", to, errno);
    done += want;
  }
  return sync_and_close(out, to);
}

std::optional<failure> read_file_piece(const std::string& path, uint64_t offset, size_t max,
                                       std::string& out) {
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return io_failure("open", path, errno);
  out.resize(max);
  auto n = read_at(f.fd, out.data(), max, offset);
  if (n < 0) return io_failure("read", path, errno);
  out.resize(static_cast<size_t>(n));
  return std::nullopt;
}

std::optional<failure> write_file_piece(const std::string& path, uint64_t offset,
                                        std::string_view bytes, bool sync) {
  fd_guard f{offset == 0 ? create_private(path) : ::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  if (f.fd < 0) return io_failure(offset == 0 ? "create" : "open", path, errno);
  if (!write_at(f.fd, bytes, offset)) return io_failure("write", path, errno);
  if (sync) return sync_and_close(f, path);
  if (::close(f.release()) != 0) return io_failure("close", path, errno);
  return std::nullopt;
}

}  // namespace berth
