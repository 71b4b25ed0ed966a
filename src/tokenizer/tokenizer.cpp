// Tokenizer: assembles tokenizer.json's pipeline (added tokens, normalizer, pre-tokenizer, BPE model,
// post-processor, decoder) in the order Hugging Face `tokenizers` runs it.
#include <photon/tokenizer.hpp>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/decoder.hpp"
#include "tokenizer/json_scan.hpp"
#include "tokenizer/normalizer.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#if defined(PHOTON_WITH_SENTENCEPIECE)
#include "tokenizer/sentencepiece_model.hpp"
#endif
#include "tokenizer/utf8.hpp"

namespace photon {
namespace {

using nlohmann::json;

struct AddedToken {
  std::string content;  // as matched (normalized when `normalized`)
  int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

struct Match {
  size_t begin, end;
  int32_t id;
};

bool is_word_char(std::string_view s, size_t pos, bool before) {
  // The character just before `pos` (before = true) or starting at `pos`.
  if (before) {
    if (pos == 0) return false;
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    pos = start;
  } else if (pos >= s.size()) {
    return false;
  }
  size_t i = pos;
  const char32_t c = utf8::decode(s, i);
  if (c == '_') return true;
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Leftmost-longest matching of a set of added tokens, bucketed by first byte.
class AddedMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->content.empty()) return;
    auto& bucket = buckets_[static_cast<unsigned char>(t->content[0])];
    bucket.push_back(t);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](auto* a, auto* b) { return a->content.size() > b->content.size(); });
    empty_ = false;
  }

  std::vector<Match> find(std::string_view text) const {
    std::vector<Match> out;
    if (empty_) return out;
    for (size_t i = 0; i < text.size();) {
      const auto& bucket = buckets_[static_cast<unsigned char>(text[i])];
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : bucket) {
        if (text.substr(i, t->content.size()) != t->content) continue;
        if (t->single_word && (is_word_char(text, i, true) || is_word_char(text, i + t->content.size(), false))) {
          continue;
        }
        hit = t;
        break;  // longest first
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      size_t begin = i, end = i + hit->content.size();
      const size_t floor = out.empty() ? 0 : out.back().end;
      if (hit->lstrip)
        while (begin > floor && is_space(text[begin - 1])) --begin;
      if (hit->rstrip)
        while (end < text.size() && is_space(text[end])) ++end;
      out.push_back({begin, end, hit->id});
      i = end;
    }
    return out;
  }

 private:
  std::vector<const AddedToken*> buckets_[256];
  bool empty_ = true;
};

// TemplateProcessing's "single" template: special ids around the sequence.
struct Template {
  std::vector<std::vector<int32_t>> items;  // empty vector: the sequence itself
};

Status bad(std::string_view message) {
  return Status(StatusCode::kFormatError, std::string("tokenizer.json: ").append(message));
}

Result<Template> parse_post_processor(const json& spec) {
  Template t;
  t.items.emplace_back();  // default: the sequence alone
  if (spec.is_null()) return t;
  if (!spec.is_object() || !spec.value("type", json()).is_string()) return bad("post_processor needs a 'type'");
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return t;  // only adjusts offsets
  if (type == "Sequence") {
    const auto& list = spec.value("processors", json());
    if (!list.is_array()) return bad("post_processor Sequence needs 'processors'");
    for (const auto& p : list) {
      PHOTON_ASSIGN_OR_RETURN(Template sub, parse_post_processor(p));
      if (sub.items.size() > 1 || !sub.items[0].empty()) t = std::move(sub);
    }
    return t;
  }
  if (type == "TemplateProcessing") {
    const auto& single = spec.value("single", json());
    const auto& specials = spec.value("special_tokens", json::object());
    if (!single.is_array()) return bad("TemplateProcessing needs a 'single' template");
    t.items.clear();
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        t.items.emplace_back();
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", std::string());
        const auto s = specials.find(name);
        if (s == specials.end() || !s->contains("ids") || !(*s)["ids"].is_array()) {
          return bad(fmt::format("TemplateProcessing names special token '{}' but does not define its ids", name));
        }
        t.items.push_back((*s)["ids"].get<std::vector<int32_t>>());
        if (t.items.back().empty()) t.items.pop_back();
      } else {
        return bad("TemplateProcessing items must be a Sequence or a SpecialToken");
      }
    }
    return t;
  }
  return Status(StatusCode::kUnsupported,
                fmt::format("tokenizer.json: post-processor type '{}' is not supported (supported: "
                            "TemplateProcessing, ByteLevel, Sequence)",
                            type));
}

