// The tokenizer against the `tokenizers` package: for four configurations (GPT-2's byte-level
// BPE, Llama-3's split regex with ignore_merges and a BOS template, Qwen2's NFC + split regex,
// and the SentencePiece-style BPE with byte fallback that Llama-2 and Mistral export), every
// test string of tests/golden/tokenizer/*/golden.json (made by make_tokenizer_golden.py) must
// encode to the same ids with and without special tokens and decode to the same text. Then what
// is refused, and how.
#include "model_loader/tokenizer/tokenizer.hpp"

#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "model_loader/tokenizer/byte_level.hpp"
#include "model_loader/tokenizer/incremental_detokenizer.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;
using model_loader::Tokenizer;
using nlohmann::json;

namespace {

const std::string kGolden = std::string(HOTSWAP_GOLDEN_DIR) + "/tokenizer/";

json read_json(const std::string& path) {
  std::ifstream in(path);
  BOOST_REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return json::parse(in);
}

std::string show(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (auto id : ids)
    s += std::to_string(id) + " ";
  return s;
}

// A tokenizer.json around `model` and the given components, for the refusal cases.
std::string with(const json& overrides) {
  json spec = {{"version", "1.0"},
               {"added_tokens", json::array()},
               {"normalizer", nullptr},
               {"pre_tokenizer", nullptr},
               {"post_processor", nullptr},
               {"decoder", nullptr},
               {"model",
                {{"type", "BPE"},
                 {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}},
                 {"merges", json::array({json::array({"a", "b"})})}}}};
  for (const auto& [k, v] : overrides.items())
    spec[k] = v;
  return spec.dump();
}

void check_refused(const json& overrides, const std::string& expected_words) {
  try {
    Tokenizer::from_json_text(with(overrides), "test.json");
    BOOST_ERROR("accepted " << overrides.dump());
  } catch (const protocol::ValueError& e) {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE(what);
    BOOST_CHECK_MESSAGE(what.find(expected_words) != std::string::npos,
                        "'" << what << "' does not say '" << expected_words << "'");
    BOOST_CHECK_MESSAGE(what.find("test.json") != std::string::npos, "no file name: " << what);
  }
}

const char* kConfigurations[] = {"gpt2", "llama3", "qwen2", "sentencepiece"};

}  // namespace

BOOST_AUTO_TEST_SUITE(tokenizer)

BOOST_DATA_TEST_CASE(ids_and_text_match_the_tokenizers_package,
                     boost::unit_test::data::make(kConfigurations), name) {
  const std::string folder = kGolden + name;
  Tokenizer tokenizer = Tokenizer::from_file(folder + "/tokenizer.json");
  const json golden = read_json(folder + "/golden.json");
  BOOST_REQUIRE_GE(golden["cases"].size(), 20u);
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<std::int64_t>>();
    const auto plain = c["ids_without_special_tokens"].get<std::vector<std::int64_t>>();
    const auto got = tokenizer.encode(text, true);
    BOOST_CHECK_MESSAGE(got == ids, name << ": '" << text << "'\n  expected " << show(ids)
                                         << "\n  got      " << show(got));
    const auto got_plain = tokenizer.encode(text, false);
    BOOST_CHECK_MESSAGE(got_plain == plain, name << " (no special tokens): '" << text
                                                 << "'\n  expected " << show(plain)
                                                 << "\n  got      " << show(got_plain));
    BOOST_CHECK_EQUAL(tokenizer.decode(ids, false), c["decoded"].get<std::string>());
    BOOST_CHECK_EQUAL(tokenizer.decode(ids, true),
                      c["decoded_skipping_special_tokens"].get<std::string>());
    BOOST_CHECK_EQUAL(tokenizer.decode(plain, false),
                      c["decoded_without_special_tokens"].get<std::string>());
  }
}

