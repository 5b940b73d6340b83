#include "trainer_sdk/python/bindings/conversions.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::python {
namespace {

// hotswap.TransferError, created at module init and alive for the interpreter's life.
PyObject* transfer_error_type = nullptr;

std::string type_name(py::handle value) {
  return py::str(py::type::of(value).attr("__name__"));
}

}  // namespace

nlohmann::json to_json(py::handle value) {
  const std::string text = py::module_::import("json").attr("dumps")(value).cast<std::string>();
  return nlohmann::json::parse(text);
}

py::object from_json(const nlohmann::json& value) {
  return py::module_::import("json").attr("loads")(value.dump());
}

protocol::DType wire_dtype(py::handle dtype, const std::string& what) {
  if (!THPDtype_Check(dtype.ptr())) {
    throw py::type_error(what + " must be a torch.dtype, got " + type_name(dtype));
  }
  // A dtype with no name on the wire (complex, quantized) is a ValueError naming it.
  return transport::from_scalar_type(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
}

py::object torch_dtype(protocol::DType dtype) {
  auto* object = reinterpret_cast<PyObject*>(torch::getTHPDtype(transport::to_scalar_type(dtype)));
  return py::reinterpret_borrow<py::object>(object);
}

std::chrono::milliseconds timeout_argument(double seconds, const std::string& what) {
  // At most a year: beyond, the milliseconds would overflow (and infinity has no integer).
  if (!(seconds > 0) || !(seconds <= 365.0 * 24 * 3600)) {
    throw protocol::ValueError(what + " must be a positive number of seconds up to a year, got " +
                               std::to_string(seconds));
  }
  return protocol::to_milliseconds(seconds);
}

at::Tensor tensor_argument(py::handle value, const std::string& what) {
  if (!THPVariable_Check(value.ptr())) {
    throw py::type_error(what + " must be a torch.Tensor, got " + type_name(value));
  }
  return THPVariable_Unpack(value.ptr());
}

std::optional<std::vector<std::int64_t>> owners_from(py::handle value, const std::string& what) {
  if (value.is_none()) return std::nullopt;
  std::vector<std::int64_t> ranks;
  for (py::handle r : py::iter(value)) {
    if (!py::isinstance<py::int_>(r) || py::isinstance<py::bool_>(r)) {
      throw py::type_error(what + " must be a sequence of ints, got " + type_name(r) + " in it");
    }
    ranks.push_back(r.cast<std::int64_t>());
  }
  return ranks;
}

std::vector<protocol::Placement> placements_from(py::handle value, const std::string& what) {
  std::vector<protocol::Placement> out;
  if (value.is_none()) return out;
  for (py::handle p : py::iter(value)) {
    if (py::isinstance<protocol::Placement>(p)) {
      out.push_back(p.cast<protocol::Placement>());
    } else if (py::hasattr(p, "dim")) {  // vLLM's Shard(dim)
      out.push_back(protocol::Placement::shard(p.attr("dim").cast<std::int64_t>()));
    } else if (std::string(Py_TYPE(p.ptr())->tp_name).ends_with("Replicate")) {
      out.push_back(protocol::Placement::replicate());
    } else {
      throw py::type_error(what + ": placement " + py::repr(p).cast<std::string>() +
                           " is neither Replicate nor Shard");
    }
  }
  return out;
}

protocol::ParamMeta param_meta_from(py::handle value, const std::string& what) {
  if (py::isinstance<protocol::ParamMeta>(value)) return value.cast<protocol::ParamMeta>();
  if (py::hasattr(value, "name") && py::hasattr(value, "dtype") && py::hasattr(value, "shape")) {
    // vLLM's own ParamMeta (or one like it): its fields, ownership included.
    protocol::ParamMeta meta;
    meta.name = py::str(value.attr("name")).cast<std::string>();
    meta.dtype = wire_dtype(value.attr("dtype"), what + " ('" + meta.name + "') dtype");
    meta.shape = value.attr("shape").cast<std::vector<std::int64_t>>();
    meta.owners = owners_from(py::getattr(value, "owners", py::none()), what + " owners");
    py::object mesh = py::getattr(value, "mesh_shape", py::none());
    if (!mesh.is_none()) meta.mesh_shape = mesh.cast<std::vector<std::int64_t>>();
    meta.placements =
        placements_from(py::getattr(value, "placements", py::none()), what + " placements");
    protocol::check_ownership(meta);
    return meta;
  }
  if (!py::isinstance<py::tuple>(value) && !py::isinstance<py::list>(value)) {
    throw py::type_error(what +
                         " must be a hotswap.ParamMeta or a (name, dtype, shape) tuple, got " +
                         type_name(value));
  }
  auto items = py::reinterpret_borrow<py::sequence>(value);
  if (items.size() != 3 || !py::isinstance<py::str>(items[0])) {
    throw py::type_error(what + " must be a (name: str, dtype: torch.dtype, shape) tuple");
  }
  protocol::ParamMeta meta;
  meta.name = items[0].cast<std::string>();
  meta.dtype = wire_dtype(items[1], what + " ('" + meta.name + "') dtype");
  try {
    meta.shape = items[2].cast<std::vector<std::int64_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error(what + " ('" + meta.name + "') shape must be a sequence of ints, got " +
                         type_name(items[2]));
  }
  return meta;
}

void rethrow_python_error(py::error_already_set& error, const std::string& context) {
  const std::string message = context + " raised " +
                              py::str(error.type().attr("__name__")).cast<std::string>() + ": " +
                              py::str(error.value()).cast<std::string>();
  // hotswap.HotswapError (the pure-Python client's) carries the worker's JSON-RPC code and
  // error type: the kind they stand for, exactly as the C++ client reads a reply.
  py::object value = error.value();
  if (py::hasattr(value, "kind") && py::hasattr(value, "code") &&
      py::isinstance<py::str>(value.attr("kind")) && py::isinstance<py::int_>(value.attr("code"))) {
    protocol::throw_error(protocol::error_kind_from_reply(value.attr("code").cast<int>(),
                                                          value.attr("kind").cast<std::string>()),
                          message);
  }
  // Python's own: bad input (ValueError, TypeError: hotswap has no TypeError kind) is a
  // ValueError, a wait that ran out a TimeoutError, and everything else a RuntimeError.
  if (error.matches(PyExc_ValueError) || error.matches(PyExc_TypeError)) {
    throw protocol::ValueError(message);
  }
  if (error.matches(PyExc_TimeoutError)) throw protocol::TimeoutError(message);
  if (transfer_error_type != nullptr && error.matches(transfer_error_type)) {
    throw protocol::TransferError(message);
  }
  throw protocol::RuntimeError(message);
}

void register_exceptions(py::module_& module) {
  static py::exception<protocol::TransferError> transfer_error(module, "TransferError",
                                                               PyExc_RuntimeError);
  transfer_error.doc() =
      "A data plane failed mid-transfer (hotswap's TransferError, JSON-RPC code -32001).";
  transfer_error_type = transfer_error.ptr();
  // Local to this module: a global translator would also catch the c10::Errors of torch's own
  // bindings and turn their IndexErrors and TypeErrors into RuntimeErrors.
  py::register_local_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const protocol::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.kind()) {
        case protocol::ErrorKind::kParseError:
        case protocol::ErrorKind::kInvalidRequest:
        case protocol::ErrorKind::kMethodNotFound:
        case protocol::ErrorKind::kValueError:
        case protocol::ErrorKind::kModelNotFound:
          type = PyExc_ValueError;
          break;
        case protocol::ErrorKind::kTimeoutError:
          type = PyExc_TimeoutError;
          break;
        case protocol::ErrorKind::kTransferError:
          type = transfer_error_type;
          break;
        case protocol::ErrorKind::kRuntimeError:
        case protocol::ErrorKind::kOverloaded:
          break;
      }
      PyErr_SetString(type, e.what());
    } catch (const c10::Error& e) {
      // libtorch's own errors (a copy out of a meta tensor, an allocation that failed) read
      // without the C++ backtrace that what() appends.
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
}

}  // namespace hotswap::python
