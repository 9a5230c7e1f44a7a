// third_party/caf_openssl's session (CAF 0.17.6's TLS module, patched:
// PATCHES.md) on two TLS connections over socket pairs, driven by hand on
// one thread as CAF's multiplexer drives all of a process's connections: a
// connection that ends without a close_notify (a shell that exits) leaves
// OpenSSL's "unexpected eof" behind, and the next read of another connection
// that has nothing to read must still be "nothing yet", not a failure that
// closes it (patch 1; unpatched, this test fails).
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/session.hpp>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tls/caf_tls.hpp"
#include "tls/pki.hpp"

namespace fs = std::filesystem;
using namespace berth;
using caf::io::network::rw_state;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "berth-caf-openssl-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() { fs::remove_all(path); }
};

// A connected pair of non-blocking sockets with a TLS session on each end.
struct tls_pair {
  int fds[2] = {-1, -1};
  caf::openssl::session_ptr client, server;
  tls_pair(caf::actor_system& sys) {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    for (int fd : fds) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    client = caf::openssl::make_session(sys, fds[0], false);
    server = caf::openssl::make_session(sys, fds[1], true);
    REQUIRE(client);
    REQUIRE(server);
  }
  ~tls_pair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  // Sends `msg` from the client to the server, driving both handshakes as
  // CAF does (a write on the client, a read on the server, until done).
  // False when either side fails.
  bool send(const std::string& msg) {
    size_t sent = 0;
    std::string got;
    for (int i = 0; i < 10000 && got.size() < msg.size(); ++i) {
      size_t n = 0;
      if (sent < msg.size()) {
        if (client->write_some(n, fds[0], msg.data() + sent, msg.size() - sent) ==
            rw_state::failure)
          return false;
        sent += n;
      }
      char buf[256];
      if (server->read_some(n, fds[1], buf, sizeof buf) == rw_state::failure) return false;
      got.append(buf, n);
      // The client reads what the server sends (its handshake, its session
      // tickets), as CAF's multiplexer reads every readable connection.
      if (client->read_some(n, fds[0], buf, sizeof buf) == rw_state::failure) return false;
    }
    return got == msg;
  }
};

}  // namespace

TEST_CASE("a_connection_that_ends_leaves_no_error_that_ends_another") {
  temp_dir d;
  auto ca = std::get<tls::ca_plan>(tls::plan_ca(d.path.string(), "berth-agent-ca", 30, {}));
  REQUIRE_FALSE(tls::create_ca(ca));
  auto cert = std::get<tls::cert_plan>(
      tls::plan_cert(d.path.string(), tls::role::server, "global", 30, {}));
  REQUIRE_FALSE(tls::create_cert(cert, ca.cert_file, ca.key_file));
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  tls::configure(cfg, tls::files{ca.cert_file, cert.cert_file, cert.key_file});
  caf::actor_system sys{cfg};

  tls_pair one(sys), two(sys);
  REQUIRE(one.send("first connection"));
  REQUIRE(two.send("second connection"));

  // The first connection's client goes away without a close_notify, having
  // read all it was sent (its socket closes with a FIN, as a berth shell's
  // at exit).
  char buf[64];
  size_t n = 0;
  for (int i = 0; i < 100; ++i)
    REQUIRE(one.client->read_some(n, one.fds[0], buf, sizeof buf) != rw_state::failure);
  one.client.reset();
  ::close(one.fds[0]);
  one.fds[0] = -1;
  CHECK(one.server->read_some(n, one.fds[1], buf, sizeof buf) == rw_state::failure);

  // The second has nothing to read yet: no failure, and it still carries data.
  CHECK(two.server->read_some(n, two.fds[1], buf, sizeof buf) == rw_state::success);
  CHECK(n == 0);
  CHECK(two.send("still connected"));
}