std::optional<std::string> token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

struct Tokenizer::Impl {
#if defined(PHOTON_WITH_SENTENCEPIECE)
  // A SentencePiece model replaces the whole tokenizer.json pipeline when present.
  std::unique_ptr<SentencePieceModel> sp;
  bool sp_add_bos = true;
  bool sp_add_eos = false;
#endif
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<TokenDecoder> decoder;
  Template post;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  AddedMatcher raw_matcher, normalized_matcher;
  int64_t vocab_size = 0;
  std::optional<int32_t> bos, eos;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    // Non-normalized added tokens split the raw text; the rest is normalized, split again by normalized added
    // tokens, pre-tokenized and encoded word by word.
    size_t last = 0;
    auto encode_plain = [&](std::string_view piece) {
      if (piece.empty()) return;
      const std::string normalized = normalizer ? normalizer->normalize(piece) : std::string(piece);
      size_t pos = 0;
      auto encode_words = [&](std::string_view part) {
        if (part.empty()) return;
        std::vector<std::string> words{std::string(part)};
        if (pre_tokenizer) pre_tokenizer->apply(words);
        for (const std::string& w : words) model->encode(w, out);
      };
      for (const Match& m : normalized_matcher.find(normalized)) {
        encode_words(std::string_view(normalized).substr(pos, m.begin - pos));
        out.push_back(m.id);
        pos = m.end;
      }
      encode_words(std::string_view(normalized).substr(pos));
    };
    for (const Match& m : raw_matcher.find(text)) {
      encode_plain(text.substr(last, m.begin - last));
      out.push_back(m.id);
      last = m.end;
    }
    encode_plain(text.substr(last));
  }

  // Token strings of `ids` through the decoder, joined as raw bytes (not yet repaired).
  Result<std::string> decode_raw(std::span<const int32_t> ids, bool skip_special) const {
#if defined(PHOTON_WITH_SENTENCEPIECE)
    if (sp) {
      for (int32_t id : ids) {
        if (id < 0 || id >= vocab_size) {
          return Status(StatusCode::kInvalidArgument,
                        fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab_size - 1));
        }
      }
      return sp->decode(ids);  // control tokens produce no text, as libsentencepiece decodes
    }
