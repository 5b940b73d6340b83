// What every part of the `hotswap._C` extension shares: conversions between Python objects and
// the trainer SDK's C++ types, and the one mapping between hotswap's error kinds and Python's
// exception types (both directions, so that an error keeps its kind across any number of
// crossings: a Python source raising ValueError inside a C++ engine reaches the trainer as
// ValueError).
//
// torch/csrc/utils/pybind.h brings the at::Tensor caster, which wraps and unwraps the same
// TensorImpl: a tensor crosses in either direction without a copy.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/dtype.hpp"
#include "protocol/param_meta.hpp"
#include "trainer_sdk/weight_sync_client.hpp"

namespace hotswap::python {

namespace py = pybind11;

// JSON values cross through Python's json module: exactly the values json.dumps accepts (a
// TypeError naming the offending type otherwise), and floats keep every digit.
nlohmann::json to_json(py::handle value);
py::object from_json(const nlohmann::json& value);

// torch.dtype <-> the wire dtype. `what` names the value in a TypeError or ValueError.
protocol::DType wire_dtype(py::handle dtype, const std::string& what);
py::object torch_dtype(protocol::DType dtype);

// Seconds (Python's unit for every timeout) as the SDK's milliseconds; a ValueError naming
// `what` unless positive.
std::chrono::milliseconds timeout_argument(double seconds, const std::string& what);

// A torch.Tensor argument, unwrapped without a copy; a TypeError naming `what` otherwise.
at::Tensor tensor_argument(py::handle value, const std::string& what);

// A ParamMeta from a hotswap.ParamMeta, a (name, dtype, shape) tuple, or any object with
// vLLM's ParamMeta attributes (name, dtype, shape, and 0.34's owners, mesh_shape, placements),
// vLLM's own included; ownership checked as vLLM checks it.
protocol::ParamMeta param_meta_from(py::handle value, const std::string& what);

// vLLM 0.34's placements (Replicate(), Shard(dim): any object with a `dim` is a Shard) and
// owners as C++ values; None is empty. A TypeError naming `what` otherwise.
std::vector<protocol::Placement> placements_from(py::handle value, const std::string& what);
std::optional<std::vector<std::int64_t>> owners_from(py::handle value, const std::string& what);

// Runs while a C++ engine called back into Python and Python raised: rethrows it as the
// protocol error of its kind (a HotswapError's worker kind; ValueError and TypeError as
// ValueError, TimeoutError, TransferError; anything else as RuntimeError), message kept and
// prefixed with `context`, so that it crosses C++ frames and threads as a plain C++ exception
// and reaches the trainer as a Python exception of that kind. Needs the GIL.
[[noreturn]] void rethrow_python_error(py::error_already_set& error, const std::string& context);

// Registers hotswap.TransferError and the translation of protocol errors (and libtorch's) into
// Python exceptions. Called once, from the module's init.
void register_exceptions(py::module_& module);

// The client an engine drives: a hotswap client (ZmqWeightSyncClient, FanOutClient), or any
// Python object with vLLM's four methods (VLLMWeightSyncClient: hotswap.client's pure-Python
// client, vLLM's HTTP client), called back under the GIL. A TypeError for anything else.
std::shared_ptr<trainer_sdk::WeightSyncClient> weight_sync_client_from(py::handle client);

// Each binds one part of the SDK into the module (bindings/<part>.cpp).
void bind_weight_sources(py::module_& module);
void bind_clients(py::module_& module);
void bind_init_infos(py::module_& module);
void bind_engines(py::module_& module);

}  // namespace hotswap::python
