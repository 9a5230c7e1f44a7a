// The replicated log's snapshots: taking one (the state database copied
// into DATA/raft-snapshot.bin, then the log compacted behind it), sending
// one to a follower in pieces, receiving and installing one.  The snapshot
// file is never held in memory whole (persistence/snapshot_file.hpp): the
// core's storage keeps only its metadata and members, and the database
// goes from file to file in 1 MiB pieces.
#include <unistd.h>

#include <caf/event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "actors/raft_log_internal.hpp"
#include "log/log.hpp"
#include "persistence/crashpoint.hpp"
#include "persistence/durable_file.hpp"
#include "persistence/integrity.hpp"
#include "raft/compaction.hpp"
#include "persistence/snapshot_file.hpp"

namespace berth::raft_log_detail {

namespace {

constexpr auto piece_timeout = std::chrono::seconds(30);

std::string incoming_path(const self_ptr& self) { return self->state.snapshot_path + ".incoming"; }

// The checksum field of a snapshot file's header (snapshot_file.hpp).
uint32_t header_crc(const std::string& header) {
  return static_cast<uint32_t>(get_le(header, 28, 4));
}

// The snapshot file of `index` is written and fsynced as `tmp`: unless a
// leader's snapshot was installed meanwhile, it becomes the snapshot and the
// log is compacted behind it.
void finish_snapshot(self_ptr self, uint64_t index, const std::string& tmp, double held_ms,
                     std::chrono::steady_clock::time_point handed) {
  auto& st = self->state;
  st.snapshotting = false;
  if (st.storage.snapshot().metadata().index() != index || index <= st.snapshot_index) {
    std::remove(tmp.c_str());  // superseded by an installed snapshot
    return;
  }
  if (auto f = rename_durably(tmp, st.snapshot_path, "snapshot"))
    fatal("cannot write the snapshot " + st.snapshot_path + ": " + f->message);
  st.snapshot_index = index;
  if (index > st.opts.snapshot_keep && index - st.opts.snapshot_keep >= st.storage.first_index()) {
    auto upto = index - st.opts.snapshot_keep;
    st.storage.compact(upto);
    if (auto f = st.disk->compact(upto)) fatal("cannot compact the log: " + f->message);
    crashpoint("snapshot.after_compact");
  }
  st.stats->snapshot_taken(index);
  std::chrono::duration<double, std::milli> written = std::chrono::steady_clock::now() - handed;
  // held_ms: this actor's own time on it; written_ms: the worker's copy of
  // the database into the snapshot file, its write and fsync, while this
  // actor ran on.
  logging::info("raft", "snapshot taken, log compacted",
                {{"index", index},
                 {"first_index", st.storage.first_index()},
                 {"bytes", st.snapshot_bytes},
                 {"held_ms", held_ms},
                 {"written_ms", written.count()}});
}

struct transfer {
  uint64_t to = 0;
  pbr::Message msg;  // the core's MSG_SNAP, sent after the last piece
  std::string path;  // a link to the snapshot file being sent
  uint64_t size = 0;
  std::chrono::steady_clock::time_point began;
};

void end_transfer(const self_ptr& self, const std::shared_ptr<transfer>& t, bool ok,
                  const std::string& why) {
  std::remove(t->path.c_str());
  self->state.snapshots_sent.emplace_back(t->to, ok);
  schedule_flush(self);
  if (ok) return;
  logging::warn("raft", "snapshot not sent; the leader tries again",
                {{"to", t->to}, {"index", t->msg.snapshot().metadata().index()}, {"error", why}});
}

// Sends the piece at `offset` and, once the peer has it, the next one; after
// the last, the MSG_SNAP itself (over the same connection, so after them).
void send_piece(self_ptr self, replicated_log_actor peer, std::shared_ptr<transfer> t,
                uint64_t offset) {
  std::string bytes;
  if (auto f = read_file_piece(t->path, offset, self->state.opts.snapshot_piece, bytes))
    return end_transfer(self, t, false, f->message);
  bool last = offset + bytes.size() >= t->size;
  const auto& meta = t->msg.snapshot().metadata();
  self->request(peer, piece_timeout, snapshot_atom::value, self->state.opts.self.raft_id(),
                meta.term(), meta.index(), offset, std::move(bytes), last)
      .then(
          [self, peer, t, last](uint64_t received) {
            if (!last) return send_piece(self, peer, t, received);
            self->send(peer, raft_atom::value, wrap(std::move(t->msg)));
            std::chrono::duration<double> took = std::chrono::steady_clock::now() - t->began;
            logging::info("raft", "snapshot sent",
                          {{"to", t->to},
                           {"index", t->msg.snapshot().metadata().index()},
                           {"bytes", t->size},
                           {"seconds", took.count()}});
            end_transfer(self, t, true, {});
          },
          [self, t](caf::error& e) { end_transfer(self, t, false, to_string(e)); });
}

// The detached worker that writes the snapshot file `tmp` from the
// Raft snapshot `snap` and the database copy `db` (removed after): answers
// one request with the error, empty when the file is written and fsynced.
caf::behavior snapshot_writer(caf::event_based_actor* w, std::string snap, std::string db,
                              std::string tmp) {
  return {[w, snap, db, tmp](snapshot_atom) -> std::string {
    w->quit();
    crashpoint("snapshot", "before_write");
    auto f = write_snapshot_file(tmp, snap, db);
    std::remove(db.c_str());
    if (f) return f->message;
    crashpoint("snapshot", "after_temp_fsync");
    return {};
  }};
}

}  // namespace

void learn_members(const self_ptr& self, const pbr::Snapshot& snap) {
  v1::SnapshotData data;
  if (!data.ParseFromString(snap.data())) return;
  for (const auto& m : data.members()) learn_member(self, m);
}

// Compaction: when raft::snapshot_due says so (every snapshot_threshold
// applied entries, and once the state is large only after the log grew by
// half of it), a consistent copy of the state database becomes the Raft
// snapshot, and the log before it (but the last snapshot_keep entries) is
// dropped, in memory and on disk.
//
// Nothing slow runs on this actor's thread, which also sends the leader's
// heartbeats: the state machine copies its database to
// DATA/raft-snapshot.bin.taken.db (VACUUM INTO, on its own thread); a
// detached worker streams that copy into the snapshot file
// raft-snapshot.bin.taken.tmp and fsyncs it (finish_snapshot); only the
// rename over DATA/raft-snapshot.bin and the directory's fsync, which make
// it the snapshot, run here.  The log is compacted only after that rename
// is durable.
void maybe_snapshot(self_ptr self) {
  auto& st = self->state;
  if (st.snapshotting ||
      !raft::snapshot_due({st.applied, st.snapshot_index, st.opts.snapshot_threshold,
                           st.bytes_since_snapshot, st.snapshot_bytes}))
    return;
  st.snapshotting = true;
  auto conf = st.node->conf_state();
  auto index = st.applied;
  auto db = st.snapshot_path + ".taken.db";
  self->request(st.machine, caf::infinite, snapshot_atom::value, db)
      .then([self, conf, index, db](uint64_t applied) {
        auto began = std::chrono::steady_clock::now();
        auto& st = self->state;
        if (applied != index || index <= st.snapshot_index) {  // a snapshot came in meanwhile
          std::remove(db.c_str());
          st.snapshotting = false;
          return;
        }
        std::error_code ec;
        st.snapshot_bytes = std::filesystem::file_size(db, ec);
        st.bytes_since_snapshot = 0;
        v1::SnapshotData data;  // the members; the database stays in its file
        for (const auto& [id, info] : st.members) *data.add_members() = info;
        if (st.storage.create_snapshot(index, conf, data.SerializeAsString()) !=
            raft::storage_error::none) {
          std::remove(db.c_str());
          st.snapshotting = false;
          return;
        }
        auto snap = st.storage.snapshot().SerializeAsString();
        auto tmp = st.snapshot_path + ".taken.tmp";
        // (its inputs as spawn arguments: CAF 0.17 spawning a function
        // without any trips UBSan, issue 32)
        auto writer = self->spawn<caf::detached>(snapshot_writer, snap, db, tmp);
        auto handed = std::chrono::steady_clock::now();
        double held_ms = std::chrono::duration<double, std::milli>(handed - began).count();
        self->request(writer, caf::infinite, snapshot_atom::value)
            .then(
                [self, index, tmp, held_ms, handed](const std::string& error) {
                  if (!error.empty()) fatal("cannot write the snapshot " + tmp + ": " + error);
                  finish_snapshot(self, index, tmp, held_ms, handed);
                },
                [tmp](caf::error& e) {
                  fatal("the snapshot writer for " + tmp + " stopped: " + to_string(e));
                });
      },
      // The state machine made no copy (a full disk): the log keeps every
      // entry and a later apply tries again.  (Without this handler CAF
      // 0.17 would end this actor.)
      [self, db](caf::error& e) {
        std::remove(db.c_str());
        self->state.snapshotting = false;
        logging::warn("raft", "the state machine made no copy for a snapshot; trying again later",
                      {{"error", to_string(e)}});
      });
}

// The file sent is a link to DATA/raft-snapshot.bin made now: a snapshot
// taken meanwhile replaces the name, not what this transfer reads.  A file
// that is not (yet) the core's snapshot (taken, not yet renamed into
// place) fails the transfer; the core asks again.
void send_snapshot(self_ptr self, replicated_log_actor peer, pbr::Message m) {
  auto& st = self->state;
  auto t = std::make_shared<transfer>();
  t->to = m.to();
  t->began = std::chrono::steady_clock::now();
  t->path = st.snapshot_path + ".send." + std::to_string(++st.transfers);
  t->msg = std::move(m);
  std::remove(t->path.c_str());
  if (::link(st.snapshot_path.c_str(), t->path.c_str()) != 0)
    return end_transfer(self, t, false, "cannot link " + st.snapshot_path + " to " + t->path);
  auto parts = read_snapshot_file_parts(t->path, false);
  if (!parts) return end_transfer(self, t, false, parts.error().message);
  pbr::Snapshot on_disk;
  if (!on_disk.ParseFromString(parts->snapshot) ||
      on_disk.metadata().index() != t->msg.snapshot().metadata().index() ||
      on_disk.metadata().term() != t->msg.snapshot().metadata().term())
    return end_transfer(self, t, false, "the snapshot file is not yet the one to send");
  t->size = parts->size();
  send_piece(self, peer, t, 0);
}

caf::result<uint64_t> receive_piece(self_ptr self, uint64_t from, uint64_t term, uint64_t index,
                                    uint64_t offset, const std::string& bytes, bool last) {
  if (!from_proven(self))
    return make_error(errc::refused,
                      "this server has not seen a proof that the sender holds a server "
                      "certificate (tls/proof.hpp); it sends one first");
  auto& st = self->state;
  auto& in = st.incoming;
  switch (raft::judge_piece(in, from, index, term, offset)) {
    case raft::piece_verdict::start:
      in = {from, index, term, 0, false};
      st.incoming_crc = 0;
      st.incoming_header.clear();
      break;
    case raft::piece_verdict::next:
      break;
    case raft::piece_verdict::refuse:
      return make_error(errc::refused, "snapshot piece at " + std::to_string(offset) +
                                           " does not follow the pieces received; start again");
  }
  auto path = incoming_path(self);
  if (auto f = write_file_piece(path, offset, bytes, last)) {
    in = {};
    return make_error(errc::internal, f->message);
  }
  // The checksum covers everything after the header (snapshot_file.hpp).
  std::string_view rest(bytes);
  if (st.incoming_header.size() < snapshot_file_header) {
    auto take = std::min(rest.size(), snapshot_file_header - st.incoming_header.size());
    st.incoming_header.append(rest.substr(0, take));
    rest.remove_prefix(take);
  }
  st.incoming_crc = crc32(rest, st.incoming_crc);
  in.offset += bytes.size();
  if (!last) return in.offset;
  auto parts = read_snapshot_file_parts(path, false);
  pbr::Snapshot snap;
  std::string wrong;
  if (!parts)
    wrong = parts.error().message;
  else if (st.incoming_header.size() < snapshot_file_header ||
           header_crc(st.incoming_header) != st.incoming_crc)
    wrong = damage_message(path, "its checksum does not match its contents");
  else if (!snap.ParseFromString(parts->snapshot) || snap.metadata().index() != index ||
           snap.metadata().term() != term)
    wrong = damage_message(path, "it is not the snapshot announced");
  if (!wrong.empty()) {
    in = {};
    return make_error(errc::invalid, "the snapshot received is not whole: " + wrong);
  }
  in.complete = true;
  return in.offset;
}

bool snapshot_arrived(const self_ptr& self, const pbr::Message& m) {
  const auto& meta = m.snapshot().metadata();
  if (raft::pieces_arrived(self->state.incoming, m.from(), meta.index(), meta.term())) return true;
  logging::debug("raft", "a snapshot message without its file; dropped",
                 {{"from", m.from()}, {"index", meta.index()}});
  return false;
}

void place_received_snapshot(const self_ptr& self, const pbr::Snapshot& snap) {
  auto& st = self->state;
  crashpoint("install", "before_write");
  // snapshot_arrived let the core take the message only with its file, and
  // nothing else ran in between.
  if (!st.incoming.complete || st.incoming.index != snap.metadata().index())
    fatal("the leader's snapshot " + std::to_string(snap.metadata().index()) +
          " is to be installed but its file did not arrive");
  crashpoint("install", "after_temp_fsync");  // each piece's write, the last fsynced
  if (auto f = rename_durably(incoming_path(self), st.snapshot_path, "install"))
    fatal("cannot write the snapshot " + st.snapshot_path + ": " + f->message);
  st.incoming = {};
}

// The state machine installs from a link to the snapshot file, which stays
// what it is even when a later snapshot replaces DATA/raft-snapshot.bin
// before the install runs; the state machine removes the link.
void install_snapshot(const self_ptr& self, const pbr::Snapshot& snap) {
  auto& st = self->state;
  st.storage.apply_snapshot(snap);
  learn_members(self, snap);
  auto link_path = st.snapshot_path + ".install." + std::to_string(snap.metadata().index());
  std::remove(link_path.c_str());
  if (::link(st.snapshot_path.c_str(), link_path.c_str()) != 0)
    fatal("cannot link " + st.snapshot_path + " to " + link_path);
  auto parts = read_snapshot_file_parts(link_path, false);
  if (!parts) fatal(parts.error().message);
  st.snapshot_bytes = parts->db_length;
  self->send(st.machine, install_atom::value, link_path);
  st.applied = st.snapshot_index = snap.metadata().index();
  st.bytes_since_snapshot = 0;
  st.stats->snapshot_taken(st.snapshot_index);
  logging::info("raft", "installed the leader's snapshot",
                {{"index", st.snapshot_index}, {"bytes", st.snapshot_bytes}});
}

void load_snapshot(const self_ptr& self) {
  auto& st = self->state;
  // What a transfer, an install or a snapshot being taken left behind when
  // berthd stopped: nothing relies on it.
  auto dir = std::filesystem::path(st.snapshot_path).parent_path();
  auto name = std::filesystem::path(st.snapshot_path).filename().string();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    auto n = e.path().filename().string();
    if (n.size() > name.size() && n.compare(0, name.size() + 1, name + ".") == 0)
      std::filesystem::remove(e.path(), ec);
  }
  if (!std::filesystem::exists(st.snapshot_path)) return;
  // check_data_dir checked it before berthd started; a failure now is new.
  auto snap = read_snapshot_of(st.snapshot_path);
  if (!snap) fatal(snap.error().message);
  auto parts = read_snapshot_file_parts(st.snapshot_path, false);
  if (!parts) fatal(parts.error().message);
  st.snapshot_bytes = parts->db_length;
  st.storage.apply_snapshot(*snap);
  learn_members(self, *snap);
  st.snapshot_index = snap->metadata().index();
}

}  // namespace berth::raft_log_detail