// Streaming: the pieces handed out token by token add up to the text the whole decoding gives,
// whatever the split between prompt and output (halves of a UTF-8 character, SentencePiece's
// leading spaces).
BOOST_DATA_TEST_CASE(incremental_detokenizing_adds_up_to_the_whole_decoding,
                     boost::unit_test::data::make(kConfigurations), name) {
  const std::string folder = kGolden + name;
  Tokenizer tokenizer = Tokenizer::from_file(folder + "/tokenizer.json");
  // Held by name: a range-for over a temporary's member reads freed memory before C++23.
  const json golden = read_json(folder + "/golden.json");
  for (const auto& c : golden["cases"]) {
    const auto ids = c["ids_without_special_tokens"].get<std::vector<std::int64_t>>();
    for (std::size_t split : {std::size_t(1), ids.size() / 2}) {
      if (split == 0 || split >= ids.size()) continue;
      const std::vector<std::int64_t> prompt(ids.begin(), ids.begin() + split);
      const std::string before = tokenizer.decode(prompt, true);
      const std::string whole = tokenizer.decode(ids, true);
      model_loader::IncrementalDetokenizer detokenizer(tokenizer, prompt, true);
      std::string pieces;
      for (std::size_t i = split; i < ids.size(); ++i)
        pieces += detokenizer.push(ids[i]);
      if (!whole.starts_with(before)) {
        // The prompt ends inside a character: the first output ids complete it where the
        // prompt's last ids hold a character boundary to start the window from; where they do
        // not, the missing bytes read as U+FFFD. Either way the text after them comes out (it
        // once stalled and handed out nothing, and a SentencePiece run of byte tokens never
        // came out at all).
        const auto end = pieces.rfind("\xEF\xBF\xBD");
        const std::string after = end == std::string::npos ? pieces : pieces.substr(end + 3);
        BOOST_CHECK_MESSAGE(!pieces.empty() && whole.ends_with(after),
                            "after a prompt of " << split << " of " << ids.size()
                                                 << " tokens ending inside a character, got '"
                                                 << pieces << "' of '" << whole << "'; prompt ids "
                                                 << show(prompt));
        continue;
      }
      BOOST_CHECK_EQUAL(pieces, whole.substr(before.size()));
      BOOST_CHECK_EQUAL(detokenizer.text(), pieces);
    }
  }
}

// A prompt that ends inside a character, then output that does not complete it: what comes out
// is valid UTF-8 and ends with the output's own text (a byte-fallback run left invalid once
// made the piece start inside a UTF-8 sequence).
BOOST_DATA_TEST_CASE(output_that_leaves_a_prompt_s_last_character_unfinished_stays_valid_utf8,
                     boost::unit_test::data::make(kConfigurations), name) {
  Tokenizer tokenizer = Tokenizer::from_file(kGolden + name + "/tokenizer.json");
  const auto text = tokenizer.encode("日本語", false);
  std::vector<std::int64_t> prompt;
  // The longest such prompt: whole characters, then the start of one (the window keeps both).
  for (std::size_t k = text.size(); k > 0 && prompt.empty(); --k) {
    std::vector<std::int64_t> head(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(k));
    if (tokenizer.decode(head, true).ends_with("\xEF\xBF\xBD")) prompt = head;
  }
  if (prompt.empty()) return;  // whole characters only: no prompt ends inside one
  const auto output = tokenizer.encode(" hello world", false);
  model_loader::IncrementalDetokenizer detokenizer(tokenizer, prompt, true);
  std::string pieces;
  for (auto id : output) {
    const std::string piece = detokenizer.push(id);
    BOOST_CHECK_MESSAGE(model_loader::utf8_valid(piece), name << ": piece '" << piece << "'");
    pieces += piece;
  }
  BOOST_CHECK_MESSAGE(pieces.ends_with("hello world"), name << ": got '" << pieces << "'");
}

BOOST_AUTO_TEST_CASE(byte_level_and_byte_fallback_round_trip_any_text) {
  // Lossless configurations give back every string, whatever its script.
  for (const char* name : {"gpt2", "llama3"}) {
    Tokenizer tokenizer = Tokenizer::from_file(kGolden + name + "/tokenizer.json");
    for (const std::string text :
         {"plain", "日本語 😀👨‍👩‍👧", "a\tb\n\nc  d", "é vs e\xCC\x81"})
      BOOST_CHECK_EQUAL(tokenizer.decode(tokenizer.encode(text, false)), text);
  }
}

