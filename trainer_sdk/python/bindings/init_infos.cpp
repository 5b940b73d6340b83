// The trainer-side init infos of every backend, with vLLM's field names and defaults, keyword
// `rank`, and `backend` as a class attribute (vLLM's `backend: ClassVar[str]`). Timeouts are
// float seconds, as everywhere in Python.
#include <chrono>

#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/disk_trainer_engine.hpp"
#include "trainer_sdk/gloo_trainer_init_info.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/nccl_trainer_init_info.hpp"
#include "trainer_sdk/python/bindings/conversions.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"

namespace hotswap::python {
namespace {

using namespace trainer_sdk;
using std::chrono::milliseconds;

double seconds_of(milliseconds value) {
  return static_cast<double>(value.count()) / 1000.0;
}

milliseconds timeout_of(double seconds) {
  return timeout_argument(seconds, "timeout");
}

// `timeout` in seconds over a member in milliseconds.
template <class Class, class Info>
void timeout_property(Class& cls, milliseconds Info::*member) {
  cls.def_property(
      "timeout", [member](const Info& info) { return seconds_of(info.*member); },
      [member](Info& info, double seconds) { info.*member = timeout_of(seconds); },
      "seconds every wait of the engine may take");
}

template <class Info>
void set_backend(py::class_<Info, TrainerInitInfo>& cls) {
  cls.attr("backend") = std::string(Info::backend);
  cls.def("__repr__", [](const Info& info) {
    return std::string(py::str(py::type::of(py::cast(info)).attr("__name__"))) +
           "(rank=" + std::to_string(info.rank) + ")";
  });
}

// The fields the dense broadcast backends share (gloo, nccl).
template <class Info>
void broadcast_fields(py::class_<Info, TrainerInitInfo>& cls) {
  cls.def_readwrite("master_address", &Info::master_address)
      .def_readwrite("master_port", &Info::master_port)
      .def_readwrite("world_size", &Info::world_size)
      .def_readwrite("packed", &Info::packed)
      .def_readwrite("packed_buffer_size_bytes", &Info::packed_buffer_size_bytes)
      .def_readwrite("packed_num_buffers", &Info::packed_num_buffers)
      .def_readwrite("trainer_ranks", &Info::trainer_ranks,
                     "trainer ranks that each send the parameters they hold (1: rank 0 sends all)");
  timeout_property(cls, static_cast<milliseconds Info::*>(&BroadcastTransferParams::timeout));
  set_backend(cls);
}

template <class Info>
std::unique_ptr<Info> broadcast_info(std::string master_address, int master_port, int world_size,
                                     int rank, bool packed, std::int64_t packed_buffer_size_bytes,
                                     std::int64_t packed_num_buffers, double timeout,
                                     int trainer_ranks) {
  auto info = std::make_unique<Info>(std::move(master_address), master_port, world_size, rank);
  info->packed = packed;
  info->packed_buffer_size_bytes = packed_buffer_size_bytes;
  info->packed_num_buffers = packed_num_buffers;
  info->timeout = timeout_of(timeout);
  info->trainer_ranks = trainer_ranks;
  return info;
}

}  // namespace

void bind_init_infos(py::module_& m) {
  py::class_<TrainerInitInfo>(m, "TrainerInitInfo",
                              "How a caller configures a transfer on the trainer side (vLLM's "
                              "TrainerInitInfo). Rank 0 is the sender.")
      .def_readwrite("rank", &TrainerInitInfo::rank)
      .def_property_readonly("is_sender", &TrainerInitInfo::is_sender);

  const auto packed_default = protocol::kDefaultPackedBufferSizeBytes;
  const auto buffers_default = protocol::kDefaultPackedNumBuffers;

  py::class_<GlooTrainerInitInfo, TrainerInitInfo> gloo(
      m, "GlooTrainerInitInfo", "`gloo`: vLLM's nccl protocol over gloo, on the CPU.");
  gloo.def(py::init(&broadcast_info<GlooTrainerInitInfo>), py::arg("master_address"),
           py::arg("master_port"), py::arg("world_size"), py::kw_only(), py::arg("rank"),
           py::arg("packed") = true, py::arg("packed_buffer_size_bytes") = packed_default,
           py::arg("packed_num_buffers") = buffers_default,
           py::arg("timeout") = protocol::kDefaultTimeoutSeconds, py::arg("trainer_ranks") = 1);
  broadcast_fields(gloo);

  py::class_<NcclTrainerInitInfo, TrainerInitInfo> nccl(
      m, "NcclTrainerInitInfo", "`nccl`: vLLM's own, from a CUDA device of this trainer.");
  nccl.def(py::init([](std::string master_address, int master_port, int world_size, int rank,
                       bool packed, std::int64_t buffer_size, std::int64_t num_buffers,
                       double timeout, int trainer_ranks, int device, bool use_unique_id) {
             auto info = broadcast_info<NcclTrainerInitInfo>(std::move(master_address), master_port,
                                                             world_size, rank, packed, buffer_size,
                                                             num_buffers, timeout, trainer_ranks);
             info->device = device;
             info->use_unique_id = use_unique_id;
             return info;
           }),
           py::arg("master_address"), py::arg("master_port"), py::arg("world_size"), py::kw_only(),
           py::arg("rank"), py::arg("packed") = true,
           py::arg("packed_buffer_size_bytes") = packed_default,
           py::arg("packed_num_buffers") = buffers_default,
           py::arg("timeout") = protocol::kDefaultTimeoutSeconds, py::arg("trainer_ranks") = 1,
           py::arg("device") = 0, py::arg("use_unique_id") = false)
      .def_readwrite("device", &NcclTrainerInitInfo::device)
      .def_readwrite("use_unique_id", &NcclTrainerInitInfo::use_unique_id);
  broadcast_fields(nccl);
  m.attr("NCCLTrainerInitInfo") = nccl;  // vLLM's spelling

  auto sparse_fields = [](auto& cls) {
    using Info = typename std::remove_reference_t<decltype(cls)>::type;
    cls.def_readwrite("master_address", &Info::master_address)
        .def_readwrite("master_port", &Info::master_port)
        .def_readwrite("world_size", &Info::world_size);
    timeout_property(cls, static_cast<milliseconds Info::*>(&SparseTransferParams::timeout));
    set_backend(cls);
  };
  py::class_<SparseGlooTrainerInitInfo, TrainerInitInfo> sparse_gloo(
      m, "SparseGlooTrainerInitInfo", "`sparse_gloo`: sparse patches over gloo, on the CPU.");
  sparse_gloo.def(py::init([](std::string master_address, int master_port, int world_size, int rank,
                              double timeout) {
                    auto info = std::make_unique<SparseGlooTrainerInitInfo>(
                        std::move(master_address), master_port, world_size, rank);
                    info->timeout = timeout_of(timeout);
                    return info;
                  }),
                  py::arg("master_address"), py::arg("master_port"), py::arg("world_size"),
                  py::kw_only(), py::arg("rank"),
                  py::arg("timeout") = protocol::kDefaultTimeoutSeconds);
  sparse_fields(sparse_gloo);

  py::class_<SparseNcclTrainerInitInfo, TrainerInitInfo> sparse_nccl(
      m, "SparseNcclTrainerInitInfo", "`sparse_nccl`: vLLM's sparse patches over NCCL.");
  sparse_nccl
      .def(py::init([](std::string master_address, int master_port, int world_size, int rank,
                       double timeout, int device, bool use_unique_id) {
             auto info = std::make_unique<SparseNcclTrainerInitInfo>(std::move(master_address),
                                                                     master_port, world_size, rank);
             info->timeout = timeout_of(timeout);
             info->device = device;
             info->use_unique_id = use_unique_id;
             return info;
           }),
           py::arg("master_address"), py::arg("master_port"), py::arg("world_size"), py::kw_only(),
           py::arg("rank"), py::arg("timeout") = protocol::kDefaultTimeoutSeconds,
           py::arg("device") = 0, py::arg("use_unique_id") = false)
      .def_readwrite("device", &SparseNcclTrainerInitInfo::device)
      .def_readwrite("use_unique_id", &SparseNcclTrainerInitInfo::use_unique_id);
  sparse_fields(sparse_nccl);
  m.attr("SparseNCCLTrainerInitInfo") = sparse_nccl;

  py::class_<ShmTrainerInitInfo, TrainerInitInfo> shm(
      m, "ShmTrainerInitInfo",
      "`shm`: POSIX shared memory to workers on this host; with an `arena`, the tensors that\n"
      "live in it are read in place.");
  shm.def(
         py::init([](int num_workers, int rank, std::int64_t buffer_size, int num_buffers,
                     std::shared_ptr<SharedWeightArena> arena, bool stream_window, double timeout) {
           auto info = std::make_unique<ShmTrainerInitInfo>(num_workers, rank);
           info->packed_buffer_size_bytes = buffer_size;
           info->num_buffers = num_buffers;
           info->arena = std::move(arena);
           info->stream_window = stream_window;
           info->timeout = timeout_of(timeout);
           return info;
         }),
         py::arg("num_workers"), py::kw_only(), py::arg("rank"),
         py::arg("packed_buffer_size_bytes") = ShmTrainerInitInfo(1, 0).packed_buffer_size_bytes,
         py::arg("num_buffers") = 2, py::arg("arena") = nullptr, py::arg("stream_window") = false,
         py::arg("timeout") = protocol::kDefaultTimeoutSeconds)
      .def_readwrite("num_workers", &ShmTrainerInitInfo::num_workers)
      .def_readwrite("packed_buffer_size_bytes", &ShmTrainerInitInfo::packed_buffer_size_bytes)
      .def_readwrite("num_buffers", &ShmTrainerInitInfo::num_buffers)
      .def_readwrite("arena", &ShmTrainerInitInfo::arena)
      .def_readwrite("stream_window", &ShmTrainerInitInfo::stream_window);
  timeout_property(shm, &ShmTrainerInitInfo::timeout);
  set_backend(shm);

  py::class_<IpcTrainerInitInfo, TrainerInitInfo> ipc(
      m, "IpcTrainerInitInfo", "`ipc`: CUDA IPC handles to a worker on the same GPU.");
  ipc.def(py::init([](int rank, bool packed, std::int64_t buffer_size, int device) {
            auto info = std::make_unique<IpcTrainerInitInfo>(rank);
            info->packed = packed;
            info->packed_buffer_size_bytes = buffer_size;
            info->device = device;
            return info;
          }),
          py::kw_only(), py::arg("rank"), py::arg("packed") = false,
          py::arg("packed_buffer_size_bytes") = packed_default, py::arg("device") = 0)
      .def_readwrite("packed", &IpcTrainerInitInfo::packed)
      .def_readwrite("packed_buffer_size_bytes", &IpcTrainerInitInfo::packed_buffer_size_bytes)
      .def_readwrite("device", &IpcTrainerInitInfo::device);
  set_backend(ipc);
  m.attr("IPCTrainerInitInfo") = ipc;

  py::class_<DiskTrainerInitInfo, TrainerInitInfo> disk(
      m, "DiskTrainerInitInfo",
      "`disk`: a safetensors checkpoint in a directory shared with the "
      "workers.");
  disk.def(py::init([](const std::string& directory, int rank, double timeout) {
             auto info = std::make_unique<DiskTrainerInitInfo>(directory, rank);
             info->timeout = timeout_of(timeout);
             return info;
           }),
           py::arg("directory"), py::kw_only(), py::arg("rank"),
           py::arg("timeout") = protocol::kDefaultTimeoutSeconds)
      .def_property(
          "directory", [](const DiskTrainerInitInfo& info) { return info.directory.string(); },
          [](DiskTrainerInitInfo& info, const std::string& path) { info.directory = path; });
  timeout_property(disk, &DiskTrainerInitInfo::timeout);
  set_backend(disk);
}

}  // namespace hotswap::python
