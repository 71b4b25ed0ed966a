// The smallest program that links PhotonInfer through find_package(Photon): checks that the library loaded at run
// time matches the headers, routes the library's log records into the application, and reports the build.
#include <cstdio>
#include <cstring>

#include <photon/log.hpp>
#include <photon/version.hpp>

int main() {
  photon::set_log_sink([](photon::LogLevel level, std::string_view message) {
    std::fprintf(stderr, "app log [%s]: %.*s\n", photon::log_level_name(level).data(),
                 static_cast<int>(message.size()), message.data());
  });
  const char* runtime = photon::version_string();
  std::printf("PhotonInfer headers %s, library %s, CUDA backend %s\n", PHOTON_VERSION_STRING, runtime,
              photon::built_with_cuda() ? "built" : "not built");
  return std::strcmp(runtime, PHOTON_VERSION_STRING) == 0 ? 0 : 1;
}
