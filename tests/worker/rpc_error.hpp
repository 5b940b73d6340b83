// rpc_error: the (code, message) of the JSON-RPC error a worker answers one request with, for
// the worker tests that check refusals. A request that succeeds fails the test.
#pragma once

#include <boost/test/unit_test.hpp>

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "protocol/jsonrpc.hpp"
#include "trainer_sdk/rpc_client.hpp"

namespace hotswap::testing {

// `frame`: a whole request, sent as it is (malformed ones included).
inline std::pair<int, std::string> rpc_error(trainer_sdk::RpcClient& client,
                                             const std::string& frame) {
  nlohmann::json reply = nlohmann::json::parse(client.call_raw(frame));
  BOOST_REQUIRE_MESSAGE(reply.contains("error"), "expected an error, got " << reply.dump());
  return {reply["error"]["code"].get<int>(), reply["error"]["message"].get<std::string>()};
}

inline std::pair<int, std::string> rpc_error(trainer_sdk::RpcClient& client,
                                             const std::string& method,
                                             const nlohmann::json& params) {
  return rpc_error(client, protocol::make_request(77, method, params).dump());
}

}  // namespace hotswap::testing
