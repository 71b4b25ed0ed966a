// PhotonInfer — tokenizers: text to token ids and back, exactly as Hugging Face `tokenizers` does it.
//
// Supported: SentencePiece tokenizer.model files (through libsentencepiece, when built with it), and
// tokenizer.json files with a BPE model (byte-level BPE of Llama 3.x and Qwen2/Qwen3, and others),
// their normalizers (NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Sequence), pre-tokenizers (Split with the
// file's own regex, ByteLevel, Sequence), added tokens (special or not, honouring single_word, lstrip, rstrip and
// normalized), post-processors (TemplateProcessing, ByteLevel, Sequence) and decoders (ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Sequence). Anything else is a clear kUnsupported error at load time.
//
// Text input must be UTF-8; invalid sequences are replaced by U+FFFD before encoding (as Rust's
// String::from_utf8_lossy does), never rejected and never a crash.
//
// Thread safety: a loaded Tokenizer is immutable; encode and decode may run concurrently from any threads.
// A StreamingDetokenizer belongs to one request and one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <photon/export.hpp>
#include <photon/status.hpp>

namespace photon {

class PHOTON_API Tokenizer {
 public:
  /// Loads `path`: a tokenizer.json file, or a folder holding tokenizer.json (and optionally
  /// tokenizer_config.json, which names the BOS and EOS tokens). Errors say which part of the file is wrong.
  /// A SentencePiece tokenizer.model (a folder without tokenizer.json, or the file itself) is read through
  /// libsentencepiece when the build has it; it adds BOS / EOS as tokenizer_config.json's add_bos_token /
  /// add_eos_token say (default: BOS only), and decodes as libsentencepiece does (control tokens give no text).
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Token ids of `text`. Special-token text inside it is recognised (as `tokenizers` does by default). With
  /// `add_special_tokens` the post-processor adds its tokens (BOS for Llama 3).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  /// Text of `ids`; special tokens are kept unless `skip_special_tokens`. Ids outside the vocabulary are an error.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  /// The token's own string (byte-level alphabet included, as in tokenizer.json); empty for unknown ids.
  std::string token_to_piece(int32_t id) const;
  /// The id of a token string (regular or added), if any.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// One past the largest id (model vocabulary and added tokens).
  int64_t vocab_size() const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;

 private:
  Tokenizer();
  static Result<std::unique_ptr<Tokenizer>> load_impl(const std::string& path);
  static Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_path,
                                                               const std::string& config_path);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend class StreamingDetokenizer;
};

/// Turns a growing list of ids into text increments that never split a UTF-8 character: bytes of an incomplete
/// character are held back until the ids that complete it arrive. Concatenating every delta (and finish())
/// gives decode(all ids).
class PHOTON_API StreamingDetokenizer {
 public:
  /// `tokenizer` must outlive this object. `prompt` ids give the context that decoding continues from.
  StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt = {},
                       bool skip_special_tokens = false);
  /// Adds one id; returns the text that became complete (possibly empty).
  std::string push(int32_t id);
  /// Whatever is still held back (an incomplete character becomes U+FFFD). Call once at the end.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_, read_offset_) are context for the next decode
  size_t read_offset_ = 0;    // ids_[read_offset_, ...) have not been emitted yet
};

}  // namespace photon
