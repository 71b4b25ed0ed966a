// PhotonInfer — symbol visibility.
//
// libphoton is built with hidden visibility: only declarations marked PHOTON_API (the photon:: C++ API) and the
// photon_* C functions are exported from the shared library.
#pragma once

#if defined(_WIN32)
#if defined(PHOTON_BUILDING_LIBRARY)
#define PHOTON_API __declspec(dllexport)
#else
#define PHOTON_API __declspec(dllimport)
#endif
#else
#define PHOTON_API __attribute__((visibility("default")))
#endif
