#include "protocol/curve_key_file.hpp"

#include <fstream>
#include <string_view>

#include "protocol/errors.hpp"

namespace hotswap::protocol {

std::string read_curve_key_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw ValueError("CURVE key file " + path.string() + " cannot be read");
  }
  std::string key;
  in >> key;
  // ZeroMQ's Z85 alphabet (RFC 32).
  constexpr std::string_view kZ85 =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  if (key.size() != 40 || key.find_first_not_of(kZ85) != std::string::npos) {
    throw ValueError("CURVE key file " + path.string() + " must hold a 40-character Z85 key");
  }
  return key;
}

}  // namespace hotswap::protocol
