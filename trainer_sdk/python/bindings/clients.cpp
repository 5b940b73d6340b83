// hotswap.WeightSyncClient, hotswap.ZmqWeightSyncClient and hotswap.FanOutClient, and the
// adapter that lets an engine drive any Python object with vLLM's four client methods.
//
// Every call releases the GIL while it waits on the workers: a trainer's other Python threads
// (a data loader, a logger) keep running through a push.
#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/python/bindings/conversions.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"

namespace hotswap::python {
namespace {

using trainer_sdk::AdapterTarget;
using trainer_sdk::FanOutClient;
using trainer_sdk::WeightSyncClient;
using trainer_sdk::ZmqWeightSyncClient;

// A Python client behind the C++ interface. Each call takes the GIL for itself, so the engine
// may call it from a side thread while the push that drives it has released the GIL.
class PythonWeightSyncClient final : public WeightSyncClient {
 public:
  explicit PythonWeightSyncClient(py::object client) : client_(std::move(client)) {}
  ~PythonWeightSyncClient() override {
    py::gil_scoped_acquire gil;
    client_ = py::object();
  }

  void init_weight_transfer_engine(const nlohmann::json& init_info) override {
    call("init_weight_transfer_engine", [&](const py::object& f) { f(from_json(init_info)); });
  }
  void start_weight_update() override {
    call("start_weight_update", [](const py::object& f) { f(); });
  }
  void update_weights(const nlohmann::json& update_info) override {
    call("update_weights", [&](const py::object& f) { f(from_json(update_info)); });
  }
  void finish_weight_update(const std::optional<std::string>& weight_version) override {
    call("finish_weight_update", [&](const py::object& f) {
      f(py::arg("weight_version") = weight_version ? py::cast(*weight_version) : py::none());
    });
  }

  WorkerDigests checkpoint_checksums() override {
    auto digests = fetch_digests("checkpoint_checksums", std::nullopt);
    return digests ? *digests : WeightSyncClient::checkpoint_checksums();  // raises: cannot
  }

  void start_adapter_update(const AdapterTarget& adapter) override {
    call("start_weight_update", [&](const py::object& f) {
      f(py::arg("lora_name") = adapter.lora_name,
        py::arg("lora_config") = from_json(adapter.lora_config));
    });
  }

  WorkerDigests adapter_checksums(const std::string& lora_name) override {
    auto digests = fetch_digests("adapter_checksums", lora_name);
    return digests ? *digests : WeightSyncClient::adapter_checksums(lora_name);  // raises
  }

  void shutdown_weight_transfer_engine() override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(client_, "shutdown_weight_transfer_engine")) {
      WeightSyncClient::shutdown_weight_transfer_engine();
      return;
    }
    call("shutdown_weight_transfer_engine", [](const py::object& f) { f(); });
  }

 private:
  // The client's own `method` (given `lora_name` when there is one), else the worker's
  // checkpoint-format digests through hotswap.client.HotswapWeightSyncClient's weight_checker;
  // nullopt when the client has neither.
  std::optional<WorkerDigests> fetch_digests(const char* method,
                                             const std::optional<std::string>& lora_name) {
    WorkerDigests digests;
    py::gil_scoped_acquire gil;
    if (py::hasattr(client_, method)) {
      call(method, [&](const py::object& f) {
        digests = (lora_name ? f(*lora_name) : f()).cast<WorkerDigests>();
      });
    } else if (py::hasattr(client_, "weight_checker")) {
      call("weight_checker", [&](const py::object& f) {
        py::dict params;
        params["format"] = "checkpoint";
        if (lora_name) params["lora_name"] = *lora_name;
        auto reply = to_json(f("checksum", **params));
        const std::string name =
            py::hasattr(client_, "endpoint") ? py::str(client_.attr("endpoint")) : py::str(client_);
        digests.emplace_back(name, reply.at("checksums").get<std::map<std::string, std::string>>());
      });
    } else {
      return std::nullopt;
    }
    return digests;
  }

