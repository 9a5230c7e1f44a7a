#include "actors/node_fence.hpp"

namespace berth {

std::optional<failure> leader_fence::load(client_store& store, bool forget) {
  auto read_failed = [&](const failure& f) {
    return failure{errc::internal, "node '" + node_id_ + "' could not read the leader term from " +
                                       store.path() + ": " + f.message +
                                       " (if the file is damaged, see the user guide)"};
  };
  if (forget)
    if (auto f = store.set_leader_term(0)) return read_failed(*f);
  auto term = store.leader_term();
  if (!term) return read_failed(term.error());
  term_ = *term;
  published_->store(term_);
  return std::nullopt;
}

std::optional<failure> leader_fence::admit(client_store& store, uint64_t term) {
  switch (fence(term_, term)) {
    case fence_verdict::accept:
      return std::nullopt;
    case fence_verdict::accept_newer:
      return raise(store, term);
    case fence_verdict::refuse:
      break;
  }
  return failure{errc::refused, "node '" + node_id_ +
                                    "' refuses a request of a deposed leader "
                                    "(term " +
                                    std::to_string(term) +
                                    "; it takes requests of "
                                    "term " +
                                    std::to_string(term_) +
                                    "; if the servers were "
                                    "rebuilt as a new cluster, restart this client with "
                                    "--forget-leader-term)"};
}

std::optional<failure> leader_fence::heard(client_store& store, uint64_t term) {
  if (fence(term_, term) != fence_verdict::accept_newer) return std::nullopt;
  return raise(store, term);
}

std::optional<failure> leader_fence::raise(client_store& store, uint64_t term) {
  if (auto f = store.set_leader_term(term))
    return failure{errc::internal, "node '" + node_id_ + "' could not record leader term " +
                                       std::to_string(term) + " in " + store.path() + ": " +
                                       f->message +
                                       " (check the disk; the request may be retried)"};
  term_ = term;
  published_->store(term_);
  return std::nullopt;
}

}  // namespace berth
