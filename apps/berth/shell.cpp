#include "apps/berth/shell.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include <readline/history.h>
#include <readline/readline.h>

#include "apps/berth/client.hpp"
#include "apps/berth/commands.hpp"
#include "apps/berth/line.hpp"

namespace berth {

namespace {

constexpr int history_lines = 1000;  // kept in memory and in the file

// What the completion hooks need.  readline's hooks are plain functions
// without a user pointer, hence one shell at a time, reached through here.
struct shell_state {
  command_info tree;
  known_ids ids;
  std::vector<std::string> matches;  // of the completion in progress
};
shell_state* current = nullptr;

char* next_match(const char*, int state) {
  static size_t next = 0;
  if (state == 0) next = 0;
  if (next >= current->matches.size()) return nullptr;
  // readline frees the matches with free().
  return strdup(current->matches[next++].c_str());
}

char** attempt_completion(const char* text, int start, int) {
  auto c = complete(current->tree, std::string(rl_line_buffer, start), text, current->ids);
  if (c.filenames) return nullptr;  // readline's default: file names
  rl_attempted_completion_over = 1;
  current->matches = std::move(c.candidates);
  return rl_completion_matches(text, next_match);
}

std::optional<v1::Response> ask(client& c, const v1::Request& req) {
  auto result = c.call(req);
  auto* resp = std::get_if<v1::Response>(&result);
  if (!resp || resp->error().code() != v1::OK) return std::nullopt;
  return std::move(*resp);
}

// Asks the server who it is (for the prompt) and which ids it knows (for
// completion; unchanged when it does not answer).  Returns the prompt.
std::string refresh(client& c, known_ids& ids) {
  std::string prompt = "berth " + c.address();
  v1::Request status;
  status.mutable_agent_status();
  auto result = c.call(status);
  if (std::holds_alternative<failure>(result)) return prompt + " (unreachable)> ";
  const auto& resp = std::get<v1::Response>(result);
  // An older berthd does not know agent_status: no role then.
  if (resp.error().code() == v1::OK)
    prompt += resp.agent().leader() ? " (leader)" : " (follower)";

  v1::Request req;
  req.mutable_volume_list();  // every namespace
  if (auto r = ask(c, req)) {
    ids.volumes.clear();
    ids.allocs.clear();
    for (const auto& v : r->volumes()) {
      ids.volumes.push_back(v.id());
      for (const auto& claim : v.claims()) ids.allocs.push_back(claim.alloc_id());
    }
  }
  req.mutable_alloc_list();  // every namespace
  if (auto r = ask(c, req))
    for (const auto& a : r->allocs()) ids.allocs.push_back(a.id());
  req.mutable_plugin_list();
  if (auto r = ask(c, req)) {
    ids.plugins.clear();
    for (const auto& p : r->plugins()) ids.plugins.push_back(p.id());
  }
  req.mutable_node_list();
  if (auto r = ask(c, req)) {
    ids.nodes.clear();
    for (const auto& n : r->nodes()) ids.nodes.push_back(n.id());
  }
  return prompt + "> ";
}

void leaves(const command_info& cmd, const std::string& path,
            std::vector<std::pair<std::string, std::string>>& out) {
  if (cmd.subcommands.empty()) out.emplace_back(path, summary(cmd.description));
  for (const auto& sub : cmd.subcommands)
    leaves(sub, path.empty() ? sub.name : path + " " + sub.name, out);
}

void print_commands(const command_info& tree) {
  std::vector<std::pair<std::string, std::string>> lines;
  leaves(tree, "", lines);
  lines.emplace_back("help [COMMAND]", "List the commands, or show one command's options");
  lines.emplace_back("exit, quit", "Leave the shell (or Ctrl-D)");
  size_t width = 0;
  for (const auto& [name, what] : lines) width = std::max(width, name.size());
  for (const auto& [name, what] : lines)
    std::cout << "  " << name << std::string(width - name.size() + 2, ' ') << what << "\n";
}

std::string history_file() {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.berth_history" : "";
}

}  // namespace

int run_shell(const shell_options& opts) {
  client c(opts.address, opts.timeout_seconds);
  shell_state state{command_tree(), {}, {}};
  // `shell` inside the shell would only be refused: do not offer it.
  auto& subs = state.tree.subcommands;
  subs.erase(std::remove_if(subs.begin(), subs.end(),
                            [](const command_info& s) { return s.name == "shell"; }),
             subs.end());
  current = &state;

  rl_readline_name = "berth";
  rl_attempted_completion_function = attempt_completion;
  // Words break at blanks only: ids may contain '.', and "--alloc=" stays
  // one word.
  static char blanks[] = " \t\n";
  rl_completer_word_break_characters = blanks;

  auto history = history_file();
  stifle_history(history_lines);
  if (!history.empty()) read_history(history.c_str());

  int last = exit_ok;
  for (;;) {
    auto prompt = refresh(c, state.ids);
    std::unique_ptr<char, decltype(&std::free)> input(readline(prompt.c_str()), &std::free);
    if (!input) {  // Ctrl-D
      std::cout << "\n";
      break;
    }
    std::string line = input.get();
    auto split = split_line(line);
    if (auto* error = std::get_if<failure>(&split)) {
      std::cerr << "Error: " << error->message << "\n";
      last = exit_usage;
      continue;
    }
    auto words = std::get<std::vector<std::string>>(std::move(split));
    if (words.empty()) continue;
    // Repeated lines are kept once, as bash's ignoredups does.
    if (history_length == 0 || line != history_get(history_base + history_length - 1)->line)
      add_history(line.c_str());
    if (words[0] == "exit" || words[0] == "quit") break;
    if (words[0] == "help" && words.size() == 1) {
      print_commands(state.tree);
      last = exit_ok;
      continue;
    }
    std::vector<std::string> args = opts.global_args;
    if (words[0] == "help") {  // help COMMAND: that command's CLI11 help
      args.insert(args.end(), words.begin() + 1, words.end());
      args.push_back("--help");
    } else {
      args.insert(args.end(), words.begin(), words.end());
    }
    last = run_command(args, &c);
    std::cout.flush();
  }
  if (!history.empty()) write_history(history.c_str());
  current = nullptr;
  return last;
}

}  // namespace berth
