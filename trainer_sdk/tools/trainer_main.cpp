// hotswap-trainer: a stand-in RL trainer. Loads a checkpoint as its source, and each round
// applies a deterministic simulated training step (or, for the sparse backends, a deterministic
// sparse delta), pushes it into the workers, optionally verifies bit for bit, and prints what it
// moved.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randperm.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "model_loader/checkpoint.hpp"
#include "protocol/backend_names.hpp"
#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/round_hook.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "trainer_sdk/shard_plan.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/trainer_settings.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "transport/child_process.hpp"
#include "transport/exception_text.hpp"
#include "transport/gloo_communicator.hpp"

using namespace hotswap;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using Factory = trainer_sdk::WeightTransferTrainerFactory;
namespace settings = trainer_sdk::settings;

namespace {

// `names` joined by `separator`, the last by `last` ("a, b and c").
std::string join(const std::vector<std::string>& names, std::string_view separator,
                 std::string_view last) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += std::string(i + 1 == names.size() ? last : separator);
    out += names[i];
  }
  return out;
}

// The backends the trainer can configure, for --help and the error naming an unknown one.
std::string backend_list(std::string_view separator) {
  return join(Factory::registered_backends(), separator, separator);
}

// The flags that switch a backend into a mode of its own: given for a backend whose init info
// does not read them, they would be ignored silently, so they are refused instead. The other
// settings (--buffer-size, --device, --master-port, ...) tune whichever backend reads them, and
// scripts pass them alike to all.
constexpr std::array kModeSettings = {settings::kShmArena, settings::kShmWindow,
                                      settings::kNcclUniqueId};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

at::Generator generator(std::uint64_t seed, std::uint64_t round, std::size_t index) {
  return at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ull + round * 7919ull + index);
}

