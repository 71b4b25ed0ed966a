#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <climits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.hpp"

namespace photon {
namespace {

using nlohmann::json;

constexpr size_t kCacheCapacity = 1 << 16;
constexpr size_t kCacheMaxWordBytes = 256;

Status bad(std::string message) { return Status(StatusCode::kFormatError, "tokenizer.json: model: " + message); }

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const json& model) {
  if (!model.is_object()) return bad("expected an object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    return Status(StatusCode::kUnsupported, fmt::format("tokenizer.json: model type '{}' is not supported (only BPE)",
                                                        type));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty())) {
      return Status(StatusCode::kUnsupported, fmt::format("tokenizer.json: model.{} is not supported", key));
    }
  }
  auto m = std::unique_ptr<BpeModel>(new BpeModel());
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return bad("'vocab' must be an object of token -> id");
  m->vocab_.reserve(vocab->size());
  int32_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX / 2) {
      return bad(fmt::format("vocab['{}'] must be a non-negative id", it.key()));
    }
    const auto id = static_cast<int32_t>(it->get<int64_t>());
    m->vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : m->vocab_) m->id_to_token_[static_cast<size_t>(id)] = token;

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return bad("'merges' must be an array");
  m->merges_.reserve(merges->size());
  int32_t rank = 0;
  for (const json& merge : *merges) {
    std::string a, b;
    if (merge.is_string()) {  // "a b"
      const std::string& s = merge.get_ref<const std::string&>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return bad(fmt::format("merge '{}' is not two tokens separated by a space", s));
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {  // ["a","b"]
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      return bad(fmt::format("merge #{} must be \"a b\" or [\"a\", \"b\"]", rank));
    }
    const auto ia = m->vocab_.find(a), ib = m->vocab_.find(b), iab = m->vocab_.find(a + b);
    if (ia == m->vocab_.end() || ib == m->vocab_.end() || iab == m->vocab_.end()) {
      return bad(fmt::format("merge #{} ('{}' + '{}') uses a token missing from the vocabulary", rank, a, b));
    }
    m->merges_.emplace(pair_key(ia->second, ib->second), Merge{rank, iab->second});
    ++rank;
  }
  m->ignore_merges_ = model.value("ignore_merges", false);
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->fuse_unk_ = model.value("fuse_unk", false);
  const auto unk = model.find("unk_token");
  if (unk != model.end() && unk->is_string()) {
    const auto it = m->vocab_.find(unk->get<std::string>());
    if (it == m->vocab_.end()) return bad(fmt::format("unk_token '{}' is not in the vocabulary", unk->get<std::string>()));
    m->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m->vocab_.find(fmt::format("<0x{:02X}>", b));
    m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return nullptr;
  const std::string& t = id_to_token_[static_cast<size_t>(id)];
  return t.empty() && !vocab_.contains(t) ? nullptr : &t;
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word that is itself a token is taken whole
    const auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() <= kCacheMaxWordBytes) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t begin = out.size();
  encode_uncached(word, out);
  if (word.size() <= kCacheMaxWordBytes) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(begin), out.end()));
  }
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  // Initial symbols: one per character (or its bytes / the unknown token when the character is not a token).
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    i += utf8::sequence_length(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    ch.assign(word.substr(start, i - start));
    const auto it = vocab_.find(ch);
    if (it != vocab_.end()) {
      symbols.push_back(it->second);
    } else if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
                 return byte_ids_[static_cast<unsigned char>(c)] >= 0;
               })) {
      for (char c : ch) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    } else if (unk_id_) {
      if (!(fuse_unk_ && !symbols.empty() && symbols.back() == *unk_id_)) symbols.push_back(*unk_id_);
    }
  }
  // Repeatedly apply the best-ranked merge among adjacent pairs (words are short: a linear scan beats a heap).
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX;
    size_t best = 0;
    int32_t best_id = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merges_.find(pair_key(symbols[i], symbols[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = i;
        best_id = it->second.id;
      }
    }
    if (best_id < 0) break;
    // Merge every non-overlapping occurrence of the best pair, left to right, in one pass.
    const int32_t a = symbols[best], b = symbols[best + 1];
    size_t w = 0;
    for (size_t r = 0; r < symbols.size();) {
      if (r + 1 < symbols.size() && symbols[r] == a && symbols[r + 1] == b) {
        symbols[w++] = best_id;
        r += 2;
      } else {
        symbols[w++] = symbols[r++];
      }
    }
    symbols.resize(w);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace photon
