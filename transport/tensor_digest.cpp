#include "transport/tensor_digest.hpp"

#include <openssl/evp.h>

#include <array>
#include <memory>

#include "protocol/errors.hpp"

namespace hotswap::transport {

std::string sha256_hex(const at::Tensor& tensor) {
  at::Tensor bytes = tensor.to(c10::Device(c10::kCPU)).contiguous();
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data_ptr(), bytes.nbytes()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest.data(), &length) != 1) {
    throw protocol::RuntimeError("OpenSSL SHA-256 failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace hotswap::transport
