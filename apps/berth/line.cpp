#include "apps/berth/line.hpp"

#include <algorithm>

namespace berth {

std::variant<std::vector<std::string>, failure> split_line(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // distinguishes an empty quoted word ('') from none
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (++i == line.size())
        return failure{errc::invalid, "the line ends with a backslash (nothing to escape)"};
      word += line[i];
    } else if (c == '\'') {
      auto end = line.find('\'', i + 1);
      if (end == std::string::npos)
        return failure{errc::invalid,
                       "unterminated ' quote starting at column " + std::to_string(i + 1)};
      word.append(line, i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      size_t start = i;
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        // As in sh: inside double quotes a backslash escapes only the
        // characters that would otherwise be special there.
        if (line[i] == '\\' && i + 1 < line.size() &&
            std::string("\"\\$`").find(line[i + 1]) != std::string::npos)
          ++i;
        word += line[i];
      }
      if (i == line.size())
        return failure{errc::invalid,
                       "unterminated \" quote starting at column " + std::to_string(start + 1)};
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Options fall through to the parent commands, as in the CLI: `volume
// status --json` is `--json volume status`.
const option_info* find_option(const std::vector<const command_info*>& path,
                               const std::string& word) {
  auto name = word.substr(0, word.find('='));
  for (auto it = path.rbegin(); it != path.rend(); ++it)
    for (const auto& o : (*it)->options)
      if (o.name == name) return &o;
  return nullptr;
}

const command_info* find_subcommand(const command_info& cmd, const std::string& word) {
  for (const auto& sub : cmd.subcommands)
    if (sub.name == word) return &sub;
  return nullptr;
}

const std::vector<std::string>* ids_of_command(const std::string& top, const known_ids& ids) {
  if (top == "volume") return &ids.volumes;
  if (top == "plugin") return &ids.plugins;
  if (top == "node") return &ids.nodes;
  if (top == "alloc") return &ids.allocs;
  return nullptr;
}

}  // namespace

completion complete(const command_info& root, const std::string& before,
                    const std::string& prefix, const known_ids& ids) {
  completion out;
  auto split = split_line(before);
  // Inside an open quote the words before are unknown: offer nothing.
  if (!std::holds_alternative<std::vector<std::string>>(split)) return out;
  const auto& words = std::get<std::vector<std::string>>(split);

  std::vector<const command_info*> path{&root};
  size_t positionals = 0;
  const option_info* pending = nullptr;  // an option still waiting for its value
  bool help = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    if (pending) {
      pending = nullptr;
      continue;
    }
    if (w.size() > 1 && w[0] == '-') {
      auto* o = find_option(path, w);
      if (o && o->takes_value && w.find('=') == std::string::npos) pending = o;
      continue;
    }
    if (i == 0 && w == "help") {
      help = true;
      continue;
    }
    if (auto* sub = find_subcommand(*path.back(), w)) {
      path.push_back(sub);
      continue;
    }
    ++positionals;
  }

  std::vector<std::string> all;
  const auto* cmd = path.back();
  if (pending) {
    if (pending->name == "--node") all = ids.nodes;
    if (pending->name == "--alloc") all = ids.allocs;
    if (pending->name == "--plugin") all = ids.plugins;
    if (pending->name == "--output") out.filenames = true;  // volume init
  } else if (starts_with(prefix, "-")) {
    if (!help)
      for (const auto* c : path)
        for (const auto& o : c->options)
          if (starts_with(o.name, "--")) all.push_back(o.name);
  } else if (!cmd->subcommands.empty()) {
    for (const auto& sub : cmd->subcommands) all.push_back(sub.name);
    if (words.empty()) all.insert(all.end(), {"help", "exit", "quit"});
  } else if (!help && positionals < cmd->positionals.size()) {
    const auto& name = cmd->positionals[positionals];
    if (name == "file") out.filenames = true;
    if (name == "id" && path.size() > 1)
      if (auto* known = ids_of_command(path[1]->name, ids)) all = *known;
    if (name == "node") all = ids.nodes;
    if (name == "volume") all = ids.volumes;  // volume snapshot create, volume modify
    if (name == "plugin") all = ids.plugins;  // volume snapshot delete
  }

  for (auto& c : all)
    if (starts_with(c, prefix)) out.candidates.push_back(std::move(c));
  std::sort(out.candidates.begin(), out.candidates.end());
  out.candidates.erase(std::unique(out.candidates.begin(), out.candidates.end()),
                       out.candidates.end());
  return out;
}

std::string summary(const std::string& description) {
  auto end = description.size();
  for (const char* stop : {" (", ". ", "; ", ": ", ", or ", "\n"})
    end = std::min(end, description.find(stop));
  auto s = description.substr(0, end);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace berth
