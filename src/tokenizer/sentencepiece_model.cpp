#include "tokenizer/sentencepiece_model.hpp"

#include <sentencepiece_processor.h>

#include <fmt/format.h>

namespace photon {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

Result<std::unique_ptr<SentencePieceModel>> SentencePieceModel::load(const std::string& path) {
  std::unique_ptr<SentencePieceModel> m(new SentencePieceModel());
  const auto status = m->impl_->sp.Load(path);
  if (!status.ok()) {
    return Status(StatusCode::kFormatError, fmt::format("{}: not a SentencePiece model ({})", path, status.ToString()));
  }
  return m;
}

void SentencePieceModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  impl_->sp.Encode(text, &ids).IgnoreError();  // encoding valid UTF-8 does not fail
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceModel::decode(std::span<const int32_t> ids) const {
  std::string text;
  impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text).IgnoreError();
  return text;
}

std::string SentencePieceModel::id_to_piece(int32_t id) const {
  if (id < 0 || id >= impl_->sp.GetPieceSize()) return {};
  return impl_->sp.IdToPiece(id);
}

std::optional<int32_t> SentencePieceModel::piece_to_id(std::string_view piece) const {
  const int id = impl_->sp.PieceToId(piece);
  if (id == impl_->sp.unk_id() && piece != impl_->sp.IdToPiece(id)) return std::nullopt;
  return id;
}

int64_t SentencePieceModel::vocab_size() const { return impl_->sp.GetPieceSize(); }

bool SentencePieceModel::is_control(int32_t id) const {
  return id >= 0 && id < impl_->sp.GetPieceSize() && impl_->sp.IsControl(id);
}

std::optional<int32_t> SentencePieceModel::bos_id() const {
  const int id = impl_->sp.bos_id();
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::optional<int32_t> SentencePieceModel::eos_id() const {
  const int id = impl_->sp.eos_id();
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

}  // namespace photon
