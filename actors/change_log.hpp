// The operator's log of committed changes: what one applied change did to a
// volume (registered, claimed, a release step, released, deregistered), a
// plugin (instances added or removed, health), a node (down, back) or an
// alloc (its state), one line each with the ids and the entry's index.
// Called by the leader for every change it applies (so each committed
// change is logged once, by the server that leads).  Never logs secrets,
// parameters, contexts or mount flags.
#pragma once

#include <cstdint>

#include "control/catalog.hpp"

namespace berth {

void log_change(const applied_change& a, uint64_t index);

}  // namespace berth
