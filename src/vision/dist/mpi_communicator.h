// The MPI communicator (built with VISION_HAS_MPI): MPI_COMM_WORLD, non-blocking collectives polled against the
// communicator's timeout. Reached through dist::world().
#pragma once

#include <memory>

#include "vision/dist/communicator.h"

namespace vision::dist {

#ifdef VISION_HAS_MPI
// Initialises MPI (MPI_THREAD_FUNNELED; finalised at exit) and returns MPI_COMM_WORLD's communicator.
std::shared_ptr<Communicator> make_mpi_world();
#endif

}  // namespace vision::dist
