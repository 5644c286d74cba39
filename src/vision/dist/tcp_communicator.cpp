#include "vision/dist/tcp_communicator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "vision/core/error.h"

namespace vision::dist {
namespace {

using TcpClock = std::chrono::steady_clock;

constexpr uint32_t kTcpHello = 0x564e5354;  // "VNST": a rank's first message (its rank and the world size)

// What each message of a collective announces, so that ranks whose collectives are out of order fail clearly.
enum class TcpOp : uint32_t { hello = 1, reduce_sum, reduce_max, broadcast, gather, result };

const char* tcp_op_name(TcpOp op) {
  switch (op) {
    case TcpOp::hello: return "hello";
    case TcpOp::reduce_sum: return "an all-reduce";
    case TcpOp::reduce_max: return "an all-reduce of the run's state";
    case TcpOp::broadcast: return "a broadcast";
    case TcpOp::gather: return "an all-gather";
    case TcpOp::result: return "a collective's result";
  }
  return "an unknown message";
}

struct TcpHeader {
  uint32_t op;
  uint32_t rank;
  uint64_t bytes;
};

class TcpSocket {
 public:
  TcpSocket() = default;
  explicit TcpSocket(int fd) : fd_(fd) {}
  TcpSocket(TcpSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  TcpSocket& operator=(TcpSocket&& o) noexcept {
    if (this != &o) close(), fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~TcpSocket() { close(); }
  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void tcp_set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    fail_as(ErrorKind::device, "rendezvous: fcntl(O_NONBLOCK) failed: {}", std::strerror(errno));
}

// Waits until fd is ready for `events` or the deadline passes (then false).
bool tcp_wait_ready(int fd, short events, TcpClock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TcpClock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) fail_as(ErrorKind::device, "rendezvous: poll failed: {}", std::strerror(errno));
  }
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(int rank, int world, int local_rank, const std::string& addr, int port,
                  std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), local_rank_(local_rank) {
    timeout_ = timeout;
    VISION_CHECK(world >= 1 && rank >= 0 && rank < world, "rendezvous: rank {} of a world of {}", rank, world);
    VISION_CHECK(port > 0 && port < 65536, "MASTER_PORT={} is not a TCP port", port);
    const auto deadline = TcpClock::now() + timeout;
    if (rank == 0) {
      listen_and_accept(port, deadline);
    } else {
      connect_to_root(addr, port, deadline);
    }
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "tcp"; }

  void all_reduce_sum(float* data, size_t n) override {
    if (world_ == 1 || n == 0) return;
    const size_t bytes = n * sizeof(float);
    if (rank_ == 0) {
      std::vector<float> other(n);
      for (int r = 1; r < world_; ++r) {  // in rank order: the same sum whatever the arrival order
        receive(peers_[static_cast<size_t>(r)], r, TcpOp::reduce_sum, other.data(), bytes);
        for (size_t i = 0; i < n; ++i) data[i] += other[i];
      }
      for (int r = 1; r < world_; ++r) send(peers_[static_cast<size_t>(r)], TcpOp::result, data, bytes);
    } else {
      send(peers_[0], TcpOp::reduce_sum, data, bytes);
      receive(peers_[0], 0, TcpOp::result, data, bytes);
    }
  }

  int64_t all_reduce_max(int64_t value) override {
    if (world_ == 1) return value;
    if (rank_ == 0) {
      for (int r = 1; r < world_; ++r) {
        int64_t other = 0;
        receive(peers_[static_cast<size_t>(r)], r, TcpOp::reduce_max, &other, sizeof other);
        value = std::max(value, other);
      }
      for (int r = 1; r < world_; ++r) send(peers_[static_cast<size_t>(r)], TcpOp::result, &value, sizeof value);
    } else {
      send(peers_[0], TcpOp::reduce_max, &value, sizeof value);
      receive(peers_[0], 0, TcpOp::result, &value, sizeof value);
    }
    return value;
  }

  void broadcast(void* data, size_t bytes, int root) override {
    VISION_CHECK(root >= 0 && root < world_, "broadcast from rank {} in a world of {} ranks", root, world_);
    if (world_ == 1) return;
    if (rank_ == 0) {
      if (root != 0) receive(peers_[static_cast<size_t>(root)], root, TcpOp::broadcast, data, bytes);
      for (int r = 1; r < world_; ++r)
        if (r != root) send(peers_[static_cast<size_t>(r)], TcpOp::result, data, bytes);
    } else if (rank_ == root) {
      send(peers_[0], TcpOp::broadcast, data, bytes);
    } else {
      receive(peers_[0], 0, TcpOp::result, data, bytes);
    }
  }

