#include "transport/process_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "transport/posix_check.hpp"

namespace hotswap::transport {
namespace {

struct StatLine {
  char state = '?';
  std::uint64_t start_time = 0;
};

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat; nullopt-like state '?' if no such
// process. The command name (field 2) may hold spaces and parentheses: fields are counted from
// its last ')'.
StatLine read_stat(pid_t pid) {
  StatLine out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return out;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int index = 3; fields >> field; ++index) {
    if (index == 3) out.state = field.empty() ? '?' : field[0];
    if (index == 22) {
      out.start_time = std::strtoull(field.c_str(), nullptr, 10);
      break;
    }
  }
  return out;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

ProcessIdentity ProcessIdentity::self() {
  return of(::getpid());
}

ProcessIdentity ProcessIdentity::of(pid_t pid) {
  return {pid, read_stat(pid).start_time};
}

bool ProcessIdentity::alive() const {
  if (pid <= 0) return false;
  const StatLine stat = read_stat(pid);
  if (stat.state == '?' || stat.state == 'Z' || stat.state == 'X') return false;
  return start_time == 0 || stat.start_time == start_time;
}

ProcessWatch::ProcessWatch(ProcessIdentity process, std::function<void()> on_exit)
    : process_(process), stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  HOTSWAP_POSIX_CHECK(stop_fd_.get(), "create", "an eventfd to stop a process watch");
  thread_ =
      std::thread([this, on_exit = std::move(on_exit)]() mutable { run(std::move(on_exit)); });
}

ProcessWatch::~ProcessWatch() {
  if (stop_fd_.valid()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto written = ::write(stop_fd_.get(), &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

void ProcessWatch::run(std::function<void()> on_exit) {
  // A pidfd turns readable when the process exits, zombie or not; where there is none (old
  // kernels, some sandboxes), poll its /proc entry instead.
  const UniqueFd pidfd(process_.alive() ? open_pidfd(process_.pid) : -1);
  while (process_.alive()) {
    pollfd fds[2] = {{stop_fd_.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
    const int ready = ::poll(fds, pidfd.valid() ? 2 : 1, pidfd.valid() ? 1000 : 200);
    if (ready > 0 && (fds[0].revents & POLLIN)) return;  // stopped
  }
  exited_ = true;
  on_exit();
}

}  // namespace hotswap::transport
