// PeerHangup: whether the client of an HTTP request has hung up, so that a long generate whose
// caller left stops costing a batch slot. cpp-httplib hands a handler no socket, so the
// connection is found among this process's descriptors by its two ends (the handler's socket
// stays open while it runs, so the descriptor is stable); poll's POLLRDHUP then says when the
// client closed its side.
#pragma once

#include <string>

namespace hotswap::worker {

class PeerHangup {
 public:
  // Finds the TCP connection from remote_port to local_port (addresses as cpp-httplib gives
  // them). When none or several match, hung_up() stays false: nothing is cancelled on a guess.
  PeerHangup(const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port);

  bool found() const { return fd_ >= 0; }
  bool hung_up() const;

 private:
  int fd_ = -1;  // not owned: the HTTP server's
};

}  // namespace hotswap::worker
