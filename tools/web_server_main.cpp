// photon_web_server: the same server as `photon serve`, under the name and default port (5728) the original
// PhotonInfer ships, linked against the shared libphoton and its public API only.
#include "commands.hpp"

int main(int argc, char** argv) { return photon::cli::run_serve(argc, argv, 1, "photon_web_server"); }
