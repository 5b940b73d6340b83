#include "worker/parallel/tensor_parallel_rank.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <ATen/ops/tensor.h>

#include <stdlib.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "model_loader/intra_op_team.hpp"
#include "model_loader/lora/lora_staging.hpp"
#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"
#include "protocol/weight_transfer_config.hpp"
#include "receiver/weight_transfer_engine_factory.hpp"
#include "transport/exception_text.hpp"
#include "worker/log_line.hpp"
#include "worker/parallel/rank_methods.hpp"
#include "worker/worker_options.hpp"

namespace hotswap::worker {

using nlohmann::json;

namespace {

// A ROUTER socket bound at `path`: an IPC endpoint in a directory only this user can enter,
// so that no other local user can drive a rank (the control socket's CURVE, when it is on,
// does not cover these channels).
zmq::socket_t bound_router(zmq::context_t& context, const std::string& path) {
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  socket.bind("ipc://" + path);
  return socket;
}

std::string private_directory() {
  std::string pattern = (std::filesystem::temp_directory_path() / "hotswap-rank-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw protocol::RuntimeError("cannot create a directory for the rank's sockets under " +
                                 std::filesystem::temp_directory_path().string());
  }
  return pattern;  // mkdtemp makes it 0700
}

}  // namespace

TensorParallelRank::TensorParallelRank(const WorkerOptions& options)
    : options_(options),
      socket_dir_(private_directory()),
      model_socket_(bound_router(context_, socket_dir_ + "/model")),
      weight_socket_(bound_router(context_, socket_dir_ + "/weights")) {
  const int rank = options.tensor_parallel_rank, size = options.tensor_parallel_size;
  auto model_options = model_options_for(options);
  collectives_ = std::make_unique<RankCollectives>(
      transport::Rendezvous{"127.0.0.1", options.tensor_parallel_port, rank, size,
                            options.timeout()},
      model_options.device);
  model_options.tensor_parallel_group = collectives_->for_model();
  model_ = model_loader::load_model(options.model, model_options);

  receiver::ParallelConfig parallel;
  parallel.data_parallel_rank = options.data_parallel_rank;
  parallel.data_parallel_size = options.data_parallel_size;
  parallel.tensor_parallel_size = size;
  parallel.rank = rank;
  std::unique_ptr<receiver::WeightTransferEngine> engine;
  if (options.weight_transfer_config) {
    auto config = protocol::WeightTransferConfig::from_json(*options.weight_transfer_config);
    engine = receiver::WeightTransferEngineFactory::create_engine(
        receiver::EngineContext{config, parallel, model_->device(), model_, options.timeout()});
  }
  controller_ = std::make_unique<WeightUpdateController>(std::move(engine), parallel);
}

TensorParallelRank::~TensorParallelRank() {
  controller_.reset();  // ends a session and closes the engine before the model goes
  model_socket_.close();
  weight_socket_.close();
  std::error_code ignored;
  std::filesystem::remove_all(socket_dir_, ignored);
}

json TensorParallelRank::model_call(const std::string& method, const json& params) {
  if (method == rank_methods::kForward) {
    for (const auto& id : params.at("released"))
      caches_.erase(id.get<std::uint64_t>());
    std::unique_lock loras(loras_mutex_);
    release_loras(params);
    std::vector<model_loader::ForwardSlice> slices;
    for (const auto& s : params.at("slices")) {
      model_loader::KvCache& cache = caches_[s.at("cache").get<std::uint64_t>()];
      const auto length = s.at("length").get<std::int64_t>();
      // Rank 0's cache is the truth, and caches never rewind: one rank 0 cleared (a preempted
      // sequence) comes back under a new id, its old one released, so both hold the same
      // blocks' worth and run out together.
      if (length != cache.length) {
        throw protocol::RuntimeError("KV cache " + s.at("cache").dump() + " holds " +
                                     std::to_string(cache.length) + " positions here but " +
                                     std::to_string(length) + " on rank 0");
      }
      const model_loader::LoraAdapter* lora = nullptr;
      if (auto id = s.find("lora"); id != s.end()) {
        auto held = loras_.find(id->get<std::uint64_t>());
        if (held == loras_.end()) {
          throw protocol::RuntimeError("LoRA adapter " + id->dump() + " is not held on this rank");
        }
        lora = held->second.get();
      }
      slices.push_back({&cache, s.at("tokens").get<std::int64_t>(), lora});
    }
    // Unlocked for the step: an id is let go only after rank 0's adapter went, i.e. after the
    // last step through it returned on every rank, so none of these goes meanwhile.
    loras.unlock();
    auto ids = params.at("tokens").get<std::vector<std::int64_t>>();
    try {
      model_->forward(at::tensor(ids, at::TensorOptions().dtype(at::kLong)), slices,
                      params.at("all_positions").get<bool>());
    } catch (...) {
      // A step that failed here may have left rank 0 waiting in an all-reduce, and this
      // rank's caches no longer match: it stops, and rank 0 reports the worker failed.
      failed_ = true;
      throw;
    }
    return json::object();
  }
  if (method == rank_methods::kZeroWeights) {
    model_->zero_weights();
    return json::object();
  }
  if (method == rank_methods::kRuntimeChecksums) {
    return {{"checksums", model_->runtime_checksums(params.at("key_prefix").get<std::string>())}};
  }
  if (method == rank_methods::kCheckpointChecksums) {
    model_->checkpoint_checksums();  // this rank's share of putting the tensors back together
    return json::object();
  }
  if (method == rank_methods::kLoadLoraAdapter) {
    auto adapter = model_->load_lora_adapter(params.at("path").get<std::string>(),
                                             params.at("max_rank").get<std::int64_t>());
    std::lock_guard loras(loras_mutex_);
    release_loras(params);
    loras_[params.at("id").get<std::uint64_t>()] = std::move(adapter);
    return json::object();
  }
  throw protocol::MethodNotFound("no model call '" + method + "' on a tensor-parallel rank");
}