  template <class Call>
  void call(const char* method, Call&& body) {
    py::gil_scoped_acquire gil;
    try {
      body(client_.attr(method));
    } catch (py::error_already_set& error) {
      rethrow_python_error(error, std::string("client.") + method + "()");
    }
  }

  py::object client_;
};

// The `curve` argument of both ZeroMQ clients: a dict of three Z85 strings, or None.
std::optional<trainer_sdk::CurveKeys> curve_keys(const py::object& curve) {
  if (curve.is_none()) return std::nullopt;
  auto fields = to_json(curve);
  if (!fields.is_object()) {
    throw py::type_error("curve must be a dict with server_public, public_key and secret_key");
  }
  for (const char* key : {"server_public", "public_key", "secret_key"}) {
    if (!fields.contains(key) || !fields[key].is_string()) {
      throw py::value_error(std::string("curve lacks ") + key +
                            ": it needs server_public, public_key and secret_key (Z85 strings)");
    }
  }
  return trainer_sdk::CurveKeys{fields["server_public"].get<std::string>(),
                                fields["public_key"].get<std::string>(),
                                fields["secret_key"].get<std::string>()};
}

}  // namespace

std::shared_ptr<WeightSyncClient> weight_sync_client_from(py::handle client) {
  if (py::isinstance<WeightSyncClient>(client))
    return client.cast<std::shared_ptr<WeightSyncClient>>();
  for (const char* method : {"init_weight_transfer_engine", "start_weight_update", "update_weights",
                             "finish_weight_update"}) {
    if (!py::hasattr(client, method)) {
      throw py::type_error(
          "client must be a hotswap.ZmqWeightSyncClient, a hotswap.FanOutClient, or an object "
          "with vLLM's four client methods; " +
          py::repr(client).cast<std::string>() + " has no " + method + "()");
    }
  }
  return std::make_shared<PythonWeightSyncClient>(py::reinterpret_borrow<py::object>(client));
}

