// A control frame as the worker handles it: the JSON-RPC envelope, the method's params, every
// backend's init_info / update_info parser, and the reply frame that echoes the request's id.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/disk_info.hpp"
#include "protocol/errors.hpp"
#include "protocol/ipc_info.hpp"
#include "protocol/jsonrpc.hpp"
#include "protocol/method_params.hpp"
#include "protocol/nccl_info.hpp"
#include "protocol/shm_info.hpp"
#include "protocol/sparse_nccl_info.hpp"

namespace {

using namespace hotswap;
using nlohmann::json;

// Small enough that the fuzzer also reaches the "too large" refusal.
constexpr std::size_t kMaxRequestBytes = 32u << 10;

// Runs `parse`; an expected error must still make a reply.
template <class Parse>
void expect_parsed_or_refused(Parse&& parse) {
  try {
    parse();
  } catch (const protocol::Error& e) {
    fuzz::check_error_reply(e);
  }
}

// The frame the worker sends back for `reply`: JSON, with the request's id spelled as sent.
void check_reply(const json& reply, const json& id, const std::string& id_text) {
  std::string frame;
  try {
    frame = protocol::reply_frame(reply, id_text);
  } catch (const json::exception& e) {
    const std::string shown =
        reply.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 400);
    std::fprintf(stderr, "the reply cannot be serialized (%s); the reply: %s\n", e.what(),
                 fuzz::printable(shown).c_str());
    std::abort();
  }
  json parsed = json::parse(frame, nullptr, /*allow_exceptions=*/false);
  HOTSWAP_FUZZ_CHECK(!parsed.is_discarded());
  HOTSWAP_FUZZ_CHECK(parsed.is_object() && parsed.contains("id"));
  HOTSWAP_FUZZ_CHECK(parsed["id"] == id);
  if (id.is_number()) {
    auto raw = protocol::top_level_member_text(frame, "id");
    HOTSWAP_FUZZ_CHECK(raw.has_value() && *raw == id_text);
  }
}

void parse_init_info(const json& info) {
  expect_parsed_or_refused([&] { protocol::NcclInitInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::IpcInitInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::ShmInitInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::DiskInitInfo::from_json(info); });
}

void parse_update_info(const json& info) {
  expect_parsed_or_refused([&] { protocol::NcclUpdateInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::SparseNcclUpdateInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::IpcUpdateInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::ShmUpdateInfo::from_json(info); });
  expect_parsed_or_refused([&] { protocol::DiskUpdateInfo::from_json(info); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  protocol::RpcRequest request;
  try {
    request = protocol::parse_request(fuzz::as_text(data, size), kMaxRequestBytes);
  } catch (const protocol::RpcRequestError& e) {
    // The worker answers a refused frame too, with whatever id it could read.
    check_reply(protocol::make_error(e.id(), e), e.id(), e.id_text());
    return 0;
  }
  HOTSWAP_FUZZ_CHECK(request.params.is_object());
  // Deeper frames are refused before anything recursive (copying, printing) touches them.
  HOTSWAP_FUZZ_CHECK(fuzz::json_depth(request.params) < protocol::kMaxJsonDepth);

  // The typed params, whatever the method: each parser must refuse foreign params cleanly.
  expect_parsed_or_refused([&] { protocol::GenerateParams::from_json(request.params); });
  expect_parsed_or_refused([&] { protocol::PauseParams::from_json(request.params); });
  expect_parsed_or_refused([&] { protocol::WorldSizeParams::from_json(request.params); });
  expect_parsed_or_refused([&] {
    // hotswap's extension: an adapter's checksums, never its reset.
    auto p = protocol::WeightCheckerParams::from_json(request.params);
    HOTSWAP_FUZZ_CHECK(!p.lora_name || p.action != "reset");
  });
  expect_parsed_or_refused([&] {
    // An adapter's round: a name never empty, and a config only with one.
    auto p = protocol::StartWeightUpdateParams::from_json(request.params);
    HOTSWAP_FUZZ_CHECK(!p.lora_name || !p.lora_name->empty());
    HOTSWAP_FUZZ_CHECK(!p.lora_config || (p.lora_name && p.lora_config->is_object()));
  });
  expect_parsed_or_refused([&] { protocol::LoadLoraAdapterParams::from_json(request.params); });
  expect_parsed_or_refused([&] { protocol::UnloadLoraAdapterParams::from_json(request.params); });
  expect_parsed_or_refused([&] { protocol::TokenizeParams::from_json(request.params); });
  expect_parsed_or_refused([&] { protocol::DetokenizeParams::from_json(request.params); });
  expect_parsed_or_refused([&] {
    // An accepted completion request always has something to run, within vLLM's bounds.
    auto p = protocol::CompletionParams::from_json(request.params);
    HOTSWAP_FUZZ_CHECK(!p.prompts.empty());
    HOTSWAP_FUZZ_CHECK(p.n >= 1 && p.n <= protocol::CompletionParams::kMaxN);
    HOTSWAP_FUZZ_CHECK(!p.logprobs || *p.logprobs <= protocol::CompletionParams::kMaxLogprobs);
    for (const auto& stop : p.stop)
      HOTSWAP_FUZZ_CHECK(!stop.empty());
  });

  expect_parsed_or_refused([&] {
    // An accepted chat request: a list of messages, vLLM's logprobs bound, never both prompt
    // flags, and what completions reads of it within completions' bounds.
    auto p = protocol::ChatCompletionParams::from_json(nlohmann::ordered_json(request.params));
    HOTSWAP_FUZZ_CHECK(p.conversation.messages.is_array());
    HOTSWAP_FUZZ_CHECK(p.top_logprobs >= 0 &&
                       p.top_logprobs <= protocol::ChatCompletionParams::kMaxLogprobs);
    HOTSWAP_FUZZ_CHECK(
        !(p.conversation.add_generation_prompt && p.conversation.continue_final_message));
    HOTSWAP_FUZZ_CHECK(p.conversation.tools.is_null() || !p.conversation.tools.empty());
    HOTSWAP_FUZZ_CHECK(p.completion.n >= 1 && p.completion.n <= protocol::CompletionParams::kMaxN);
  });
  expect_parsed_or_refused(
      [&] { protocol::TokenizeChatParams::from_json(nlohmann::ordered_json(request.params)); });

  try {
    protocol::validate_params(request.method, request.params);
    if (request.method == "init_weight_transfer_engine") {
      parse_init_info(protocol::init_info_of(request.params));
    } else if (request.method == "update_weights") {
      const json& info = protocol::update_info_of(request.params);
      if (info.is_array()) {
        for (const json& rank_info : info)
          parse_update_info(rank_info);
      } else {
        parse_update_info(info);
      }
    }
  } catch (const protocol::Error& e) {
    check_reply(protocol::make_error(request.id, e), request.id, request.id_text);
    return 0;
  }
  check_reply(protocol::make_result(request.id, request.params), request.id, request.id_text);
  return 0;
}