#endif
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      const auto a = added_by_id.find(id);
      if (a != added_by_id.end()) {
        if (!(skip_special && added[a->second].special)) tokens.push_back(added[a->second].content);
        continue;
      }
      const auto t = model->id_to_token(id);
      if (!t) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab_size - 1));
      }
      tokens.emplace_back(*t);
    }
    if (decoder) decoder->decode_chain(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
  // A field of the wrong type (say "use_regex": 1) makes nlohmann::json's accessors throw: it becomes an error
  // here, so no exception ever leaves the library.
  try {
    return load_impl(path);
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kFormatError, fmt::format("{}: a field has the wrong type ({})", path, e.what()));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", path, e.what()));
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_impl(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  fs::path config_path;
  if (fs::is_directory(file, ec)) {
    config_path = file / "tokenizer_config.json";
    if (fs::exists(file / "tokenizer.json", ec)) {
      file /= "tokenizer.json";
    } else if (fs::exists(file / "tokenizer.model", ec)) {
      file /= "tokenizer.model";
    } else {
      return Status(StatusCode::kNotFound, fmt::format("'{}' holds no tokenizer.json or tokenizer.model", path));
    }
  } else {
    config_path = file.parent_path() / "tokenizer_config.json";
  }
  if (file.extension() == ".model") return load_sentencepiece(file.string(), config_path.string());
  PHOTON_ASSIGN_OR_RETURN(std::string text, read_text_file(file.string()));
  // The vocabulary and merges are most of the file: scan them directly and parse the rest as a DOM.
  size_t model_begin = 0, model_end = 0, vocab_begin = 0, vocab_end = 0, merges_begin = 0, merges_end = 0;
  std::string_view vocab_text, merges_text;
  std::string rest;
  if (json_scan::find_member(text, 0, "model", &model_begin, &model_end) &&
      json_scan::find_member(text, model_begin, "vocab", &vocab_begin, &vocab_end) &&
      json_scan::find_member(text, model_begin, "merges", &merges_begin, &merges_end)) {
    vocab_text = std::string_view(text).substr(vocab_begin, vocab_end - vocab_begin);
    merges_text = std::string_view(text).substr(merges_begin, merges_end - merges_begin);
    const bool vocab_first = vocab_begin < merges_begin;
    const size_t b1 = vocab_first ? vocab_begin : merges_begin, e1 = vocab_first ? vocab_end : merges_end;
    const size_t b2 = vocab_first ? merges_begin : vocab_begin, e2 = vocab_first ? merges_end : vocab_end;
    rest.reserve(text.size() - (e1 - b1) - (e2 - b2) + 4);
    rest.append(text, 0, b1).append(vocab_first ? "{}" : "[]").append(text, e1, b2 - e1);
    rest.append(vocab_first ? "[]" : "{}").append(text, e2, std::string::npos);
  } else {
    rest = text;  // unusual layout: let the full parser report what is wrong
  }
  const json root = json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Status(StatusCode::kFormatError, fmt::format("{}: not a well-formed JSON object", file.string()));
  }
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  Impl& m = *tok->impl_;
  auto in_file = [&](const Status& s) { return s.with_context(file.string()); };
  auto normalizer = make_normalizer(root.value("normalizer", json()));
  if (!normalizer) return in_file(normalizer.status());
  m.normalizer = std::move(*normalizer);
  auto pre = make_pre_tokenizer(root.value("pre_tokenizer", json()));
  if (!pre) return in_file(pre.status());
  m.pre_tokenizer = std::move(*pre);
  auto model = BpeModel::from_json(root.value("model", json()), vocab_text, merges_text);
  if (!model) return in_file(model.status());
  m.model = std::move(*model);
  auto decoder = make_token_decoder(root.value("decoder", json()));
  if (!decoder) return in_file(decoder.status());
  m.decoder = std::move(*decoder);
  auto post = parse_post_processor(root.value("post_processor", json()));
  if (!post) return in_file(post.status());
  m.post = std::move(*post);

  m.vocab_size = m.model->vocab_size();
  const auto& added = root.value("added_tokens", json::array());
  if (!added.is_array()) return in_file(bad("'added_tokens' must be an array"));
  m.added.reserve(added.size());
  for (const auto& a : added) {
    if (!a.is_object() || !a.value("content", json()).is_string() || !a.value("id", json()).is_number_integer()) {
      return in_file(bad("each added token needs a string 'content' and an integer 'id'"));
    }
    AddedToken t;
    t.content = a["content"].get<std::string>();
    t.id = static_cast<int32_t>(a["id"].get<int64_t>());
    if (t.id < 0) return in_file(bad(fmt::format("added token '{}' has a negative id", t.content)));
    t.special = a.value("special", false);
    t.single_word = a.value("single_word", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.normalized = a.value("normalized", !t.special);
    if (t.normalized && m.normalizer) t.content = m.normalizer->normalize(t.content);
    m.vocab_size = std::max<int64_t>(m.vocab_size, t.id + 1);
    m.added.push_back(std::move(t));
  }
  for (size_t i = 0; i < m.added.size(); ++i) {
    m.added_by_id[m.added[i].id] = i;
    m.added_by_content[m.added[i].content] = m.added[i].id;
    (m.added[i].normalized ? m.normalized_matcher : m.raw_matcher).add(&m.added[i]);
  }

  // BOS / EOS from tokenizer_config.json when present.
  if (fs::exists(config_path, ec)) {
    PHOTON_ASSIGN_OR_RETURN(std::string cfg_text, read_text_file(config_path.string()));
    const json cfg = json::parse(cfg_text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) {
      return Status(StatusCode::kFormatError, fmt::format("{}: not a well-formed JSON object", config_path.string()));
    }
    for (auto [key, slot] : {std::pair{"bos_token", &m.bos}, {"eos_token", &m.eos}}) {
      const auto it = cfg.find(key);
      if (it == cfg.end()) continue;
      if (const auto content = token_content(*it)) *slot = tok->token_to_id(*content);
    }
  }
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_sentencepiece(const std::string& model_path,
                                                                 const std::string& config_path) {
#if defined(PHOTON_WITH_SENTENCEPIECE)
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  Impl& m = *tok->impl_;
  PHOTON_ASSIGN_OR_RETURN(m.sp, SentencePieceModel::load(model_path));
  m.vocab_size = m.sp->vocab_size();
  m.bos = m.sp->bos_id();
  m.eos = m.sp->eos_id();
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    PHOTON_ASSIGN_OR_RETURN(std::string cfg_text, read_text_file(config_path));
    const json cfg = json::parse(cfg_text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) {
      return Status(StatusCode::kFormatError, fmt::format("{}: not a well-formed JSON object", config_path));
    }
    m.sp_add_bos = cfg.value("add_bos_token", true);
    m.sp_add_eos = cfg.value("add_eos_token", false);
  }
  return tok;
#else
  return Status(StatusCode::kUnsupported,
                fmt::format("'{}' is a SentencePiece model, and this build has no libsentencepiece; install it "
                            "(libsentencepiece-dev) and rebuild, or use the model's tokenizer.json",
                            model_path));
#endif
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::repair(text);
    text = repaired;
  }
#if defined(PHOTON_WITH_SENTENCEPIECE)
  if (impl_->sp) {
    if (add_special_tokens && impl_->sp_add_bos && impl_->bos) ids.push_back(*impl_->bos);
    impl_->sp->encode(text, ids);
    if (add_special_tokens && impl_->sp_add_eos && impl_->eos) ids.push_back(*impl_->eos);
    return ids;
  }
#endif
  if (!add_special_tokens) {
    impl_->encode_text(text, ids);
    return ids;
  }
  for (const auto& item : impl_->post.items) {
    if (item.empty()) {
      impl_->encode_text(text, ids);
    } else {
      ids.insert(ids.end(), item.begin(), item.end());
    }
  }
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  PHOTON_ASSIGN_OR_RETURN(std::string raw, impl_->decode_raw(ids, skip_special_tokens));
  return utf8::repair(raw);
}

