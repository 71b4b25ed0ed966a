#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <charconv>
#include <climits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/json_scan.hpp"
#include "tokenizer/utf8.hpp"

namespace photon {
namespace {

using nlohmann::json;

constexpr size_t kCacheCapacity = 1 << 16;
constexpr size_t kCacheMaxWordBytes = 256;

Status bad(std::string_view message) {
  return Status(StatusCode::kFormatError, std::string("tokenizer.json: model: ").append(message));
}

// Reads {"token": id, ...} into `vocab` with the fast scanner.
template <typename F>
Status scan_vocab(std::string_view s, F&& on_token) {
  size_t pos = json_scan::skip_ws(s, 0);
  if (pos >= s.size() || s[pos] != '{') return bad("'vocab' must be an object of token -> id");
  pos = json_scan::skip_ws(s, pos + 1);
  std::string key;
  while (pos < s.size() && s[pos] != '}') {
    pos = json_scan::read_string(s, pos, key);
    if (pos == std::string_view::npos) return bad("'vocab' holds a malformed token string");
    pos = json_scan::skip_ws(s, pos);
    if (pos >= s.size() || s[pos] != ':') return bad(fmt::format("vocab['{}'] has no ':'", key));
    pos = json_scan::skip_ws(s, pos + 1);
    int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(s.data() + pos, s.data() + s.size(), id);
    if (ec != std::errc() || id < 0 || id > INT32_MAX / 2) {
      return bad(fmt::format("vocab['{}'] must be a non-negative id", key));
    }
    pos = json_scan::skip_ws(s, static_cast<size_t>(ptr - s.data()));
    PHOTON_RETURN_IF_ERROR(on_token(key, static_cast<int32_t>(id)));
    if (pos < s.size() && s[pos] == ',') pos = json_scan::skip_ws(s, pos + 1);
  }
  return Status::ok();
}

// Reads ["a b", ...] or [["a", "b"], ...] with the fast scanner, calling on_merge(a, b, index) for each.
template <typename F>
Status scan_merges(std::string_view s, F&& on_merge) {
  size_t pos = json_scan::skip_ws(s, 0);
  if (pos >= s.size() || s[pos] != '[') return bad("'merges' must be an array");
  pos = json_scan::skip_ws(s, pos + 1);
  std::string a, b;
  size_t index = 0;
  while (pos < s.size() && s[pos] != ']') {
    if (s[pos] == '"') {
      pos = json_scan::read_string(s, pos, a);
      const size_t space = a.find(' ', 1);
      if (pos == std::string_view::npos || space == std::string::npos) {
        return bad(fmt::format("merge #{} must be \"a b\" or [\"a\", \"b\"]", index));
      }
      PHOTON_RETURN_IF_ERROR(
          on_merge(std::string_view(a).substr(0, space), std::string_view(a).substr(space + 1), index));
    } else if (s[pos] == '[') {
      pos = json_scan::skip_ws(s, pos + 1);
      pos = pos < s.size() ? json_scan::read_string(s, pos, a) : std::string_view::npos;
      if (pos != std::string_view::npos) {
        pos = json_scan::skip_ws(s, pos);
        pos = pos < s.size() && s[pos] == ',' ? json_scan::read_string(s, json_scan::skip_ws(s, pos + 1), b)
                                              : std::string_view::npos;
      }
      if (pos != std::string_view::npos) pos = json_scan::skip_ws(s, pos);
      if (pos == std::string_view::npos || pos >= s.size() || s[pos] != ']') {
        return bad(fmt::format("merge #{} must be \"a b\" or [\"a\", \"b\"]", index));
      }
      ++pos;
      PHOTON_RETURN_IF_ERROR(on_merge(std::string_view(a), std::string_view(b), index));
    } else {
      return bad(fmt::format("merge #{} must be \"a b\" or [\"a\", \"b\"]", index));
    }
    ++index;
    pos = json_scan::skip_ws(s, pos);
    if (pos < s.size() && s[pos] == ',') pos = json_scan::skip_ws(s, pos + 1);
  }
  return Status::ok();
}

}  // namespace

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();  // FNV-1a, then a final mix
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

std::optional<int32_t> BpeModel::vocab_find(std::string_view token) const {
  if (vocab_.empty()) return std::nullopt;
  const uint64_t h = hash_bytes(token);
  for (size_t i = static_cast<size_t>(h) & vocab_mask_;; i = (i + 1) & vocab_mask_) {
    const VocabEntry& e = vocab_[i];
    if (e.id < 0) return std::nullopt;
    if (e.hash == h && e.length == token.size() && arena_view(e.offset, e.length) == token) return e.id;
  }
}

bool BpeModel::vocab_insert(std::string_view token, int32_t id) {
  if ((vocab_count_ + 1) * 2 > vocab_.size()) {  // keep the table at most half full
    std::vector<VocabEntry> old;
    old.swap(vocab_);
    vocab_.assign(std::max<size_t>(1024, old.size() * 2), VocabEntry{});
    vocab_mask_ = vocab_.size() - 1;
    for (const VocabEntry& e : old) {
      if (e.id < 0) continue;
      size_t i = static_cast<size_t>(e.hash) & vocab_mask_;
      while (vocab_[i].id >= 0) i = (i + 1) & vocab_mask_;
      vocab_[i] = e;
    }
  }
  const uint64_t h = hash_bytes(token);
  size_t i = static_cast<size_t>(h) & vocab_mask_;
  for (; vocab_[i].id >= 0; i = (i + 1) & vocab_mask_) {
    if (vocab_[i].hash == h && arena_view(vocab_[i].offset, vocab_[i].length) == token) return false;  // duplicate
  }
  vocab_[i] = {h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), id};
  arena_.append(token);
  ++vocab_count_;
  return true;
}

