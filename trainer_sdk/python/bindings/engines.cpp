// hotswap.WeightTransferTrainerFactory, hotswap.TrainerWeightTransferEngine and
// hotswap.SparsePatch.
//
// A Python engine owns its C++ engine and the Python objects that engine calls into (a Python
// source, a Python client): the C++ side holds them only through shared_ptrs to their C++
// halves, which stop dispatching to Python once the Python object is gone. Every transfer runs
// with the GIL released; a Python source or client takes it back for each call.
#include <atomic>
#include <filesystem>

#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/python/bindings/conversions.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"

namespace hotswap::python {
namespace {

using trainer_sdk::SparsePatch;
using trainer_sdk::TrainerWeightTransferEngine;
using trainer_sdk::WeightSource;

class PythonEngine {
 public:
  PythonEngine(std::unique_ptr<TrainerWeightTransferEngine> engine, std::string backend,
               py::object client, py::object source)
      : engine_(std::move(engine)),
        backend_(std::move(backend)),
        client_(std::move(client)),
        source_(std::move(source)) {}
  // The engine is torn down without the GIL: its threads may be waiting to call into Python.
  ~PythonEngine() {
    py::gil_scoped_release release;
    engine_.reset();
  }
  PythonEngine(const PythonEngine&) = delete;
  PythonEngine& operator=(const PythonEngine&) = delete;

  // The engine, or a RuntimeError saying that it was shut down.
  TrainerWeightTransferEngine& open(const char* call) {
    if (!engine_) {
      throw protocol::RuntimeError("TrainerWeightTransferEngine." + std::string(call) +
                                   "(): this " + backend_ +
                                   " engine was shut down; build a new one with "
                                   "WeightTransferTrainerFactory.trainer_init");
    }
    return *engine_;
  }

  // Marks a call that runs with the GIL released, for as long as it lives (taken under the
  // GIL, so shutdown() from another thread sees it).
  class Call {
   public:
    explicit Call(PythonEngine& engine) : engine_(engine) { ++engine_.calls_; }
    ~Call() { --engine_.calls_; }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    PythonEngine& engine_;
  };
  Call call() { return Call(*this); }

  void shutdown() {
    if (!engine_) return;
    if (calls_ > 0) {
      throw protocol::RuntimeError(
          "TrainerWeightTransferEngine.shutdown(): a push is running on another thread; shut "
          "down once it has returned");
    }
    py::gil_scoped_release release;
    engine_->shutdown();
    engine_.reset();
  }

  bool closed() const { return !engine_; }
  const std::string& backend() const { return backend_; }

