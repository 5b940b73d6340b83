#include "worker/parallel/tensor_parallel_group.hpp"

#include <algorithm>
#include <filesystem>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/servable_model.hpp"
#include "protocol/errors.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/log_line.hpp"
#include "worker/worker_options.hpp"

namespace hotswap::worker {
namespace {

// This very binary: the rank processes must run the same code as rank 0.
std::string self_binary(const std::string& fallback) {
  std::error_code ec;
  auto self = std::filesystem::canonical("/proc/self/exe", ec);
  return ec ? fallback : self.string();
}

// Refuses a model that does not split `size` ways before any process is started: the message
// then comes from rank 0, at once, rather than from every rank after the group has formed.
void check_model_splits(const std::string& model_dir, int size, bool expert_parallel) {
  model_loader::ModelConfig config;
  try {
    config = model_loader::ModelConfig::load(model_dir);
  } catch (const std::exception&) {
    return;  // loading the model says what is wrong with it
  }
  model_loader::ArchitectureRegistry::builtin()
      .find(config.architecture_name())
      .weight_mapping(config, {0, size, expert_parallel});
}

// "hotswap-worker rank R ready: model <endpoint>; weights <endpoint>"
struct ReadyLine {
  std::string model, weights;
};
std::optional<ReadyLine> parse_ready(const std::string& output, int rank) {
  const std::string marker = "hotswap-worker rank " + std::to_string(rank) + " ready: model ";
  auto pos = output.find(marker);
  if (pos == std::string::npos) return std::nullopt;
  auto end = output.find('\n', pos);
  if (end == std::string::npos) return std::nullopt;
  std::string line = output.substr(pos + marker.size(), end - pos - marker.size());
  const std::string separator = "; weights ";
  auto split = line.find(separator);
  if (split == std::string::npos) return std::nullopt;
  return ReadyLine{line.substr(0, split), line.substr(split + separator.size())};
}

}  // namespace

TensorParallelGroup::TensorParallelGroup(const WorkerOptions& options)
    : size_(options.tensor_parallel_size),
      timeout_(options.timeout()),
      peer_bytes_received_(static_cast<std::size_t>(std::max(size_ - 1, 0))) {
  check_model_splits(options.model, size_, options.enable_expert_parallel);
  const int port = transport::pick_free_port();
  const std::string binary = self_binary(options.program);
  for (int r = 1; r < size_; ++r) {
    auto args = options.arguments;
    args.insert(args.end(), {"--tensor-parallel-rank", std::to_string(r), "--tensor-parallel-port",
                             std::to_string(port)});
    ranks_.push_back(std::make_unique<transport::ChildProcess>(binary, args));
  }
  try {
    collectives_ = std::make_unique<RankCollectives>(
        transport::Rendezvous{"127.0.0.1", port, 0, size_, timeout_},
        model_options_for(options).device);
  } catch (const std::exception& e) {
    std::string said;
    for (auto& rank : ranks_) {
      rank->stop(std::chrono::seconds(2));
      said += rank->output();
    }
    throw protocol::RuntimeError(std::string("the tensor-parallel ranks did not form a group: ") +
                                 e.what() + (said.empty() ? "" : "; they said: " + said));
  }
}

TensorParallelGroup::~TensorParallelGroup() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  for (auto& rank : ranks_)
    rank->stop(std::chrono::seconds(5));
}

void TensorParallelGroup::wait_until_ready() {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int r = 1; r < size_; ++r) {
    transport::ChildProcess& rank = *ranks_[r - 1];
    std::optional<ReadyLine> ready;
    while (!(ready = parse_ready(rank.output(), r))) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !rank.read_output(std::min(left, std::chrono::milliseconds(100)))) {
        if (rank.poll_exit() || left.count() <= 0) {
          throw protocol::RuntimeError("tensor-parallel rank " + std::to_string(r) +
                                       " did not become ready: " + rank.output());
        }
      }
    }
    model_channels_.push_back(std::make_unique<RankChannel>(context_, ready->model, r));
    weight_channels_.push_back(std::make_unique<RankChannel>(context_, ready->weights, r));
  }
  watcher_ = std::thread([this] { watch(); });
}

