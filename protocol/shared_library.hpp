// SharedLibrary: RAII over a dlopen handle. Opened with RTLD_NODELETE, because objects made by a
// plugin keep pointing into its code (vtables) for as long as they live, which may be past the
// handle's own end; closing then only drops the reference.
#pragma once

#include <string>

namespace hotswap::protocol {

class SharedLibrary {
 public:
  // Loads `path` now (RTLD_NOW): a missing file or unresolved symbol fails here, with dlerror's
  // text, rather than at first call. Throws RuntimeError.
  explicit SharedLibrary(const std::string& path);
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The address of `name`; RuntimeError naming the symbol and the library when it is absent.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* handle_ = nullptr;
};

}  // namespace hotswap::protocol
