#include "protocol/shared_library.hpp"

#include <dlfcn.h>

#include <utility>

#include "protocol/errors.hpp"

namespace hotswap::protocol {
namespace {
std::string last_dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown dlopen error";
}
}  // namespace

SharedLibrary::SharedLibrary(const std::string& path) : path_(path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle_ == nullptr) {
    throw RuntimeError("cannot load shared library '" + path + "': " + last_dl_error());
  }
}

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : path_(std::move(other.path_)), handle_(std::exchange(other.handle_, nullptr)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    path_ = std::move(other.path_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void* SharedLibrary::symbol(const std::string& name) const {
  dlerror();  // clear a stale error: a symbol's value may legitimately be null
  void* address = dlsym(handle_, name.c_str());
  if (address == nullptr) {
    throw RuntimeError("symbol '" + name + "' not found in '" + path_ + "': " + last_dl_error());
  }
  return address;
}

}  // namespace hotswap::protocol
