// A CURVE key in a file, as hotswap-worker's --curve-secret-key-file and --curve-authorized-keys
// and hotswap-trainer's --curve-* flags take them: one 40-character Z85 key (ZeroMQ's text form
// of 32 bytes), surrounding whitespace ignored. No ZeroMQ here: the file is checked for Z85's
// alphabet and length, the key's use is the socket's.
#pragma once

#include <filesystem>
#include <string>

namespace hotswap::protocol {

// ValueError naming the file and what is wrong with it (unreadable, not 40 Z85 characters).
std::string read_curve_key_file(const std::filesystem::path& path);

}  // namespace hotswap::protocol
