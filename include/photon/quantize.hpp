// PhotonInfer — ahead-of-time int8 quantization of a checkpoint: the model's projections become symmetric int8
// with one scale per group of input features, written in the compressed-tensors layout ("pack-quantized", 8-bit,
// strategy "group") that transformers and vLLM load too. docs/models.md lists the fields written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <photon/export.hpp>
#include <photon/status.hpp>

namespace photon {

struct QuantizeOptions {
  /// A Hugging Face checkpoint folder with float weights (f32, f16 or bf16 safetensors).
  std::string model;
  /// The folder to write (created if missing): config.json with its quantization_config, model.safetensors, and
  /// every other file of `model` (tokenizer, generation config, chat template) copied.
  std::string out;
  /// Input features per scale: 32, 64 or 128.
  int32_t group_size = 128;
  /// Quantize an untied LM head too (a tied head is the embedding, which stays in floats).
  bool quantize_lm_head = false;
  /// Called after each tensor with (tensors done, tensors total); may be empty. Runs on the calling thread.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

/// Writes the int8 checkpoint. Scales are stored in the checkpoint's float dtype, and each value is rounded against
/// its stored scale, so the file is exactly what the engine computes with. Blocks; uses the calling thread and
/// OpenMP's threads. Errors: an unreadable or already quantized checkpoint, a bad group size, a file that cannot be
/// written (messages name the file).
PHOTON_API Status quantize_checkpoint(const QuantizeOptions& options);

}  // namespace photon