  std::vector<std::string> all_gather(const std::string& bytes) override {
    if (world_ == 1) return {bytes};
    std::string packed;
    if (rank_ == 0) {
      std::vector<std::string> all(static_cast<size_t>(world_));
      all[0] = bytes;
      for (int r = 1; r < world_; ++r) all[static_cast<size_t>(r)] = receive_any(peers_[static_cast<size_t>(r)], r);
      for (const std::string& s : all) {
        const uint64_t n = s.size();
        packed.append(reinterpret_cast<const char*>(&n), sizeof n).append(s);
      }
      for (int r = 1; r < world_; ++r) send(peers_[static_cast<size_t>(r)], TcpOp::result, packed.data(), packed.size());
      return all;
    }
    send(peers_[0], TcpOp::gather, bytes.data(), bytes.size());
    packed = receive_any(peers_[0], 0, TcpOp::result);
    std::vector<std::string> all;
    for (size_t at = 0; at < packed.size();) {
      uint64_t n = 0;
      VISION_CHECK(at + sizeof n <= packed.size(), "all_gather: a truncated result from rank 0");
      std::memcpy(&n, packed.data() + at, sizeof n);
      at += sizeof n;
      VISION_CHECK(n <= packed.size() - at, "all_gather: a truncated result from rank 0");
      all.push_back(packed.substr(at, n));
      at += n;
    }
    VISION_CHECK(all.size() == static_cast<size_t>(world_), "all_gather: rank 0 sent {} parts for {} ranks", all.size(),
                 world_);
    return all;
  }

  void barrier() override { all_reduce_max(0); }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    for (TcpSocket& s : peers_) s.close();  // the other ranks see the connection close and end too
    std::_Exit(code);
  }

 private:
  void listen_and_accept(int port, TcpClock::time_point deadline) {
    TcpSocket listener(::socket(AF_INET, SOCK_STREAM, 0));
    if (listener.fd() < 0) fail_as(ErrorKind::device, "rendezvous: socket failed: {}", std::strerror(errno));
    const int one = 1;
    ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0)
      fail_as(ErrorKind::device, "rendezvous: cannot listen on port {} (MASTER_PORT): {}", port,
              std::strerror(errno));
    if (::listen(listener.fd(), world_) < 0)
      fail_as(ErrorKind::device, "rendezvous: listen failed: {}", std::strerror(errno));
    tcp_set_nonblocking(listener.fd());
    peers_.resize(static_cast<size_t>(world_));
    for (int joined = 1; joined < world_;) {
      if (!tcp_wait_ready(listener.fd(), POLLIN, deadline))
        fail_as(ErrorKind::device,
                "rendezvous: {} of the {} other ranks connected to port {} within {:.0f} s (did they start, with the "
                "same MASTER_ADDR and MASTER_PORT?)",
                joined - 1, world_ - 1, port, std::chrono::duration<double>(timeout_).count());
      TcpSocket s(::accept(listener.fd(), nullptr, nullptr));
      if (s.fd() < 0) {
        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
        fail_as(ErrorKind::device, "rendezvous: accept failed: {}", std::strerror(errno));
      }
      tcp_set_nonblocking(s.fd());
      configure(s.fd());
      uint32_t hello[3] = {};
      receive_raw(s, "a connecting rank", hello, sizeof hello, deadline);
      const int r = static_cast<int>(hello[1]);
      VISION_CHECK(hello[0] == kTcpHello, "rendezvous: a connection to port {} that is not a rank of vision", port);
      VISION_CHECK(static_cast<int>(hello[2]) == world_, "rendezvous: rank {} says the world has {} ranks, rank 0 {}",
                   r, hello[2], world_);
      VISION_CHECK(r >= 1 && r < world_ && peers_[static_cast<size_t>(r)].fd() < 0,
                   "rendezvous: a second rank {} connected (two ranks with the same RANK?)", r);
      peers_[static_cast<size_t>(r)] = std::move(s);
      ++joined;
    }
    for (int r = 1; r < world_; ++r) {
      const uint32_t ack = kTcpHello;
      send_raw(peers_[static_cast<size_t>(r)], r, &ack, sizeof ack, deadline);
    }
  }