void BpeModel::insert_merge(uint64_t key, int32_t rank, int32_t id) {
  for (size_t i = slot_of(key, merge_mask_);; i = (i + 1) & merge_mask_) {
    MergeEntry& e = merges_[i];
    if (e.key == kEmpty || e.key == key) {
      if (e.key == key && e.rank <= rank) return;  // a repeated merge keeps its first (best) rank
      e = {key, rank, id};
      return;
    }
  }
}

const BpeModel::MergeEntry* BpeModel::find_merge(int32_t a, int32_t b) const {
  const uint64_t key = pair_key(a, b);
  for (size_t i = slot_of(key, merge_mask_);; i = (i + 1) & merge_mask_) {
    const MergeEntry& e = merges_[i];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

Status BpeModel::add_merge(std::string_view a, std::string_view b, int32_t rank, std::string& joined) {
  joined.assign(a).append(b);
  const auto ia = vocab_find(a), ib = vocab_find(b), iab = vocab_find(joined);
  if (!ia || !ib || !iab) {
    return bad(fmt::format("merge #{} ('{}' + '{}') uses a token missing from the vocabulary", rank, a, b));
  }
  insert_merge(pair_key(*ia, *ib), rank, *iab);
  return Status::ok();
}

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const json& model, std::string_view vocab_text,
                                                      std::string_view merges_text) {
  if (!model.is_object()) return bad("expected an object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    return Status(StatusCode::kUnsupported,
                  fmt::format("tokenizer.json: model type '{}' is not supported (only BPE)", type));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty())) {
      return Status(StatusCode::kUnsupported, fmt::format("tokenizer.json: model.{} is not supported", key));
    }
  }
  auto m = std::unique_ptr<BpeModel>(new BpeModel());  // NOLINT(modernize-make-unique): private constructor
  int32_t max_id = -1;
  auto on_token = [&](std::string_view token, int32_t id) -> Status {
    if (!m->vocab_insert(token, id)) return bad(fmt::format("token '{}' appears twice in 'vocab'", token));
    max_id = std::max(max_id, id);
    return Status::ok();
  };
  if (!vocab_text.empty()) {
    m->arena_.reserve(vocab_text.size());
    PHOTON_RETURN_IF_ERROR(scan_vocab(vocab_text, on_token));
  } else {
    const auto vocab = model.find("vocab");
    if (vocab == model.end() || !vocab->is_object()) return bad("'vocab' must be an object of token -> id");
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX / 2) {
        return bad(fmt::format("vocab['{}'] must be a non-negative id", it.key()));
      }
      PHOTON_RETURN_IF_ERROR(on_token(it.key(), static_cast<int32_t>(it->get<int64_t>())));
    }
  }
  if (max_id < 0) return bad("'vocab' holds no tokens");
  m->id_offsets_.assign(static_cast<size_t>(max_id) + 1, {0, ~0u});
  for (const VocabEntry& e : m->vocab_) {
    if (e.id >= 0) m->id_offsets_[static_cast<size_t>(e.id)] = {e.offset, e.length};
  }

  // The merge table: at most half full.
  size_t capacity = 1024;
  const size_t expected = merges_text.empty() ? model.value("merges", json::array()).size() : merges_text.size() / 8;
  while (capacity < 2 * expected + 16) capacity *= 2;
  m->merges_.assign(capacity, MergeEntry{});
  m->merge_mask_ = capacity - 1;
  std::string joined;
  size_t count = 0;
  auto on_merge = [&](std::string_view a, std::string_view b, size_t rank) -> Status {
    if (++count * 2 > m->merges_.size()) {  // more merges than estimated: grow and re-insert
      std::vector<MergeEntry> old;
      old.swap(m->merges_);
      m->merges_.assign(old.size() * 2, MergeEntry{});
      m->merge_mask_ = m->merges_.size() - 1;
      for (const MergeEntry& e : old) {
        if (e.key != kEmpty) m->insert_merge(e.key, e.rank, e.id);
      }
    }
    return m->add_merge(a, b, static_cast<int32_t>(rank), joined);
  };
  if (!merges_text.empty()) {
    PHOTON_RETURN_IF_ERROR(scan_merges(merges_text, on_merge));
  } else {
    const auto merges = model.find("merges");
    if (merges == model.end() || !merges->is_array()) return bad("'merges' must be an array");
    size_t rank = 0;
    for (const json& merge : *merges) {
      if (merge.is_string()) {  // "a b"
        const std::string& text = merge.get_ref<const std::string&>();
        const size_t space = text.find(' ', 1);
        if (space == std::string::npos) return bad(fmt::format("merge #{} must be \"a b\" or [\"a\", \"b\"]", rank));
        PHOTON_RETURN_IF_ERROR(
            on_merge(std::string_view(text).substr(0, space), std::string_view(text).substr(space + 1), rank));
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        PHOTON_RETURN_IF_ERROR(
            on_merge(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>(), rank));
      } else {
        return bad(fmt::format("merge #{} must be \"a b\" or [\"a\", \"b\"]", rank));
      }
      ++rank;
    }
  }
  m->ignore_merges_ = model.value("ignore_merges", false);
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->fuse_unk_ = model.value("fuse_unk", false);
  const auto unk = model.find("unk_token");
  if (unk != model.end() && unk->is_string()) {
    m->unk_id_ = m->vocab_find(unk->get_ref<const std::string&>());
    if (!m->unk_id_) return bad(fmt::format("unk_token '{}' is not in the vocabulary", unk->get<std::string>()));
  }
  for (int b = 0; b < 256; ++b) {
    m->byte_ids_[b] = m->vocab_find(fmt::format("<0x{:02X}>", b)).value_or(-1);
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const { return vocab_find(token); }

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  const auto [offset, length] = id_offsets_[static_cast<size_t>(id)];
  if (length == ~0u) return std::nullopt;
  return arena_view(offset, length);
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word that is itself a token is taken whole
    if (const auto id = vocab_find(word)) {
      out.push_back(*id);
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
    cache_.emplace(std::string(word),
                   std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(begin), out.end()));
  }
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  // Initial symbols: one per character (or its bytes / the unknown token when the character is not a token).
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    i += utf8::sequence_length(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    const std::string_view ch = word.substr(start, i - start);
    if (const auto id = vocab_find(ch)) {
      symbols.push_back(*id);
    } else if (byte_fallback_ && std::all_of(ch.begin(), ch.end(),
                                             [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
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
      const MergeEntry* e = find_merge(symbols[i], symbols[i + 1]);
      if (e != nullptr && e->rank < best_rank) {
        best_rank = e->rank;
        best = i;
        best_id = e->id;
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
