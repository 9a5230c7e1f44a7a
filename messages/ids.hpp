// Ids a caller makes before it sends a request, so that the same request
// sent again after a lost answer finds what the first one made: a token's
// accessor id and secret, an alloc's id, a snapshot's name.
#pragma once

#include <string>
#include <string_view>

namespace berth {

// A random UUID (version 4) from the kernel's random source.
std::string random_uuid();
// A random alloc id: 12 hex digits, as berthd makes them.
std::string random_alloc_id();
// 12 hex digits of a 64-bit FNV-1a digest of `text`: the same text (an
// Idempotency-Key) always gives the same id.  Pure.
std::string id_of_key(std::string_view text);

}  // namespace berth
