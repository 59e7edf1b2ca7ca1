// SPDX-License-Identifier: MIT
// What a usage error prints: the reason, the nearest valid option or
// subcommand when a word was mistyped, the command's one-line usage and
// where its help is. The whole help would bury the reason under thirty lines.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"

namespace rdmx::cli {
namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `typed`, or "" when none is near enough to be a
// likely typo: a few edits (a third of the word) or a prefix of it.
std::string nearest(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, typed.size() / 3) + 1;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(typed, c);
    if (typed.size() >= 3 && c.rfind(typed, 0) == 0) d = std::min<std::size_t>(d, 1);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names = {"--help"};
  for (const CLI::Option* o : cmd.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

bool every(const CLI::App*) { return true; }

std::vector<std::string> subcommand_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* sub : cmd.get_subcommands(every)) names.push_back(sub->get_name());
  return names;
}

// The words the parser could not place, for the command that was being parsed.
std::vector<std::string> unplaced_words(const CLI::App& root, const CLI::App& cmd) {
  std::vector<std::string> words = cmd.remaining();
  if (words.empty()) words = root.remaining(true);
  return words;
}

}  // namespace

int report_usage_error(const CLI::App& root, const CLI::ParseError& e) {
  // The deepest subcommand that was parsed is the one the error concerns.
  const CLI::App* cmd = &root;
  std::string path = root.get_name();
  for (auto subs = cmd->get_subcommands(); !subs.empty(); subs = cmd->get_subcommands()) {
    cmd = subs.back();
    path += " " + cmd->get_name();
  }
  std::fprintf(stderr, "%s: %s\n", path.c_str(), e.what());

  for (const auto& word : unplaced_words(root, *cmd)) {
    std::string suggestion;
    if (word.size() <= 2) continue;  // -x: too short to tell a typo from another program's option
    if (word[0] == '-') {
      suggestion = nearest(word.substr(0, word.find('=')), option_names(*cmd));
    } else {
      suggestion = nearest(word, subcommand_names(*cmd));
    }
    if (!suggestion.empty()) {
      std::fprintf(stderr, "%s: did you mean %s (not %s)?\n", path.c_str(), suggestion.c_str(), word.c_str());
      break;
    }
  }

  // rdmx run takes everything after -- as the program and its arguments;
  // without it an option of the program is read as one of run's.
  const auto& args = invocation_args();
  if (cmd->get_name() == "run" && std::find(args.begin(), args.end(), "--") == args.end()) {
    std::fprintf(stderr, "%s: put -- before the program and its arguments: rdmx run -n 2 -- ./prog [args]\n",
                 path.c_str());
  }
  const auto* formatter = dynamic_cast<const CLI::Formatter*>(cmd->get_formatter().get());
  const std::string usage = formatter != nullptr ? formatter->make_usage(cmd, path) : "Usage: " + path + "\n";
  std::fprintf(stderr, "%sRun '%s --help' for every option%s.\n", usage.c_str(), path.c_str(),
               subcommand_names(*cmd).empty() ? "" : " and subcommand");
  return kExitUsage;
}

}  // namespace rdmx::cli
