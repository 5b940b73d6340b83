#include "trainer_sdk/round_hook.hpp"

#include <array>
#include <memory>

namespace hotswap::trainer_sdk {
namespace {

constexpr std::array<std::pair<RoundPoint, std::string_view>, 4> kNames{{
    {RoundPoint::kInit, "init"},
    {RoundPoint::kStarted, "start"},
    {RoundPoint::kMidUpdate, "update"},
    {RoundPoint::kBeforeFinish, "finish"},
}};

std::unique_ptr<RoundHook>& installed() {
  static std::unique_ptr<RoundHook> hook;
  return hook;
}

}  // namespace

std::string_view round_point_name(RoundPoint point) {
  for (const auto& [p, name] : kNames) {
    if (p == point) return name;
  }
  return "?";
}

std::optional<RoundPoint> round_point_from_name(std::string_view name) {
  for (const auto& [p, n] : kNames) {
    if (n == name) return p;
  }
  return std::nullopt;
}

void set_round_hook(RoundHook hook) {
  installed() = hook ? std::make_unique<RoundHook>(std::move(hook)) : nullptr;
}

void reach(RoundPoint point) {
  if (const auto& hook = installed()) (*hook)(point);
}

}  // namespace hotswap::trainer_sdk
