#include "model_loader/intra_op_team.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace hotswap::model_loader {

void release_intra_op_team() {
#if defined(_OPENMP)
  // OpenMP 5.0's pause: in libgomp (libtorch's OpenMP on Linux) it ends the calling thread's
  // pool of threads and takes them off the count of managed threads; inside a parallel region
  // it refuses, which is harmless here.
  (void)omp_pause_resource_all(omp_pause_soft);
#endif
}

}  // namespace hotswap::model_loader