void TensorParallelGroup::watch() {
  while (!stopping_) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      transport::ChildProcess& rank = *ranks_[i];
      const int r = static_cast<int>(i) + 1;
      std::vector<std::string> lines;
      std::optional<int> status;
      {
        std::lock_guard lock(state_mutex_);
        while (rank.read_output(std::chrono::milliseconds(0))) {
        }
        lines = rank.take_lines();
        if (rank.running()) status = rank.poll_exit();
      }
      for (const auto& line : lines)
        LogLine{} << "[rank " << r << "] " << line;
      if (status && !stopping_) {
        std::string why =
            "tensor-parallel rank " + std::to_string(r) + " (of " + std::to_string(size_) +
            ") exited" +
            (rank.term_signal() != 0 ? " on signal " + std::to_string(rank.term_signal())
                                     : " with status " + std::to_string(*status)) +
            "; this worker cannot generate or take weights until it is restarted";
        {
          std::lock_guard lock(state_mutex_);
          if (!failure_) failure_ = why;
        }
        // hotswap-launch reads this line: the replica has failed though its process lives.
        LogLine{} << "hotswap-worker failed: " << why;
        // Steps waiting on the rank's share of an all-reduce fail now, not at their timeout.
        collectives_->abort();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::optional<std::string> TensorParallelGroup::failure() const {
  std::lock_guard lock(state_mutex_);
  return failure_;
}

void TensorParallelGroup::check_alive() const {
  if (auto why = failure()) throw protocol::RuntimeError(*why);
}

void TensorParallelGroup::send_all(Channel channel, std::string_view method,
                                   const nlohmann::json& params) {
  check_alive();
  auto& channels = channel == Channel::kModel ? model_channels_ : weight_channels_;
  for (auto& c : channels)
    c->send(method, params);
}

std::vector<std::uint64_t> TensorParallelGroup::peer_bytes_received() const {
  std::lock_guard lock(state_mutex_);
  return peer_bytes_received_;
}

std::vector<nlohmann::json> TensorParallelGroup::receive_all(Channel channel) {
  auto& channels = channel == Channel::kModel ? model_channels_ : weight_channels_;
  std::vector<nlohmann::json> answers;
  std::exception_ptr first;
  for (auto& c : channels) {
    try {
      answers.push_back(c->receive(timeout_, [this] { return failure().has_value(); }));
    } catch (...) {
      if (!first) first = std::current_exception();
      answers.emplace_back();
    }
  }
  if (first) {
    check_alive();  // a rank that died is the better diagnosis
    std::rethrow_exception(first);
  }
  return answers;
}

std::vector<nlohmann::json> TensorParallelGroup::call_all(Channel channel, std::string_view method,
                                                          const nlohmann::json& params,
                                                          const std::function<void()>& local) {
  send_all(channel, method, params);
  std::exception_ptr failure;
  try {
    local();
  } catch (...) {
    failure = std::current_exception();
  }
  std::vector<nlohmann::json> answers;
  try {
    answers = receive_all(channel);
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  if (channel == Channel::kWeights && !answers.empty()) {
    // Every weight call's answer carries the rank's dirty flag (a failed call leaves it as it
    // was; the abort that follows it reports it).
    bool dirty = false;
    for (const auto& a : answers)
      dirty = dirty || (a.is_object() && a.value("dirty", false));
    peers_dirty_ = dirty;
    std::lock_guard lock(state_mutex_);
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (answers[i].is_object() && answers[i].contains("bytes_received")) {
        peer_bytes_received_[i] = answers[i]["bytes_received"].get<std::uint64_t>();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  return answers;
}

}  // namespace hotswap::worker
