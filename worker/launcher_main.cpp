// hotswap-launch: starts N hotswap-worker replicas with consecutive control ports and
// data-parallel ranks, prints their endpoints as one JSON line once all are ready, stops them all
// on SIGINT/SIGTERM, and exits non-zero naming the replica if one dies.
//
//   hotswap-launch --replicas 2 [--base-port 5555] [--devices cpu,cpu] -- --model DIR ...
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "protocol/timeouts.hpp"
#include "transport/child_process.hpp"
#include "worker/device_plan.hpp"
#include "worker/event_fd.hpp"

using namespace hotswap;

namespace {

// hotswap-worker beside this binary, else on PATH.
std::string worker_binary(const char* argv0) {
  std::error_code ec;
  auto self = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) {
    auto beside = self.parent_path() / "hotswap-worker";
    if (std::filesystem::exists(beside)) return beside.string();
  }
  (void)argv0;
  return "hotswap-worker";
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Start N hotswap-worker replicas (data-parallel ranks 0..N-1)"};
  int replicas = 1, base_port = 5555;
  double ready_timeout = protocol::kDefaultTimeoutSeconds;
  std::string devices, host = "127.0.0.1";
  std::vector<std::string> worker_args;
  app.add_option("--replicas", replicas)->required()->check(CLI::PositiveNumber);
  app.add_option("--base-port", base_port, "control port of replica 0; replica i gets +i")
      ->capture_default_str();
  app.add_option("--devices", devices, "comma-separated device per replica, e.g. cuda:0,cuda:1");
  app.add_option("--host", host, "address the control sockets bind to")->capture_default_str();
  app.add_option("--ready-timeout", ready_timeout, "seconds to wait for every replica")
      ->capture_default_str();
  int tensor_parallel_size = 1;
  app.add_option("--tensor-parallel-size", tensor_parallel_size,
                 "rank processes per replica; replica i on cuda:K uses cuda:K..K+N-1")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("worker_args", worker_args, "arguments for every hotswap-worker, after --");
  app.allow_extras(false);
  CLI11_PARSE(app, argc, argv);

  for (const auto& a : worker_args) {
    if (a == "--control" || a == "--data-parallel-rank" || a == "--data-parallel-size" ||
        a == "--tensor-parallel-size" || (a == "--device" && !devices.empty())) {
      std::cerr << "hotswap-launch: " << a << " is set per replica by the launcher; remove it\n";
      return 2;
    }
  }
  auto device_list = split(devices);
  if (!device_list.empty() && static_cast<int>(device_list.size()) != replicas) {
    std::cerr << "hotswap-launch: --devices lists " << device_list.size() << " devices for "
              << replicas << " replicas\n";
    return 2;
  }
  // The device every replica is given after --, when --devices does not set one per replica
  // (the worker's default, the CPU, without one).
  std::string shared_device = "cpu";
  for (std::size_t i = 0; i < worker_args.size(); ++i) {
    if (worker_args[i] == "--device" && i + 1 < worker_args.size()) {
      shared_device = worker_args[i + 1];
    } else if (worker_args[i].starts_with("--device=")) {
      shared_device = worker_args[i].substr(9);
    }
  }
  try {
    // Before any replica starts. A --devices list whose replicas' ranks meet on a GPU would put
    // two ranks of an nccl weight-transfer group on one device, which NCCL may hang on; a GPU
    // past the machine's last would leave a rank waiting out its NCCL init. Replicas given one
    // --device after -- share it on purpose (colocated workers over ipc, shm, gloo or disk):
    // only that the device exists is checked.
    if (device_list.empty()) {
      worker::plan_devices_on_this_machine({shared_device}, tensor_parallel_size, "--device");
    } else {
      worker::plan_devices_on_this_machine(device_list, tensor_parallel_size, "--devices");
    }
  } catch (const std::exception& e) {
    std::cerr << "hotswap-launch: " << e.what() << "\n";
    return 2;
  }

  worker::EventFd stop;
  worker::notify_on_stop_signals(stop);

  const std::string binary = worker_binary(argv[0]);
  std::vector<std::unique_ptr<transport::ChildProcess>> children;
  std::vector<std::string> endpoints;
  for (int i = 0; i < replicas; ++i) {
    std::string endpoint = "tcp://" + host + ":" + std::to_string(base_port + i);
    std::vector<std::string> args = worker_args;
    args.insert(args.end(), {"--control", endpoint, "--data-parallel-rank", std::to_string(i),
                             "--data-parallel-size", std::to_string(replicas)});
    if (!device_list.empty()) args.insert(args.end(), {"--device", device_list[i]});
    args.insert(args.end(), {"--tensor-parallel-size", std::to_string(tensor_parallel_size)});
    children.push_back(std::make_unique<transport::ChildProcess>(binary, args));
    endpoints.push_back(endpoint);
  }

  // Forwards each replica's output with a prefix; returns the index of a replica that exited
  // or failed (a tensor-parallel replica whose rank died says so and keeps its process).
  std::vector<bool> ready(replicas, false);
  std::vector<std::string> failed(replicas);
  auto pump = [&](std::chrono::milliseconds timeout) -> std::optional<int> {
    std::vector<pollfd> fds;
    for (auto& c : children)
      fds.push_back({c->output_fd(), POLLIN, 0});
    fds.push_back({stop.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    for (int i = 0; i < replicas; ++i) {
      children[i]->read_output(std::chrono::milliseconds(0));
      for (const auto& line : children[i]->take_lines()) {
        if (line.starts_with("hotswap-worker ready")) ready[i] = true;
        if (line.starts_with("hotswap-worker failed: ")) failed[i] = line.substr(23);
        std::cerr << "[replica " << i << "] " << line << "\n";
      }
      if (!failed[i].empty() || children[i]->poll_exit()) return i;
    }
    return std::nullopt;
  };
  auto signalled = [&] {
    pollfd p{stop.fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  };
  auto died = [&](int i) {
    std::cerr << "hotswap-launch: replica " << i << " (" << endpoints[i] << ") ";
    if (!failed[i].empty()) {
      std::cerr << "failed: " << failed[i];
    } else {
      std::cerr << "exited with status " << *children[i]->poll_exit();
    }
    std::cerr << "; stopping the others\n";
    return 1;
  };

  auto deadline = std::chrono::steady_clock::now() + protocol::to_milliseconds(ready_timeout);
  while (std::count(ready.begin(), ready.end(), true) < replicas) {
    if (auto dead = pump(std::chrono::milliseconds(100))) return died(*dead);
    if (signalled()) return 0;
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "hotswap-launch: not every replica was ready within " << ready_timeout << " s\n";
      return 1;
    }
  }
  nlohmann::json pids = nlohmann::json::array();
  for (auto& c : children)
    pids.push_back(c->pid());
  std::cout << nlohmann::json{{"endpoints", endpoints}, {"pids", pids}}.dump() << std::endl;

  while (!signalled()) {
    if (auto dead = pump(std::chrono::milliseconds(500))) return died(*dead);
  }
  std::cerr << "hotswap-launch: stopping " << replicas << " replicas\n";
  return 0;  // the ChildProcess destructors stop every replica
}
