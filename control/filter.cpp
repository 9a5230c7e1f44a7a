#include "control/filter.hpp"

#include <cctype>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

namespace berth {

using nlohmann::json;

struct filter_node {
  enum kind_t { all, any, negate, equal, not_equal, contains, in, empty } kind = all;
  std::vector<std::shared_ptr<const filter_node>> children;  // all, any, negate
  std::vector<std::string> path;                            // the selector
  std::string value;
};

namespace {

using node_ptr = std::shared_ptr<const filter_node>;

struct token {
  enum kind_t { word, text, lparen, rparen, op, end } kind = end;
  std::string s;
  size_t at = 0;
};

struct parser {
  const std::string& src;
  std::vector<token> toks;
  size_t pos = 0;
  std::string error;

  bool lex() {
    size_t i = 0;
    while (i < src.size()) {
      char c = src[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (c == '(' || c == ')') {
        toks.push_back({c == '(' ? token::lparen : token::rparen, std::string(1, c), i++});
      } else if ((c == '=' || c == '!') && i + 1 < src.size() && src[i + 1] == '=') {
        toks.push_back({token::op, src.substr(i, 2), i});
        i += 2;
      } else if (c == '"') {
        size_t start = i++;
        std::string s;
        while (i < src.size() && src[i] != '"') {
          if (src[i] == '\\' && i + 1 < src.size()) ++i;
          s += src[i++];
        }
        if (i >= src.size()) return fail(start, "a closing \" for the text started here");
        ++i;
        toks.push_back({token::text, s, start});
      } else {
        size_t start = i;
        while (i < src.size() && !std::isspace(static_cast<unsigned char>(src[i])) &&
               src[i] != '(' && src[i] != ')' && src[i] != '"' &&
               !((src[i] == '=' || src[i] == '!') && i + 1 < src.size() && src[i + 1] == '='))
          ++i;
        toks.push_back({token::word, src.substr(start, i - start), start});
      }
    }
    toks.push_back({token::end, "", src.size()});
    return true;
  }

  bool fail(size_t at, const std::string& expected) {
    if (error.empty())
      error = "--filter '" + src + "': at column " + std::to_string(at + 1) + " expected " +
              expected;
    return false;
  }

  const token& peek(size_t ahead = 0) const {
    return toks[std::min(pos + ahead, toks.size() - 1)];
  }
  bool keyword(const std::string& w, size_t ahead = 0) const {
    return peek(ahead).kind == token::word && peek(ahead).s == w;
  }

  static bool is_keyword(const std::string& s) {
    return s == "and" || s == "or" || s == "not" || s == "in" || s == "contains" || s == "is" ||
           s == "empty";
  }

  bool selector(std::vector<std::string>& path) {
    const auto& t = peek();
    if (t.kind != token::word || is_keyword(t.s)) return fail(t.at, "a field name (e.g. plugin_id)");
    size_t start = 0;
    for (;;) {
      auto dot = t.s.find('.', start);
      auto part = t.s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (part.empty()) return fail(t.at, "a field name between dots");
      path.push_back(part);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    ++pos;
    return true;
  }

  bool value(std::string& out) {
    const auto& t = peek();
    if (t.kind == token::text || (t.kind == token::word && !is_keyword(t.s))) {
      out = t.s;
      ++pos;
      return true;
    }
    return fail(t.at, "a value (\"text\", a word or a number)");
  }

  node_ptr make(filter_node::kind_t k, std::vector<node_ptr> children = {}) {
    auto n = std::make_shared<filter_node>();
    n->kind = k;
    n->children = std::move(children);
    return n;
  }

  node_ptr negated(node_ptr n) { return make(filter_node::negate, {std::move(n)}); }

  node_ptr match() {
    // VALUE in SELECTOR
    if ((peek().kind == token::text || peek().kind == token::word) &&
        (keyword("in", 1) || (keyword("not", 1) && keyword("in", 2)))) {
      auto n = std::make_shared<filter_node>();
      n->kind = filter_node::in;
      value(n->value);
      bool neg = keyword("not");
      pos += neg ? 2 : 1;
      if (!selector(n->path)) return nullptr;
      return neg ? negated(n) : n;
    }
    auto n = std::make_shared<filter_node>();
    if (!selector(n->path)) return nullptr;
    const auto& t = peek();
    bool neg = false;
    if (t.kind == token::op) {
      n->kind = t.s == "==" ? filter_node::equal : filter_node::not_equal;
      ++pos;
    } else if (keyword("contains") || (keyword("not") && keyword("contains", 1))) {
      neg = keyword("not");
      pos += neg ? 2 : 1;
      n->kind = filter_node::contains;
    } else if (keyword("is")) {
      ++pos;
      if (keyword("not")) {
        neg = true;
        ++pos;
      }
      if (!keyword("empty")) {
        fail(peek().at, "empty (after is / is not)");
        return nullptr;
      }
      ++pos;
      n->kind = filter_node::empty;
      return neg ? negated(n) : n;
    } else {
      fail(t.at, "==, !=, contains, not contains, is empty or is not empty");
      return nullptr;
    }
    if (!value(n->value)) return nullptr;
    return neg ? negated(n) : n;
  }

  node_ptr unary() {
    if (keyword("not")) {
      ++pos;
      auto inner = unary();
      return inner ? negated(inner) : nullptr;
    }
    if (peek().kind == token::lparen) {
      ++pos;
      auto inner = any_of();
      if (!inner) return nullptr;
      if (peek().kind != token::rparen) {
        fail(peek().at, ")");
        return nullptr;
      }
      ++pos;
      return inner;
    }
    return match();
  }

  node_ptr all_of() {
    std::vector<node_ptr> parts;
    do {
      auto p = unary();
      if (!p) return nullptr;
      parts.push_back(p);
    } while (keyword("and") && ++pos);
    return parts.size() == 1 ? parts[0] : make(filter_node::all, std::move(parts));
  }

  node_ptr any_of() {
    std::vector<node_ptr> parts;
    do {
      auto p = all_of();
      if (!p) return nullptr;
      parts.push_back(p);
    } while (keyword("or") && ++pos);
    return parts.size() == 1 ? parts[0] : make(filter_node::any, std::move(parts));
  }
};

std::string text_of(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

// Every value the path reaches (arrays fan out).
void reach(const json& j, const std::vector<std::string>& path, size_t i,
           std::vector<const json*>& out) {
  if (j.is_array()) {
    for (const auto& e : j) reach(e, path, i, out);
    return;
  }
  if (i == path.size()) {
    out.push_back(&j);
    return;
  }
  if (!j.is_object()) return;
  auto it = j.find(path[i]);
  if (it != j.end()) reach(*it, path, i + 1, out);
}

bool eval(const filter_node& n, const json& obj) {
  switch (n.kind) {
    case filter_node::all:
      for (const auto& c : n.children)
        if (!eval(*c, obj)) return false;
      return true;
    case filter_node::any:
      for (const auto& c : n.children)
        if (eval(*c, obj)) return true;
      return false;
    case filter_node::negate:
      return !eval(*n.children[0], obj);
    default:
      break;
  }
  std::vector<const json*> values;
  if (n.path.empty()) return false;
  // An array selected as a whole (e.g. `command is empty`) is one value.
  const json* at = &obj;
  bool whole = true;
  for (const auto& p : n.path) {
    if (!at->is_object() || !at->contains(p)) {
      whole = false;
      break;
    }
    at = &(*at)[p];
  }
  if (n.kind == filter_node::empty) {
    if (!whole) return true;  // a field that is absent is empty
    return at->is_null() || (at->is_string() && at->get<std::string>().empty()) ||
           ((at->is_array() || at->is_object()) && at->empty());
  }
  reach(obj, n.path, 0, values);
  for (const auto* v : values) {
    switch (n.kind) {
      case filter_node::equal:
        if (text_of(*v) == n.value) return true;
        break;
      case filter_node::not_equal:
        if (text_of(*v) != n.value) return true;
        break;
      case filter_node::in:
      case filter_node::contains:
        if (v->is_string() && v->get<std::string>().find(n.value) != std::string::npos)
          return true;
        if (v->is_object() && v->contains(n.value)) return true;
        if (!v->is_string() && !v->is_object() && text_of(*v) == n.value) return true;
        break;
      default:
        break;
    }
  }
  return false;
}

}  // namespace

bool filter::matches(const json& object) const { return !root_ || eval(*root_, object); }

std::variant<filter, failure> parse_filter(const std::string& expr) {
  filter f;
  bool blank = true;
  for (char c : expr) blank = blank && std::isspace(static_cast<unsigned char>(c));
  if (blank) return f;
  parser p{expr, {}, 0, {}};
  if (!p.lex()) return failure{errc::invalid, p.error};
  auto root = p.any_of();
  if (root && p.peek().kind != token::end) {
    p.fail(p.peek().at, "and, or, or the end of the filter");
    root = nullptr;
  }
  if (!root) return failure{errc::invalid, p.error};
  f.root_ = std::move(root);
  return f;
}

}  // namespace berth
