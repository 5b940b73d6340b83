// PluginRegistry: name → creator, shared by WeightTransferEngineFactory (worker side) and
// WeightTransferTrainerFactory (trainer side). The C++ form of vLLM's lazy registration: a
// backend is registered either with a creator function, or with a shared library and the name
// of an `extern "C"` creator inside it, which is dlopen'ed only when the backend is first used.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "protocol/errors.hpp"
#include "protocol/shared_library.hpp"

namespace hotswap::protocol {

template <class Signature>
class PluginRegistry;

template <class Result, class... Args>
class PluginRegistry<Result(Args...)> {
 public:
  using Creator = std::function<Result(Args...)>;
  using CreatorFunction = Result (*)(Args...);  // what a plugin's symbol must be

  // `entry_kind` opens vLLM's duplicate message ("Weight transfer engine 'x' is already
  // registered."); `available_label` finishes its unknown-name one ("Available engines: [...]").
  PluginRegistry(std::string entry_kind, std::string available_label)
      : kind_(std::move(entry_kind)), label_(std::move(available_label)) {}

  void register_engine(const std::string& name, Creator creator) {
    std::lock_guard lock(mutex_);
    check_new(name);
    entries_.push_back(Entry{name, std::move(creator), {}, {}});
  }

  void register_engine(const std::string& name, std::string library_path, std::string symbol) {
    std::lock_guard lock(mutex_);
    check_new(name);
    entries_.push_back(Entry{name, nullptr, std::move(library_path), std::move(symbol)});
  }

  bool contains(const std::string& name) const {
    std::lock_guard lock(mutex_);
    return find(name) != nullptr;
  }

  // Names in registration order.
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& e : entries_)
      out.push_back(e.name);
    return out;
  }

  // The creator for `name`, loading its library on first use. ValueError for an unknown name
  // (vLLM's message, listing what is available); RuntimeError when a library fails to load.
  Creator resolve(const std::string& name) {
    std::lock_guard lock(mutex_);
    Entry* entry = find(name);
    if (entry == nullptr) {
      throw ValueError("Invalid weight transfer backend: " + name + ". Available " + label_ + ": " +
                       python_list());
    }
    if (!entry->creator) {
      try {
        SharedLibrary library(entry->library);
        auto function = reinterpret_cast<CreatorFunction>(library.symbol(entry->symbol));
        entry->creator = function;
        libraries_.push_back(std::move(library));
      } catch (const Error& e) {
        throw RuntimeError("Weight transfer engine '" + name +
                           "' could not be loaded: " + e.what());
      }
    }
    return entry->creator;
  }

 private:
  struct Entry {
    std::string name;
    Creator creator;  // empty until a lazily registered library is loaded
    std::string library;
    std::string symbol;
  };

  Entry* find(const std::string& name) {
    for (auto& e : entries_) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }
  const Entry* find(const std::string& name) const {
    return const_cast<PluginRegistry*>(this)->find(name);
  }

  void check_new(const std::string& name) const {
    if (find(name) != nullptr) {
      throw ValueError(kind_ + " '" + name + "' is already registered.");
    }
  }

  // Python's repr of a list of str, as vLLM prints `list(registry.keys())`.
  std::string python_list() const {
    std::string out = "[";
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (i) out += ", ";
      out += "'" + entries_[i].name + "'";
    }
    return out + "]";
  }

  std::string kind_;
  std::string label_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::vector<SharedLibrary> libraries_;
};

}  // namespace hotswap::protocol