void bind_clients(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<WeightSyncClient, std::shared_ptr<WeightSyncClient>>(
      m, "WeightSyncClient",
      "How to reach the inference side (vLLM's VLLMWeightSyncClient): the four calls, each\n"
      "reaching every worker and raising on any failure.")
      .def(
          "init_weight_transfer_engine",
          [](WeightSyncClient& self, const py::handle& init_info) {
            auto body = to_json(init_info);
            py::gil_scoped_release release;
            self.init_weight_transfer_engine(body);
          },
          py::arg("init_info"))
      .def(
          "start_weight_update",
          [](WeightSyncClient& self, const py::object& lora_name, const py::handle& lora_config) {
            if (lora_name.is_none()) {
              if (!lora_config.is_none()) {
                throw py::value_error("lora_config is given without a lora_name");
              }
              py::gil_scoped_release release;
              self.start_weight_update();
              return;
            }
            AdapterTarget adapter{lora_name.cast<std::string>(), to_json(lora_config)};
            py::gil_scoped_release release;
            self.start_adapter_update(adapter);
          },
          py::arg("lora_name") = py::none(), py::arg("lora_config") = py::none(),
          "Opens a round; with `lora_name` (hotswap's extension) a round of that LoRA adapter, "
          "made from `lora_config` (PEFT's adapter_config fields) if the workers lack it.")
      .def(
          "update_weights",
          [](WeightSyncClient& self, const py::handle& update_info) {
            auto body = to_json(update_info);
            py::gil_scoped_release release;
            self.update_weights(body);
          },
          py::arg("update_info"))
      .def("finish_weight_update", &WeightSyncClient::finish_weight_update,
           py::arg("weight_version") = py::none(), Release())
      .def("checkpoint_checksums", &WeightSyncClient::checkpoint_checksums, Release(),
           "[(worker, {checkpoint name: sha256 hex})] for every worker reached.")
      .def("adapter_checksums", &WeightSyncClient::adapter_checksums, py::arg("lora_name"),
           Release(),
           "[(worker, {PEFT tensor name: sha256 hex})] of LoRA adapter `lora_name` on every "
           "worker reached.")
      .def("shutdown_weight_transfer_engine", &WeightSyncClient::shutdown_weight_transfer_engine,
           Release());

  py::class_<ZmqWeightSyncClient, WeightSyncClient, std::shared_ptr<ZmqWeightSyncClient>>(
      m, "ZmqWeightSyncClient",
      "One hotswap worker over its ZeroMQ control socket; every call waits at most `timeout`\n"
      "seconds (TimeoutError) and raises the worker's error as its own kind.")
      .def(py::init([](std::string endpoint, double timeout, const py::object& curve) {
             return std::make_shared<ZmqWeightSyncClient>(
                 std::move(endpoint), timeout_argument(timeout, "timeout"), curve_keys(curve));
           }),
           py::arg("endpoint"), py::arg("timeout") = protocol::kDefaultTimeoutSeconds,
           py::arg("curve") = py::none())
      .def(
          "call",
          [](const ZmqWeightSyncClient& self, const std::string& method, const py::object& params) {
            auto body = params.is_none() ? nlohmann::json::object() : to_json(params);
            nlohmann::json reply;
            {
              py::gil_scoped_release release;
              reply = self.call(method, body);
            }
            return from_json(reply);
          },
          py::arg("method"), py::arg("params") = py::none(),
          "Any other control method of the worker (weight_info, generate, health, ...).")
      .def_property_readonly("endpoint", &ZmqWeightSyncClient::endpoint)
      .def("__repr__", [](const ZmqWeightSyncClient& self) {
        return "ZmqWeightSyncClient('" + self.endpoint() + "')";
      });

  py::class_<FanOutClient, WeightSyncClient, std::shared_ptr<FanOutClient>>(
      m, "FanOutClient",
      "Many workers (data-parallel replicas) as one client: each call reaches all of them at\n"
      "once and raises the first failure, prefixed with the worker it came from.")
      .def(py::init([](const py::iterable& workers, double timeout, const py::object& curve) {
             if (py::isinstance<py::str>(workers)) {
               throw py::type_error("FanOutClient takes a list of endpoints, got the one string " +
                                    py::repr(workers).cast<std::string>());
             }
             std::vector<std::shared_ptr<ZmqWeightSyncClient>> clients;
             for (py::handle worker : workers) {
               if (py::isinstance<py::str>(worker)) {
                 clients.push_back(std::make_shared<ZmqWeightSyncClient>(
                     worker.cast<std::string>(), timeout_argument(timeout, "timeout"),
                     curve_keys(curve)));
               } else if (py::isinstance<ZmqWeightSyncClient>(worker)) {
                 clients.push_back(worker.cast<std::shared_ptr<ZmqWeightSyncClient>>());
               } else {
                 throw py::type_error(
                     "FanOutClient takes control endpoints (str) or ZmqWeightSyncClients, got " +
                     py::repr(worker).cast<std::string>());
               }
             }
             return std::make_shared<FanOutClient>(std::move(clients));
           }),
           py::arg("workers"), py::arg("timeout") = protocol::kDefaultTimeoutSeconds,
           py::arg("curve") = py::none(),
           "`curve` (as ZmqWeightSyncClient's) applies to the workers given as endpoints.")
      .def_property_readonly("workers", &FanOutClient::workers)
      .def("inference_world_size", &FanOutClient::inference_world_size,
           py::call_guard<py::gil_scoped_release>(),
           "The inference ranks behind every endpoint (get_world_size summed, as vLLM's recipe "
           "does): a transfer group's world_size is this plus its broadcasting trainer ranks.");
}

}  // namespace hotswap::python