 private:
  std::unique_ptr<TrainerWeightTransferEngine> engine_;
  std::atomic<int> calls_{0};
  std::string backend_;
  py::object client_;
  py::object source_;
};

SparsePatch sparse_patch_from(py::handle value, std::size_t index) {
  if (py::isinstance<SparsePatch>(value)) return value.cast<SparsePatch>();
  const std::string what = "patches[" + std::to_string(index) + "]";
  if (!py::isinstance<py::tuple>(value) || py::len(value) != 4) {
    throw py::type_error(what +
                         " must be a hotswap.SparsePatch or a (name, indices, values, "
                         "full_shape) tuple, got " +
                         py::repr(value).cast<std::string>());
  }
  auto item = py::reinterpret_borrow<py::tuple>(value);
  return SparsePatch{item[0].cast<std::string>(), tensor_argument(item[1], what + " indices"),
                     tensor_argument(item[2], what + " values"),
                     item[3].cast<std::vector<std::int64_t>>()};
}

std::optional<std::string> version_argument(const py::object& version) {
  if (version.is_none()) return std::nullopt;
  if (!py::isinstance<py::str>(version)) {
    throw py::type_error("weight_version must be a str or None, got " +
                         py::repr(version).cast<std::string>());
  }
  return version.cast<std::string>();
}

// The source argument of trainer_init: None, a hotswap.WeightSource, or a torch.nn.Module
// (wrapped in hotswap.ModuleSource).
py::object source_argument(py::object source) {
  if (source.is_none() || py::isinstance<WeightSource>(source)) return source;
  if (py::isinstance(source, py::module_::import("torch.nn").attr("Module"))) {
    return py::module_::import("hotswap").attr("ModuleSource")(source);
  }
  throw py::type_error(
      "source must be a hotswap.WeightSource (ModuleSource, TensorListSource, or a subclass), a "
      "torch.nn.Module, or None; got " +
      py::repr(source).cast<std::string>());
}

}  // namespace

void bind_engines(py::module_& m) {
  py::class_<SparsePatch>(m, "SparsePatch",
                          "`values` at the flat positions `indices` (1-D int32, unique) of the "
                          "checkpoint tensor `name` of shape `full_shape`.")
      .def(py::init([](std::string name, const py::handle& indices, const py::handle& values,
                       std::vector<std::int64_t> full_shape) {
             return SparsePatch{std::move(name), tensor_argument(indices, "SparsePatch indices"),
                                tensor_argument(values, "SparsePatch values"),
                                std::move(full_shape)};
           }),
           py::arg("name"), py::arg("indices"), py::arg("values"), py::arg("full_shape"))
      .def_readonly("name", &SparsePatch::name)
      .def_readonly("indices", &SparsePatch::indices)
      .def_readonly("values", &SparsePatch::values)
      .def_readonly("full_shape", &SparsePatch::full_shape);

  py::class_<PythonEngine>(
      m, "TrainerWeightTransferEngine",
      "The trainer side of one backend (vLLM's TrainerWeightTransferEngine), built by\n"
      "WeightTransferTrainerFactory.trainer_init on every trainer rank. A context manager: it\n"
      "shuts down on leaving the block.")
      .def(
          "send_weights",
          [](PythonEngine& self, const py::object& patches, const py::object& weight_version) {
            auto& engine = self.open("send_weights");
            if (patches.is_none() && !weight_version.is_none()) {
              throw protocol::ValueError(
                  "send_weights(weight_version=...) is for a round of sparse patches; to commit a "
                  "version with the whole source, call push(weight_version=...)");
            }
            auto running = self.call();
            if (patches.is_none()) {
              py::gil_scoped_release release;
              engine.send_weights();
              return;
            }
            auto* sparse = dynamic_cast<trainer_sdk::SparseTrainerEngine*>(&engine);
            if (sparse == nullptr) {
              throw protocol::ValueError(
                  "send_weights(patches) is for the sparse backends; the " + self.backend() +
                  " engine resends its whole source: call send_weights() or push()");
            }
            std::vector<SparsePatch> list;
            for (py::handle patch : py::iter(patches)) {
              list.push_back(sparse_patch_from(patch, list.size()));
            }
            auto version = version_argument(weight_version);
            py::gil_scoped_release release;
            sparse->send_weights(list, version);
          },
          py::arg("patches") = py::none(), py::arg("weight_version") = py::none(),
          "Pushes the source's weights (start, update, finish), or, on the sparse backends, "
          "one round of patches.")
      .def(
          "push",
          [](PythonEngine& self, const py::object& weight_version, bool verify,
             const py::object& lora_name, const py::handle& lora_config) {
            auto& engine = self.open("push");
            trainer_sdk::SendOptions options{version_argument(weight_version), verify};
            if (!lora_name.is_none()) {
              options.adapter =
                  trainer_sdk::AdapterTarget{lora_name.cast<std::string>(), to_json(lora_config)};
            } else if (!lora_config.is_none()) {
              throw py::value_error("lora_config is given without a lora_name");
            }
            auto running = self.call();
            py::gil_scoped_release release;
            engine.push(options);
          },
          py::kw_only(), py::arg("weight_version") = py::none(), py::arg("verify") = false,
          py::arg("lora_name") = py::none(), py::arg("lora_config") = py::none(),
          "send_weights, committing `weight_version`; with verify=True, each sending rank then "
          "compares every worker's checkpoint digests with its source (TransferError on a "
          "mismatch). With `lora_name` (hotswap's extension) the round updates that LoRA "
          "adapter instead of the model: the source yields the adapter's tensors "
          "(hotswap.LoraSource), `lora_config` (hotswap.lora_config_of) makes it where the "
          "workers lack it, and verify compares the adapter's digests.")
      .def("shutdown", &PythonEngine::shutdown,
           "Tears communicators and buffers down; the engine cannot be used again.")
      .def_property_readonly("is_sender",
                             [](PythonEngine& self) { return self.open("is_sender").is_sender(); })
      .def_property_readonly(
          "sends_weights",
          [](PythonEngine& self) { return self.open("sends_weights").sends_weights(); })
      .def_property_readonly("backend", &PythonEngine::backend)
      .def_property_readonly("closed", &PythonEngine::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PythonEngine& self, const py::args&) { self.shutdown(); });

