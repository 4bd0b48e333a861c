#include "neuromkl/kernels/blas.hpp"

#include <cblas.h>

namespace neuromkl::kernels {

// We parallelise over regions with TBB; a multi-threaded BLAS underneath would oversubscribe
// the cores and make results depend on the thread count.
void UseSingleThreadedBlas() { openblas_set_num_threads(1); }

std::string BlasConfig() {
  const char* cfg = openblas_get_config();
  return cfg ? cfg : "unknown";
}

}  // namespace neuromkl::kernels