json TensorParallelRank::weight_call(const std::string& method, const json& params) {
  // An update's parallel copies run on this thread: its team goes with the call, so that only
  // the thread that steps the shard keeps one (model_loader/intra_op_team.hpp).
  const model_loader::IntraOpTeamRelease release_team;
  auto& c = *controller_;
  if (method == rank_methods::kInitWeightTransferEngine) {
    c.init_weight_transfer_engine(params.at("init_info"));
  } else if (method == rank_methods::kStartWeightUpdate) {
    {
      std::lock_guard loras(loras_mutex_);
      release_loras(params);
    }
    auto lora = params.find("lora");
    c.start_weight_update(lora != params.end() ? lora_staging(*lora) : nullptr);
  } else if (method == rank_methods::kUpdateWeights) {
    c.update_weights(params.at("update_info"));
  } else if (method == rank_methods::kPrepareFinish) {
    c.prepare_finish();
  } else if (method == rank_methods::kFinishWeightUpdate) {
    c.finish_weight_update(std::nullopt);  // the version is rank 0's to keep
  } else if (method == rank_methods::kAbortWeightUpdate) {
    c.abort_weight_update();
  } else if (method == rank_methods::kShutdownWeightTransferEngine) {
    c.shutdown_weight_transfer_engine();
  } else {
    throw protocol::MethodNotFound("no weight call '" + method + "' on a tensor-parallel rank");
  }
  // What rank 0 keeps of each rank: whether its shard is dirty, and what it has received (for
  // /metrics).
  return {{"dirty", model_->is_dirty()}, {"bytes_received", c.bytes_received()}};
}

void TensorParallelRank::release_loras(const json& params) {
  if (auto released = params.find("released_loras"); released != params.end()) {
    for (const auto& id : *released)
      loras_.erase(id.get<std::uint64_t>());
  }
}

std::shared_ptr<model_loader::LoadableModel> TensorParallelRank::lora_staging(const json& lora) {
  const model_loader::WeightMapping* mapping = model_->weight_mapping();
  if (mapping == nullptr) {
    throw protocol::ValueError("this rank's model takes no LoRA adapters");
  }
  const auto id = lora.at("id").get<std::uint64_t>();
  return std::make_shared<model_loader::LoraStaging>(
      *mapping, model_->device(),
      model_loader::LoraConfig::from_json(lora.at("config"),
                                          lora.at("max_rank").get<std::int64_t>()),
      lora.at("required").get<std::set<std::string>>(),
      [this, id](std::shared_ptr<const model_loader::LoraAdapter> adapter) {
        std::lock_guard loras(loras_mutex_);
        loras_[id] = std::move(adapter);
      });
}

void TensorParallelRank::serve(zmq::socket_t& socket, const EventFd& stop,
                               json (TensorParallelRank::*handle)(const std::string&,
                                                                  const json&)) {
  zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                             {nullptr, stop.fd(), ZMQ_POLLIN, 0}};
  while (true) {
    zmq::poll(items, 2, std::chrono::milliseconds(-1));
    if (items[1].revents & ZMQ_POLLIN) return;
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      continue;
    }
    if (frames.size() < 2) continue;
    std::string body = frames.back().to_string();
    frames.pop_back();
    auto answer = protocol::answer_frame(
        body, options_.max_request_bytes, [&](const protocol::RpcRequest& request) {
          try {
            return (this->*handle)(request.method, request.params);
          } catch (const protocol::Error&) {
            throw;
          } catch (const std::exception& e) {
            // A libtorch error's text runs on with its C++ stack: rank 0 quotes one line.
            throw protocol::RuntimeError(transport::one_line_cause(e));
          }
        });
    frames.emplace_back(std::move(answer.frame));
    zmq::send_multipart(socket, frames);
    if (failed_) {
      LogLine{} << "hotswap-worker rank " << options_.tensor_parallel_rank
                << ": a forward step failed; this rank stops, as its shard is out of step";
      stop.notify();
      return;
    }
  }
}

int TensorParallelRank::run(const EventFd& stop) {
  std::cout << "hotswap-worker rank " << options_.tensor_parallel_rank << " ready: model "
            << model_socket_.get(zmq::sockopt::last_endpoint) << "; weights "
            << weight_socket_.get(zmq::sockopt::last_endpoint) << std::endl;
  std::thread weights([&] { serve(weight_socket_, stop, &TensorParallelRank::weight_call); });
  serve(model_socket_, stop, &TensorParallelRank::model_call);
  stop.notify();  // the weight thread too, whichever loop ended first
  weights.join();
  return failed_ ? 1 : 0;
}

int run_tensor_parallel_rank(const WorkerOptions& options, const EventFd& stop) {
  // A rank outlives nothing: when rank 0 goes, so does it (SIGTERM, handled as a stop).
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() == 1) return 1;  // rank 0 went before the line above took effect
  try {
    TensorParallelRank rank(options);
    return rank.run(stop);
  } catch (const std::exception& e) {
    LogLine{} << "hotswap-worker rank " << options.tensor_parallel_rank << ": "
              << transport::one_line_cause(e);
    return 1;
  }
}

}  // namespace hotswap::worker