  using Factory = trainer_sdk::WeightTransferTrainerFactory;
  py::class_<Factory>(m, "WeightTransferTrainerFactory",
                      "The trainer-side registry of engines, keyed by init_info.backend.")
      .def_static(
          "trainer_init",
          [](const py::object& init_info, const py::object& client, py::object source) {
            if (!py::isinstance<trainer_sdk::TrainerInitInfo>(init_info)) {
              throw py::type_error(
                  "init_info must be a hotswap TrainerInitInfo (GlooTrainerInitInfo, "
                  "ShmTrainerInitInfo, NcclTrainerInitInfo, ...), got " +
                  py::repr(init_info).cast<std::string>());
            }
            const auto& info = init_info.cast<const trainer_sdk::TrainerInitInfo&>();
            auto sync_client = weight_sync_client_from(client);
            source = source_argument(std::move(source));
            auto weight_source =
                source.is_none() ? nullptr : source.cast<std::shared_ptr<WeightSource>>();
            std::unique_ptr<TrainerWeightTransferEngine> engine;
            {
              py::gil_scoped_release release;
              engine = Factory::trainer_init(info, sync_client, weight_source);
            }
            return std::make_unique<PythonEngine>(std::move(engine),
                                                  std::string(info.backend_name()), client, source);
          },
          py::arg("init_info"), py::kw_only(), py::arg("client"), py::arg("source") = py::none(),
          "Rendezvous with the workers through the engine of init_info.backend and return it "
          "ready.")
      .def_static("registered_backends", &Factory::registered_backends)
      .def_static("is_registered", &Factory::is_registered, py::arg("name"))
      // A launcher's way to any registered backend, with no class of its own to know: the
      // factory builds the backend's init info from settings, as hotswap-trainer does.
      .def_static(
          "init_info_from_settings",
          [](const std::string& backend, int rank, int world_size, int num_workers, double timeout,
             std::string master_address, int master_port, int trainer_ranks, int device,
             bool packed, std::int64_t packed_buffer_size_bytes, bool use_nccl_unique_id,
             std::shared_ptr<trainer_sdk::SharedWeightArena> shm_arena, bool shm_window,
             std::string disk_dir) {
            trainer_sdk::TrainerSettings s;
            s.rank = rank;
            s.world_size = world_size;
            s.num_workers = num_workers;
            s.timeout = timeout_argument(timeout, "timeout");
            s.master_address = std::move(master_address);
            s.master_port = master_port;
            s.trainer_ranks = trainer_ranks;
            s.device = device;
            s.packed = packed;
            s.packed_buffer_size_bytes = packed_buffer_size_bytes;
            s.use_nccl_unique_id = use_nccl_unique_id;
            s.shm_arena = std::move(shm_arena);
            s.shm_window = shm_window;
            s.disk_dir = std::move(disk_dir);
            return Factory::settings_support(backend).make(s);
          },
          py::arg("backend"), py::kw_only(), py::arg("rank"), py::arg("world_size") = 0,
          py::arg("num_workers") = 1, py::arg("timeout") = protocol::kDefaultTimeoutSeconds,
          py::arg("master_address") = "127.0.0.1", py::arg("master_port") = 0,
          py::arg("trainer_ranks") = 1, py::arg("device") = 0, py::arg("packed") = true,
          py::arg("packed_buffer_size_bytes") = protocol::kDefaultPackedBufferSizeBytes,
          py::arg("use_nccl_unique_id") = false, py::arg("shm_arena") = nullptr,
          py::arg("shm_window") = false, py::arg("disk_dir") = "",
          "The init info of `backend`, built by the factory from launcher settings (each "
          "backend reads those it names in settings_read(backend)); ValueError for a backend "
          "registered with a creator alone.")
      .def_static(
          "settings_read",
          [](const std::string& backend) {
            std::vector<std::string> out;
            for (auto name : Factory::settings_support(backend).reads)
              out.emplace_back(name);
            return out;
          },
          py::arg("backend"),
          "The optional settings `backend`'s init info reads, named as hotswap-trainer's flags.");
}

}  // namespace hotswap::python