  void connect_to_root(const std::string& addr, int port, TcpClock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int g = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (g != 0) fail("MASTER_ADDR={}: {}", addr, ::gai_strerror(g));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, ::freeaddrinfo);
    peers_.resize(1);
    for (;;) {  // rank 0 may not listen yet: retry until the deadline
      TcpSocket s(::socket(found->ai_family, found->ai_socktype, found->ai_protocol));
      if (s.fd() < 0) fail_as(ErrorKind::device, "rendezvous: socket failed: {}", std::strerror(errno));
      if (::connect(s.fd(), found->ai_addr, found->ai_addrlen) == 0) {
        tcp_set_nonblocking(s.fd());
        configure(s.fd());
        peers_[0] = std::move(s);
        break;
      }
      if (TcpClock::now() > deadline)
        fail_as(ErrorKind::device, "rendezvous: could not reach rank 0 at {}:{} within {:.0f} s: {}", addr, port, std::chrono::duration<double>(timeout_).count(), std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const uint32_t hello[3] = {kTcpHello, static_cast<uint32_t>(rank_), static_cast<uint32_t>(world_)};
    send_raw(peers_[0], 0, hello, sizeof hello, deadline);
    uint32_t ack = 0;
    receive_raw(peers_[0], "rank 0", &ack, sizeof ack, deadline);
    VISION_CHECK(ack == kTcpHello, "rendezvous: rank 0 at {}:{} answered with something else than vision's", addr, port);
  }

  static void configure(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small control messages go at once
  }

  void send_raw(TcpSocket& s, int to, const void* data, size_t bytes, TcpClock::time_point deadline) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      if (!tcp_wait_ready(s.fd(), POLLOUT, deadline)) timed_out(fmt::format("sending to rank {}", to));
      const ssize_t n = ::send(s.fd(), p, bytes, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        fail_as(ErrorKind::device, "the connection to rank {} failed ({}): it died or ended", to, std::strerror(errno));
      }
      p += n, bytes -= static_cast<size_t>(n);
    }
  }

  void receive_raw(TcpSocket& s, const std::string& from, void* data, size_t bytes, TcpClock::time_point deadline) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      if (!tcp_wait_ready(s.fd(), POLLIN, deadline)) timed_out("waiting for " + from);
      const ssize_t n = ::recv(s.fd(), p, bytes, 0);
      if (n == 0)
        fail_as(ErrorKind::device, "{} closed its connection: it died or ended", from);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        fail_as(ErrorKind::device, "receiving from {} failed: {}", from, std::strerror(errno));
      }
      p += n, bytes -= static_cast<size_t>(n);
    }
  }

  [[noreturn]] void timed_out(const std::string& what) { fail_as(ErrorKind::device, "{}", timeout_message(what)); }

  void send(TcpSocket& s, TcpOp op, const void* data, size_t bytes) {
    const auto deadline = TcpClock::now() + timeout_;
    const int to = &s == &peers_[0] ? 0 : static_cast<int>(&s - peers_.data());
    const TcpHeader h{static_cast<uint32_t>(op), static_cast<uint32_t>(rank_), bytes};
    send_raw(s, to, &h, sizeof h, deadline);
    send_raw(s, to, data, bytes, deadline);
  }

  TcpHeader receive_header(TcpSocket& s, int from, TcpOp op, TcpClock::time_point deadline) {
    TcpHeader h{};
    receive_raw(s, fmt::format("rank {}", from), &h, sizeof h, deadline);
    VISION_CHECK(h.op == static_cast<uint32_t>(op) && static_cast<int>(h.rank) == from,
                 "rank {} sent {} while this rank waits for {}: the ranks' collectives are out of order", h.rank, tcp_op_name(static_cast<TcpOp>(h.op)), tcp_op_name(op));
    return h;
  }

  void receive(TcpSocket& s, int from, TcpOp op, void* data, size_t bytes) {
    const auto deadline = TcpClock::now() + timeout_;
    const TcpHeader h = receive_header(s, from, op, deadline);
    VISION_CHECK(h.bytes == bytes, "rank {} sent {} bytes of {}, this rank expects {}", from, h.bytes, tcp_op_name(op), bytes);
    receive_raw(s, fmt::format("rank {}", from), data, bytes, deadline);
  }

  std::string receive_any(TcpSocket& s, int from, TcpOp op = TcpOp::gather) {
    const auto deadline = TcpClock::now() + timeout_;
    const TcpHeader h = receive_header(s, from, op, deadline);
    VISION_CHECK(h.bytes <= (uint64_t{1} << 32), "rank {} sends {} bytes in one message", from,
                 h.bytes);
    std::string out(h.bytes, '\0');
    receive_raw(s, fmt::format("rank {}", from), out.data(), out.size(), deadline);
    return out;
  }

  int rank_, world_, local_rank_;
  std::vector<TcpSocket> peers_;  // rank 0: one per other rank (index = rank); the others: [0] = rank 0
};

}  // namespace

std::shared_ptr<Communicator> make_tcp_world(int rank, int world, int local_rank, const std::string& master_addr,
                                             int master_port, std::chrono::milliseconds timeout) {
  return std::make_shared<TcpCommunicator>(rank, world, local_rank, master_addr, master_port, timeout);
}

}  // namespace vision::dist