// --fault-at: stops this trainer at one point of its first round, deterministically. Where the
// workers have a call in flight at that point (init, update), it first waits until the first
// worker says so in `health`, so that the fault always lands inside that call.
void install_fault(const std::string& at, const std::string& action, const std::string& worker,
                   const std::optional<trainer_sdk::CurveKeys>& curve) {
  const auto point = *trainer_sdk::round_point_from_name(at);
  auto fired = std::make_shared<bool>(false);
  trainer_sdk::set_round_hook([=](trainer_sdk::RoundPoint reached) {
    if (reached != point || *fired) return;
    *fired = true;
    const char* inside = point == trainer_sdk::RoundPoint::kInit ? "init_weight_transfer_engine"
                         : point == trainer_sdk::RoundPoint::kMidUpdate ? "update_weights"
                                                                        : nullptr;
    if (inside != nullptr) {
      trainer_sdk::RpcClient observer(worker, std::chrono::seconds(5), curve);
      // A quick call (a shm or disk init) may be over before it is seen: then it is done.
      const auto deadline = Clock::now() + std::chrono::seconds(3);
      while (Clock::now() < deadline && observer.call("health")["weight_call"] != inside) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    std::printf("hotswap-trainer: fault injection: %s at %s\n", action.c_str(), at.c_str());
    std::fflush(stdout);
    ::raise(action == "kill" ? SIGKILL : SIGSTOP);
  });
}

// The other trainer ranks of a --ranks run, started by rank 0 as copies of this process with
// their own --rank and rank 0's --master-port; they print to the same terminal. Destruction
// gives any still running a moment to report why they stop (rank 0 failing breaks their group),
// then stops them (SIGTERM, then SIGKILL), so none outlives rank 0 on any exit path.
class RankProcesses {
 public:
  RankProcesses() = default;
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;
  ~RankProcesses() {
    if (wait_all(std::chrono::seconds(5))) return;
    for (auto& rank : running_)
      rank->stop(std::chrono::seconds(5));  // SIGTERM, then SIGKILL
  }

  // `args` follow argv[0].
  void spawn(const std::vector<std::string>& args) {
    running_.push_back(std::make_unique<transport::ChildProcess>(
        "/proc/self/exe", args, transport::ChildProcess::Output::kInherited));
  }

  // Waits up to `timeout` for every rank to end; false if some still run. `failed` counts
  // the ranks that ended with a non-zero status or a signal.
  bool wait_all(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (auto it = running_.begin(); it != running_.end();) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto status = (*it)->wait_exit(std::max(left, std::chrono::milliseconds(0)));
      if (!status) return false;
      if (*status != 0) ++failed_;
      it = running_.erase(it);
    }
    return true;
  }
  int failed() const { return failed_; }

 private:
  std::vector<std::unique_ptr<transport::ChildProcess>> running_;
  int failed_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hotswap-trainer: push simulated training steps into hotswap workers"};
  std::string workers, backend, source_dir, master_address = "127.0.0.1", disk_dir;
  int rounds = 1, master_port = 0, rank = 0;
  double step_scale = 0.01, timeout_seconds = protocol::kDefaultTimeoutSeconds;
  std::uint64_t seed = 0;
  std::int64_t buffer_size = protocol::kDefaultPackedBufferSizeBytes;
  bool shm_arena = false, shm_window = false, nccl_unique_id = false;
  int device = 0;
  bool packed = true, verify = false;
  app.add_option("--workers", workers, "control endpoints, comma-separated")->required();
  app.add_option("--backend", backend, backend_list(" | "))->required();
  app.add_option("--source", source_dir, "checkpoint directory the trainer starts from")
      ->required();
  app.add_option("--rounds", rounds)->capture_default_str();
  int ranks = 1;
  std::string shard;
  app.add_option("--rank", rank,
                 "this trainer process's rank: 0 drives the round; with --ranks 1 the others only "
                 "iterate. Given with --ranks N, this process is that one rank only (start each "
                 "rank yourself, e.g. on several hosts, with a shared --master-port)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--ranks", ranks,
                 "gloo, nccl: trainer ranks that each send the part of the model they hold; "
                 "without --rank, this process is rank 0 and starts the others")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--shard", shard,
                 "with --ranks N: how the ranks split the model: experts (each holds a block of "
                 "every layer's experts, the rest replicated) or layers (pipeline stages); "
                 "default experts for a mixture of experts, else layers")
      ->check(CLI::IsMember({"experts", "layers"}));
  app.add_option("--step-scale", step_scale, "size of each simulated step (0: no step)")
      ->capture_default_str();
  app.add_option("--seed", seed);
  app.add_flag("--packed,!--no-packed", packed, "pack tensors into chunks (gloo, nccl, ipc)");
  app.add_option("--buffer-size", buffer_size, "packed chunk size in bytes")->capture_default_str();
  app.add_option("--device", device,
                 "nccl, sparse_nccl, ipc: the CUDA device to send from (with --ranks N started "
                 "from here, rank r sends from this device + r)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("--nccl-unique-id", nccl_unique_id,
               "nccl, sparse_nccl: ship a minted nccl_unique_id_b64 instead of hosting a TCPStore");
  app.add_flag("--shm-arena", shm_arena,
               "shm: keep the trainer's weights in shared memory; workers read them in place");
  app.add_flag("--shm-window", shm_window,
               "shm: stream each chunk through a 2 MiB window that trainer and workers share "
               "in the cache, instead of laying it whole in a buffer");
  app.add_flag("--verify", verify, "check the workers' weights bit for bit after each round");
  app.add_option("--master-address", master_address, "gloo and nccl rendezvous host")
      ->capture_default_str();
  app.add_option("--master-port", master_port,
                 "gloo and nccl rendezvous port (default: a free one)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--disk-dir", disk_dir, "shared directory for the disk backend");
  app.add_option("--timeout", timeout_seconds, "seconds for every wait")->capture_default_str();
  std::string curve_server_key_file, curve_secret_key_file;
  auto* curve_server =
      app.add_option("--curve-server-key-file", curve_server_key_file,
                     "reach workers started with --curve-secret-key-file: the workers' Z85 "
                     "public key (40 chars) in a file")
          ->check(CLI::ExistingFile);
  auto* curve_secret =
      app.add_option("--curve-secret-key-file", curve_secret_key_file,
                     "with --curve-server-key-file: this trainer's Z85 secret key in a file (its "
                     "public key must be in the workers' --curve-authorized-keys)")
          ->check(CLI::ExistingFile);
  curve_server->needs(curve_secret);
  curve_secret->needs(curve_server);
  std::string fault_at, fault_action = "kill";
  app.add_option(
         "--fault-at", fault_at,
         "fault injection, for tests: stop at this point of the first round (init: the "
         "workers are inside init_weight_transfer_engine; start: after start_weight_update; "
         "update: part of the bytes sent, the workers inside update_weights; finish: "
         "before finish_weight_update)")
      ->check(CLI::IsMember({"init", "start", "update", "finish"}));
  app.add_option("--fault-action", fault_action,
                 "with --fault-at: kill (SIGKILL this process) or stop (SIGSTOP it; SIGCONT "
                 "resumes the round)")
      ->check(CLI::IsMember({"kill", "stop"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // Outside the try: on an error, this rank reports it first; then the others get a moment to
  // report theirs before they are stopped.
  RankProcesses other_ranks;
  try {
    auto timeout = protocol::to_milliseconds(timeout_seconds);
    if (!Factory::is_registered(backend)) {
      throw protocol::ValueError("unknown --backend '" + backend + "' (" + backend_list(", ") +
                                 ")");
    }
    const auto backend_settings = Factory::settings_support(backend);
    const auto reads = [&](std::string_view setting) {
      return std::find(backend_settings.reads.begin(), backend_settings.reads.end(), setting) !=
             backend_settings.reads.end();
    };
    for (auto setting : kModeSettings) {
      const std::string flag = "--" + std::string(setting);
      if (app.count(flag) > 0 && !reads(setting)) {
        throw protocol::ValueError(flag + " is for --backend " +
                                   join(Factory::backends_reading(setting), ", ", " or "));
      }
    }
    std::optional<trainer_sdk::CurveKeys> curve;
    if (!curve_server_key_file.empty()) {
      curve = trainer_sdk::CurveKeys::from_files(curve_server_key_file, curve_secret_key_file);
    }
    std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>> clients;
    for (const auto& endpoint : split(workers)) {
      clients.push_back(
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, timeout, curve));
    }
    auto client = std::make_shared<trainer_sdk::FanOutClient>(clients);
    // Every trainer rank broadcasts (each sends what it holds), and each endpoint may be a
    // tensor-parallel worker of several ranks: the group's size comes from the workers.
    const int world_size = ranks + client->inference_world_size();
    if (ranks > 1 && !reads(settings::kTrainerRanks)) {
      throw protocol::ValueError(
          "--ranks " + std::to_string(ranks) + " is for the " +
          join(Factory::backends_reading(settings::kTrainerRanks), ", ", " and ") +
          " backends, where every trainer rank joins the broadcast group; "
          "--backend " +
          backend + " sends from rank 0");
    }
    if (ranks > 1 && rank > 0 && master_port == 0) {
      throw protocol::ValueError("--rank " + std::to_string(rank) + " of --ranks " +
                                 std::to_string(ranks) +
                                 " joins rank 0's group: give it rank 0's --master-port");
    }
    if (!fault_at.empty()) install_fault(fault_at, fault_action, split(workers).front(), curve);
    if (master_port == 0) master_port = transport::pick_free_port();
    // --ranks N without --rank: this process is rank 0, and starts the others (over NCCL, rank r
    // on the r-th GPU after --device: NCCL refuses two ranks of one group on one GPU).
    if (ranks > 1 && app.count("--rank") == 0) {
      for (int r = 1; r < ranks; ++r) {
        std::vector<std::string> args(argv + 1, argv + argc);
        args.insert(args.end(),
                    {"--rank", std::to_string(r), "--master-port", std::to_string(master_port)});
        if (reads(settings::kDevice))
          args.insert(args.end(), {"--device", std::to_string(device + r)});
        other_ranks.spawn(args);
      }
    }

    // The source: the checkpoint's tensors, owned, so each round can step them.
    auto checkpoint = model_loader::Checkpoint::open(source_dir);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& name : checkpoint.names())
      tensors.emplace_back(name, checkpoint.tensor(name).clone());
    std::shared_ptr<trainer_sdk::SharedWeightArena> arena;
    if (shm_arena) {
      // Trained in place there from now on: each step writes the bytes the workers will read.
      std::vector<protocol::ParamMeta> meta;
      for (const auto& [name, t] : tensors)
        meta.push_back(trainer_sdk::param_meta_of(name, t));
      arena = std::make_shared<trainer_sdk::SharedWeightArena>(
          trainer_sdk::SharedWeightArena::bytes_for(meta));
      for (auto& [name, t] : tensors)
        t = arena->copy_in(name, t);
    }
    // With several ranks, this rank holds its share, and its metadata still describes the whole.
    std::optional<std::unordered_set<std::string>> held;
    std::shared_ptr<trainer_sdk::TensorListSource> source;
    if (ranks > 1) {
      std::vector<std::string> names;
      for (const auto& [name, t] : tensors)
        names.push_back(name);
      if (shard.empty()) {
        bool has_experts = std::any_of(names.begin(), names.end(), [](const std::string& n) {
          return n.find(".experts.") != std::string::npos;
        });
        shard = has_experts ? "experts" : "layers";
      }
      held = trainer_sdk::held_by_rank(names, *trainer_sdk::shard_by_from_name(shard), rank, ranks);
      std::vector<protocol::ParamMeta> meta;
      std::map<std::string, at::Tensor> mine;
      for (const auto& [name, t] : tensors) {
        meta.push_back(trainer_sdk::param_meta_of(name, t));
        if (held->contains(name)) mine.emplace(name, t);
      }
      source = std::make_shared<trainer_sdk::TensorListSource>(std::move(meta), std::move(mine));
    } else {
      source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
    }
    std::uint64_t model_bytes = checkpoint.total_bytes();

    std::filesystem::path owned_disk_dir;
    // The directory this run made for the disk backend goes on every exit path.
    struct RemoveOnExit {
      std::filesystem::path& path;
      ~RemoveOnExit() {
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove_all(path, ec);
      }
    } cleanup{owned_disk_dir};
    if (reads(settings::kDiskDir) && disk_dir.empty()) {
      owned_disk_dir = std::filesystem::temp_directory_path() /
                       ("hotswap-trainer-" + std::to_string(::getpid()));
      disk_dir = owned_disk_dir.string();
    }
    // The backend's init info, built from the flags through the factory: its own declaration
    // says which settings it reads.
    trainer_sdk::TrainerSettings flags;
    flags.rank = rank;
    flags.world_size = world_size;
    flags.num_workers = static_cast<int>(clients.size());
    flags.timeout = timeout;
    flags.master_address = master_address;
    flags.master_port = master_port;
    flags.trainer_ranks = ranks;
    flags.device = device;
    flags.packed = packed;
    flags.packed_buffer_size_bytes = buffer_size;
    flags.use_nccl_unique_id = nccl_unique_id;
    flags.shm_arena = arena;
    flags.shm_window = shm_window;
    flags.disk_dir = disk_dir;
    auto engine = Factory::trainer_init(*backend_settings.make(flags), client,
                                        backend_settings.takes_source ? source : nullptr);
    // A delta backend sends each round's patches instead of its source.
    auto* sparse = dynamic_cast<trainer_sdk::SparseTrainerEngine*>(engine.get());

    for (int round = 1; round <= rounds; ++round) {
      std::string version = "round-" + std::to_string(round);
      std::uint64_t bytes = 0;
      // Set where the sync begins: the simulated step before it is the trainer's compute, not
      // part of the sync.
      Clock::time_point start;
      if (sparse != nullptr) {
        // A deterministic sparse delta: a few elements of every tensor of two dimensions.
        std::vector<trainer_sdk::SparsePatch> patches;
        for (std::size_t i = 0; i < tensors.size(); ++i) {
          auto& [name, t] = tensors[i];
          if (t.dim() != 2 || !at::isFloatingType(t.scalar_type())) continue;
          auto gen = generator(seed, round, i);
          std::int64_t n = std::min<std::int64_t>(16, t.numel());
          at::Tensor idx =
              at::randperm(t.numel(), gen, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, n);
          at::Tensor flat = t.view({-1});
          at::Tensor values =
              (flat.index_select(0, idx).to(at::kFloat) +
               step_scale * at::randn({n}, gen, at::TensorOptions().dtype(at::kFloat)))
                  .to(t.scalar_type());
          flat.index_put_({idx}, values);  // the trainer's own copy moves too, for --verify
          patches.push_back({name, idx.to(at::kInt), values, t.sizes().vec()});
          bytes += static_cast<std::uint64_t>(n * 4 + values.nbytes());
        }
        start = Clock::now();
        sparse->send_weights(patches, version);
      } else {
        // --step-scale 0 pushes the same weights every round, with no step at all (a bench's
        // steady state: the step's writes would leave the next push a cold, dirtied model).
        for (std::size_t i = 0; step_scale != 0 && i < tensors.size(); ++i) {
          auto& [name, t] = tensors[i];
          if (!at::isFloatingType(t.scalar_type())) continue;
          // Every rank draws a tensor's step from the same seed: replicas stay equal.
          if (held && !held->contains(name)) continue;
          auto gen = generator(seed, round, i);
          t.copy_(t.to(at::kFloat) +
                  step_scale * at::randn(t.sizes(), gen, at::TensorOptions().dtype(at::kFloat)));
        }
        if (model_bytes > (256u << 20)) {
          std::printf("round %d/%d: sending %.1f MB over %s...\n", round, rounds, model_bytes / 1e6,
                      backend.c_str());
          std::fflush(stdout);
        }
        start = Clock::now();
        engine->push({version, /*verify=*/false});
        bytes = model_bytes;
      }
      // The round's time is the sync's, start to commit; verification is timed apart.
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (!engine->sends_weights()) {
        std::printf(
            "round %d/%d: rank %d joined the round (it iterates its source; rank 0 sends)\n", round,
            rounds, rank);
        continue;
      }
      if (verify) trainer_sdk::verify_against_source(*client, *source);
      if (!engine->is_sender()) {
        std::printf("round %d/%d: rank %d of %d sent its share (%zu of %zu tensors held)%s\n",
                    round, rounds, rank, ranks, held->size(), tensors.size(),
                    verify ? ", verified" : "");
        std::fflush(stdout);
        continue;
      }
      auto served = clients[0]->call("weight_info")["weight_version"];
      std::printf("round %d/%d: %s %llu bytes in %.4f s = %.3f GB/s, weight_version %s%s\n", round,
                  rounds, backend.c_str(), static_cast<unsigned long long>(bytes), seconds,
                  bytes / seconds / 1e9, served.dump().c_str(), verify ? ", verified" : "");
      std::cout << json{{"round", round},
                        {"backend", backend},
                        {"bytes", bytes},
                        {"seconds", seconds},
                        {"gbps", bytes / seconds / 1e9},
                        {"weight_version", served},
                        {"verified", verify}}
                       .dump()
                << std::endl;
    }
    engine->shutdown();
    if (!other_ranks.wait_all(timeout)) {
      throw protocol::TimeoutError("the other trainer ranks did not end within the timeout");
    }
    if (other_ranks.failed() > 0) {
      std::cerr << "hotswap-trainer: " << other_ranks.failed() << " other trainer rank(s) failed\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "hotswap-trainer: " << (ranks > 1 ? "rank " + std::to_string(rank) + ": " : "")
              << transport::one_line_cause(e) << "\n";
    return 1;
  }
  return 0;
}
