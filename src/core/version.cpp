#include <photon/version.hpp>

namespace photon {

const char* version_string() { return PHOTON_VERSION_STRING; }

bool built_with_cuda() {
#if defined(PHOTON_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace photon
