#include "log/log.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace berth::logging {

namespace {

constexpr int off = 5;
constexpr size_t ring_capacity = 2048;

spdlog::level::level_enum to_spdlog(level l) {
  switch (l) {
    case level::trace: return spdlog::level::trace;
    case level::debug: return spdlog::level::debug;
    case level::info: return spdlog::level::info;
    case level::warn: return spdlog::level::warn;
    default: return spdlog::level::err;
  }
}

level from_spdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return level::trace;
    case spdlog::level::debug: return level::debug;
    case spdlog::level::info: return level::info;
    case spdlog::level::warn: return level::warn;
    default: return level::error;
  }
}

// The recent lines, numbered, for `berth monitor`.
class ring_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  recent after(uint64_t after, logging::level min, size_t tail) {
    std::lock_guard<std::mutex> lock(mutex_);
    recent out;
    out.last = lines_.empty() ? 0 : lines_.back().seq;
    if (after > 0 && !lines_.empty() && lines_.front().seq > after + 1)
      out.dropped = lines_.front().seq - after - 1;
    for (const auto& l : lines_)
      if (l.seq > after && l.lvl >= min) out.lines.push_back(l.text);
    if (after == 0 && out.lines.size() > tail)
      out.lines.erase(out.lines.begin(), out.lines.end() - static_cast<std::ptrdiff_t>(tail));
    return out;
  }

  void on_line(std::function<void()> wake) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_ = std::move(wake);
  }

  std::atomic<bool> armed{false};

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string text(buf.data(), buf.size());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    lines_.push_back({++seq_, from_spdlog(msg.level), std::move(text)});
    if (lines_.size() > ring_capacity) lines_.pop_front();
    if (armed.load(std::memory_order_relaxed) && wake_) wake_();
  }
  void flush_() override {}

 private:
  struct line {
    uint64_t seq;
    logging::level lvl;
    std::string text;
  };
  std::deque<line> lines_;
  uint64_t seq_ = 0;
  std::function<void()> wake_;
};

struct state {
  std::shared_ptr<spdlog::logger> logger;
  std::shared_ptr<ring_sink> ring;
  bool json = false;
};

// Set once by setup() before any other thread logs; never freed (berthd
// ends with _Exit).
state* g = nullptr;
std::atomic<int> configured{off};
std::atomic<int> monitor_level{off};
std::atomic<int64_t> monitor_until{0};  // steady_clock ticks

int64_t ticks(std::chrono::steady_clock::time_point t) { return t.time_since_epoch().count(); }

bool bare(std::string_view v) {
  if (v.empty()) return false;
  for (unsigned char c : v)
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return false;
  return true;
}

// Escapes quotes, backslashes and control characters (a plugin's message
// may span lines; a line of the log never does).
void escaped(std::string& out, std::string_view v) {
  static const char* hex = "0123456789abcdef";
  for (unsigned char c : v) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
}

void quoted(std::string& out, std::string_view v) {
  out += '"';
  escaped(out, v);
  out += '"';
}

std::string text_line(level l, std::string_view component, std::string_view message, fields f) {
  std::string out;
  out.reserve(96);
  out += level_name(l);
  out += ' ';
  out += component;
  out += ' ';
  escaped(out, message);
  for (const auto& x : f) {
    out += ' ';
    out += x.key;
    out += '=';
    if (bare(x.value))
      out += x.value;
    else
      quoted(out, x.value);
  }
  return out;
}

std::string json_line(level l, std::string_view component, std::string_view message, fields f) {
  std::string out;
  out.reserve(128);
  out += "\"level\":\"";
  out += level_name(l);
  out += "\",\"component\":";
  quoted(out, component);
  out += ",\"message\":";
  quoted(out, message);
  for (const auto& x : f) {
    out += ',';
    quoted(out, x.key);
    out += ':';
    quoted(out, x.value);
  }
  return out;
}

}  // namespace

std::string_view level_name(level l) {
  switch (l) {
    case level::trace: return "trace";
    case level::debug: return "debug";
    case level::info: return "info";
    case level::warn: return "warn";
    default: return "error";
  }
}

std::optional<level> parse_level(std::string_view name) {
  if (name == "trace") return level::trace;
  if (name == "debug") return level::debug;
  if (name == "info") return level::info;
  if (name == "warn" || name == "warning") return level::warn;
  if (name == "error") return level::error;
  return std::nullopt;
}

void setup(level min, bool json) {
  if (g != nullptr) return;
  auto* s = new state;
  s->json = json;
  auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  err->set_level(to_spdlog(min));
  s->ring = std::make_shared<ring_sink>();
  s->ring->set_level(spdlog::level::trace);
  s->logger = std::make_shared<spdlog::logger>(
      "berthd", spdlog::sinks_init_list{std::static_pointer_cast<spdlog::sinks::sink>(err),
                                        std::static_pointer_cast<spdlog::sinks::sink>(s->ring)});
  s->logger->set_level(spdlog::level::trace);
  s->logger->set_pattern(json ? R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ",%v})" : "%Y-%m-%dT%H:%M:%S.%eZ %v",
                         spdlog::pattern_time_type::utc);
  g = s;
  configured = static_cast<int>(min);
}

bool enabled(level l) {
  auto v = static_cast<int>(l);
  if (v >= configured.load(std::memory_order_relaxed)) return true;
  return v >= monitor_level.load(std::memory_order_relaxed) &&
         ticks(std::chrono::steady_clock::now()) < monitor_until.load(std::memory_order_relaxed);
}

void write(level l, std::string_view component, std::string_view message, fields f) {
  if (g == nullptr || !enabled(l)) return;
  auto payload = g->json ? json_line(l, component, message, f) : text_line(l, component, message, f);
  g->logger->log(to_spdlog(l), spdlog::string_view_t(payload.data(), payload.size()));
}

recent lines_after(uint64_t after, level min, size_t tail) {
  if (g == nullptr) return {};
  return g->ring->after(after, min, tail);
}

void want(level min, std::chrono::steady_clock::time_point until) {
  auto now = ticks(std::chrono::steady_clock::now());
  auto v = static_cast<int>(min);
  // Several monitors: the lowest level any of them still streams at.
  if (monitor_until.load() <= now || v < monitor_level.load()) monitor_level = v;
  if (ticks(until) > monitor_until.load()) monitor_until = ticks(until);
}

void on_line(std::function<void()> wake) {
  if (g != nullptr) g->ring->on_line(std::move(wake));
}

void arm(bool armed) {
  if (g != nullptr) g->ring->armed = armed;
}

}  // namespace berth::logging