// PCRE2 re-validated the UTF-8 of the rest of the text at every match: 400 KB took 12.6 s.
// Linear now: 400 KB in well under a second on every pattern (a generous bound for a loaded CI
// machine; the bench measures the rate).
BOOST_AUTO_TEST_CASE(tokenizing_is_linear_in_the_text) {
  std::string text;
  while (text.size() < 400'000)
    text += "The quick brown fox, 1234 jumps über the lazy dog! 日本語のテキスト\n";
  for (const char* name : {"gpt2", "llama3", "qwen2", "sentencepiece"}) {
    Tokenizer tokenizer = Tokenizer::from_file(kGolden + name + "/tokenizer.json");
    const auto begin = std::chrono::steady_clock::now();
    const auto ids = tokenizer.encode(text, false);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    BOOST_TEST(seconds < 1.0, name << ": " << seconds << " s for " << text.size() << " bytes");
    BOOST_TEST(ids.size() > 50'000u);
  }
}

// encode_within stops once the count is certain to pass the limit; under it, it is encode.
BOOST_AUTO_TEST_CASE(encoding_within_a_limit_stops_early) {
  Tokenizer tokenizer = Tokenizer::from_file(kGolden + "qwen2/tokenizer.json");
  const std::string text = "Hello world, this is a short text.";
  const auto all = tokenizer.encode(text, true);
  BOOST_TEST(*tokenizer.encode_within(text, true, all.size()) == all);
  BOOST_TEST(!tokenizer.encode_within(text, true, all.size() - 1).has_value());
  // One 8 MB word: refused by its length alone, without merging it.
  const std::string word(8u << 20, 'a');
  const auto begin = std::chrono::steady_clock::now();
  BOOST_TEST(!tokenizer.encode_within(word, true, 4096).has_value());
  BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < 5.0);
}

BOOST_AUTO_TEST_CASE(lookups_and_special_tokens) {
  Tokenizer tokenizer = Tokenizer::from_file(kGolden + "qwen2/tokenizer.json");
  const auto im_start = tokenizer.token_to_id("<|im_start|>");
  BOOST_REQUIRE(im_start.has_value());
  BOOST_CHECK(tokenizer.is_special(*im_start));
  BOOST_CHECK_EQUAL(*tokenizer.id_to_token(*im_start), "<|im_start|>");
  BOOST_CHECK(!tokenizer.token_to_id("no such token").has_value());
  BOOST_CHECK(!tokenizer.id_to_token(tokenizer.vocab_size()).has_value());
  // An id without a token (a model's extra embedding rows) is dropped, as tokenizers does.
  const auto hello = tokenizer.encode("Hello", false);
  auto with_extra = hello;
  with_extra.insert(with_extra.begin() + 1, tokenizer.vocab_size() + 10);
  BOOST_CHECK_EQUAL(tokenizer.decode(with_extra), "Hello");
}

BOOST_AUTO_TEST_CASE(the_byte_level_alphabet_is_gpt2s) {
  // Printable Latin-1 stands for itself; space is Ġ (U+0120), newline Ċ (U+010A).
  BOOST_CHECK_EQUAL(model_loader::byte_level_char('a'), "a");
  BOOST_CHECK_EQUAL(model_loader::byte_level_char(' '), "\xC4\xA0");
  BOOST_CHECK_EQUAL(model_loader::byte_level_char('\n'), "\xC4\x8A");
  for (int b = 0; b < 256; ++b) {
    const std::string& c = model_loader::byte_level_char(static_cast<std::uint8_t>(b));
    BOOST_CHECK_EQUAL(*model_loader::byte_level_byte(model_loader::utf8_decode(c, 0)), b);
  }
  // Invalid UTF-8 decodes as Rust's from_utf8_lossy does: one U+FFFD per broken sequence.
  BOOST_CHECK_EQUAL(model_loader::utf8_lossy("a\xE6\x97z"), "a\xEF\xBF\xBDz");
  BOOST_CHECK_EQUAL(model_loader::utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

BOOST_AUTO_TEST_CASE(unsupported_components_are_refused_by_name) {
  check_refused({{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}}, "WordPiece");
  check_refused({{"normalizer", {{"type", "BertNormalizer"}}}}, "BertNormalizer");
  check_refused({{"pre_tokenizer", {{"type", "Whitespace"}}}}, "Whitespace");
  check_refused({{"decoder", {{"type", "WordPiece"}}}}, "WordPiece");
  check_refused({{"post_processor", {{"type", "SomethingElse"}}}}, "SomethingElse");
  check_refused({{"truncation", {{"max_length", 8}}}}, "truncation");
  check_refused(
      {{"pre_tokenizer",
        {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}}},
      "does not compile");
  check_refused({{"pre_tokenizer",
                  {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}}}},
                "Sideways");
  json bad_merge = {
      {"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", json::array({"a b"})}};
  check_refused({{"model", bad_merge}}, "names a token its vocab does not have");
  json dropout = {
      {"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}, {"dropout", 0.1}};
  check_refused({{"model", dropout}}, "dropout");
}

BOOST_AUTO_TEST_CASE(a_character_without_a_token_is_an_error_naming_it) {
  Tokenizer tokenizer = Tokenizer::from_json_text(with({}), "test.json");
  BOOST_CHECK((tokenizer.encode("ab", false) == std::vector<std::int64_t>{2}));
  BOOST_CHECK((tokenizer.encode("aab", false) == std::vector<std::int64_t>{0, 2}));
  try {
    tokenizer.encode("abc", false);
    BOOST_ERROR("encoded a character it has no token for");
  } catch (const protocol::ValueError& e) {
    BOOST_CHECK(std::string(e.what()).find("'c'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_missing_or_malformed_file_is_a_value_error) {
  testing::TempDir dir;
  BOOST_CHECK_THROW(Tokenizer::from_file(dir.path / "tokenizer.json"), protocol::Error);
  std::ofstream(dir.path / "tokenizer.json") << "{\"model\": ";
  BOOST_CHECK_THROW(Tokenizer::from_file(dir.path / "tokenizer.json"), protocol::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
