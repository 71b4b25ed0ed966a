// SentencePiece tokenizer.model files (Llama 2, TinyLlama, Mistral-style models) through libsentencepiece, behind
// the same Tokenizer interface. Built when libsentencepiece is found (PHOTON_WITH_SENTENCEPIECE).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <photon/status.hpp>

namespace photon {

class SentencePieceModel {
 public:
  static Result<std::unique_ptr<SentencePieceModel>> load(const std::string& path);
  ~SentencePieceModel();

  void encode(std::string_view text, std::vector<int32_t>& out) const;
  /// The text of `ids` as libsentencepiece decodes it (control tokens such as <s> produce no text).
  std::string decode(std::span<const int32_t> ids) const;
  std::string id_to_piece(int32_t id) const;
  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  int64_t vocab_size() const;
  bool is_control(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  SentencePieceModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace photon
