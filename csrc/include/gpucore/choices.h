#pragma once
// Named choices (config values such as "adamw" or "cosine") and their enum values, one table per
// enum, read both ways; an unknown name is a ConfigError that lists the valid ones.
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "gpucore/errors.h"

namespace gpucore {

template <typename Enum>
using Choices = std::initializer_list<std::pair<const char*, Enum>>;

template <typename Enum>
Enum parse_choice(const std::string& key, const std::string& value, Choices<Enum> choices, const std::string& also = "") {
  std::string valid;
  for (const auto& [name, choice] : choices) {
    if (value == name) return choice;
    valid += (valid.empty() ? "" : ", ") + std::string(name);
  }
  throw ConfigError(key + " '" + value + "' is not valid; use one of " + valid + also);
}

// The names of a table, in its order: what the Python config offers as the key's choices (_C.config_choices).
template <typename Enum>
std::vector<std::string> choice_names(Choices<Enum> choices) {
  std::vector<std::string> names;
  for (const auto& [name, choice] : choices) names.emplace_back(name);
  return names;
}

template <typename Enum>
std::string choice_name(Enum value, Choices<Enum> choices) {
  for (const auto& [name, choice] : choices) {
    if (choice == value) return name;
  }
  return "?";
}

}  // namespace gpucore