std::string Tokenizer::token_to_piece(int32_t id) const {
#if defined(PHOTON_WITH_SENTENCEPIECE)
  if (impl_->sp) return impl_->sp->id_to_piece(id);
#endif
  const auto a = impl_->added_by_id.find(id);
  if (a != impl_->added_by_id.end()) return impl_->added[a->second].content;
  const auto t = impl_->model->id_to_token(id);
  return t ? std::string(*t) : std::string();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
#if defined(PHOTON_WITH_SENTENCEPIECE)
  if (impl_->sp) return impl_->sp->piece_to_id(token);
#endif
  const auto a = impl_->added_by_content.find(std::string(token));
  if (a != impl_->added_by_content.end()) return a->second;
  return impl_->model->token_to_id(token);
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
#if defined(PHOTON_WITH_SENTENCEPIECE)
  if (impl_->sp) return impl_->sp->is_control(id);
#endif
  const auto a = impl_->added_by_id.find(id);
  return a != impl_->added_by_id.end() && impl_->added[a->second].special;
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos; }

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                                           bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_(skip_special_tokens),
      // A few prompt tokens of context, so decoders that treat the first token specially see the middle of a text.
      ids_(prompt.end() - static_cast<std::ptrdiff_t>(std::min<size_t>(prompt.size(), 5)), prompt.end()),
      prefix_offset_(0),
      read_offset_(ids_.size()) {}

std::string StreamingDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  auto prefix = tokenizer_.impl_->decode_raw(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  auto full = tokenizer_.impl_->decode_raw(all.subspan(prefix_offset_), skip_special_);
  if (!prefix || !full) {  // an id outside the vocabulary: drop it rather than poison the stream
    ids_.pop_back();
    return {};
  }
  if (full->size() <= prefix->size() || full->compare(0, prefix->size(), *prefix) != 0) return {};
  const std::string_view tail = std::string_view(*full).substr(prefix->size());
  if (utf8::complete_prefix(tail) != tail.size()) return {};  // hold back an incomplete character
  if (tail.ends_with("\xEF\xBF\xBD")) return {};              // a decoder's stand-in for bytes that may yet complete
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return utf8::repair(tail);
}

std::string StreamingDetokenizer::finish() {
  const std::span<const int32_t> all(ids_);
  auto prefix = tokenizer_.impl_->decode_raw(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  auto full = tokenizer_.impl_->decode_raw(all.subspan(prefix_offset_), skip_special_);
  prefix_offset_ = read_offset_ = ids_.size();
  if (!prefix || !full || full->size() <= prefix->size()) return {};
  return utf8::repair(std::string_view(*full).substr(prefix->size()));
}

}  // namespace photon
