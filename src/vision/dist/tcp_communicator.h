// The communicator of ranks launched the way torchrun launches them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), without an MPI launcher: rank 0 listens on MASTER_ADDR:MASTER_PORT and every other rank connects to
// it (retrying until the timeout). The collectives go through rank 0 (a star: each rank sends to rank 0, which combines
// in rank order and sends the result back), so every rank gets the same bits. It carries the run's control messages
// and the NCCL unique id of GPU ranks, whose gradients go through NCCL; CPU ranks' gradients go through it too, at TCP's
// speed (MPI is the fast path for CPU ranks). Every send and receive waits at most the timeout; a peer that closes its
// connection (a rank that died) is an error naming it.
#pragma once

#include <memory>
#include <string>

#include "vision/dist/communicator.h"

namespace vision::dist {

// Sets up the star of `world` ranks (a collective: every rank calls it). Throws vision::Error naming the address, the
// rank and what failed (a port in use, no rank 0 within the timeout, a rank connecting twice).
std::shared_ptr<Communicator> make_tcp_world(int rank, int world, int local_rank, const std::string& master_addr,
                                             int master_port, std::chrono::milliseconds timeout);

}  // namespace vision::dist
